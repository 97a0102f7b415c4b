"""Trials a worker left behind: fail them and queue them again, once, with what they had sampled.

A worker that dies (kill -9, a lost host) leaves its trial RUNNING. On a
database storage its heartbeat stops and Optuna fails the trial after the
grace period, on whichever host looks next (`fail_stale_trials`); a journal
file has no heartbeat, so a trial of a dead process of this host is failed
here (one on another host sharing the file cannot be told from a live one).
A trial that Ctrl-C or a pause interrupted is failed by its own worker.
Either way `retry` queues it again with its parameters; the retry names its
original (`retry_of`), so none is retried twice and none counts twice.
"""

from __future__ import annotations

import os
import socket
import warnings

import optuna
from optuna.storages import fail_stale_trials
from optuna.trial import FrozenTrial, TrialState


def retry(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue `trial` again with its parameters (the engine-default trial keeps its role)."""
    attrs = {k: v for k, v in trial.user_attrs.items() if k == "role"}
    study.enqueue_trial(trial.params, user_attrs={**attrs, "retry_of": trial.number}, skip_if_exists=False)


def watched(trial: FrozenTrial, heartbeat: bool) -> bool:
    """Whether the death of this RUNNING trial's worker would be noticed: any worker with a heartbeat, else ours.

    Without a heartbeat, a trial of another host sharing the journal file may
    belong to a dead worker that nothing can detect: nobody waits for it.
    """
    return heartbeat or trial.user_attrs.get("worker", {}).get("host") == socket.gethostname()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_abandoned(study: optuna.Study, heartbeat: bool) -> None:
    """Fail the trials dead workers left running and queue every abandoned trial again.

    Take the study's lock around it. With a `heartbeat` (database storages),
    Optuna fails and queues the trials whose worker stopped beating, on any
    host. Without one (a journal file), a trial left RUNNING by a dead
    process of this host is failed here. On any storage, a trial whose
    worker died between asking for it and naming itself (no heartbeat yet)
    is failed here. Failed trials that were interrupted or abandoned are
    queued once.
    """
    if heartbeat:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            fail_stale_trials(study)  # calls `retry` (the storage's stale-trial callback) for each
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get("retry_of") for t in trials}
    for t in trials:
        if t.state == TrialState.RUNNING and _abandoned(t, heartbeat):
            study.tell(t.number, state=TrialState.FAIL)
        elif not (t.state == TrialState.FAIL and t.user_attrs.get("interrupted")):
            continue
        if t.number not in retried:
            retry(study, t)


def _abandoned(trial: FrozenTrial, heartbeat: bool) -> bool:
    """Whether this RUNNING trial's worker died before naming itself on it, or (with no heartbeat to tell)
    is a dead process of this host.

    A worker asks for its trial and names itself on it under the study's
    lock, so a trial the lock's holder sees nameless was asked by a worker
    that died holding the lock, killed between the two steps: it never beat
    a heartbeat either.
    """
    worker = trial.user_attrs.get("worker")
    if worker is None:
        return True
    return not heartbeat and worker["host"] == socket.gethostname() and not _alive(worker["pid"])
