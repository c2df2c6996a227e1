"""What the command lines of both backends share: a parser whose errors are one line and
exit status 2 (like every other bad input), and the arguments every backend takes."""

from __future__ import annotations

import argparse


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def scenario_parser(prog: str, description: str, backend: str) -> ArgumentParser:
    """FILE, --out DIR (default runs/<name>/<backend>) and repeatable --set PATH=VALUE."""
    parser = ArgumentParser(prog=prog, description=description)
    parser.add_argument("scenario", metavar="FILE", help="scenario YAML file (version 1)")
    parser.add_argument(
        "--out", metavar="DIR", help=f"output directory (default runs/<name>/{backend})"
    )
    parser.add_argument(
        "--set",
        metavar="PATH=VALUE",
        action="append",
        default=[],
        dest="sets",
        help="override a field, e.g. --set cluster.hosts=4 (VALUE is YAML); repeatable",
    )
    return parser
