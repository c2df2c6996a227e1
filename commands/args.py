"""What the command lines of both backends share: a parser whose errors are one line and
exit status 2 (like every other bad input), and the arguments every backend takes."""

from __future__ import annotations

import argparse
from importlib import metadata
from pathlib import Path

from scenarios import UserError, vocab

try:
    VERSION = metadata.version("trainscale")
except metadata.PackageNotFoundError:  # run from a checkout that was never installed
    VERSION = "unknown"

# what comes before a command's name in its usage lines: "trainscale " when the command was
# started as `trainscale COMMAND` (trainscale/cli.py), nothing under its short name
PROG_PREFIX = ""


class ArgumentParser(argparse.ArgumentParser):
    """Errors in one line with exit status 2; `--version`; the name the command was run by."""

    def __init__(self, *, prog: str, **kwargs: object) -> None:
        super().__init__(prog=PROG_PREFIX + prog, **kwargs)  # type: ignore[arg-type]
        self.add_argument("--version", action="version", version=f"trainscale {VERSION}")

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def with_examples(examples: list[str]) -> dict[str, object]:
    """An epilog of command lines, each of which runs as written from a checkout's root
    (tests/test_examples.py runs them)."""
    return {
        "epilog": "examples:\n" + "\n".join(f"  {line}" for line in examples),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def scenario_parser(
    prog: str, description: str, backend: str, examples: list[str]
) -> ArgumentParser:
    """FILE, --out DIR (default runs/<name>/<backend>), repeatable --set PATH=VALUE and
    --force."""
    parser = ArgumentParser(prog=prog, description=description, **with_examples(examples))
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
        help="override a field, e.g. --set training.steps=10 (VALUE is YAML); repeatable",
    )
    add_force(parser)
    return parser


def add_steps(parser: argparse.ArgumentParser) -> None:
    """--steps summary|all: the form of steps.csv a backend writes (results/steps.py)."""
    parser.add_argument(
        "--steps",
        choices=list(vocab.STEPS_FORMS),
        default=vocab.STEPS_SUMMARY,
        help="steps.csv: one row per step, the workers summed up (summary, the default), "
        "or one row per worker and step (all)",
    )


def add_resume(parser: argparse.ArgumentParser) -> None:
    """--resume DIR: go on with an interrupted run (results/progress.py)."""
    parser.add_argument(
        "--resume",
        metavar="DIR",
        help="go on with the run whose results DIR holds (in place of --out): the points "
        "it finished are kept and the rest run; refused if DIR holds another scenario's or "
        "another version's results",
    )


def out_dir_of(args: argparse.Namespace, default: Path) -> Path:
    """Where a command writes: --resume DIR, else --out DIR, else `default`; raises
    UserError where both name directories and they differ, or the place is a file."""
    out = Path(args.resume or args.out or default)
    if args.resume and args.out and Path(args.out).resolve() != out.resolve():
        raise UserError(f"--out: {args.out}, with --resume {args.resume} (which writes there)")
    if out.exists() and not out.is_dir():
        flag = "--resume" if args.resume else "--out"
        raise UserError(f"{flag}: {out} exists and is not a directory")
    return out


def add_force(parser: argparse.ArgumentParser) -> None:
    """--force, and the hidden --written-by that `compare` gives the commands it starts
    (their results are compare's: meta.json's `origin`)."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace what another command, a calibrated run or a run on another engine "
        "wrote in the output directory (without it, the command refuses before it runs)",
    )
    parser.add_argument("--written-by", default=None, help=argparse.SUPPRESS)
