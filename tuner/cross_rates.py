"""A study's best and default, like with like: each config measured at both goodput rates.

`pipedeck tune` stores the best config's run at the best's goodput and the
default's at the default's, so side by side the two differ in load as well
as in config. This measures each config at the other's rate too, on the
simulator (a live run cannot be measured again from here), with the study's
workload and the run's seed, and stores those runs in the study as
`best@default-rate` and `default@best-rate`, so that the next comparison
reads them instead of simulating again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..backends import ServingConfig, capabilities_of, open_backend
from ..errors import PipedeckError
from ..scenarios import load_scenario
from ..store import RunStore, StoredRun, StoreError, StoreInputError
from .study import open_store

CROSS_LABELS = {"best": "best@default-rate", "default": "default@best-rate"}


@dataclass(frozen=True)
class LikeForLike:
    """The runs a comparison shows, in page order, and the line that says how they were measured."""

    runs: list[StoredRun]
    note: str | None = None


def study_pair(stored: Sequence[StoredRun]) -> tuple[StoredRun, StoredRun] | None:
    """(best, default) when `stored` is exactly one study's best and default runs, at different rates."""
    if len(stored) != 2:
        return None
    a, b = stored
    if (
        a.study is None
        or a.study != b.study
        or {a.label, b.label} != {"best", "default"}
        or a.result.rate == b.result.rate
    ):
        return None
    return (a, b) if a.label == "best" else (b, a)


def study_runs(store: RunStore, study: str) -> list[StoredRun]:
    """The latest best and default runs `pipedeck tune` stored for `study` (StoreError if either is missing)."""
    rows = store.list_runs(study=study)  # newest first
    found = {label: next((r.id for r in rows if r.label == label), None) for label in ("best", "default")}
    best, default = found["best"], found["default"]
    if best is None or default is None:
        missing = [label for label, run_id in found.items() if run_id is None]
        raise StoreInputError(
            f"study: {study} has no stored {' or '.join(missing)} run (tune stores them when it ends)"
        )
    return [store.get_run(best), store.get_run(default)]


def like_for_like(db: str | Path, stored: list[StoredRun]) -> LikeForLike:
    """The runs to compare: a study's best and default at different rates become both configs at both rates.

    Runs that are not such a pair come back as they are. Each missing cross run is
    simulated and stored; runs stored by an earlier comparison are read back.
    """
    pair = study_pair(stored)
    if pair is None:
        return LikeForLike(stored)
    best, default = pair
    live = [s for s in pair if not _rerunnable(s.result.backend)]
    if live:
        return LikeForLike(
            stored,
            f"run {live[0].id} was measured on the {live[0].result.backend} backend and "
            "cannot be measured again at the other run's rate from here: the two differ in "
            "load as well as config",
        )
    try:
        cross = {s.label: _at_rate(db, s, other.result.rate) for s, other in ((best, default), (default, best))}
    except PipedeckError as err:
        return LikeForLike(
            stored,
            f"the best and default could not be measured at each other's rate ({err}): "
            "the two differ in load as well as config",
        )
    first, second = stored
    runs = [first, cross[second.label][0], cross[first.label][0], second]
    made = [run.id for run, new in cross.values() if new]
    how = (
        f"simulated now and stored as run{'s' if len(made) > 1 else ''} {' and '.join(map(str, made))}"
        if made
        else "stored by an earlier comparison"
    )
    rates = f"{best.result.rate:.4g} req/s (the best's goodput) and {default.result.rate:.4g} req/s (the default's)"
    return LikeForLike(
        runs,
        f"Like with like: study {best.study}'s best (trial {best.trial}) and default (trial "
        f"{default.trial}) are each shown at both {rates}; the runs at the other's rate were "
        f"{how}. Deltas compare the two configs at the same rate.",
    )


def _at_rate(db: str | Path, run: StoredRun, rate: float | None) -> tuple[StoredRun, bool]:
    """`run`'s config at `rate` (its cross label): the stored one if there is one, else simulated and stored now;
    with whether it was simulated now."""
    label = CROSS_LABELS[str(run.label)]
    with open_store(db) as store:
        earlier = next(
            (
                r
                for r in store.list_runs(study=run.study)
                if r.label == label and r.trial == run.trial and r.rate == rate and r.seed == run.result.seed
            ),
            None,
        )
        if earlier is not None:
            return store.get_run(earlier.id), False
        try:
            settings = store.get_study(str(run.study)).settings or {}
        except StoreError:  # the study's row is gone: its runs still say what they ran
            settings = {}
    scenario = load_scenario(str(settings.get("scenario") or run.result.scenario))
    requests = settings.get("requests", len(run.result.records))  # None: the scenario's own count
    config = ServingConfig.from_dict(run.result.config).resolve()
    with open_backend(run.result.backend) as backend:
        result = backend.run(
            scenario,
            config,
            rate=rate,
            seed=run.result.seed,
            num_requests=requests if isinstance(requests, int) else None,
            timeline=True,
        )
    with open_store(db) as store:
        return store.get_run(store.save_run(result, study=run.study, trial=run.trial, label=label)), True


def _rerunnable(backend: str) -> bool:
    """Whether a run on `backend` can be run again from here at another rate: a simulator installed here."""
    capabilities = capabilities_of(backend)
    return capabilities is not None and capabilities.simulated
