"""Sim-screened, live-confirmed tuning: measure a simulated study's top configs on a live server.

The simulator screens many configs cheaply; a live server measures few, each
for real. `confirm_study` takes the study's top-k distinct configs by
simulated objective plus the engine-default baseline and measures each with
the study's own objective (goodput: the same `find_goodput` search, SLO,
scenario, seed and request count) on a live backend: a server launched per
config (`launch=ENGINE`), or one the operator runs at an endpoint, measured
once as it runs and reported beside the simulated best. Each measured run is
stored with the study, its trial and the label "confirm". A server that will
not start or dies fails its row with one line; the other rows are measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..backends import ServerError, ServingConfig
from .objective import Evaluator, completed_value, config_key
from .objectives import Objective
from .spec import TuneSpec
from .storage import open_storage
from .study import open_store

CONFIRM_LABEL = "confirm"  # the stored runs' label
DEFAULT_TOP = 3


@dataclass(frozen=True)
class ConfirmRow:
    """One config measured on the live backend beside its simulated value."""

    trial: int
    role: str  # "top 1", "top 2, default", "default", or "endpoint" (the best, as a running server serves it)
    config: dict[str, object]
    simulated: float | None
    measured: float | None  # None when the server failed (`error`)
    metrics: dict[str, object]  # what the live measurement saw (goodput searches: rate, attainment, latencies)
    run_id: int | None  # the stored live run at the measured rate; None when nothing passed or the server failed
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        """Measured over simulated (None unless both are positive)."""
        return self.measured / self.simulated if self.measured and self.simulated else None


def candidates(
    study: optuna.Study, objective: Objective, top: int, best: int | None = None
) -> list[tuple[str, FrozenTrial]]:
    """The top `top` distinct configs (best first), then the engine-default trial if not among them.

    `best` names the trial the study recommends (among ties, the verdict's
    pick); it comes first, the others follow by objective.
    """
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if "config" in t.user_attrs]
    ranked = sorted(done, key=lambda t: (t.number != best, objective.sort_key(completed_value(t)), t.number))
    chosen: dict[str, tuple[str, FrozenTrial]] = {}
    for trial in ranked:
        key = config_key(trial.user_attrs["config"])
        if key not in chosen and len(chosen) < top:
            chosen[key] = (f"top {len(chosen) + 1}", trial)
    default = next((t for t in done if t.user_attrs.get("role") == "default"), None)
    if default is not None:
        key = config_key(default.user_attrs["config"])
        role, trial = chosen.get(key, ("", default))
        chosen[key] = (f"{role}, default" if role else "default", trial)
    return list(chosen.values())


def confirm_study(
    spec: TuneSpec,
    db: str | Path,
    live_options: dict[str, object],
    top: int = DEFAULT_TOP,
    best: int | None = None,
    on_row: Callable[[int, int, str, FrozenTrial], None] | None = None,
) -> list[ConfirmRow]:
    """Measure the study's candidates on the live backend made with `live_options`, storing each run.

    `best` is the trial the study recommends (first among the candidates).
    With `endpoint` among the options the server cannot be restarted: the
    best config alone is measured, as that server runs. `on_row(index,
    total, role, trial)` hears each row before it is measured.
    """
    study = optuna.load_study(study_name=spec.study, storage=open_storage(spec.storage))
    chosen = candidates(study, spec.objective, top, best)
    if live_options.get("endpoint"):
        chosen = [("endpoint", trial) for role, trial in chosen[:1] if role.startswith("top 1")]
    live = dataclasses.replace(spec, backend="live", backend_options=dict(live_options), trials=None, deadline=None)
    evaluator = Evaluator(live)
    rows = []
    try:
        for index, (role, trial) in enumerate(chosen):
            if on_row is not None:
                on_row(index, len(chosen), role, trial)
            rows.append(_measure(evaluator, db, role, trial))
    finally:
        evaluator.close()
    return rows


def _measure(evaluator: Evaluator, db: str | Path, role: str, trial: FrozenTrial) -> ConfirmRow:
    """One row: the trial's config measured live on a fresh server, its run stored."""
    config = trial.user_attrs["config"]
    try:
        measured = evaluator.measure(ServingConfig.from_dict(config).resolve())
    except ServerError as err:
        return ConfirmRow(trial.number, role, config, trial.value, None, {}, None, str(err))
    finally:
        evaluator.close()  # the next config gets a fresh server
    run_id = None
    if measured.result is not None:
        with open_store(db) as store:
            run_id = store.save_run(
                measured.result, study=evaluator.spec.study, trial=trial.number, label=CONFIRM_LABEL
            )
    return ConfirmRow(trial.number, role, config, trial.value, measured.value, measured.metrics, run_id)


def ranks(rows: list[ConfirmRow], objective: Objective, key: Callable[[ConfirmRow], float | None]) -> list[int | None]:
    """Each row's rank (1 = best; equal values share one) by `key` among the rows that have a value; None otherwise."""
    values = [None if (value := key(r)) is None else objective.sort_key(value) for r in rows]
    return [None if v is None else 1 + sum(w is not None and w < v for w in values) for v in values]
