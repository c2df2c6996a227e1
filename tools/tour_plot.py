"""The README tour's scaling plot: simulate scenarios/library/parameter-servers-vs-ring.yaml
and draw its throughput and scaling efficiency with the report's own figure
(`reports.plots.scaling`), into docs/img/parameter-servers-vs-ring.png.

    python tools/tour_plot.py        (make tour-plot)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from reports.report import build
from sim.cli import main as simulate

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "library" / "parameter-servers-vs-ring.yaml"
OUT = ROOT / "docs" / "img" / "parameter-servers-vs-ring.png"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "sim"
        status = simulate([str(SCENARIO), "--out", str(runs), "--quiet"])
        if status:
            return status
        png = build([runs], timelines=False).plots["scaling"].png
    OUT.parent.mkdir(parents=True, exist_ok=True)
    partial = OUT.with_suffix(".png.tmp")
    partial.write_bytes(png)
    partial.replace(OUT)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
