"""Models of the training workload that both backends and the report use: pipeline splits
and device memory, the learning-rate schedule, and statistical efficiency (the progress
updates make towards a target)."""
