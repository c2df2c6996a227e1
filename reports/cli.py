"""`report DIR [DIR ...] [--out OUTDIR] [--force]`: one self-contained HTML page and a
Markdown summary, `report.html` and `report.md`, in one directory.

The default directory is the first DIR's parent: `simulate` and `run-real` write
`runs/<name>/sim` and `runs/<name>/real`, so the report lands beside them in
`runs/<name>/`; `--out OUTDIR` writes the two files in OUTDIR and nothing else. A report
that `compare` wrote there is replaced only with `--force` (the page's generator tag says
which command wrote it). Bad or mismatched input is one line on stderr and exit status 2,
with nothing written.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from commands.args import ArgumentParser, add_force, with_examples
from results.files import claim, origin, page_origin, write_atomic
from scenarios.errors import UserError

from .render import to_html, to_markdown, uncalibrated_note
from .report import build


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="report",
        description="Lay simulated and real results side by side: plots, prediction error, "
        "provenance, in one HTML file that opens offline, and a Markdown summary.",
        **with_examples(
            [
                "report runs/mlp-localhost/sim",
                "report runs/mlp-localhost/sim runs/mlp-localhost/real --out mlp-report",
            ]
        ),
    )
    parser.add_argument(
        "dirs", metavar="DIR", nargs="+", help="result directories (of simulate or run-real)"
    )
    parser.add_argument(
        "--out",
        metavar="OUTDIR",
        help="the directory that receives report.html and report.md, and nothing else "
        "(default: the first DIR's parent; made if missing)",
    )
    parser.add_argument(
        "--no-timelines", action="store_true", help="skip the per-point timelines (faster)"
    )
    add_force(parser)
    return parser


def output_paths(dirs: Sequence[str], out: str | None) -> tuple[Path, Path]:
    """(HTML, Markdown) paths: report.html and report.md in --out (a directory), else in
    the first DIR's parent; refuses an --out that names a file."""
    if out is None:
        folder = Path(dirs[0]).resolve().parent
    else:
        folder = Path(out)
        if folder.suffix.lower() in (".html", ".htm", ".md"):
            raise UserError(
                f"--out: {out!r} names a file; --out is the directory that receives "
                f"report.html and report.md, e.g. --out {folder.with_suffix('')}"
            )
        if folder.exists() and not folder.is_dir():
            raise UserError(f"--out: {folder} exists and is not a directory")
    page = folder / "report.html"
    if page.is_dir():
        raise UserError(f"--out: {page} is a directory")
    return page, page.with_suffix(".md")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        page, summary = output_paths(args.dirs, args.out)
        written_by = args.written_by or "report"
        claim(page, page_origin(page), origin(written_by, None), args.force)
        report = build(args.dirs, timelines=not args.no_timelines)
        html_text = to_html(report, written_by=written_by)
        markdown_text = to_markdown(report, page.name)
    except UserError as exc:
        print(f"report: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("report: interrupted; nothing written", file=sys.stderr)
        return 130
    try:
        write_atomic(page, html_text)
        write_atomic(summary, markdown_text)
    except OSError as exc:
        print(f"report: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    for note in uncalibrated_note(report):
        print(f"report: {note[0].lower()}{note[1:]}", file=sys.stderr)
    print(f"wrote {page} and {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
