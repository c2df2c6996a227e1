"""`trainscale COMMAND [ARGS...]`: one entry point for the five commands.

Each command is its own module, imported only when asked for, so that `trainscale
simulate` never loads TensorFlow and `trainscale report` or `catalog` loads neither
backend.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence

from commands import args as shared

# command -> (module with main(argv), what it does)
COMMANDS = {
    "simulate": ("sim.cli", "predict a scenario with the discrete-event simulator"),
    "run-real": ("real.cli", "run a scenario for real with TensorFlow (or --calibrate)"),
    "report": ("reports.cli", "lay result directories side by side in HTML and Markdown"),
    "compare": ("real.compare", "calibrate, run for real, simulate and report, in one go"),
    "catalog": ("commands.catalog", "show the bundled devices, links, networks and models"),
    "plan": ("planner.cli", "which cluster, strategy and batch reach a target fastest or cheapest"),
    "model-table": ("real.process.layer_table", "a Keras model of your own as a layer table"),
}

USAGE = "usage: trainscale [--version] COMMAND [ARGS...]"


def _help() -> str:
    width = max(map(len, COMMANDS))
    lines = [USAGE, "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    lines += [
        "",
        "`trainscale COMMAND --help` tells a command's arguments; the short names",
        "`simulate`, `run-real`, `report`, `compare` and `catalog` run the same commands.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(_help(), file=sys.stderr)
        return 2
    command, rest = args[0], args[1:]
    if command in ("-h", "--help"):
        print(_help())
        return 0
    if command == "--version":
        print(f"trainscale {shared.VERSION}")
        return 0
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; one of {', '.join(COMMANDS)}"
        print(f"trainscale: error: unknown command {command!r}{hint}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    shared.PROG_PREFIX = "trainscale "
    try:
        return int(module.main(rest))
    finally:
        shared.PROG_PREFIX = ""
