"""Run an Optuna study over serving configs: create or resume, workers, progress, store sync.

Optuna's storage (a journal file next to the run store by default, or a
PostgreSQL database that workers on several hosts share) holds the study, so
a study resumes after Ctrl-C or a killed process. The DuckDB run store is
this host's: this process copies the study's finished trials into it as
they land, opening the file only for each write so other commands can read
it meanwhile.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import queue
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..backends import ConfigError, ServingConfig
from ..store import RunStore
from .confidence import Interval, clear_win, interval
from .importance import param_importances
from .journal import recover_journal
from .objective import (
    FINISHED,
    Evaluator,
    Metrics,
    StopFlag,
    TuneInterrupted,
    completed_value,
    metric_name,
    search_precision,
)
from .objectives import GOODPUT, Objective, objective_named
from .signals import stop_on_signals
from .slo import Slo
from .space import default_params, foreign_params
from .spec import TuneSpec, saved_slo, space_context
from .storage import LOST, locked, lost_connection, open_storage, shown, storage_kind
from .verdict import Finished, Verdict, decide
from .workers import POLL_S, counted, storage_of, worker

STORE_WAIT_S = 30.0  # how long a write waits for another process to release the run store


@dataclass(frozen=True)
class Progress:
    """A view of the study while it runs."""

    finished: int  # as --trials counts them: repeats of another trial's config excluded
    target: int | None
    best_value: float | None
    best_trial: int | None
    running: int


@dataclass(frozen=True)
class TrialSummary:
    """A finished trial as the CLI reports it."""

    number: int
    config: dict[str, Any]  # as ServingConfig.to_dict() gives it
    metrics: Metrics
    value: float | None


@dataclass(frozen=True)
class TuneOutcome:
    """What a tune produced."""

    study: str
    objective: Objective
    trials: int  # finished trials in the study, resumed ones included
    best: TrialSummary | None
    default: TrialSummary | None
    best_run_id: int | None
    default_run_id: int | None
    interrupted: bool
    ties: tuple[TrialSummary, ...] = ()  # distinct configs within the precision of the best, the best included
    free: tuple[str, ...] = ()  # knobs (--fix names) whose value differs among the ties: free within the tie set
    best_ci: Interval | None = None  # goodput over --repeats seeds: mean, 95% interval
    default_ci: Interval | None = None
    completed: int = 0  # completed trials (not pruned), those importances rest on
    importances: dict[str, float] | None = None  # fANOVA shares by parameter; None below importance.MIN_TRIALS

    @property
    def clear_win(self) -> bool | None:
        """Whether the best beats the default on their paired seeds (confidence.clear_win); None without intervals."""
        return clear_win(self.best_ci, self.default_ci, self.objective)

    @property
    def ratio(self) -> float | None:
        """How much better the best is than the default (above 1 = better, whatever the direction)."""
        if not (self.best and self.default and self.best.value and self.default.value):
            return None
        return self.objective.ratio(self.best.value, self.default.value)


SETTINGS_BEFORE_THEY_EXISTED = {"backend": "sim"}  # what studies created before a setting existed ran with


def create_or_resume(spec: TuneSpec, on_notice: Callable[[str], None] | None = None) -> tuple[optuna.Study, bool]:
    """Open the study, creating it (seeded with the engine default) if new; refuse mismatched settings.

    Under the study's lock: of workers starting together, on any host, one
    creates the study and the others find it complete. A journal whose last
    line was cut off is first cut back to its complete lines, a copy of it
    kept, and `on_notice` told in one line.
    """
    if storage_kind(spec.storage) == "journal":
        backup = recover_journal(Path(spec.storage))
        if backup is not None and on_notice is not None:
            complete = Path(spec.storage).read_bytes().count(b"\n")
            on_notice(
                f"{spec.storage}: its last line was cut off (an interrupted write); kept the whole file as "
                f"{backup} and resumed from its {complete} complete lines"
            )
    storage = storage_of(spec)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with locked(spec.storage, spec.study):
        existing = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
        if spec.study not in existing:
            study = optuna.create_study(study_name=spec.study, storage=storage, direction=spec.objective.direction)
            name_objective(study, spec)
            study.enqueue_trial(default_params(space_context(spec), spec.fixed), user_attrs={"role": "default"})
            study.set_user_attr("pipedeck", spec.settings())
            return study, True
        study = optuna.load_study(study_name=spec.study, storage=storage)
    refuse_foreign_params(study)
    saved = study.user_attrs.get("pipedeck", {})
    for key, value in spec.settings().items():
        was = saved.get(key, SETTINGS_BEFORE_THEY_EXISTED.get(key))
        if was != value:
            raise ConfigError(
                f"study: {spec.study!r} was created with {key}={was!r}, not {value!r}; "
                "resume it with the same settings or choose a new --study name"
            )
    return study, False


def saved_settings(spec: TuneSpec) -> dict[str, object] | None:
    """The settings study `spec.study` was created with, from its storage (every host sees them); None if new."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for summary in optuna.get_all_study_summaries(storage_of(spec), include_best_trial=False):
        if summary.study_name == spec.study:
            settings: dict[str, object] = summary.user_attrs.get("pipedeck", {})
            return settings
    return None


def refuse_foreign_params(study: optuna.Study) -> None:
    """A study whose trials use parameter names this pipedeck does not make (an older one's) is not resumed:
    its sampler would learn nothing from them and its queued retries would run other configs."""
    names = {
        name for t in study.get_trials(deepcopy=False) for name in (*t.params, *t.system_attrs.get("fixed_params", {}))
    }
    foreign = foreign_params(names)
    if foreign:
        raise ConfigError(
            f"study: {study.study_name!r} was made by an older pipedeck, whose parameter names "
            f"({', '.join(foreign)}) this one does not use; start a new --study"
        )


def name_objective(study: optuna.Study, spec: TuneSpec) -> None:
    """Name the study's value as its objective (optuna-dashboard shows it), e.g. "goodput (req/s); a pruned trial:
    ..."."""
    with warnings.catch_warnings():  # set_metric_names is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([metric_name(spec.objective)])
    study.set_user_attr("objective", f"{spec.objective.label}, {spec.objective.direction_name}d")


def summarize(trial: FrozenTrial) -> TrialSummary:
    return TrialSummary(
        trial.number, trial.user_attrs.get("config", {}), trial.user_attrs.get("metrics", {}), trial.value
    )


def _default_trial(study: optuna.Study) -> FrozenTrial | None:
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("role") == "default"
    ]
    return done[0] if done else None


def open_store(db: str | Path) -> RunStore:
    """The run store, waiting briefly if another command holds it."""
    return RunStore.open(db, lock_timeout_s=STORE_WAIT_S)


class StoreSync:
    """Copies finished trials from Optuna's storage into the run store, each once."""

    def __init__(self, db: str | Path, study: optuna.Study):
        self.db, self.study = db, study
        self.synced: set[int] = set()

    def __call__(self) -> None:
        new = [
            t
            for t in self.study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.FAIL))
            if t.number not in self.synced
        ]
        for t in new:
            self.save(t)

    def save(self, t: FrozenTrial, extra_metrics: dict[str, object] | None = None) -> None:
        """Write one trial to the run store (again, with `extra_metrics` added, for a finalist's interval).

        Its params are its choices by `--fix` name and value; only a completed trial has an objective
        (a pruned one's metrics keep the rate it failed at, fails_slo_at_rps, and its attainment there).
        """
        duration = (
            (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete and t.datetime_start
            else None
        )
        worker = t.user_attrs.get("worker")
        with open_store(self.db) as store:
            store.save_trial(
                self.study.study_name,
                t.number,
                state=t.state.name,
                params=t.user_attrs.get("flags", t.params),
                config=t.user_attrs.get("config"),
                metrics={**t.user_attrs.get("metrics", {}), **(extra_metrics or {})},
                objective=t.value if t.state == TrialState.COMPLETE else None,
                duration_s=duration,
                # Optuna's times are naive local time
                started_at=t.datetime_start.astimezone() if t.datetime_start else None,
                worker=f"{worker['host']}:{worker['pid']}" if worker else None,
            )
        self.synced.add(t.number)


def pull_study(storage: str, name: str, db: str | Path) -> optuna.Study:
    """Copy study `name` (its settings and every finished or failed trial) from its storage into this host's store.

    For a host that shares the storage but ran none of the study's workers,
    or to bring its copy up to date with the trials other hosts finished.
    The storage must exist (storage.check_storage): opening a journal file
    that does not would create it.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=name, storage=open_storage(storage))
    except KeyError:
        raise ConfigError(f"study: no study {name!r} in {shown(storage)}") from None
    settings = study.user_attrs.get("pipedeck")
    if settings is None:
        raise ConfigError(f"study: {name!r} in {shown(storage)} was not made by pipedeck tune")
    with open_store(db) as store:
        save_study(store, name, settings, storage, slo=saved_slo(settings))
    StoreSync(db, study)()
    return study


def run_study(
    spec: TuneSpec,
    db: str | Path,
    jobs: int = 1,
    on_progress: Callable[[Progress], None] | None = None,
    stop_requested: threading.Event | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> TuneOutcome:
    """Tune until the study has `spec.trials` finished trials or the deadline passes.

    Ctrl-C, SIGTERM, or setting `stop_requested` (from another thread), stops
    cleanly: the trials in progress are abandoned and retried when the study
    resumes, and the finalists are not measured.
    `on_notice` hears, in one line, of a damaged journal set aside.
    """
    stop_requested = threading.Event() if stop_requested is None else stop_requested
    try:
        with stop_on_signals(stop_requested):
            return _tune(spec, db, jobs, on_progress, stop_requested, on_notice)
    except LOST as err:  # the database went away: one line, not the driver's traceback
        raise lost_connection(spec.storage, err) from None


def _tune(
    spec: TuneSpec,
    db: str | Path,
    jobs: int,
    on_progress: Callable[[Progress], None] | None,
    stop_requested: threading.Event,
    on_notice: Callable[[str], None] | None,
) -> TuneOutcome:
    """run_study's steps: open the study, run its workers, then the outcome (its finalists measured)."""
    study, _ = create_or_resume(spec, on_notice)
    with open_store(db) as store:
        save_study(store, spec.study, spec.settings(), spec.storage, slo=spec.slo)
    sync = StoreSync(db, study)
    interrupted = _run_workers(spec, study, jobs, sync, on_progress, stop_requested)
    if on_progress is not None:
        on_progress(_progress(study, spec))
    try:
        return _outcome(spec, study, db, interrupted or stop_requested.is_set(), stop_requested)
    except TuneInterrupted:  # stopped while measuring the finalists: what the study has, without them
        return _outcome(spec, study, db, True, stop_requested)


def _run_workers(
    spec: TuneSpec,
    study: optuna.Study,
    jobs: int,
    sync: StoreSync,
    on_progress: Callable[[Progress], None] | None,
    stop_requested: threading.Event,
) -> bool:
    """Run the workers until they end, syncing the store and showing progress; whether a stop cut them short."""
    context = multiprocessing.get_context("spawn")
    stop: threading.Event | multiprocessing.synchronize.Event
    errors: queue.Queue[Exception] | multiprocessing.queues.Queue[Exception]
    workers: list[threading.Thread] | list[multiprocessing.context.SpawnProcess]
    if jobs > 1:
        stop, errors = context.Event(), context.Queue()
        workers = [
            context.Process(target=worker, args=(spec, stop, i, False, errors), daemon=True) for i in range(jobs)
        ]
    else:
        stop, errors = threading.Event(), queue.Queue()
        workers = [threading.Thread(target=worker, args=(spec, stop, 0, True, errors), daemon=True)]
    try:
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers) and not stop_requested.is_set():
            time.sleep(POLL_S)
            sync()
            if on_progress is not None:
                on_progress(_progress(study, spec))
    finally:  # also when the store or the storage fails here: no worker outlives the tune
        interrupted = stop_requested.is_set()
        stop.set()
        for w in workers:
            w.join()
    sync()
    if not errors.empty():
        raise errors.get()
    return interrupted


def _progress(study: optuna.Study, spec: TuneSpec) -> Progress:
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = min(complete, key=lambda t: spec.objective.sort_key(completed_value(t))) if complete else None
    return Progress(
        counted(trials),
        spec.trials,
        best.value if best else None,
        best.number if best else None,
        sum(t.state == TrialState.RUNNING for t in trials),
    )


def study_verdict(study: optuna.Study, *, objective: Objective, precision: float, slo: Slo | None) -> Verdict | None:
    """The tuner's verdict over the study's completed trials (ties within `precision`, the engine default as
    baseline); None when none completed."""
    default = _default_trial(study)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return decide(
        [
            Finished(t.number, t.user_attrs.get("config", {}), t.user_attrs.get("metrics", {}), completed_value(t))
            for t in complete
        ],
        objective,
        precision,
        slo.seconds() if slo else {},
        default.user_attrs.get("config") if default else None,
    )


def recommended_trial(study: optuna.Study) -> FrozenTrial | None:
    """The trial `tune` recommends, decided under the settings the study was created with: what `pipedeck studies`
    names as its best, from its Optuna storage as from the run store (Optuna's best_trial ignores ties)."""
    settings = study.user_attrs.get("pipedeck", {})
    verdict = study_verdict(
        study,
        objective=objective_named(settings.get("objective")),
        precision=search_precision(str(settings.get("backend", "sim"))),
        slo=saved_slo(settings),
    )
    return None if verdict is None else study.get_trials(deepcopy=False)[verdict.winner.number]


def _outcome(spec: TuneSpec, study: optuna.Study, db: str | Path, interrupted: bool, stop: StopFlag) -> TuneOutcome:
    """The verdict (best, ties, knobs free among them), the finalists' intervals, and their runs stored with timelines."""
    default = _default_trial(study)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    verdict = study_verdict(
        study, objective=spec.objective, precision=search_precision(spec.backend, spec.precision), slo=spec.slo
    )
    best = next(t for t in complete if t.number == verdict.winner.number) if verdict else None
    finalists = {t.number: t for t in (best, default) if t is not None}
    intervals = {} if interrupted else {n: _interval(spec, study, t, stop) for n, t in finalists.items()}
    with open_store(db) as store:
        run_ids = {
            row.trial: row.id
            for row in store.list_runs(study=spec.study)
            if row.trial is not None and row.label in ("best", "default")
        }  # not other runs of a trial
    if not interrupted:
        evaluator = Evaluator(spec, stop)
        for number, trial in finalists.items():
            if intervals.get(number):
                StoreSync(db, study).save(trial, {"goodput_ci": intervals[number]})
            if number in run_ids:  # measured and stored by an earlier invocation
                continue
            config = ServingConfig.from_dict(trial.user_attrs["config"]).resolve()
            if spec.objective == GOODPUT:
                rate = trial.user_attrs["metrics"].get("goodput_rps")
                if not rate:
                    continue
            else:
                rate = evaluator.scenario.rate
            result = evaluator.run(config, rate, timeline=True)
            label = "best" if best is not None and number == best.number else "default"
            with open_store(db) as store:  # once: another tune finishing this study may have stored it meanwhile
                run_ids[number] = store.save_run(result, study=spec.study, trial=number, label=label, once=True)
    link_runs(db, spec.study, {n: run_ids[n] for n in finalists if n in run_ids})
    return TuneOutcome(
        study=spec.study,
        objective=spec.objective,
        trials=counted(study.get_trials(deepcopy=False)),
        best=summarize(best) if best else None,
        default=summarize(default) if default else None,
        best_run_id=run_ids.get(best.number) if best else None,
        default_run_id=run_ids.get(default.number) if default else None,
        interrupted=interrupted,
        ties=tuple(summarize(next(t for t in complete if t.number == tie.number)) for tie in verdict.ties)
        if verdict
        else (),
        free=verdict.free if verdict else (),
        best_ci=intervals.get(best.number) if best else None,
        default_ci=intervals.get(default.number) if default else None,
        completed=len(complete),
        importances=None if interrupted else param_importances(study),
    )


def link_runs(db: str | Path, study: str, run_ids: dict[int, int]) -> None:
    """Point each finalist trial's row in the run store at its stored run (trials.run_id)."""
    if run_ids:
        with open_store(db) as store:
            for number, run_id in run_ids.items():
                store.link_run(study, number, run_id)


def _interval(spec: TuneSpec, study: optuna.Study, trial: FrozenTrial, stop: StopFlag) -> Interval | None:
    """The trial's goodput over `spec.repeats` seeds (its own measurement first), kept in the study to reuse.

    Under a lock of its own, not the study's: of workers ending together one
    measures it, while the others go on admitting and claiming trials.
    """
    if spec.objective != GOODPUT or spec.repeats < 2:
        return None
    key = f"goodput_ci/{trial.number}/{spec.repeats}"
    with locked(spec.storage, f"{spec.study}/goodput_ci"):
        if key not in study.user_attrs:
            config = ServingConfig.from_dict(trial.user_attrs["config"]).resolve()
            seeds = [spec.seed + k for k in range(spec.repeats)]
            values = [completed_value(trial)] + [
                Evaluator(dataclasses.replace(spec, seed=seed), stop).measure(config).value or 0.0 for seed in seeds[1:]
            ]
            study.set_user_attr(key, interval(values, seeds))
    measured: Interval = study.user_attrs[key]
    return measured


def save_study(store: RunStore, name: str, settings: dict[str, object], storage: str, *, slo: Slo | None) -> None:
    """Record the study in this host's run store, with its storage (a password in it hidden)."""
    store.save_study(
        name,
        scenario=str(settings["scenario"]),
        objective=str(settings["objective"]),
        slo={} if slo is None else slo.to_dict(),
        settings=settings,
        storage=shown(storage),
    )
