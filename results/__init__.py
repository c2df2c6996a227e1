"""What both backends write, and how: result files (atomic, with provenance), steps.csv in
its two forms, step-time statistics, Chrome traces, and the seeded random streams that
make simulated results reproducible. Imports the scenario language below it, nothing
above."""
