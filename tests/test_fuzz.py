"""Fuzzing: bad input of every kind is refused in one line, never with a traceback.

Hypothesis mutates what users hand the commands: the bundled scenarios and plans (keys
dropped, retyped, misspelt, nested, extended; numbers out of range; wrong units; sweeps
too large to run), `--set` values, calibration profiles and the result files `report`
reads (columns missing, cells of the wrong type, files truncated, garbage bytes). Every
input must either be accepted or be refused with a `UserError` whose message is one line
naming the field; through a command's `main`, exit status 0 or 2, on 2 exactly one line on
stderr and nothing new in the output directory. Any other exception is a bug, fixed at
its source with its example kept below.

The runs are derandomized (the same examples every time) and sized to take well under a
minute together; FUZZ_SCALE=10 (an environment variable) tries ten times as many inputs,
and FUZZ_RANDOM=1 draws new ones on each run, for a longer hunt by hand.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import io
import json
import logging
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import SCENARIO as CALIBRATED
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from measured.profile import Profile, dump_profile, load_profile, profiles_of
from planner.space import load_plan
from reports.cli import main as report
from reports.load import load_run
from scenarios import ScenarioError, load, loads
from scenarios.errors import UserError
from scenarios.loader import _submodel
from scenarios.spec import ScenarioSpec
from sim.cli import main as simulate

ROOT = Path(__file__).resolve().parent.parent
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


def budget(examples: int) -> settings:
    """Hypothesis settings for one fuzz test: `examples` inputs (times FUZZ_SCALE), the
    same ones every run unless FUZZ_RANDOM is set."""
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        derandomize=not os.environ.get("FUZZ_RANDOM"),
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


# ------------------------------------------------------------------ what a refusal is


def assert_one_line(message: str, what: str) -> None:
    """A refusal's message: one non-empty line that says where (`field: ...`)."""
    assert message.strip(), f"{what}: an empty message"
    assert "\n" not in message.strip(), f"{what}: more than one line:\n{message}"
    assert ": " in message, f"{what}: names no field: {message!r}"


def accepted_or_refused(call: Callable[[], Any], what: str) -> Any:
    """The call's result, or None where it raised a UserError of one line. Anything
    else it raises propagates: a traceback is a bug."""
    try:
        return call()
    except UserError as exc:
        assert_one_line(str(exc), what)
        return None


class _Lines(logging.Handler):
    """Log records of WARNING and above, as the command's stderr would show them."""

    def __init__(self, stream: io.StringIO):
        super().__init__(logging.WARNING)
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        self.stream.write(f"{record.levelname} {record.name}: {record.getMessage()}\n")


def files_under(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file below folder (hidden ones too), with its size and modification time."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def run_command(
    main: Callable[[Sequence[str]], int], argv: Sequence[str], out: Path
) -> tuple[int, str]:
    """Run a command's `main` in-process; return its exit status and stderr after checking the
    contract: 0 or 2, on 2 exactly one line on stderr (log records and Python warnings
    count as lines, as a terminal would show them) and nothing new under `out`."""
    before = files_under(out)
    stderr = io.StringIO()
    root = logging.getLogger()
    handler = _Lines(stderr)
    root.addHandler(handler)
    try:
        with (
            contextlib.redirect_stderr(stderr),
            contextlib.redirect_stdout(io.StringIO()),
            warnings.catch_warnings(record=True) as said,
        ):
            warnings.simplefilter("default")
            try:
                status = main(list(argv))
            except SystemExit as exc:  # argparse's refusal of a flag
                status = exc.code if isinstance(exc.code, int) else 2
    finally:
        root.removeHandler(handler)
    shown = [w for w in said if not issubclass(w.category, DeprecationWarning | ResourceWarning)]
    text = stderr.getvalue() + "".join(f"{w.category.__name__}: {w.message}\n" for w in shown)
    assert status in (0, 2), f"exit status {status}; stderr:\n{text}"
    if status == 2:
        lines = text.strip().splitlines()
        assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{text}"
        assert_one_line(lines[0], " ".join(argv))
        assert files_under(out) == before, f"{out}: written although refused: {lines[0]}"
    return status, text


# ------------------------------------------------------------------ mutating documents

Path_ = tuple[str | int, ...]


def paths_in(node: Any, here: Path_ = ()) -> Iterator[Path_]:
    """Every path to a value below node (mapping keys and list positions)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*here, key)
            yield from paths_in(value, (*here, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield (*here, i)
            yield from paths_in(value, (*here, i))


def parent_of(document: Any, path: Path_) -> Any:
    node = document
    for part in path[:-1]:
        node = node[part]
    return node


#: values of every type YAML can write, for a field given the wrong one
ANY_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)

#: numbers at and beyond the edges of any field's range
EDGE_NUMBERS = st.sampled_from(
    [0, -1, -0.5, 0.5, 1, 2, 1e-300, 1e308, 1e400, -1e400, float("nan"), 10**19, 2**63, 2**64,
     -(2**63), 10**9, 3.7, 1e-9]
)  # fmt: skip

#: units of every dimension (and none), for a field given the wrong one
UNITS = st.sampled_from(
    ["s", "ms", "us", "h", "min", "B", "MiB", "GB", "bit", "Gbit/s", "GB/s", "Gbps", "GBps",
     "FLOP", "TFLOP/s", "GFLOP", "W", "kW", "USD", "m", "kg", "%", "Gb", "", "1/s", "s/s",
     "GB/s/s", "hertz", "x", "??", "e3"]
)  # fmt: skip

#: keys a mapping may be given that it does not take (a few are valid elsewhere)
STRAY_KEYS = st.sampled_from(
    ["servers", "hosts", "base", "name", "kind", "sweep", "version", "steps", "seed", "x",
     "", "1", "profile", "trials", "plan"]
) | st.text(min_size=1, max_size=8)  # fmt: skip


def misspelt(key: str, draw: st.DrawFn) -> str:
    """A typo of key: a letter dropped, doubled, swapped or changed, or its case."""
    if not key:
        return "x"
    i = draw(st.integers(0, len(key) - 1))
    how = draw(st.sampled_from(["drop", "double", "swap", "change", "case", "space"]))
    if how == "drop":
        return key[:i] + key[i + 1 :] or "x"
    if how == "double":
        return key[:i] + key[i] + key[i:]
    if how == "swap" and i + 1 < len(key):
        return key[:i] + key[i + 1] + key[i] + key[i + 2 :]
    if how == "case":
        return key.upper()
    if how == "space":
        return f" {key}"
    return key[:i] + draw(st.sampled_from("aeiouxz_-.")) + key[i + 1 :]


def with_units(value: str, draw: st.DrawFn) -> Any:
    """A dimensioned value (`25 Gbit/s`) with its number or its unit changed, or bare."""
    number, _, unit = value.strip().partition(" ")
    how = draw(st.sampled_from(["unit", "number", "bare", "garbage"]))
    if how == "unit":
        return f"{number} {draw(UNITS)}".strip()
    if how == "number":
        return f"{draw(EDGE_NUMBERS)} {unit}".strip()
    if how == "bare":
        try:
            return float(number)
        except ValueError:
            return number
    return f"{number}{draw(st.sampled_from(['**', ' per ', '/', ' * ', '(', ' GB GB']))}{unit}"


MUTATIONS = ("drop", "retype", "misspell", "nest", "extend", "number", "units")


def mutate(document: dict[str, Any], draw: st.DrawFn, kinds: list[str]) -> dict[str, Any]:
    """One mutation of the document (a copy), at one of its paths; its kind is appended
    to `kinds`."""
    document = copy.deepcopy(document)
    # in an order of no meaning: Hypothesis draws the first more often than the rest
    paths = sorted(paths_in(document), key=lambda p: hashlib.sha256(repr(p).encode()).digest())
    if not paths:
        return document
    path = draw(st.sampled_from(paths))
    parent, key = parent_of(document, path), path[-1]
    value = parent[key]
    kind = draw(st.sampled_from(MUTATIONS))
    if kind == "number" and not isinstance(value, int | float):
        kind = "units" if isinstance(value, str) and any(c.isdigit() for c in value) else "retype"
    if kind == "units" and not isinstance(value, str):
        kind = "number" if isinstance(value, int | float) else "retype"
    kinds.append(kind)
    if kind == "drop":
        del parent[key]
    elif kind == "retype":
        parent[key] = draw(ANY_VALUE)
    elif kind == "misspell":
        if isinstance(key, str):
            parent[misspelt(key, draw)] = parent.pop(key)
        elif isinstance(parent, list):
            parent.insert(key, copy.deepcopy(value))  # a list item twice
        else:  # a number as a mapping's key (an earlier "extend" made it)
            parent[f"{key}_"] = parent.pop(key)
    elif kind == "nest":
        parent[key] = draw(st.sampled_from([[value], {"base": value}, {"value": value}]))
    elif kind == "extend":
        if isinstance(value, dict):
            value[draw(STRAY_KEYS)] = draw(ANY_VALUE)
        elif isinstance(value, list):
            value.append(
                copy.deepcopy(value[-1]) if value and draw(st.booleans()) else draw(ANY_VALUE)
            )
        else:
            parent[key] = draw(st.sampled_from([[value, value], f"{value} {value}", {key: value}]))
    elif kind == "number":
        parent[key] = draw(EDGE_NUMBERS)
    else:
        parent[key] = with_units(value, draw)
    return document


# ------------------------------------------------------------------ the bundled files


def bundled(folder: str) -> dict[str, dict[str, Any]]:
    """The bundled YAML files of scenarios/<folder>, read, by file name."""
    return {
        path.name: yaml.safe_load(path.read_text(encoding="utf-8"))
        for path in sorted((ROOT / "scenarios" / folder).glob("*.yaml"))
    }


def trimmed(document: dict[str, Any]) -> dict[str, Any]:
    """The document with its sweep cut to two points (loading costs a point at a time)."""
    document = copy.deepcopy(document)
    sweep = document.get("sweep")
    if isinstance(sweep, dict):
        document["sweep"] = {k: v[: 2 if i == 0 else 1] for i, (k, v) in enumerate(sweep.items())}
    return document


SCENARIOS = {
    f"{folder}/{name}": trimmed(doc)
    for folder in ("library", "published")
    for name, doc in bundled(folder).items()
}


@st.composite
def mutated_from(draw: st.DrawFn, document: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(mutated document, kinds of mutation): one to three mutations of the document."""
    kinds: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        document = mutate(document, draw, kinds)
    return document, kinds


@st.composite
def mutated_scenarios(draw: st.DrawFn) -> tuple[str, dict[str, Any], list[str]]:
    """(file, mutated document, kinds of mutation) of one bundled scenario."""
    name = draw(st.sampled_from(sorted(SCENARIOS)))
    return (name, *draw(mutated_from(SCENARIOS[name])))


@budget(1200)
@given(mutated_scenarios())
def test_a_mutated_scenario_loads_or_is_refused_in_one_line(
    case: tuple[str, dict[str, Any], list[str]],
) -> None:
    name, document, kinds = case
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    scenario = accepted_or_refused(lambda: loads(text, source=name), f"{name} {kinds}")
    if scenario is not None:
        accepted_or_refused(lambda: profiles_of(scenario), f"{name} {kinds}")


@pytest.mark.parametrize(
    "sets, field",
    [
        (["training.max_epochs=1e308"], "training.max_epochs"),  # more updates than a float
        (["strategy.fusion_buffer=0(B"], "strategy.fusion_buffer"),  # pint's TokenError
        (["strategy.fusion_buffer=9**999 B"], "strategy.fusion_buffer"),  # int beyond a float
        (["strategy.fusion_buffer=1/0 B"], "strategy.fusion_buffer"),
        (["strategy.fusion_buffer=" + "1*" * 5000 + "1 B"], "strategy.fusion_buffer"),  # stack
        (["strategy.fusion_buffer=" + "-" * 2000 + "1 B"], "strategy.fusion_buffer"),
        (['cluster.network={base: 25GbE, "a\\nb": 1}'], "cluster.network.a\\nb"),  # a break
        (["sweep.checkpoint=&a [*a]"], "--set sweep.checkpoint"),  # an alias in itself
        (["description=" + "[" * 1000 + "]" * 1000], "--set description"),  # YAML's stack
        (  # a trial's batch is a number: the simulator took int() of this list
            ["strategy.trials={batch_per_worker: [32, [64]]}"], "strategy.trials.batch_per_worker"
        ),
    ],
)  # fmt: skip
def test_what_the_fuzzing_found_is_refused_in_one_line(sets: list[str], field: str) -> None:
    name = "hyperparameter-search" if "trials" in sets[0] else "resnet50-large-batch"
    with pytest.raises(ScenarioError) as refused:
        load(ROOT / f"scenarios/library/{name}.yaml", sets)
    assert_one_line(str(refused.value), str(sets))
    assert str(refused.value).startswith(f"{field}: ")


def test_a_power_tower_is_refused_at_once() -> None:
    """9**9**9 has 370 million digits: pint would compute them before anything else."""
    started = time.perf_counter()
    with pytest.raises(ScenarioError, match="^strategy.fusion_buffer: not a number with a unit"):
        load(ROOT / "scenarios/library/mlp-localhost.yaml", ["strategy.fusion_buffer=9**9**9 B"])
    assert time.perf_counter() - started < 5


# ------------------------------------------------------------------ --set PATH=VALUE


def field_paths(model: Any = None, prefix: str = "") -> Iterator[str]:
    """Every dotted path the scenario language has (cluster.network.bandwidth ...)."""
    for key, info in (model or ScenarioSpec).model_fields.items():
        yield prefix + key
        inner = _submodel(info.annotation)
        if inner is not None:
            yield from field_paths(inner, f"{prefix}{key}.")


FIELD_PATHS = sorted(field_paths())

#: what a person types after `=`: YAML scalars and collections, broken YAML, units
SET_TEXTS = st.sampled_from(
    ["4", "-1", "0", "1e400", ".nan", ".inf", "nan", "[1, 2]", "[]", "{}", "{a: 1}", "true",
     "null", "~", "", " ", "'", '"', "[", "{", ": ", "- a", "a: b: c", "!!python/object:os.system",
     "!!binary AAAA", "&a [*a]", "25 Gbit/s", "64 MiB", "10 us", "3 ms", "ring", "allreduce",
     "parameter_server", "resnet50", "v100", "25GbE", "1.5", "2**10", "0x10", "1_000", "=",
     "[1, [2, [3]]]", "{base: v100, efficiency: 2}", "\t", "é", "\x00", "1 GB GB"]
) | st.text(alphabet="0123456789.-+e []{}:,'\"abs GMiB/&*!|>#%@`\\\n", max_size=16)  # fmt: skip

SET_PATHS = (
    st.sampled_from(FIELD_PATHS)
    | st.sampled_from(FIELD_PATHS).map(lambda path: f"sweep.{path}")
    | st.sampled_from(["", ".", "..", "a..b", "sweep", "sweep.", "cluster.", ".cluster", "=",
                       "cluster.hosts,strategy.servers", "sweep.cluster.hosts,strategy.servers",
                       "cluster.network.bandwidth.x", "strategy.trials.lr", "model.keras.hidden",
                       "cluster.device.samples_per_s.resnet50", "real.spark.conf.spark.x"])
    | st.text(max_size=12)
)  # fmt: skip

SET_ITEMS = st.builds(
    lambda p, v, eq: f"{p}{eq}{v}",
    SET_PATHS,
    SET_TEXTS,
    st.sampled_from(["=", "=", "=", " = ", ""]),
)


@budget(700)
@given(st.sampled_from(sorted(SCENARIOS)), st.lists(SET_ITEMS, min_size=1, max_size=3))
def test_a_fuzzed_set_loads_or_is_refused_in_one_line(name: str, sets: list[str]) -> None:
    text = yaml.safe_dump(SCENARIOS[name], sort_keys=False)
    accepted_or_refused(lambda: loads(text, sets, source=name), f"{name} --set {sets}")


# ------------------------------------------------------------------ simulate itself

#: what simulate runs here: small enough to run in milliseconds after a mutation
SMALL = ("mlp-localhost.yaml", "mlp-localhost-strategies.yaml", "sync-vs-async.yaml",
         "stragglers-backup-workers.yaml", "hyperparameter-search.yaml")  # fmt: skip
FEW_STEPS = ("--set", "training.steps=3", "--set", "training.warmup_steps=1")


def small_enough(text: str, sets: Sequence[str]) -> bool:
    """Whether the scenario loads and each point is small to simulate (a mutation can
    ask for a million workers or steps: valid, and minutes to simulate)."""
    try:
        scenario = loads(text, sets)
    except UserError:
        return True  # refused before any work
    return all(
        p.spec.workers <= 64
        and p.spec.training.steps <= 50
        and p.spec.sim.replications <= 3
        and len(scenario.points) <= 8
        for p in scenario.points
    )


@budget(120)
@given(
    st.sampled_from(SMALL).flatmap(
        lambda name: st.tuples(st.just(name), mutated_from(SCENARIOS[f"library/{name}"]))
    ),
    st.lists(SET_ITEMS, max_size=2),
)
def test_simulate_runs_or_refuses_in_one_line_with_nothing_written(
    tmp_path_factory: pytest.TempPathFactory,
    case: tuple[str, tuple[dict[str, Any], list[str]]],
    sets: list[str],
) -> None:
    name, (document, _) = case
    folder = tmp_path_factory.mktemp("simulate")
    scenario = folder / name
    scenario.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    argv = [str(scenario), "--quiet", "--out", str(folder / "out"), *FEW_STEPS]
    argv += [arg for item in sets for arg in ("--set", item)]
    assume(small_enough(scenario.read_text(encoding="utf-8"), argv[5::2]))
    run_command(simulate, argv, folder / "out")


# ------------------------------------------------------------------ huge input


def test_a_sweep_too_large_to_run_is_refused_at_once_with_its_size(tmp_path: Path) -> None:
    """10 keys of 10 values: 1e10 points, refused before the first is expanded."""
    sets = [f"sweep.{key}={list(range(1, 11))}" for key in TEN_SWEPT]
    started = time.perf_counter()
    with pytest.raises(ScenarioError) as refused:
        load(ROOT / "scenarios/library/mlp-localhost.yaml", sets)
    assert str(refused.value).startswith("sweep: 2 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10 x 10")
    assert "= 2,000,000,000 points, more than the 10,000 " in str(refused.value)
    out = tmp_path / "out"
    argv = [str(ROOT / "scenarios/library/mlp-localhost.yaml"), "--out", str(out)]
    assert run_command(simulate, argv + [a for s in sets for a in ("--set", s)], out)[0] == 2
    assert time.perf_counter() - started < 5


#: fields that take the numbers 1 to 10
TEN_SWEPT = ("seed", "training.steps", "training.warmup_steps", "training.batch_per_worker",
             "cluster.hosts", "checkpoint.every_steps", "sim.replications",
             "training.learning_rate.base", "stragglers.jitter")  # fmt: skip


def test_a_plan_grid_too_large_to_check_is_refused_but_a_search_is_not() -> None:
    """A plan's candidates are made one at a time, as the search asks: a space of 1e10
    costs nothing until a grid would validate every one of them."""
    plan = ROOT / "scenarios/plans/digits-mlp.yaml"
    sets = [
        f"plan.options.{key}={list(range(1, 11))}"
        for key in ("seed", "training.warmup_steps", "cluster.hosts", "checkpoint.every_steps",
                    "sim.replications")
    ] + [
        f"plan.options.training.learning_rate.base={[i / 100 for i in range(1, 11)]}",
        f"plan.options.stragglers.jitter={[i / 100 for i in range(10)]}",
    ]  # fmt: skip
    space = load_plan(plan, sets)
    assert space.size == 2 * 2 * 3 * 10**7  # the file's options, and seven lists of ten
    space.point(space.size - 1)  # the last candidate, made alone
    with pytest.raises(ScenarioError, match=r"^plan.search.method: a grid of 120,000,000 "):
        load_plan(plan, [*sets, "plan.search.method=grid"])


def test_a_file_of_megabytes_is_read_or_refused_in_one_line(tmp_path: Path) -> None:
    """A description of 4 MB is read; a list of 300,000 workers (2 MB) and aliases that
    hold billions of values are refused, each in one line, in seconds."""
    base = (ROOT / "scenarios/library/mlp-localhost.yaml").read_text(encoding="utf-8")
    long = tmp_path / "long.yaml"
    long.write_text(base.replace("description: ", "description: " + "x" * 4_000_000), "utf-8")
    huge = tmp_path / "huge.yaml"
    huge.write_text(
        base + f"stragglers: {{slow: [{{factor: 2, workers: {list(range(300_000))}}}]}}\n"
    )
    laughs = tmp_path / "laughs.yaml"
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    laughs.write_text(base + "strategy: {kind: independent, trials: {" + ", ".join(lines) + "}}\n")
    started = time.perf_counter()
    description = load(long).points[0].spec.description
    assert description.startswith("x" * 4_000_000 + "MLP (1.1 M parameters)")
    assert huge.stat().st_size > 2_000_000
    for path, message in (
        (huge, "stragglers.slow[0].workers: "),
        (laughs, "holds 12,345,679,073 values with its aliases followed, more than the "),
    ):
        out = tmp_path / f"out-{path.stem}"
        status, said = run_command(simulate, [str(path), "--out", str(out)], out)
        assert status == 2 and message in said
    assert time.perf_counter() - started < 30


# ------------------------------------------------------------------ calibration profiles


def _fit(**more: Any) -> dict[str, Any]:
    points = [{"bytes": "1 KiB", "time": "2 ms"}, {"bytes": "1 MiB", "time": "8 ms"}]
    return {"latency": "1.9 ms", "bandwidth": "160 MB/s", "r2": 0.99, "max_rel_residual": 0.1,
            "points": points, **more}  # fmt: skip


#: a profile with an entry of every kind (conftest's SCENARIO trains its model `toy`),
#: as `dump_profile` writes it
PROFILE = dump_profile(
    Profile.model_validate(
        {
            "created": "2026-11-29T12:00:00+00:00",
            "machine": {"hostname": "box", "cpus": 2, "platform": "test", "tensorflow": "2.21"},
            "compute": [
                {
                    "model": "toy",
                    "batch_per_worker": 10,
                    "processes": p,
                    "step_time": f"{t} ms",
                    "p10": "6 ms",
                    "p90": "8 ms",
                    "steps": 50,
                    "startup": "2 s",
                }
                for p, t in ((1, 6.4), (2, 7.0))
            ]
            + [
                {
                    "model": "toy",
                    "batch_per_worker": 10,
                    "processes": 2,
                    "in_graph": True,
                    "gradients_only": True,
                    "step_time": "5 ms",
                }
            ],
            "transfer": _fit(),
            "exchange": _fit(bandwidth="120 MB/s"),
            "messages": {"first": "2.2 ms", "chained": "0.5 ms", "chain": 8},
            "allreduce": [_fit(workers=2), _fit(workers=4)],
            "in_graph": [_fit(workers=2)],
            "coordinator": {"dispatch": "3 ms", "call": "1 ms", "queued": "2 ms"},
            "updates": [
                {
                    "model": "toy",
                    "servers": 1,
                    "time": "4 ms",
                    "closure_read": "3 ms",
                    "closure_accumulate": "4 ms",
                    "closure_apply": "5 ms",
                }
            ],
            "restarts": [
                {
                    "model": "toy",
                    "batch_per_worker": 10,
                    "strategy": "allreduce/ring",
                    "workers": 2,
                    "time": "3 s",
                }
            ],
        }  # fmt: skip
    )
)
PROFILE_DOCUMENT = yaml.safe_load(PROFILE)


#: bytes that break a text file: not UTF-8, NUL, YAML's and CSV's syntax, a line break
GARBAGE = st.sampled_from(
    [b"\xff\xfe", b"\x00", b"\t:", b"\n- ", b"{", b"&a *a", b"\xe2\x80\xa8", b'"', b",,", b"\r"]
)


@st.composite
def broken_bytes(draw: st.DrawFn, text: str) -> bytes:
    """The text's bytes truncated, with garbage written over a part, or bytes inserted."""
    raw = text.encode()
    at = draw(st.integers(0, len(raw)))
    how = draw(st.sampled_from(["truncate", "overwrite", "insert"]))
    if how == "truncate":
        return raw[:at]
    garbage = draw(st.binary(min_size=1, max_size=16) | GARBAGE)
    return raw[:at] + garbage + raw[at + (len(garbage) if how == "overwrite" else 0) :]


PROFILE_INPUTS = mutated_from(PROFILE_DOCUMENT).map(
    lambda case: yaml.safe_dump(case[0], sort_keys=False).encode()
) | broken_bytes(PROFILE)


@budget(500)
@given(PROFILE_INPUTS)
def test_a_broken_profile_loads_or_is_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes
) -> None:
    path = tmp_path_factory.mktemp("profile") / "box.yaml"
    path.write_bytes(raw)
    accepted_or_refused(lambda: load_profile(path), repr(raw[:200]))


@budget(100)
@given(PROFILE_INPUTS, st.sampled_from(["allreduce", "parameter_server", "independent"]))
def test_simulate_with_a_broken_profile_runs_or_refuses_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, raw: bytes, kind: str
) -> None:
    folder = tmp_path_factory.mktemp("calibrated")
    (folder / "box.yaml").write_bytes(raw)
    (folder / "scenario.yaml").write_text(CALIBRATED, encoding="utf-8")
    strategy = {
        "allreduce": "{kind: allreduce, algorithm: ring, overlap: false}",
        "parameter_server": "{kind: parameter_server, servers: 1}",
        "independent": "{kind: independent, trials: {lr: [0.1, 0.2, 0.3]}}",
    }[kind]
    argv = [str(folder / "scenario.yaml"), "--quiet", "--out", str(folder / "out")]
    argv += ["--set", f"strategy={strategy}", "--set", "cluster.devices_per_host=2"]
    run_command(simulate, argv, folder / "out")


# ------------------------------------------------------------------ result files

#: result directories `report` reads: simulate's and run-real's of one scenario, and a
#: simulation with traces
RESULTS = ROOT / "tests" / "data" / "reports"
RUNS = ("mlp-localhost/sim", "mlp-localhost/real", "async-ps")


def mutated_csv(text: str, draw: st.DrawFn) -> str:
    """A CSV file with a column dropped, misspelt or added, a cell of another type, its
    rows gone, or a row repeated."""
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    how = draw(st.sampled_from(["drop column", "misspell column", "add column", "cell",
                                "cells", "no rows", "repeat row", "short row"]))  # fmt: skip
    column = draw(st.integers(0, len(header) - 1))
    if how == "drop column":
        rows = [row[:column] + row[column + 1 :] for row in rows]
    elif how == "misspell column":
        header[column] = misspelt(header[column], draw)
    elif how == "add column":
        rows = [row + [draw(CELLS)] for row in rows]
    elif how in ("cell", "cells") and body:
        chosen = body if how == "cells" else [draw(st.sampled_from(body))]
        for row in chosen:
            row[column] = draw(CELLS)
    elif how == "no rows":
        rows = rows[:1]
    elif how == "repeat row" and body:
        rows.append(list(draw(st.sampled_from(body))))
    elif how == "short row" and body:
        body[-1] = body[-1][:column]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


#: what a cell may hold instead of its value
CELLS = st.sampled_from(["", "nan", "inf", "-inf", "-1", "0", "1e400", "True", "yes", "x",
                         "sim", "real", "1,5", "[1]", "None", "NaN", "1e-400", " 3 "]) | st.text(
    max_size=6)  # fmt: skip


@st.composite
def broken_runs(draw: st.DrawFn) -> tuple[str, dict[str, bytes]]:
    """(run, {file name: new bytes}): one or two of a result directory's files broken."""
    run = draw(st.sampled_from(RUNS))
    files = sorted(p.name for p in (RESULTS / run).iterdir() if p.name != "scenario.yaml")
    changed: dict[str, bytes] = {}
    for name in draw(st.lists(st.sampled_from(files), min_size=1, max_size=2, unique=True)):
        text = (RESULTS / run / name).read_text(encoding="utf-8")
        how = draw(st.sampled_from(["content", "content", "bytes", "missing"]))
        if how == "missing":
            changed[name] = b""
            continue
        if how == "bytes":
            changed[name] = draw(broken_bytes(text))
        elif name.endswith(".csv"):
            changed[name] = mutated_csv(text, draw).encode()
        else:
            document = json.loads(text)
            document = draw(mutated_from(document))[0] if isinstance(document, dict) else document
            changed[name] = json.dumps(document).encode()
    return run, changed


def broken_copy(folder: Path, run: str, changed: dict[str, bytes]) -> Path:
    """A copy of the run in folder with its changed files (an empty one: missing)."""
    target = folder / "run"
    shutil.copytree(RESULTS / run, target)
    for name, raw in changed.items():
        if raw:
            (target / name).write_bytes(raw)
        else:
            (target / name).unlink()
    return target


@budget(500)
@given(broken_runs())
def test_a_broken_result_directory_is_read_or_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[str, dict[str, bytes]]
) -> None:
    run = broken_copy(tmp_path_factory.mktemp("results"), *case)
    accepted_or_refused(lambda: load_run(run), f"{case[0]}: {sorted(case[1])}")


@budget(40)
@given(broken_runs(), st.booleans())
def test_report_writes_or_refuses_in_one_line_with_nothing_written(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[str, dict[str, bytes]], timelines: bool
) -> None:
    folder = tmp_path_factory.mktemp("report")
    run = broken_copy(folder, *case)
    argv = [str(run), "--out", str(folder / "report"), *([] if timelines else ["--no-timelines"])]
    run_command(report, argv, folder / "report")


def test_a_trace_with_a_list_for_a_thread_id_is_drawn(tmp_path: Path) -> None:
    """Found by fuzzing: a trace event's pid may be any JSON value; a list was a
    TypeError (unhashable) in the timeline, now a thread like any other."""
    run = broken_copy(tmp_path, "async-ps", {})
    trace = run / "trace-sync=true.json"
    document = json.loads(trace.read_text(encoding="utf-8"))
    for event in document["traceEvents"][:3]:
        event["pid"], event["args"] = [1, 2], ["not", "a", "mapping"]
    trace.write_text(json.dumps(document), encoding="utf-8")
    assert run_command(report, [str(run), "--out", str(tmp_path / "report")], tmp_path)[0] == 0
    assert "async-ps" in (tmp_path / "report" / "report.html").read_text(encoding="utf-8")


# ------------------------------------------------------------------ plans

PLANS = bundled("plans")


@budget(150)
@given(
    st.sampled_from(sorted(PLANS)).flatmap(
        lambda name: st.tuples(st.just(name), mutated_from(PLANS[name]))
    ),
    st.lists(SET_ITEMS | SET_ITEMS.map(lambda item: f"plan.{item}"), max_size=2),
)
def test_a_mutated_plan_loads_or_is_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory,
    case: tuple[str, tuple[dict[str, Any], list[str]]],
    sets: list[str],
) -> None:
    """A plan read and its candidates checked, as `trainscale plan` does before it
    simulates any."""
    name, (document, kinds) = case
    path = tmp_path_factory.mktemp("plan") / name
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    space = accepted_or_refused(lambda: load_plan(path, sets), f"{name} {kinds} {sets}")
    if space is not None:
        accepted_or_refused(space.check, f"{name} {kinds} {sets}")


@pytest.mark.parametrize(
    "item, field",
    [
        ("strategy.servers=10000000000000000000", "strategy.servers"),  # numpy: size exceeded
        ("cluster.hosts=99999999999999999999", "cluster.hosts"),  # numpy: int too large
        ("training.steps=1000000000000", "training.steps"),  # numpy: 7.28 TiB
        ("training.warmup_steps=100000000000000000000", "training.warmup_steps"),
    ],
)
def test_a_run_beyond_reach_is_refused_in_one_line(tmp_path: Path, item: str, field: str) -> None:
    """Found by fuzzing: counts that validated but broke the simulator's arrays."""
    path = str(ROOT / "scenarios/library/stragglers-backup-workers.yaml")
    status, said = run_command(
        simulate, [path, "--out", str(tmp_path / "out"), "--set", item], tmp_path
    )
    assert status == 2
    assert said.startswith(f"simulate: error: {field}: ") and ", more than the 1,000,000" in said


# ------------------------------------------------------------------ command lines

#: what a person may type after a command's name (never a Spark engine: that starts Java)
FLAG_WORDS = st.sampled_from(
    ["--jobs", "0", "-1", "2", "x", "--out", "--set", "--steps", "all", "summary", "bogus",
     "--defaults", "real", "sim", "--trace", "--force", "--quiet", "--no-timelines", "--",
     "-", "--out=", "--set=", "training.steps=2", "training.steps=", "=", "--version=1",
     "--jobs=1e3", "\x00", "é", "{OUT}", "{FILE}", "{MISSING}"]
)  # fmt: skip


def command_line(words: list[str], folder: Path, file: str) -> list[str]:
    """The words with a scenario or result directory (FILE), a fresh output directory
    (OUT) and a path that does not exist (MISSING) put in."""
    names = {"{OUT}": str(folder / "out"), "{FILE}": file, "{MISSING}": str(folder / "nothing")}
    return [names.get(word, word) for word in words]


@budget(150)
@given(st.lists(FLAG_WORDS, max_size=6), st.booleans())
def test_any_command_line_runs_or_is_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, words: list[str], reporting: bool
) -> None:
    folder = tmp_path_factory.mktemp("flags")
    with contextlib.chdir(folder):  # `--out=` is the working directory
        command_line_of(folder, words, reporting)


def command_line_of(folder: Path, words: list[str], reporting: bool) -> None:
    if reporting:
        run = broken_copy(folder, "mlp-localhost/sim", {})
        argv = command_line(["{FILE}", *words], folder, str(run))
        run_command(report, argv, folder / "out")
    else:
        scenario = str(ROOT / "scenarios/library/mlp-localhost.yaml")
        argv = command_line(["{FILE}", *words, *FEW_STEPS, "--out", "{OUT}"], folder, scenario)
        run_command(simulate, argv, folder / "out")
