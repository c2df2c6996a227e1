"""Money and energy of a point (costing/): closed forms, the price's refusals, and both
backends' results.csv and meta.json."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from costing import J_PER_KWH, billed_seconds, cost_usd, host_power_w, point_costs, power_w
from real.runner import RealPoint, priced
from scenarios import loads, vocab
from scenarios.errors import ScenarioError
from scenarios.sections.cluster import ClusterSpec
from sim.cli import main as simulate
from sim.cli import summary_table

ONE_HOUR = 3600.0

SCENARIO = """
version: 1
name: cost-test
seed: 1
model: mlp
cluster: {hosts: 2, devices_per_host: 2, device: cpu, host_link: loopback, network: 1GbE}
training: {batch_per_worker: 32, steps: 6, warmup_steps: 1}
strategy: {kind: allreduce, algorithm: ring}
"""


def cluster(**fields: Any) -> ClusterSpec:
    return ClusterSpec(**fields)


def test_eight_p4d_hosts_for_an_hour() -> None:
    # 8 instances x 1 h x 32.77 USD per instance-hour
    priced = cluster(hosts=8, devices_per_host=8, price={"per_host_hour": "32.77 USD"})
    assert cost_usd(priced, ONE_HOUR) == pytest.approx(262.16, abs=1e-9)
    # the catalog's p4d.24xlarge: AWS's us-east-1 list price, 32.7726 USD/h
    listed = cluster(hosts=8, devices_per_host=8, device="a100", price="p4d.24xlarge")
    assert cost_usd(listed, ONE_HOUR) == pytest.approx(8 * 32.7726)
    # its spot market: the median of us-east-1's zones, 6.7915 USD/h
    spot = cluster(hosts=8, price={"base": "p4d.24xlarge", "market": "spot"})
    assert cost_usd(spot, 1800.0) == pytest.approx(8 * 6.7915 / 2)


def test_a_device_hour_price_counts_devices() -> None:
    # 3 hosts x 4 devices x 2.5 h x 1.5 USD per device-hour
    priced = cluster(hosts=3, devices_per_host=4, price={"per_device_hour": "1.5 USD"})
    assert cost_usd(priced, 2.5 * ONE_HOUR) == pytest.approx(12 * 2.5 * 1.5)
    assert math.isnan(cost_usd(cluster(hosts=3), ONE_HOUR))  # no price: unknown


def test_energy_busy_and_idle_by_hand() -> None:
    # one 8-A100 host (NVIDIA A100 datasheet: 400 W; idle 60 W) beside the default host
    # draw of 300 W + 150 W per device = 1,500 W, at the default PUE of 1.1
    a100 = cluster(hosts=1, devices_per_host=8, device="a100")
    assert host_power_w(a100)[0] == 1500.0
    busy = 1.1 * (8 * 400 + 1500) * ONE_HOUR / J_PER_KWH
    idle = 1.1 * (8 * 60 + 1500) * ONE_HOUR / J_PER_KWH
    assert power_w(a100, 1.0) * ONE_HOUR / J_PER_KWH == pytest.approx(busy)  # 5.17 kWh
    assert power_w(a100, 0.0) * ONE_HOUR / J_PER_KWH == pytest.approx(idle)  # 2.178 kWh
    assert (busy, idle) == (pytest.approx(5.17), pytest.approx(2.178))
    # a quarter busy: the device draws idle + (tdp - idle) / 4
    quarter = 1.1 * (8 * (60 + 340 / 4) + 1500)
    assert power_w(a100, 0.25) == pytest.approx(quarter)


def test_pue_and_host_power_scale_as_given() -> None:
    plain = cluster(hosts=2, devices_per_host=4, device="v100", host_power="1 kW", pue=1.0)
    hot = plain.model_copy(update={"pue": 1.5})
    assert power_w(plain, 0.5) == pytest.approx(2 * 1000 + 8 * (45 + 255 / 2))
    assert power_w(hot, 0.5) == pytest.approx(1.5 * power_w(plain, 0.5))
    assert host_power_w(plain) == (1000.0, "cluster.host_power")
    # a device without power figures: energy unknown
    assert math.isnan(power_w(cluster(device={"peak_flops": "1 TFLOP/s"}), 0.5))


def test_a_row_is_billed_for_its_training_and_evaluations() -> None:
    spec = loads(SCENARIO, ["cluster.price={per_host_hour: 2 USD}"]).points[0].spec
    row = {"training_time_s": 3000.0, "evaluation_time_s": 600.0, "compute_time_frac": 1.0}
    columns, note = point_costs(spec, {**row, "time_to_target_s": 1800.0})
    assert columns["cost_usd"] == pytest.approx(2 * 2.0)  # 2 hosts x 1 h
    assert columns["cost_to_target_usd"] == pytest.approx(2 * 2.0 / 2)
    # the catalog's cpu: 5 W a core busy, and a cpu host's default 60 W
    watts = 1.1 * (4 * 5.0 + 2 * 60.0)
    assert columns["energy_kwh"] == pytest.approx(watts * ONE_HOUR / J_PER_KWH)
    assert columns["energy_to_target_kwh"] == pytest.approx(watts * 1800.0 / J_PER_KWH)
    assert note["known"] == list(vocab.MONEY_AND_ENERGY)
    assert note["price"]["usd_per_host_hour"] == 2.0 and note["power"]["device"] == "cpu"
    # no target reached: its two figures empty, and meta says why
    columns, note = point_costs(spec, {**row, "time_to_target_s": math.nan})
    assert math.isnan(columns["cost_to_target_usd"])
    assert math.isnan(columns["energy_to_target_kwh"])
    assert note["known"] == ["cost_usd", "energy_kwh"] and "why_empty_to_target" in note


@pytest.mark.parametrize(
    "setting",
    ["cluster.price={per_host_hour: 32.77}", "cluster.price.per_device_hour=4"],
)
def test_a_price_without_currency_is_refused(
    setting: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cost.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    assert simulate([str(path), "--out", str(out), "--quiet", "--set", setting]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a price needs its currency" in err, err
    assert not out.exists()  # nothing written


def test_a_price_file_without_currency_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cost.yaml"
    path.write_text(SCENARIO.replace("network: 1GbE}", "network: 1GbE, price: {per_host_hour: 3}}"))
    assert simulate([str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("simulate: error: cluster.price"), err


def test_simulate_fills_the_columns_and_meta_says_what_was_known(tmp_path: Path) -> None:
    path = tmp_path / "cost.yaml"
    path.write_text(SCENARIO + "sweep:\n  cluster.price: [null, {per_host_hour: 3 USD}]\n")
    out = tmp_path / "out"
    assert simulate([str(path), "--out", str(out), "--quiet"]) == 0
    results = pd.read_csv(out / vocab.RESULTS_FILE)
    assert list(results.columns[: len(vocab.RESULT_COLUMNS)]) == list(vocab.RESULT_COLUMNS)
    free, paid = results.to_dict("records")
    hours = (paid["training_time_s"] + paid["evaluation_time_s"]) / ONE_HOUR
    assert paid["cost_usd"] == pytest.approx(2 * 3.0 * hours)
    assert math.isnan(free["cost_usd"])  # no price: empty
    for row in (free, paid):  # the cpu's power is in the catalog: energy is known
        busy = row["compute_time_frac"]
        watts = 1.1 * (4 * (1.5 + 3.5 * busy) + 2 * 60.0)
        assert row["energy_kwh"] == pytest.approx(watts * hours * ONE_HOUR / J_PER_KWH)
        assert math.isnan(row["cost_to_target_usd"]) and math.isnan(row["energy_to_target_kwh"])
    header, _, free_line, paid_line = summary_table(results).splitlines()
    assert "cost" in header.split() and "energy" in header.split()
    assert "USD" not in free_line and f"{paid['cost_usd']:,.2f} USD" in paid_line
    costs = json.loads((out / vocab.META_FILE).read_text())["costs"]
    free_note, paid_note = (costs[p] for p in results["point"])
    assert free_note["price"] == {"known": False, "why": "no cluster.price"}
    assert free_note["known"] == ["energy_kwh"]
    assert paid_note["price"]["usd_per_host_hour"] == 3.0
    assert paid_note["power"]["source"].startswith("ESTIMATE")


def test_run_real_prices_its_merged_row() -> None:
    spec = loads(SCENARIO, ["cluster.price=p3.16xlarge"]).points[0].spec
    row = {"training_time_s": 7200.0, "compute_time_frac": 0.5, "time_to_target_s": math.nan}
    point = priced(spec, RealPoint("p", dict(row), pd.DataFrame()))
    # 2 p3.16xlarge hosts (us-east-1 list price 24.48 USD/h) for 2 h
    assert point.row["cost_usd"] == pytest.approx(2 * 24.48 * 2)
    assert point.row["energy_kwh"] == pytest.approx(
        1.1 * (4 * (1.5 + 3.5 * 0.5) + 2 * 60.0) * 7200.0 / J_PER_KWH
    )
    assert point.costs is not None and point.costs["price"]["name"] == "p3.16xlarge"
    assert math.isnan(point.row["cost_to_target_usd"])


@pytest.mark.real
@pytest.mark.usefixtures("own")
def test_run_real_fills_the_columns_for_a_cpu_run(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    from processes import run_real

    path = tmp_path / "cost.yaml"
    path.write_text(
        SCENARIO.replace("hosts: 2, devices_per_host: 2", "hosts: 1, devices_per_host: 2")
    )
    out = tmp_path / "out"
    proc = run_real(
        str(path), "--out", str(out), "--quiet", "--set", "cluster.price={per_host_hour: 1 USD}"
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict("records")
    hours = billed_seconds(row) / ONE_HOUR
    assert row["backend"] == "real" and hours > 0
    assert row["cost_usd"] == pytest.approx(1.0 * hours)
    busy = row["compute_time_frac"]
    watts = 1.1 * (2 * (1.5 + 3.5 * busy) + 60.0)
    assert row["energy_kwh"] == pytest.approx(watts * hours * ONE_HOUR / J_PER_KWH)
    (note,) = json.loads((out / vocab.META_FILE).read_text())["costs"].values()
    assert note["known"] == ["cost_usd", "energy_kwh"]


def test_a_price_of_ones_own_over_an_instance_drops_its_source() -> None:
    # what you pay for a p5.48xlarge yourself: the catalog's source and date no longer apply
    spec = loads(SCENARIO, ["cluster.price={base: p5.48xlarge, per_device_hour: 7 USD}"])
    point = spec.points[0].spec
    columns, note = point_costs(point, {"training_time_s": ONE_HOUR, "compute_time_frac": 1.0})
    assert columns["cost_usd"] == pytest.approx(4 * 7.0)  # 4 devices x 1 h
    assert (note["price"]["source"], note["price"]["date"]) == ("the scenario", "")
    # a market the entry does not list is refused
    with pytest.raises(ScenarioError, match="no spot price for p5.48xlarge"):
        loads(
            SCENARIO,
            ["cluster.price={base: p5.48xlarge, per_host_hour: {on_demand: 55 USD}, market: spot}"],
        )


def test_the_report_lists_cost_and_energy_of_priced_points(tmp_path: Path) -> None:
    from reports.cli import main as report

    path = tmp_path / "cost.yaml"
    path.write_text(SCENARIO.replace("network: 1GbE}", "network: 1GbE, price: p3.16xlarge}"))
    out = tmp_path / "out"
    assert simulate([str(path), "--out", str(out), "--quiet"]) == 0
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict("records")
    assert report([str(out), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    (points,) = [line for line in text.splitlines() if line.startswith("| point | backend | conf")]
    assert "| training time | cost | energy |" in points
    assert f"| {row['cost_usd']:,.2f} USD | {row['energy_kwh']:.3g} kWh |" in text
