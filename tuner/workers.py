"""A tuner worker: a process or thread, on any host, running one study's trials until it has enough.

Workers share nothing but the study's storage. Each takes the study's lock
(storage.StudyLock) to register (its number picks its sampler's seed stream),
to admit each trial (so the study never runs more than `--trials` at once
nor finishes more), and to claim each trial's config (so no two workers
measure one config).
"""

from __future__ import annotations

import os
import signal
import socket
import time
import warnings
from collections.abc import Callable
from typing import Protocol

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from ..backends import ConfigError
from .objective import FINISHED, WAIT_S, StopFlag, TrialObjective, TuneInterrupted
from .recovery import recover_abandoned, retry, watched
from .spec import TuneSpec
from .storage import LOST, StudyLock, has_heartbeat, lost_connection, open_storage

POLL_S = 0.25  # how often the tune process syncs the run store and shows progress
SAMPLERS = ("tpe", "random")

GO, WAIT, DONE = "go", "wait", "done"


def counted(trials: list[FrozenTrial]) -> int:
    """Finished trials that measured a config of their own (a repeat of another trial's config is not counted)."""
    return sum(t.state in FINISHED and "duplicate_of" not in t.user_attrs for t in trials)


def storage_of(spec: TuneSpec) -> optuna.storages.BaseStorage:
    """The study's storage; on a database, trials of workers that stopped beating are failed and retried."""
    return open_storage(spec.storage, spec.heartbeat_s, retry)


def seed_stream(seed: int, worker: int) -> int:
    """The sampler seed of the study's `worker`-th worker: independent streams from one --seed."""
    return int(np.random.SeedSequence([seed, worker]).generate_state(1)[0])


def register(study: optuna.Study) -> int:
    """This worker's number in the study: 0 for the first to join, on any host, in any session.

    Take the study's lock around it. The worker is also listed by host and
    PID in the study's one `worker_processes` attribute, for readers such as
    optuna-dashboard.
    """
    number = int(study.user_attrs.get("workers", 0))
    study.set_user_attr("workers", number + 1)
    joined = {"host": socket.gethostname(), "pid": os.getpid(), "joined": time.time()}
    study.set_user_attr("worker_processes", [*study.user_attrs.get("worker_processes", []), joined])
    return number


class ErrorSink(Protocol):
    """Where a worker hands its failure to the tune process: a queue (of processes or of threads)."""

    def put(self, error: Exception, /) -> None: ...


def admit(study: optuna.Study, spec: TuneSpec, stop: StopFlag, cap: int | None) -> str:
    """GO (ask a trial now), WAIT (others' trials may still fail and need this worker) or DONE.

    Take the study's lock around it and around the ask that follows GO:
    then the finished and running trials together never exceed --trials.
    """
    heartbeat = has_heartbeat(spec.storage)
    recover_abandoned(study, heartbeat)
    trials = study.get_trials(deepcopy=False)
    if (
        stop.is_set()
        or (spec.deadline is not None and time.time() >= spec.deadline)
        or (cap is not None and len(trials) >= cap)
    ):
        return DONE
    if spec.trials is None:
        return GO
    finished = counted(trials)
    running = sum(
        t.state == TrialState.RUNNING and "duplicate_of" not in t.user_attrs and watched(t, heartbeat) for t in trials
    )
    if finished >= spec.trials:
        return DONE
    return GO if finished + running < spec.trials else WAIT


def worker(spec: TuneSpec, stop: StopFlag, index: int, in_process: bool, errors: ErrorSink) -> None:
    """Run trials until the study has enough, the deadline passes, or stop is set; report failures on `errors`."""
    try:
        work(spec, stop, in_process)
    except LOST as err:  # the database went away: one line; its trial in flight is retried (Objective.__call__)
        errors.put(lost_connection(spec.storage, err))
    except Exception as err:  # noqa: BLE001 - handed to the parent, which raises it
        errors.put(err if isinstance(err, ConfigError) else RuntimeError(f"tuner worker {index} failed: {err!r}"))


class OrphanStop:
    """A worker process's stop flag: set by the tune process, or gone with it (killed with SIGKILL, say), so that
    no worker goes on running the study without the process that reports it."""

    def __init__(self, stop: StopFlag):
        self.stop, self.parent = stop, os.getppid()

    def is_set(self) -> bool:
        return self.stop.is_set() or os.getppid() != self.parent


def work(spec: TuneSpec, stop: StopFlag, in_process: bool) -> None:
    if not in_process:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
        stop = OrphanStop(stop)
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # no traceback for a trial a stop cut short
    storage, lock = storage_of(spec), StudyLock(spec.storage, spec.study)
    try:
        with lock:
            study = optuna.load_study(study_name=spec.study, storage=storage)
            number = register(study)
            cap = None if spec.trials is None else len(study.get_trials(deepcopy=False)) + 3 * spec.trials
        study = optuna.load_study(
            study_name=spec.study, storage=storage, sampler=make_sampler(spec.sampler, seed_stream(spec.seed, number))
        )
        objective = TrialObjective(spec, stop, lock)
        me = {"host": socket.gethostname(), "pid": os.getpid(), "number": number}

        def admitted(trial: optuna.Trial) -> float:
            trial.set_user_attr("worker", me)
            lock.release()  # asked under the lock: the trial counts as running now
            return objective(trial)

        while True:
            with lock:
                verdict = admit(study, spec, stop, cap)
                if verdict == GO:
                    run_one(study, admitted)
            if verdict == DONE:
                return
            if verdict == WAIT:
                time.sleep(WAIT_S)
    except TuneInterrupted:
        return
    finally:
        lock.close()


def run_one(study: optuna.Study, objective: Callable[[optuna.Trial], float]) -> None:
    """One trial in Optuna's loop, which beats its heartbeat; a trial failed under us as stale is let go.

    A worker that stalled past the grace period finds its trial failed (and
    queued again) by another worker; Optuna then cannot record the result,
    and this worker goes on with its next trial instead of dying.
    """
    seen: dict[str, object] = {}

    def observed(trial: optuna.Trial) -> float:
        seen["trial"] = trial.number
        try:
            return objective(trial)
        except Exception as err:
            seen["error"] = err
            raise

    try:
        study.optimize(observed, n_trials=1)
    except TuneInterrupted:
        raise
    except Exception as err:
        failed = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
        if err is seen.get("error") or seen.get("trial") not in failed:
            raise


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """TPE (multivariate, grouped for the conditional space) or random sampling."""
    if name == "tpe":
        with warnings.catch_warnings():  # multivariate and group are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(multivariate=True, group=True, seed=seed, constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"sampler: unknown sampler {name!r}; allowed: {', '.join(SAMPLERS)}")
