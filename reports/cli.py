"""`report DIR [DIR ...] [--out FILE.html]`: one self-contained HTML page and a Markdown
summary beside it (same name, `.md`).

The default output is `report.html` in the parent of the first DIR: `simulate` and
`run-real` write `runs/<name>/sim` and `runs/<name>/real`, so the report lands beside them
in `runs/<name>/`. Bad or mismatched input is one line on stderr and exit status 2, with
nothing written.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from scenarios.cli import ArgumentParser, with_examples
from scenarios.errors import UserError
from scenarios.results import write_atomic

from .render import to_html, to_markdown
from .report import build


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="report",
        description="Lay simulated and real results side by side: plots, prediction error, "
        "provenance, in one HTML file that opens offline, and a Markdown summary.",
        **with_examples(
            [
                "report runs/mlp-localhost/sim",
                "report runs/mlp-localhost/sim runs/mlp-localhost/real --out mlp.html",
            ]
        ),
    )
    parser.add_argument(
        "dirs", metavar="DIR", nargs="+", help="result directories (of simulate or run-real)"
    )
    parser.add_argument(
        "--out",
        metavar="FILE.html",
        help="the HTML file (default: report.html in the first DIR's parent); "
        "the Markdown summary goes beside it, same name with .md",
    )
    parser.add_argument(
        "--no-timelines", action="store_true", help="skip the per-point timelines (faster)"
    )
    return parser


def output_paths(dirs: Sequence[str], out: str | None) -> tuple[Path, Path]:
    """(HTML, Markdown) paths; refuses an --out that is not an .html file name."""
    if out is None:
        page = Path(dirs[0]).resolve().parent / "report.html"
    else:
        page = Path(out)
        if page.suffix.lower() not in (".html", ".htm"):
            raise UserError(f"--out: {out!r} must end in .html (the Markdown goes beside it)")
    if page.is_dir():
        raise UserError(f"--out: {page} is a directory")
    return page, page.with_suffix(".md")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        page, summary = output_paths(args.dirs, args.out)
        report = build(args.dirs, timelines=not args.no_timelines)
        html_text = to_html(report)
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
    print(f"wrote {page} and {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
