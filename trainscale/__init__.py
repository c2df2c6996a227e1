"""trainscale: one scenario file drives a simulator and real TensorFlow runs.

The command line is `trainscale simulate|run-real|report|compare|catalog ...`
(`trainscale.cli`); `simulate`, `run-real`, `report`, `compare` and `catalog` are the same
commands under short names.
The library lives in the packages `scenarios` (the language), `measured` (calibration
profiles and published figures), `sim` (the simulator), `real` (the TensorFlow backend)
and `reports` (reads result files).
"""

from commands.args import VERSION as __version__

__all__ = ["__version__"]
