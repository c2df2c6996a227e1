"""The pages a person decides from, checked as a person sees them: every bundled plan's
plan.html and the README tour's report.html, opened in headless Chromium at 1280 x 800
(tests/browser.py). Each fits the window (no horizontal scrolling, no table wider than
its box), shows no empty table, loads every image, and names its points in words, the
id in the tooltip; the plan's page answers which candidate is fastest and which
cheapest, with what each costs in time, money and energy, from plan.csv's numbers."""

from __future__ import annotations

import csv
import fcntl
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from browser import CHROMIUM, REQUIRED, browse
from conftest import ROOT

from planner import cli as plan_cli
from planner.rank import show
from reports import cli as report_cli
from sim import cli as sim_cli

PLANS = sorted((ROOT / "scenarios/plans").glob("*.yaml"))
#: the scenarios the README's tour simulates and reports
TOUR = ("resnet50-v100-scaling", "parameter-servers-vs-ring", "gpt3-175b-layouts")

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not REQUIRED,
    reason="Chromium not installed (Debian: apt-get install chromium; .ci/run installs it)",
)


def _once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """`build(folder)` run once per test run: under pytest-xdist the first worker to ask
    builds it in a folder the workers share (`PYTEST_XDIST_TESTRUNUID` names the run),
    the others wait for it and read it."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    root = factory.getbasetemp().parent / f"pages-{run}" if run else factory.getbasetemp()
    root.mkdir(parents=True, exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every bundled plan's output directory (planned once a run)."""

    def build(out: Path) -> None:
        for plan in PLANS:
            where = str(out / plan.stem)
            assert plan_cli.main([str(plan), "--out", where, "--jobs", "2", "--quiet"]) == 0

    out = _once(tmp_path_factory, "plans", build)
    return {plan.stem: out / plan.stem for plan in PLANS}


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tour's scenarios simulated and reported: each one's folder (once a run)."""

    def build(out: Path) -> None:
        for name in TOUR:
            runs = out / name
            scenario = ROOT / "scenarios/library" / f"{name}.yaml"
            assert sim_cli.main([str(scenario), "--out", str(runs / "sim"), "--quiet"]) == 0
            assert report_cli.main([str(runs / "sim"), "--out", str(runs / "report")]) == 0

    out = _once(tmp_path_factory, "tour", build)
    return {name: out / name for name in TOUR}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _check(seen: dict[str, object]) -> None:
    """What every page must be: within the window, its tables within their boxes and
    none empty, its images loaded."""
    assert seen["scroll-width"] <= seen["client-width"], seen
    assert seen["scrolled-tables"] == 0, seen["scrolled"]
    assert seen["empty-tables"] == 0
    assert seen["images"] >= 1 and seen["loaded"] == seen["images"]


def _named(entries: list[dict[str, str]], ids: set[str]) -> None:
    """Each entry shows words, not an id, and carries a point's id in its tooltip."""
    assert entries
    for entry in entries:
        assert entry["title"] in ids
        assert entry["text"] != entry["title"] and "=" not in entry["text"]


@needs_chromium
@pytest.mark.parametrize("plan", [p.stem for p in PLANS])
def test_plan_page_fits_the_window_and_names_every_candidate(
    plan: str, plans: dict[str, Path], tmp_path: Path
) -> None:
    out = plans[plan]
    rows = _rows(out / "plan.csv")
    seen = browse(out / "plan.html", tmp_path, (".card .name", "#ranked-table td.name"))
    _check(seen)
    read = seen["read"]
    assert isinstance(read, dict)
    ids = {r["point"] for r in rows}
    _named(read[".card .name"], ids)
    _named(read["#ranked-table td.name"], ids)
    # every recommendation has its card, named for its devices: "<workers> <DEVICE> ..."
    by_id = {r["point"]: r for r in rows}
    for recommended in (r for r in rows if r["recommended"]):
        cards = [c for c in read[".card .name"] if c["title"] == recommended["point"]]
        assert cards, f"no card for {recommended['recommended']}"
        workers = by_id[recommended["point"]]["workers"]
        assert cards[0]["text"].startswith(f"{workers} ")
    # counts are integers in plan.csv, as in every CSV
    for column in ("workers", "batch_per_worker", "rank", "candidate", "steps"):
        assert all(r[column] == "" or r[column].isdigit() for r in rows), column


@needs_chromium
def test_plan_page_answers_fastest_cheapest_and_their_trade(
    plans: dict[str, Path], tmp_path: Path
) -> None:
    """The ResNet-50 plan: the page's first sentence names the fastest and the cheapest
    candidates of plan.csv with their time, money and energy, and the ratio of costs."""
    out = plans["resnet50-imagenet"]
    ok = [r for r in _rows(out / "plan.csv") if r["status"] == "ok"]
    fastest = min(ok, key=lambda r: float(r["plan_time_s"]))
    cheapest = min(ok, key=lambda r: float(r["plan_cost_usd"]))
    seen = browse(out / "plan.html", tmp_path, ("#lead", ".card", "#ranked-table tbody tr"))
    read = seen["read"]
    assert isinstance(read, dict)
    lead = read["#lead"][0]["text"]
    for row in (fastest, cheapest):
        for objective, column in (("time", "plan_time_s"), ("cost", "plan_cost_usd"),
                                  ("energy", "plan_energy_kwh")):  # fmt: skip
            assert show(objective, float(row[column])) in lead, (objective, lead)
    ratio = float(fastest["plan_cost_usd"]) / float(cheapest["plan_cost_usd"])
    assert f"costs {ratio:.2g}x what the cheapest does" in lead
    # each card says its interval, or that it has none and why
    for card in read[".card"]:
        assert "90% interval" in card["text"] or "no interval (unvalidated" in card["text"]
    # the table lists every candidate that keeps the limits, first the recommendation
    assert len(read["#ranked-table tbody tr"]) == len(ok)


@needs_chromium
def test_plan_table_sorts_by_a_clicked_column(plans: dict[str, Path], tmp_path: Path) -> None:
    """A click on the cost heading puts the cheapest candidate of plan.csv first."""
    out = plans["resnet50-imagenet"]
    ok = [r for r in _rows(out / "plan.csv") if r["status"] == "ok"]
    cheapest = min(ok, key=lambda r: float(r["plan_cost_usd"]))
    page = out / "plan.html"
    clicked = tmp_path / "clicked" / "plan.html"
    clicked.parent.mkdir()
    text = page.read_text(encoding="utf-8")
    click = (
        "<script>window.addEventListener('load', function () {"
        "Array.from(document.querySelectorAll('#ranked-table th'))"
        ".filter(function (th) { return th.textContent === 'cost'; })[0].click(); });"
        "</script></body>"
    )
    clicked.write_text(text.replace("</body>", click), encoding="utf-8")
    seen = browse(clicked, tmp_path, ("#ranked-table tbody tr:first-child td.name",))
    read = seen["read"]
    assert isinstance(read, dict)
    assert read["#ranked-table tbody tr:first-child td.name"][0]["title"] == cheapest["point"]


@needs_chromium
@pytest.mark.parametrize("name", TOUR)
def test_tour_report_fits_the_window_and_names_its_points(
    name: str, tour: dict[str, Path], tmp_path: Path
) -> None:
    runs = tour[name]
    seen = browse(
        runs / "report/report.html",
        tmp_path,
        ("td.name", "#prediction-error table", "#prediction-error p"),
    )
    _check(seen)
    read = seen["read"]
    assert isinstance(read, dict)
    _named(read["td.name"], {r["point"] for r in _rows(runs / "sim/results.csv")})
    # simulated only: the error section says so in one line, no table
    assert read["#prediction-error table"] == []
    assert len(read["#prediction-error p"]) == 1


@needs_chromium
def test_the_checks_see_a_page_that_overflows_or_shows_an_empty_table(tmp_path: Path) -> None:
    """The probe itself: a page wider than the window, and one with an empty table, a
    table wider than its box and an image that does not load, are seen as such."""
    wide = tmp_path / "wide.html"
    wide.write_text(
        "<!DOCTYPE html><html><body><div style='width: 2000px'>wide</div></body></html>",
        encoding="utf-8",
    )
    seen = browse(wide, tmp_path)
    assert seen["scroll-width"] > seen["client-width"]
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><body><table><thead><tr><th>a</th></tr></thead><tbody>"
        "</tbody></table><div class='table' style='overflow-x: auto'><table><tr>"
        "<td style='min-width: 3000px'>x</td></tr></table></div>"
        "<img src='data:image/png;base64,AAAA'></body></html>",
        encoding="utf-8",
    )
    seen = browse(bad, tmp_path)
    assert seen["scroll-width"] <= seen["client-width"]
    assert seen["empty-tables"] == 1 and seen["scrolled-tables"] == 1
    assert seen["images"] == 1 and seen["loaded"] == 0
    assert math.isfinite(float(str(seen["client-width"])))
