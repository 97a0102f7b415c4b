"""Tuning on several hosts through a real PostgreSQL: workers started together share one study, none measures a
config twice, the study stops at exactly --trials, and a killed worker's trial is retried by another.

Each worker is a `pipedeck tune` process with a run store of its own, as on its own host. The server is the
`postgres` fixture's: skipped, with the reason, where initdb and pg_ctl (or psycopg) are missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore
from pipedeck.tuner import open_storage
from tests.postgres_server import PostgresServer, unavailable
from tests.tune_support import SMALL

psycopg = pytest.importorskip("psycopg", reason="psycopg 3 is not installed (pip install 'pipedeck[postgres]')")


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for these tests (skipped, with the reason, where none can start)."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.stop()


TRIALS, WORKERS, VICTIM = 9, 4, 1  # three survive the victim
HEARTBEAT_S = 2  # a killed worker's trial is failed 3 heartbeats (6 s) after its last one

# A worker that imports everything, says it is ready and waits for the word "go": the workers then reach the
# fresh database within a millisecond of each other, as workers started together on several hosts would.
LAUNCH = """
import pathlib, sys, time
from pipedeck.console.cli import main
folder, name = pathlib.Path(sys.argv[1]), sys.argv[2]
(folder / f"ready-{name}").touch()
while not (folder / "go").exists():
    time.sleep(0.001)
sys.argv = ["pipedeck", *sys.argv[3:]]
main()
"""
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass(frozen=True)
class Shared:
    """What workers started together on one fresh database left behind, one of them killed mid-trial."""

    url: str
    study: optuna.Study
    exits: dict[int, int]  # worker index: exit status (the killed one's is -9)
    errors: dict[int, str]  # worker index: its stderr
    outputs: dict[int, dict]  # worker index: its `tune --json` (survivors)
    stores: dict[int, Path]  # worker index: its run store, as on its own host
    killed: list[FrozenTrial]  # the trial the killed worker left running


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.time() + timeout_s
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def study_created(url: str, name: str = "S") -> bool:
    """Whether study `name` and its settings are in the database, looked up without creating Optuna's tables."""
    with psycopg.connect(url) as con:
        try:
            return (
                con.execute(
                    "SELECT 1 FROM study_user_attributes a JOIN studies s USING (study_id) "
                    "WHERE s.study_name = %s AND a.key = 'pipedeck'",
                    (name,),
                ).fetchone()
                is not None
            )
        except psycopg.errors.UndefinedTable:
            return False


def measuring(study: optuna.Study, pid: int) -> list[FrozenTrial]:
    """The trials worker `pid` is measuring (their config sampled and claimed)."""
    return [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if t.user_attrs.get("worker", {}).get("pid") == pid and "config" in t.user_attrs
    ]


def counted(study: optuna.Study) -> list[FrozenTrial]:
    """Finished trials that measured their config (repeats, answered from another trial, excluded)."""
    return [t for t in study.get_trials(deepcopy=False, states=FINISHED) if "duplicate_of" not in t.user_attrs]


class Missed(Exception):
    """The victim was never caught measuring a trial: it ended, or the others claimed every trial first."""


ATTEMPTS = 3  # the kill is a race against trials of a second or so: a missed one starts over on a fresh database


@pytest.fixture(scope="module")
def shared(postgres, tmp_path_factory) -> Shared:
    missed = []
    for attempt in range(ATTEMPTS):
        try:
            return start_killing_one(postgres, tmp_path_factory.mktemp("hosts"), f"shared{attempt}")
        except Missed as why:
            missed.append(str(why))
    raise AssertionError(f"the victim was never caught mid-trial in {ATTEMPTS} attempts: {missed}")


def start_killing_one(postgres, folder: Path, database: str) -> Shared:
    """Start WORKERS workers together on a fresh database, stop the victim while it measures a trial after the
    first one finished and kill it, and let the others finish; Missed when the victim could not be caught."""
    url = postgres.create_database(database)
    stores = {i: folder / f"host{i}.duckdb" for i in range(WORKERS)}
    argv = [
        "tune",
        *SMALL,
        "--trials",
        str(TRIALS),
        "--repeats",
        "2",
        "--study",
        "S",
        "--storage",
        url,
        "--heartbeat",
        str(HEARTBEAT_S),
        "--json",
    ]
    workers = {
        i: subprocess.Popen(
            [sys.executable, "-c", LAUNCH, str(folder), str(i), *argv, "--db", str(stores[i])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WORKERS)
    }
    try:
        wait_until(lambda: all((folder / f"ready-{i}").exists() for i in workers), 120, "the workers to start")
        (folder / "go").touch()
        victim = workers[VICTIM]
        wait_until(lambda: study_created(url), 60, "the workers to create the study")  # they alone make the tables
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(study_name="S", storage=open_storage(url))
        deadline = time.monotonic() + 120
        while True:  # stopped mid-trial, then killed: a trial is a second or so, too short to kill in by polling
            wait_until(
                lambda: (counted(study) and measuring(study, victim.pid)) or catchable(study, victim) is not None,
                max(deadline - time.monotonic(), 1.0),
                "the victim to measure a trial after the first one finished",
            )
            if (why := catchable(study, victim)) is not None:
                raise Missed(why)
            os.kill(victim.pid, signal.SIGSTOP)
            if measuring(study, victim.pid):
                break
            os.kill(victim.pid, signal.SIGCONT)  # it finished that trial as it was stopped: catch the next one
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(30)
        killed = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.user_attrs.get("worker", {}).get("pid") == victim.pid
        ]
        outputs, exits, errors = {}, {}, {}
        for i, worker in workers.items():
            out, errors[i] = worker.communicate(timeout=300)
            exits[i] = worker.returncode
            if worker.returncode == 0:
                outputs[i] = json.loads(out)
    finally:
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return Shared(
        url, optuna.load_study(study_name="S", storage=open_storage(url)), exits, errors, outputs, stores, killed
    )


def catchable(study: optuna.Study, victim: subprocess.Popen[str]) -> str | None:
    """Why the victim can no longer be caught measuring a trial (None while it can)."""
    if victim.poll() is not None:
        return f"it exited with status {victim.returncode}: {victim.stderr.read() if victim.stderr else ''}"
    if not measuring(study, victim.pid) and len(counted(study)) >= TRIALS:
        return f"the other workers finished all {TRIALS} trials first"
    return None


def test_workers_started_together_share_one_study_of_exactly_the_trials_asked_for(shared):
    assert shared.exits == {i: -signal.SIGKILL if i == VICTIM else 0 for i in range(WORKERS)}, shared.errors
    assert [s.study_name for s in optuna.get_all_study_summaries(open_storage(shared.url))] == ["S"]
    assert len(counted(shared.study)) == TRIALS
    assert [out["trials"] for out in shared.outputs.values()] == [TRIALS] * (WORKERS - 1)
    assert shared.study.get_trials(states=(TrialState.RUNNING,)) == []
    assert shared.study.user_attrs["workers"] == WORKERS
    numbers = {t.user_attrs["worker"]["number"] for t in shared.study.trials if "worker" in t.user_attrs}
    assert numbers <= set(range(WORKERS))  # each registered worker drew from its own seed stream


def test_no_config_is_measured_twice(shared):
    measured = [json.dumps(t.user_attrs["config"], sort_keys=True) for t in counted(shared.study)]
    assert len(set(measured)) == len(measured) == TRIALS
    params = [json.dumps(t.params, sort_keys=True) for t in counted(shared.study)]
    assert len(set(params)) == len(params)
    by_number = {t.number: t for t in shared.study.trials}
    for t in shared.study.trials:  # a repeat was answered from the trial that measured its config
        if "duplicate_of" in t.user_attrs:
            assert t.user_attrs["config"] == by_number[t.user_attrs["duplicate_of"]].user_attrs["config"]


def test_the_killed_workers_trial_is_failed_and_retried_once_with_its_parameters(shared):
    assert shared.killed, "the victim was killed while it ran a trial"
    trials = shared.study.trials
    for lost in shared.killed:
        assert trials[lost.number].state == TrialState.FAIL
        retries = [t for t in trials if t.user_attrs.get("retry_of") == lost.number]
        assert len(retries) == 1 and retries[0].state in FINISHED
        assert {k: retries[0].params[k] for k in lost.params} == lost.params  # what it had sampled is kept
        if "config" in lost.user_attrs:  # killed mid-measurement (the poll made sure of it a moment before)
            assert retries[0].params == lost.params and retries[0].user_attrs["config"] == lost.user_attrs["config"]
    retried = [t.user_attrs["retry_of"] for t in trials if "retry_of" in t.user_attrs]
    assert len(retried) == len(set(retried))  # none retried twice
    assert all(t.number in retried for t in trials if t.state == TrialState.FAIL)


def test_each_host_keeps_the_whole_study_in_its_own_run_store(shared):
    finished = {t.number for t in counted(shared.study)}
    for i in shared.outputs:
        with RunStore.open(shared.stores[i], read_only=True) as store:
            stored = {t.number for t in store.trials("S") if t.state in ("COMPLETE", "PRUNED")}
            runs = store.list_runs(study="S")
        assert finished <= stored
        assert {r.label for r in runs} == {"best", "default"}  # each host measured the finalists' runs itself
    best = {out["best"]["trial"] for out in shared.outputs.values()}
    intervals = [json.dumps(out["best"]["goodput_ci"]) for out in shared.outputs.values()]
    assert len(best) == 1 and len(set(intervals)) == 1  # one verdict; the interval measured once, shared


def test_report_from_a_host_that_ran_no_worker(shared, tmp_path, capsys):
    page, db = tmp_path / "report.html", tmp_path / "elsewhere.duckdb"
    assert run_cli(cli, ["report", "--study", "S", "--storage", shared.url, "--db", str(db), "--out", str(page)]) == 0
    text = page.read_text()
    assert "Optuna storage: postgresql://pipedeck:***@127.0.0.1" in text and "tuning-secret" not in text
    with RunStore.open(db, read_only=True) as store:
        assert {t.number for t in store.trials("S")} == {
            t.number for t in shared.study.trials if t.state in (*FINISHED, TrialState.FAIL)
        }


@pytest.mark.parametrize(
    "database, password, message",
    [
        ("shared", "wrong", 'password authentication failed for user "pipedeck"'),
        ("nope", None, 'database "nope" does not exist'),
    ],
)
def test_a_database_that_refuses_is_one_line_and_leaves_no_file(
    postgres, tmp_path, capsys, database, password, message
):
    url = postgres.url(database, password) if password else postgres.url(database)
    status = run_cli(cli, ["tune", *SMALL, "--trials", "2", "--storage", url, "--db", str(tmp_path / "r.duckdb")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("pipedeck: error: Invalid value for --storage: cannot use postgresql://pipedeck:***@")
    assert message in err and "tuning-secret" not in err and "wrong" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_lost_database_connection_is_one_line_and_its_trial_is_retried(postgres, tmp_path):
    """The server ends every connection of a tune mid-trial (a restart, a failover): the worker says so in one line
    and exits 2; its trial in flight is failed by the heartbeat and retried when the study resumes."""
    url = postgres.create_database("lost")
    argv = [
        sys.executable,
        "-m",
        "pipedeck.console",
        "tune",
        *SMALL,
        "--repeats",
        "1",
        "--study",
        "L",
        "--storage",
        url,
        "--heartbeat",
        str(HEARTBEAT_S),
        "--db",
        str(tmp_path / "r.duckdb"),
        "--progress",
        "off",
    ]
    tune = subprocess.Popen([*argv, "--trials", "40"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: study_created(url, "L"), 120, "the tune to create the study")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(study_name="L", storage=open_storage(url))
        wait_until(lambda: counted(study) and measuring(study, tune.pid), 120, "a trial in flight")
        in_flight = [t.number for t in measuring(study, tune.pid)]
        with psycopg.connect(postgres.url("postgres"), autocommit=True) as con:
            ended = con.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = 'lost' AND pid <> pg_backend_pid()"
            ).fetchone()[0]
        _out, err = tune.communicate(timeout=120)
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.wait()
    assert ended >= 1 and tune.returncode == 1, err  # a runtime failure, not bad input
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("pipedeck: error: storage: lost the connection to postgresql://pipedeck:***@127.0.0.1:")
    assert "tuning-secret" not in err and "rerun the same command" in err

    study = optuna.load_study(study_name="L", storage=open_storage(url))
    # what the worker was measuring when the server ended its connections either finished on a fresh connection
    # before the worker hit a dead one, or was left running: those are failed and retried, once each
    left = {t.number for t in study.get_trials(deepcopy=False) if t.state == TrialState.RUNNING}
    resumed = subprocess.run(
        [*argv, "--trials", str(len(counted(study)) + 1)], capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    trials = study.get_trials(deepcopy=False)
    assert all(t.state != TrialState.RUNNING for t in trials)
    for number in left | set(in_flight):
        if number in left or trials[number].state == TrialState.FAIL:
            assert trials[number].state == TrialState.FAIL
            assert [t.user_attrs.get("retry_of") for t in trials].count(number) == 1
        else:
            assert trials[number].state in FINISHED
