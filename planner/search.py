"""Which candidates are simulated: all of them (`grid`) or those a multi-objective search
picks (`optuna`: Optuna's TPE sampler, the limits as its constraints), `jobs` at a time.

Either way the candidates are Optuna trials in a study kept on disk in the output
directory (a journal file, one line per event), each finished trial holding its
candidate's simulated row: run the same plan again into the same directory and it
continues where it stopped, simulating nothing twice. A study is named for the plan's
file and --set edits, so that a changed plan starts afresh beside the old.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scenarios.loader import Point
from sim.runner import run
from workloads.pipeline import memory_summary

from .bounds import sure_status
from .evaluate import PRUNED, Judged, judge
from .space import Space

STUDY_FILE = "plan-study.log"
#: what a candidate's trial keeps: its index, its row, its status
CANDIDATE, ROW = "candidate", "row"


def study_name(space: Space) -> str:
    """The plan's file and edits, hashed: a changed plan gets a study of its own."""
    edits = hashlib.sha256("\n".join(space.sets).encode()).hexdigest()[:8]
    return f"{space.name}-{space.sha256[:12]}-{edits}"


def _study(space: Space, out_dir: Path, method: str) -> Any:
    import optuna  # imported here: only `trainscale plan` loads it
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    backend = JournalFileBackend(str(out_dir / STUDY_FILE))
    storage = optuna.storages.JournalStorage(backend)
    # the grid: every candidate queued as a trial of its own (what the sampler would
    # pick is then never asked)
    sampler = optuna.samplers.TPESampler(
        seed=space.plan.search.seed,
        multivariate=True,
        n_startup_trials=10,
    )
    study = optuna.create_study(
        study_name=study_name(space),
        storage=storage,
        sampler=sampler,
        directions=["minimize"] * len(space.plan.objectives),
        load_if_exists=True,
    )
    # a trial left running by a plan that was stopped: failed, its candidate asked again
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(trial.number, state=TrialState.FAIL)
    if method == "grid":
        queued = {
            t.user_attrs.get(CANDIDATE)
            for t in study.get_trials(deepcopy=False)
            if t.state == TrialState.WAITING or ROW in t.user_attrs
        }
        for index in range(space.size):
            if index not in queued:
                params = dict(zip(space.keys, space.choices(index), strict=True))
                study.enqueue_trial(params, user_attrs={CANDIDATE: index})
    return study


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """A row as JSON keeps it (numpy scalars as Python's, NaN as null)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    return out


def explore(
    space: Space,
    out_dir: Path,
    jobs: int = 1,
    tick: Callable[[int, int], None] | None = None,
) -> list[Judged]:
    """Every candidate the plan's search simulates, judged (resumed from the study in
    out_dir where there is one); `tick(done, total)` after each."""
    from optuna.trial import TrialState

    method = space.plan.method(space.size)
    total = space.size if method == "grid" else min(space.size, space.plan.search.trials)
    study = _study(space, out_dir, method)
    judged: dict[int, Judged] = {}
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        index = trial.user_attrs.get(CANDIDATE)
        if index is not None and index not in judged:
            judged[index] = judge(space.plan, index, space.point(index), trial.user_attrs[ROW])
    if tick:
        tick(len(judged), total)
    while len(judged) < total:
        asked: list[tuple[Any, int]] = []
        fresh: list[tuple[int, Point]] = []
        while len(asked) < jobs and len(judged) + len(fresh) < total:
            trial = study.ask()
            index = space.index(
                [
                    trial.suggest_categorical(k, list(range(len(v))))
                    for k, v in space.plan.options.items()
                ]
            )
            asked.append((trial, index))
            if index not in judged and all(i != index for i, _ in fresh):
                fresh.append((index, space.point(index)))
        points = dict(fresh)
        for index, row in _simulate(space, fresh, jobs):
            judged[index] = judge(space.plan, index, points[index], row)
        for trial, index in asked:
            _tell(study, trial, space, judged[index])
        if tick:
            tick(len(judged), total)
        if len(study.trials) > 4 * total + 20:
            break  # the sampler keeps asking for candidates it has seen
    return [judged[i] for i in sorted(judged)]


def _simulate(
    space: Space, fresh: list[tuple[int, Point]], jobs: int
) -> list[tuple[int, dict[str, Any]]]:
    """The rows of these candidates: an unfit one's from its memory alone (where the plan
    asks that they fit), one sure to miss the target or a limit with that reason
    (`bounds.sure_status`), both pruned before simulating; the rest simulated."""
    out: list[tuple[int, dict[str, Any]]] = []
    runnable: list[tuple[int, Point]] = []
    for index, point in fresh:
        memory = memory_summary(point.spec)
        if memory["fits"] is False and space.plan.constraints.fits_memory:
            unfit = {
                "point": point.id,
                "fits": False,
                "peak_memory_bytes": memory["peak_memory_bytes"],
            }
            out.append((index, unfit))
        elif (sure := sure_status(space.plan, point)) is not None:
            out.append((index, {"point": point.id, PRUNED: sure}))
        else:
            runnable.append((index, point))
    if runnable:
        result = run(space.scenario([p for _, p in runnable]), jobs=jobs)
        for (index, _), done in zip(runnable, result.points, strict=True):
            out.append((index, _clean(done.row)))
    return out


def _tell(study: Any, trial: Any, space: Space, judged: Judged) -> None:
    from optuna.trial import TrialState

    trial.set_user_attr(CANDIDATE, judged.index)
    trial.set_user_attr(ROW, json.loads(json.dumps(_clean(judged.row))))
    trial.set_user_attr("status", judged.status)
    values = [judged.value(o) for o in space.plan.objectives]
    if any(math.isnan(v) for v in values):
        study.tell(trial, state=TrialState.FAIL)
        return
    trial.set_constraint("limits", 0.0 if judged.ok else 1.0)  # > 0: breaks them
    study.tell(trial, values)
