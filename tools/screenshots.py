"""The pages as a person sees them, for the docs: `trainscale plan` on the bundled
ResNet-50 plan and on the Llama 2 layouts plan, and `report` on `make demo`'s scenario,
each page shot in headless Chromium at 1280 wide (the first screen, 800 high, and the
page further down where the table or the plots are), into docs/img/.

    python tools/screenshots.py        (make screenshots; needs Chromium)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from browser import CHROMIUM, screenshot  # noqa: E402  (tests/browser.py)

from planner.cli import main as plan  # noqa: E402
from reports.cli import main as report  # noqa: E402
from sim.cli import main as simulate  # noqa: E402

IMG = ROOT / "docs" / "img"
#: (plan, the image of its page, the page's height shot)
PLANS = [
    ("scenarios/plans/resnet50-imagenet.yaml", "plan-resnet50-imagenet.png", 1400),
    ("scenarios/plans/llama2-70b-layouts.yaml", "plan-llama2-70b-layouts.png", 1400),
]
#: (scenario, the image of its report, the page's height shot)
REPORTS = [
    ("scenarios/library/resnet50-v100-scaling.yaml", "report-resnet50-v100-scaling.png", 1600),
]


def main() -> int:
    if CHROMIUM is None:
        print("screenshots: error: no chromium on PATH (Debian: apt-get install chromium)",
              file=sys.stderr)  # fmt: skip
        return 2
    IMG.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for source, image, height in PLANS:
            out = work / Path(source).stem
            status = plan([str(ROOT / source), "--out", str(out), "--jobs", "2", "--quiet"])
            if status:
                return status
            _shoot(out / "plan.html", image, height, work)
        for source, image, height in REPORTS:
            runs = work / Path(source).stem
            status = simulate([str(ROOT / source), "--out", str(runs / "sim"), "--quiet"])
            status = status or report([str(runs / "sim"), "--out", str(runs / "report")])
            if status:
                return status
            _shoot(runs / "report" / "report.html", image, height, work)
    return 0


def _shoot(page: Path, image: str, height: int, work: Path) -> None:
    """The page's picture, written whole or not at all."""
    partial = work / image
    screenshot(page, partial, work, height)
    partial.replace(IMG / image)
    print(f"wrote docs/img/{image}")


if __name__ == "__main__":
    sys.exit(main())
