"""Reports: read result files (never sim or real) and lay them side by side."""
