"""Fit a calibration profile's convergence entries again from the curves it keeps.

    python tools/refit_convergence.py PROFILE --out NEW_PROFILE

`run-real --calibrate` keeps every evaluation of its curves in the profile; this redoes
only the least-squares fit (real/calibrate/convergence.py) on them, so that a profile
measured before a change of the fit can be resimulated without running anything again.
The fit's metric is the one the entry's fit was for; nothing else in the profile changes.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measured.profile import dump_profile, load_profile  # noqa: E402
from real.calibrate.convergence import fit  # noqa: E402
from results.files import write_atomic  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    profile = load_profile(args.profile, "profile")
    entries = []
    for entry in profile.convergence:
        metric = entry.fit.metric
        initial = 0.1 if metric == "accuracy" else math.log(10)  # chance on ten classes
        fitted, rms = fit(entry.curves, metric, initial)
        print(f"{entry.model} on {entry.data}: rms {entry.rms:.4g} -> {rms:.4g}")
        entries.append(
            entry.model_copy(
                update={"fit": fitted.model_copy(update={"source": entry.fit.source}), "rms": rms}
            )
        )
    write_atomic(Path(args.out), dump_profile(profile.model_copy(update={"convergence": entries})))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
