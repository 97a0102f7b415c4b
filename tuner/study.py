"""Run an Optuna study over serving configs: create or resume, workers, progress, store sync.

Optuna's storage (a journal file next to the run store by default, or any
RDB URL) holds the study, so a study resumes after Ctrl-C or a killed
process and several machines can work on one. Only this process writes the
DuckDB run store: it copies finished trials over as they land, opening the
file only for each write so other commands can read it meanwhile.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import signal
import socket
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

from ..backends.config import ServingConfig
from ..backends.errors import ConfigError
from ..store import RunStore
from .confidence import interval, separated
from .objective import (
    FINISHED,
    OBJECTIVE_LABELS,
    Evaluator,
    Objective,
    TuneInterrupted,
    TuneSpec,
    search_precision,
    space_context,
)
from .slo import parse_slo
from .space import default_params, foreign_params
from .verdict import Finished, decide

SAMPLERS = ("tpe", "random")
POLL_S = 0.25
STORE_WAIT_S = 30.0  # how long a write waits for another process to release the run store


def default_storage(db_path: str | Path) -> str:
    """The journal file beside the run store: pipedeck.duckdb -> pipedeck.optuna.jsonl."""
    return str(Path(db_path).with_suffix(".optuna.jsonl"))


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An RDB URL (sqlite:///, postgresql://, mysql://) or a journal file path."""
    if "://" in url:
        return optuna.storages.RDBStorage(url)
    return JournalStorage(JournalFileBackend(url))


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """TPE (multivariate, grouped for the conditional space) or random sampling."""
    if name == "tpe":
        with warnings.catch_warnings():  # multivariate and group are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed, constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"sampler: unknown sampler {name!r}; allowed: {', '.join(SAMPLERS)}")


@dataclass(frozen=True)
class Progress:
    """A view of the study while it runs."""

    finished: int
    target: int | None
    best_value: float | None
    best_trial: int | None
    running: int


@dataclass(frozen=True)
class TrialSummary:
    """A finished trial as the CLI reports it."""

    number: int
    config: dict[str, object]
    metrics: dict[str, float]
    value: float | None


@dataclass(frozen=True)
class TuneOutcome:
    """What a tune produced."""

    study: str
    direction: str
    trials: int  # finished trials in the study, resumed ones included
    best: TrialSummary | None
    default: TrialSummary | None
    best_run_id: int | None
    default_run_id: int | None
    interrupted: bool
    ties: tuple[TrialSummary, ...] = ()  # distinct configs within the precision of the best, the best included
    inert: tuple[str, ...] = ()  # knobs (--fix names) whose value differs among the ties
    best_ci: dict[str, object] | None = None  # goodput over --repeats seeds: mean, 95% interval
    default_ci: dict[str, object] | None = None

    @property
    def clear_win(self) -> bool | None:
        """Whether the best's interval lies above the default's; None without intervals."""
        if self.best_ci is None or self.default_ci is None:
            return None
        return separated(self.best_ci, self.default_ci, self.direction)

    @property
    def ratio(self) -> float | None:
        """How much better the best is than the default (above 1 = better, whatever the direction)."""
        if not (self.best and self.default and self.best.value and self.default.value):
            return None
        if self.direction == "maximize":
            return self.best.value / self.default.value
        return self.default.value / self.best.value


def _worker(spec: TuneSpec, stop: object, index: int, in_process: bool, errors: object) -> None:
    """Run trials until the study has enough, the deadline passes, or stop is set; report failures on `errors`."""
    try:
        _work(spec, stop, index, in_process)
    except Exception as err:  # noqa: BLE001 - handed to the parent, which raises it
        errors.put(err if isinstance(err, ConfigError) else RuntimeError(f"tuner worker {index} failed: {err!r}"))


def _work(spec: TuneSpec, stop: object, index: int, in_process: bool) -> None:
    if not in_process:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # no traceback for a trial a stop cut short
    storage = open_storage(spec.storage)
    # A resumed study gets a fresh seed stream: the same seed would propose the trials it already ran.
    started = len(optuna.load_study(study_name=spec.study, storage=storage).get_trials(deepcopy=False))
    study = optuna.load_study(study_name=spec.study, storage=storage,
                              sampler=make_sampler(spec.sampler, spec.seed + 1000 * started + index))
    cap = None if spec.trials is None else started + 3 * spec.trials  # a space smaller than --trials ends

    def stop_when_done(study: optuna.Study, trial: FrozenTrial) -> None:
        if stop.is_set() or (spec.trials is not None and _finished(study) >= spec.trials) or \
                (cap is not None and len(study.get_trials(deepcopy=False)) >= cap) or \
                (spec.deadline is not None and time.time() >= spec.deadline):
            study.stop()

    pid, host = os.getpid(), socket.gethostname()
    study.set_user_attr(f"worker/{host}/{pid}", time.time())  # so a resume can tell this worker is gone

    def objective(trial: optuna.Trial) -> float:
        trial.set_user_attr("worker", {"pid": pid, "host": host})
        return Objective(spec, stop)(trial)

    if spec.trials is not None and _finished(study) >= spec.trials:
        return
    try:
        study.optimize(objective, callbacks=[stop_when_done],
                       timeout=None if spec.deadline is None else max(0.0, spec.deadline - time.time()))
    except TuneInterrupted:
        pass


def _finished(study: optuna.Study) -> int:
    """Finished trials that measured a config of their own (a repeat of a finished config is not counted)."""
    return sum("duplicate_of" not in t.user_attrs for t in study.get_trials(deepcopy=False, states=FINISHED))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_abandoned(study: optuna.Study) -> int:
    """Retry trials a killed or interrupted run left behind; returns how many were re-queued.

    A trial left RUNNING by a dead process of this host (or, when it died
    before naming its worker, with no worker of the study alive) is failed;
    failed trials that were interrupted or abandoned are queued again with
    their parameters (once: the retry names its original), so no trial is
    lost and none is counted twice.
    """
    host = socket.gethostname()
    workers = [key.split("/")[1:] for key in study.user_attrs if key.startswith("worker/")]
    any_alive = any(h != host or _alive(int(pid)) for h, pid in workers)
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get("retry_of") for t in trials}
    requeued = 0
    for t in trials:
        worker = t.user_attrs.get("worker")
        dead = (not any_alive) if worker is None else (worker["host"] == host and not _alive(worker["pid"]))
        if t.state == TrialState.RUNNING and dead:
            study.tell(t.number, state=TrialState.FAIL)
        elif not (t.state == TrialState.FAIL and t.user_attrs.get("interrupted")):
            continue
        if t.number not in retried:
            attrs = {k: v for k, v in t.user_attrs.items() if k == "role"}
            study.enqueue_trial(t.params, user_attrs={**attrs, "retry_of": t.number}, skip_if_exists=False)
            requeued += 1
    return requeued


SETTINGS_BEFORE_THEY_EXISTED = {"backend": "sim"}  # what studies created before a setting existed ran with


def create_or_resume(spec: TuneSpec) -> tuple[optuna.Study, bool]:
    """Open the study, creating it (seeded with the engine default) if new; refuse mismatched settings."""
    storage = open_storage(spec.storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    existing = {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if spec.study in existing:
        study = optuna.load_study(study_name=spec.study, storage=storage)
        refuse_foreign_params(study)
        saved = study.user_attrs.get("pipedeck", {})
        for key, value in spec.settings().items():
            was = saved.get(key, SETTINGS_BEFORE_THEY_EXISTED.get(key))
            if was != value:
                raise ConfigError(f"study: {spec.study!r} was created with {key}={was!r}, not {value!r}; "
                                  "resume it with the same settings or choose a new --study name")
        return study, False
    study = optuna.create_study(study_name=spec.study, storage=storage, direction=spec.direction)
    name_objective(study, spec)
    study.set_user_attr("pipedeck", spec.settings())
    study.enqueue_trial(default_params(space_context(spec), spec.fixed), user_attrs={"role": "default"})
    return study, True


def refuse_foreign_params(study: optuna.Study) -> None:
    """A study whose trials use parameter names this pipedeck does not make (an older one's) is not resumed:
    its sampler would learn nothing from them and its queued retries would run other configs."""
    names = {name for t in study.get_trials(deepcopy=False)
             for name in (*t.params, *t.system_attrs.get("fixed_params", {}))}
    foreign = foreign_params(names)
    if foreign:
        raise ConfigError(f"study: {study.study_name!r} was made by an older pipedeck, whose parameter names "
                          f"({', '.join(foreign)}) this one does not use; start a new --study")


def name_objective(study: optuna.Study, spec: TuneSpec) -> None:
    """Name the study's value as its objective (optuna-dashboard shows it), e.g. "goodput (req/s)"."""
    with warnings.catch_warnings():  # set_metric_names is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([OBJECTIVE_LABELS[spec.objective]])
    study.set_user_attr("objective", f"{OBJECTIVE_LABELS[spec.objective]}, {spec.direction}d")


def summarize(trial: FrozenTrial) -> TrialSummary:
    return TrialSummary(trial.number, trial.user_attrs.get("config", {}), trial.user_attrs.get("metrics", {}),
                        trial.value)


def _default_trial(study: optuna.Study) -> FrozenTrial | None:
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("role") == "default"]
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
        new = [t for t in self.study.get_trials(deepcopy=False, states=FINISHED + (TrialState.FAIL,))
               if t.number not in self.synced]
        for t in new:
            self.save(t)

    def save(self, t: FrozenTrial, extra_metrics: dict[str, object] | None = None) -> None:
        """Write one trial to the run store (again, with `extra_metrics` added, for a finalist's interval).

        Its params are its choices by `--fix` name and value; only a completed trial has an objective
        (Optuna gives a pruned one the rate it was pruned at, which its metrics keep as fails_slo_at_rps).
        """
        duration = (t.datetime_complete - t.datetime_start).total_seconds() \
            if t.datetime_complete and t.datetime_start else None
        with open_store(self.db) as store:
            store.save_trial(self.study.study_name, t.number, state=t.state.name,
                             params=t.user_attrs.get("flags", t.params), config=t.user_attrs.get("config"),
                             metrics={**t.user_attrs.get("metrics", {}), **(extra_metrics or {})},
                             objective=t.value if t.state == TrialState.COMPLETE else None, duration_s=duration)
        self.synced.add(t.number)


def run_study(spec: TuneSpec, db: str | Path, jobs: int = 1,
              on_progress: Callable[[Progress], None] | None = None,
              stop_requested: threading.Event | None = None) -> TuneOutcome:
    """Tune until the study has `spec.trials` finished trials or the deadline passes.

    Ctrl-C, or setting `stop_requested` (from another thread), stops cleanly:
    the trials in progress are abandoned and retried when the study resumes.
    """
    study, _ = create_or_resume(spec)
    recover_abandoned(study)
    with open_store(db) as store:
        store.save_study(spec.study, scenario=spec.scenario, objective=spec.objective,
                         slo=({} if spec.slo is None else parse_slo(spec.slo).to_dict()),
                         settings=spec.settings(), storage=spec.storage)
    sync = StoreSync(db, study)
    context = multiprocessing.get_context("spawn")
    if jobs > 1:
        stop, errors = context.Event(), context.Queue()
        workers = [context.Process(target=_worker, args=(spec, stop, i, False, errors), daemon=True)
                   for i in range(jobs)]
    else:
        stop, errors = threading.Event(), queue.Queue()
        workers = [threading.Thread(target=_worker, args=(spec, stop, 0, True, errors), daemon=True)]
    interrupted = False
    try:
        for w in workers:
            w.start()
        while any(w.is_alive() for w in workers):
            time.sleep(POLL_S)
            sync()
            if on_progress is not None:
                on_progress(_progress(study, spec))
            if stop_requested is not None and stop_requested.is_set():
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        for w in workers:
            w.join()
    sync()
    if not errors.empty():
        raise errors.get()
    if on_progress is not None:
        on_progress(_progress(study, spec))
    return _outcome(spec, study, db, interrupted)


def _progress(study: optuna.Study, spec: TuneSpec) -> Progress:
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state in FINISHED]
    complete = [t for t in done if t.state == TrialState.COMPLETE]
    pick = max if spec.direction == "maximize" else min
    best = pick(complete, key=lambda t: t.value) if complete else None
    return Progress(len(done), spec.trials, best.value if best else None, best.number if best else None,
                    sum(t.state == TrialState.RUNNING for t in trials))


def _outcome(spec: TuneSpec, study: optuna.Study, db: str | Path, interrupted: bool) -> TuneOutcome:
    """The verdict (best, ties, inert knobs), the finalists' intervals, and their runs stored with timelines."""
    default = _default_trial(study)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    limits = {limit.metric: limit.limit_s for limit in parse_slo(spec.slo).limits} if spec.slo else {}
    verdict = decide([Finished(t.number, t.user_attrs.get("config", {}), t.user_attrs.get("metrics", {}), t.value)
                      for t in complete], spec.direction, search_precision(spec.backend, spec.precision), limits,
                     default.user_attrs.get("config") if default else None)
    best = next(t for t in complete if t.number == verdict.winner.number) if verdict else None
    finalists = {t.number: t for t in (best, default) if t is not None}
    intervals = {} if interrupted else {n: _interval(spec, study, t) for n, t in finalists.items()}
    with open_store(db) as store:
        run_ids = {row.trial: row.id for row in store.list_runs(study=spec.study)
                   if row.trial is not None and row.label in ("best", "default")}  # not other runs of a trial
    if not interrupted:
        evaluator = Evaluator(spec)
        for number, trial in finalists.items():
            if intervals.get(number):
                StoreSync(db, study).save(trial, {"goodput_ci": intervals[number]})
            if number in run_ids:  # measured and stored by an earlier invocation
                continue
            config = ServingConfig.from_dict(trial.user_attrs["config"]).resolve()
            if spec.objective == "goodput":
                rate = trial.user_attrs["metrics"].get("goodput_rps")
                if not rate:
                    continue
            else:
                rate = evaluator.scenario.rate
            result = evaluator.run(config, rate, timeline=True)
            label = "best" if best is not None and number == best.number else "default"
            with open_store(db) as store:
                run_ids[number] = store.save_run(result, study=spec.study, trial=number, label=label)
    link_runs(db, spec.study, {n: run_ids[n] for n in finalists if n in run_ids})
    return TuneOutcome(
        study=spec.study, direction=spec.direction, trials=_finished(study),
        best=summarize(best) if best else None, default=summarize(default) if default else None,
        best_run_id=run_ids.get(best.number) if best else None,
        default_run_id=run_ids.get(default.number) if default else None, interrupted=interrupted,
        ties=tuple(summarize(next(t for t in complete if t.number == tie.number)) for tie in verdict.ties)
        if verdict else (),
        inert=verdict.inert if verdict else (),
        best_ci=intervals.get(best.number) if best else None,
        default_ci=intervals.get(default.number) if default else None)


def link_runs(db: str | Path, study: str, run_ids: dict[int, int]) -> None:
    """Point each finalist trial's row in the run store at its stored run (trials.run_id)."""
    if run_ids:
        with open_store(db) as store:
            for number, run_id in run_ids.items():
                store.link_run(study, number, run_id)


def _interval(spec: TuneSpec, study: optuna.Study, trial: FrozenTrial) -> dict[str, object] | None:
    """The trial's goodput over `spec.repeats` seeds (its own measurement first), kept in the study to reuse."""
    if spec.objective != "goodput" or spec.repeats < 2:
        return None
    key = f"goodput_ci/{trial.number}/{spec.repeats}"
    if key not in study.user_attrs:
        config = ServingConfig.from_dict(trial.user_attrs["config"]).resolve()
        seeds = [spec.seed + k for k in range(spec.repeats)]
        values = [trial.value] + [Evaluator(dataclasses.replace(spec, seed=seed)).measure(config).value or 0.0
                                  for seed in seeds[1:]]
        study.set_user_attr(key, interval(values, seeds))
    return study.user_attrs[key]
