"""Where sweep points and jobs run besides local processes: Spark (one SparkSession per
process), shared by the simulator and the real backend."""
