"""The scenario language: validation, units, catalog references, sweeps, errors."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from scenarios import ScenarioError, load, loads
from scenarios.schema import SCHEMA_PATH, render
from scenarios.units import parse

ROOT = Path(__file__).resolve().parent.parent

MINIMAL = """
version: 1
name: tiny
model: resnet50
cluster: {hosts: 2, devices_per_host: 4, device: v100, network: 25GbE}
"""


def error_of(text: str, sets: tuple[str, ...] = ()) -> str:
    with pytest.raises(ScenarioError) as info:
        loads(textwrap.dedent(text), sets)
    message = str(info.value)
    assert "\n" not in message  # one line
    return message


# ------------------------------------------------------------------ units


@pytest.mark.parametrize(
    "text,kind,expected",
    [
        ("25 Gbit/s", "bandwidth", 25e9 / 8),
        ("12.5 GB/s", "bandwidth", 12.5e9),
        ("10 us", "time", 10e-6),
        ("1.5 ms", "time", 1.5e-3),
        ("2 h", "time", 7200.0),
        ("64 MiB", "bytes", 64 * 2**20),
        ("1 kB", "bytes", 1000.0),
        ("15.7 TFLOP/s", "flop_rate", 15.7e12),
        ("4.1 GFLOP", "flops", 4.1e9),
        ("25.6e6", "count", 25.6e6),
        (3, "count", 3.0),
        # networking's rates: bps bits per second, Bps bytes per second
        ("10 Gbps", "bandwidth", 10e9 / 8),
        ("100 Mbps", "bandwidth", 100e6 / 8),
        ("1.6 Tbps", "bandwidth", 1.6e12 / 8),
        ("56 kbps", "bandwidth", 56e3 / 8),
        ("10 GBps", "bandwidth", 10e9),
        ("10Gbps", "bandwidth", 10e9 / 8),
    ],
)
def test_units_to_si(text: str, kind: str, expected: float) -> None:
    assert parse(text, kind) == pytest.approx(expected, rel=1e-12)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text,kind,fragment",
    [
        (25, "bandwidth", "bare number"),
        ("64 MiB", "count", "plain count"),
        ("25 Gb/s", "bandwidth", "gilbert"),
        ("10 blorps", "time", "cannot read units"),
        ("10 furlongs", "time", "expected a time"),
        ("3 GB", "bandwidth", "expected a bandwidth"),
        ("10 mbps", "bandwidth", "read more than one way"),  # milli-baud or milli-point-s
    ],
)
def test_units_refused(text: object, kind: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse(text, kind)  # type: ignore[arg-type]


GBPS = """
version: 1
name: gbps
model: {name: toy, params: 1e6, flops_per_sample: 1 GFLOP}
cluster:
  hosts: 2
  devices_per_host: 1
  device: {peak_flops: 10 TFLOP/s, efficiency: 1.0}
  host_link: {bandwidth: 100 GB/s, latency: 1 us}
  network: {bandwidth: BANDWIDTH, latency: 10 us}
training: {batch_per_worker: 10, steps: 5, warmup_steps: 1}
strategy: {kind: allreduce, algorithm: ring}
"""


def test_networking_units_from_the_command_line(tmp_path: Path) -> None:
    """`10 Gbps` in a scenario runs as 10 Gbit/s with nothing from pint on the terminal;
    a rate pint reads more than one way is one line naming the field, exit 2."""
    import subprocess
    import sys

    def simulate(bandwidth: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        path = tmp_path / f"{bandwidth.replace(' ', '')}.yaml"
        path.write_text(GBPS.replace("BANDWIDTH", bandwidth))
        out = tmp_path / path.stem
        argv = [sys.executable, "-m", "sim.cli", str(path), "--out", str(out), "--quiet"]
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120), out

    for text, expected in (("10 Gbps", 10e9 / 8), ("10 GBps", 10e9)):
        proc, out = simulate(text)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        meta = json.loads((out / "meta.json").read_text())
        network = meta["points"][0]["resolved"]["cluster"]["network"]
        assert network["bandwidth"] == pytest.approx(expected)
    proc, out = simulate("10 mbps")
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr == (
        "simulate: error: cluster.network.bandwidth: units that read more than one way; "
        "write it like '25 Gbit/s' (got '10 mbps')\n"
    )


def test_an_ambiguous_unit_is_refused_without_pint_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever pint reads more than one way is refused, and its warning kept back."""
    import logging
    import re

    from scenarios import units

    monkeypatch.setattr(units, "_PER_SECOND", re.compile("(?!)"))  # pint reads Gbps itself
    monkeypatch.setattr(units, "_kept", dict)  # nothing kept by earlier runs
    units._parse_text.cache_clear()  # read it again, not as remembered
    with caplog.at_level(logging.DEBUG), pytest.raises(ValueError, match="more than one way"):
        parse("10 Gbps", "bandwidth")
    assert not caplog.records


# ------------------------------------------------------------------ loading


def test_minimal_scenario_resolves_catalog() -> None:
    sc = loads(MINIMAL)
    (point,) = sc.points
    spec = point.spec
    assert point.id == "base"
    assert spec.workers == 8
    assert spec.cluster.device.base == "v100"
    assert spec.cluster.device.peak_for("float32") == pytest.approx(15.7e12)
    assert spec.cluster.network.bandwidth == pytest.approx(25e9 / 8)
    assert spec.cluster.host_link.base == "pcie3"  # the default host link
    assert spec.model.total_params == pytest.approx(25.58e6, rel=1e-3)


def test_catalog_override_with_base() -> None:
    sc = loads(MINIMAL.replace("device: v100", "device: {base: v100, efficiency: 0.4}"))
    device = sc.points[0].spec.cluster.device
    assert device.efficiency == 0.4 and device.peak_for("float32") == pytest.approx(15.7e12)


def test_model_override_of_totals_drops_layer_table() -> None:
    sc = loads(MINIMAL.replace("model: resnet50", "model: {base: resnet50, params: 1e6}"))
    model = sc.points[0].spec.model
    assert model.total_params == 1e6 and model.layers is None


def test_keras_mlp_builder_gives_layers_without_tensorflow() -> None:
    text = MINIMAL.replace(
        "model: resnet50",
        "model: {name: my-mlp, keras: {builder: mlp, inputs: 784, hidden: [100], classes: 10}}",
    )
    model = loads(text).points[0].spec.model
    assert model.total_params == 784 * 100 + 100 + 100 * 10 + 10


def test_sweep_is_cartesian_with_stable_ids() -> None:
    text = MINIMAL + textwrap.dedent("""
        sweep:
          cluster.hosts: [1, 2]
          strategy:
            - {kind: allreduce, algorithm: ring}
            - {kind: parameter_server, servers: 4}
    """)
    ids = [p.id for p in loads(text).points]
    assert ids == [
        "hosts=1_allreduce,algorithm=ring",
        "hosts=1_parameter_server,servers=4",
        "hosts=2_allreduce,algorithm=ring",
        "hosts=2_parameter_server,servers=4",
    ]
    assert [p.id for p in loads(text).points] == ids  # stable
    assert loads(text).points[3].spec.strategy.servers == 4
    # a list of mappings replaced the subtree: the PS point has no algorithm set explicitly
    assert "algorithm" not in loads(text).points[3].spec.strategy.model_fields_set


def test_global_batch_divides_over_each_points_workers() -> None:
    # strong scaling: workers x batch_per_worker stays the global batch at every point
    text = MINIMAL + textwrap.dedent("""
        training: {global_batch: 96}
        sweep:
          cluster.devices_per_host: [1, 2, 3, 4]
    """)
    points = loads(text).points
    assert [p.spec.training.batch_per_worker for p in points] == [48, 24, 16, 12]  # 2 hosts
    assert {p.spec.workers * p.spec.training.batch_per_worker for p in points} == {96}


def test_global_batch_errors() -> None:
    msg = error_of(MINIMAL + "training: {global_batch: 100}\n")  # 8 workers
    assert msg.startswith("training.global_batch:") and "8 workers" in msg and "100" in msg
    msg = error_of(MINIMAL + "training: {global_batch: 64, batch_per_worker: 8}\n")
    assert msg.startswith("training.global_batch:") and "not both" in msg
    msg = error_of(MINIMAL + "training: {global_batch: 0}\n")
    assert msg.startswith("training.global_batch:")


def test_set_overrides() -> None:
    sc = loads(MINIMAL, sets=("cluster.hosts=3", "strategy.algorithm=tree", "seed=9"))
    spec = sc.points[0].spec
    assert (spec.cluster.hosts, spec.strategy.algorithm, spec.seed) == (3, "tree", 9)


# ------------------------------------------------------------------ errors


def test_unknown_key_suggests() -> None:
    msg = error_of(MINIMAL + "strategy: {kind: parameter_server, sevrers: 4}\n")
    assert msg == "strategy.sevrers: unknown key; did you mean 'servers'?"


def test_bare_number_where_unit_needed() -> None:
    msg = error_of(MINIMAL.replace("network: 25GbE", "network: {bandwidth: 25, latency: 10 us}"))
    assert msg.startswith("cluster.network.bandwidth: a bare number needs a unit")
    assert "(got 25)" in msg


def test_unknown_catalog_name_suggests() -> None:
    msg = error_of(MINIMAL.replace("device: v100", "device: v10"))
    assert msg.startswith("cluster.device: unknown device 'v10'")
    assert "'v100'" in msg


def test_version_missing_and_wrong() -> None:
    assert "add 'version: 1'" in error_of("name: x\n")
    msg = error_of(MINIMAL.replace("version: 1", "version: 2"))
    assert msg.startswith("version: 2 is not supported")


def test_enum_and_bounds() -> None:
    msg = error_of(MINIMAL + "strategy: {algorithm: butterfly}\n")
    assert msg.startswith("strategy.algorithm:") and "'butterfly'" in msg
    msg = error_of(MINIMAL.replace("hosts: 2", "hosts: 0"))
    assert msg.startswith("cluster.hosts:") and "(got 0)" in msg


def test_field_of_another_strategy_kind() -> None:
    msg = error_of(MINIMAL + "strategy: {kind: allreduce, servers: 2}\n")
    assert msg.startswith("strategy: 'servers' applies to kind parameter_server and pipeline only")


def test_cross_field_index_out_of_range() -> None:
    msg = error_of(MINIMAL + "stragglers: {slow: [{workers: [8], factor: 2}]}\n")
    assert msg.startswith("stragglers.slow[0].workers: worker 8 does not exist")


def test_error_in_sweep_point_names_point() -> None:
    msg = error_of(MINIMAL + "sweep: {cluster.hosts: [1, 0]}\n")
    assert msg.startswith("cluster.hosts:") and msg.endswith("(sweep point hosts=0)")


def test_error_every_point_shares_names_no_point() -> None:
    # the problem is the file's, not one point's: naming a point would mislead
    msg = error_of(MINIMAL.replace("v100", "v1000") + "sweep: {cluster.hosts: [1, 2]}\n")
    assert msg.startswith("cluster.device:") and "sweep point" not in msg


def test_misspelt_section_is_named_before_the_missing_one() -> None:
    msg = error_of(MINIMAL.replace("cluster:", "clusterr:"))
    assert msg == "clusterr: unknown key; did you mean 'cluster'?"


def test_bad_sweep_and_set_paths() -> None:
    assert error_of(MINIMAL + "sweep: {cluster.hots: [1]}\n") == (
        "sweep: unknown key 'cluster.hots'; did you mean 'hosts'?"
    )
    assert error_of(MINIMAL, ("traning.steps=3",)).startswith("--set traning.steps: unknown key")
    assert "expected PATH=VALUE" in error_of(MINIMAL, ("cluster.hosts",))


def test_yaml_syntax_error_has_position() -> None:
    msg = error_of("version: 1\nname: [unclosed\n")
    assert msg.startswith("<string>:") and "not valid YAML" in msg


def test_failure_needs_one_trigger() -> None:
    msg = error_of(MINIMAL + "failures: [{role: worker, index: 1}]\n")
    assert msg == "failures[0]: give exactly one of at_step or at_time"


def test_missing_file() -> None:
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load("/nonexistent/x.yaml")


# ------------------------------------------------------------------ schema


def test_schema_json_in_sync() -> None:
    assert SCHEMA_PATH.read_text() == render(), "run `make schema` to regenerate"


def test_schema_accepts_catalog_names_and_mappings() -> None:
    schema = json.loads(render())
    device = schema["$defs"]["ClusterSpec"]["properties"]["device"]
    names = device["anyOf"][0]["enum"]
    assert "v100" in names and "h200" in names
    assert "strategy" in schema["properties"] and "sweep" in schema["properties"]


def test_keras_override_of_a_catalog_model_recomputes_its_layers() -> None:
    # a wider MLP on the catalog's mlp entry: the simulator must see the model run-real
    # builds (64 x 2048 + 2048 + 2048 x 2048 + 2048 + 2048 x 10 + 10 parameters)
    doc = """
version: 1
name: wide
model:
  {name: mlp-wide, base: mlp, keras: {builder: mlp, inputs: 64, hidden: [2048, 2048], classes: 10}}
cluster: {device: cpu}
"""
    spec = loads(doc).points[0].spec
    assert spec.model.total_params == 64 * 2048 + 2048 + 2048 * 2048 + 2048 + 2048 * 10 + 10


def test_model_variables_in_creation_order() -> None:
    # a computable builder lists kernel and bias per layer (what ParameterServerStrategy
    # deals round-robin to its servers); a catalog model without that detail, and a
    # hand-written layer table, count one variable per layer; totals alone, one variable
    mlp = loads(MINIMAL.replace("model: resnet50", "model: mlp")).points[0].spec.model
    assert mlp.variables() == [65536, 1024, 1048576, 1024, 10240, 10]
    resnet = loads(MINIMAL).points[0].spec.model
    assert resnet.layers is not None
    assert resnet.variables() == [ly.params for ly in resnet.layers if ly.params > 0]
    assert sum(resnet.variables()) == resnet.total_params
    resized = loads(MINIMAL.replace("model: resnet50", "model: {params: 3e6}"))
    assert resized.points[0].spec.model.variables() == [3e6]


def test_asynchronous_local_aggregation_updates_a_hosts_batches() -> None:
    # MXNet's dist_async on machines of several devices: a host's devices sum their
    # gradients and push once, so an update applies the host's 4 batches
    text = MINIMAL + (
        "training: {batch_per_worker: 32, steps: 8}\n"
        "strategy: {kind: parameter_server, servers: 2, sync: false, local_aggregation: true}\n"
    )
    (point,) = loads(text).points
    assert point.spec.samples_per_step == 4 * 32


def test_asynchronous_updates_cover_every_worker() -> None:
    # 8 workers, asynchronous: 7 updates would not measure one iteration of each worker
    text = MINIMAL + "strategy: {kind: parameter_server, sync: false}\n"
    msg = error_of(text + "training: {steps: 7}\n")
    assert msg.startswith("training.steps: 7 updates measure less than one iteration")
    assert "of 8 asynchronous workers; give at least 8" in msg
    (point,) = loads(textwrap.dedent(text + "training: {steps: 8}\n")).points
    assert point.spec.training.steps == 8


def test_a_joined_sweep_key_sets_its_paths_together() -> None:
    text = MINIMAL + textwrap.dedent("""
        strategy: {kind: parameter_server}
        sweep:
          cluster.hosts,strategy.servers: [[1, 1], [2, 3]]
          training.batch_per_worker: [8, 16]
        """)
    points = loads(textwrap.dedent(text)).points
    got = [
        (p.spec.cluster.hosts, p.spec.strategy.servers, p.spec.training.batch_per_worker)
        for p in points
    ]
    assert got == [(1, 1, 8), (1, 1, 16), (2, 3, 8), (2, 3, 16)]  # a product of 2 x 2, not 8
    assert points[2].id == "hosts=2_servers=3_batch_per_worker=8"
    assert points[2].values == {
        "cluster.hosts": 2,
        "strategy.servers": 3,
        "training.batch_per_worker": 8,
    }
    msg = error_of(MINIMAL + "sweep:\n  cluster.hosts,strategy.servers: [[1, 1], [2]]\n")
    assert msg.startswith("sweep.cluster.hosts,strategy.servers: each value must be a list of 2")
    msg = error_of(MINIMAL + "sweep:\n  cluster.hosts,strategy.sevrers: [[1, 1]]\n")
    assert msg.startswith("sweep: unknown key 'strategy.sevrers'")
    msg = error_of(
        MINIMAL + "sweep:\n  cluster.hosts,strategy.servers: [[1, 1]]\n", ("strategy.servers=2",)
    )
    assert msg.startswith("--set strategy.servers: the sweep sets cluster.hosts,strategy.servers")


def test_a_swept_subtree_may_not_undo_an_earlier_sweep_key() -> None:
    text = MINIMAL + (
        "strategy: {kind: parameter_server}\n"
        "sweep:\n"
        "  cluster.hosts,strategy.servers: [[1, 1], [2, 2]]\n"
        "  strategy: [{kind: parameter_server, sync: false}]\n"
    )
    msg = error_of(text)
    assert msg.startswith(
        "sweep.strategy: replaces all of strategy, which sweep.cluster.hosts,strategy.servers "
        "sets before it (strategy.servers); list strategy first"
    )


def test_steps_or_samples_not_both() -> None:
    msg = error_of(MINIMAL + "training: {steps: 10, samples: 640}\n")
    assert msg == "training.samples: give steps or samples, not both (got 640)"
    trials = "strategy: {kind: independent, trials: {training.learning_rate: [0.1, 0.2]}}\n"
    msg = error_of(MINIMAL + "training: {samples: 640}\n" + trials)
    assert msg.startswith("training.samples: not defined for strategy kind independent")


def test_the_ssp_bound_has_one_name_at_a_time() -> None:
    ps = "strategy: {kind: parameter_server, sync: false, staleness: 2, max_iterations_ahead: 2}\n"
    assert error_of(MINIMAL + ps).startswith(
        "strategy: give max_iterations_ahead or staleness (the contract's name for it), not both"
    )
    ps = "strategy: {kind: parameter_server, max_iterations_ahead: 2}\n"
    assert error_of(MINIMAL + ps).startswith(
        "strategy: 'max_iterations_ahead' applies to asynchronous training (sync: false) only"
    )
    ring = "strategy: {kind: allreduce, sync: false, max_iterations_ahead: 2}\n"
    assert error_of(MINIMAL + ring).startswith("strategy: 'max_iterations_ahead' applies to kind")


def test_a_schedule_in_epochs_needs_the_training_set() -> None:
    text = BASE_SCHEDULE % "{base: 0.1, warmup_epochs: 5}"
    with pytest.raises(ScenarioError) as info:
        loads(text)
    assert str(info.value) == (
        "training.dataset_samples: needed by learning_rate.warmup_epochs (an epoch is the "
        "training set's samples); give it, or train on data: digits"
    )
    spec = (
        loads(
            text.replace("batch_per_worker: 32", "batch_per_worker: 32, dataset_samples: 1281167")
        )
        .points[0]
        .spec
    )
    assert spec.training.epoch_samples == 1281167
    digits = loads(text.replace("batch_per_worker: 32", "batch_per_worker: 32, data: digits"))
    assert digits.points[0].spec.training.epoch_samples == 1797


@pytest.mark.parametrize(
    "decay, message",
    [
        ("{kind: cosine, milestones: [3]}", "milestones: only step decay has them, not cosine"),
        ("{kind: step}", "milestones: step decay needs the epochs to decay at"),
        ("{kind: step, milestones: [3, 2]}", "milestones: must increase, not [3.0, 2.0]"),
    ],
)
def test_decay_refusals(decay: str, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        loads(BASE_SCHEDULE % f"{{decay: {decay}}}")
    assert str(info.value) == f"training.learning_rate.decay: {message}"
    assert (
        loads(BASE_SCHEDULE % "{decay: cosine}").points[0].spec.training.learning_rate.decay.kind
        == "cosine"
    )


BASE_SCHEDULE = """
version: 1
name: x
model: resnet50
cluster: {hosts: 1, devices_per_host: 2, device: v100, host_link: nvlink2, network: 25GbE}
training: {batch_per_worker: 32, learning_rate: %s}
"""


TARGET = MINIMAL + "training: {%s}\n"


def test_a_bound_replaces_the_steps_warm_up_included() -> None:
    spec = loads(TARGET % "max_steps: 50, warmup_steps: 5").points[0].spec
    assert spec.training.steps == 45
    # digits with a target: 20% held out, 1,797 - 359 = 1,438 train; 8 workers x 32
    text = TARGET % "data: digits, target: {metric: accuracy, value: 0.9}, max_epochs: 3"
    spec = loads(text).points[0].spec
    assert spec.training.holdout_samples == 359 and spec.training.epoch_samples == 1438
    assert spec.training.steps == math.ceil(3 * 1438 / 256) - 5


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            "max_steps: 5, max_epochs: 2",
            "training.max_epochs: give max_steps or max_epochs, not both",
        ),
        ("max_steps: 5", "training.max_steps: 5 is 5 updates, not more than warmup_steps 5"),
        ("steps: 10, max_steps: 50", "training.max_steps: give steps or max_steps, not both"),
        (
            "max_epochs: 2",
            "training.dataset_samples: needed by max_epochs (an epoch is the "
            "training set's samples); give it, or train on data: digits",
        ),
        (
            "target: {metric: accuracy, value: 1.5}",
            "training.target.value: 1.5: an accuracy is a fraction in (0, 1]",
        ),
        ("target: {metric: top5, value: 0.5}", "training.target.metric: "),
    ],
)
def test_target_and_bound_refusals(fields: str, message: str) -> None:
    assert error_of(TARGET % fields).startswith(message)
