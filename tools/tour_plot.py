"""The README tour's plots: simulate scenarios/library/parameter-servers-vs-ring.yaml and
draw its throughput and scaling efficiency with the report's own figure
(`reports.plots.scaling`), into docs/img/parameter-servers-vs-ring.png; simulate
scenarios/library/gpt3-175b-layouts.yaml and draw where each layout's step goes (the
report's breakdown), into docs/img/gpt3-175b-layouts.png.

    python tools/tour_plot.py        (make tour-plot)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from reports.report import build
from sim.cli import main as simulate

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "scenarios" / "library"
IMG = ROOT / "docs" / "img"
#: (scenario, the report's plot, the image)
PLOTS = [
    ("parameter-servers-vs-ring.yaml", "scaling", "parameter-servers-vs-ring.png"),
    ("gpt3-175b-layouts.yaml", "breakdown", "gpt3-175b-layouts.png"),
]


def main() -> int:
    for scenario, plot, image in PLOTS:
        with tempfile.TemporaryDirectory() as tmp:
            runs = Path(tmp) / "sim"
            status = simulate([str(LIBRARY / scenario), "--out", str(runs), "--quiet"])
            if status:
                return status
            png = build([runs], timelines=False).plots[plot].png
        out = IMG / image
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".png.tmp")
        partial.write_bytes(png)
        partial.replace(out)
        print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
