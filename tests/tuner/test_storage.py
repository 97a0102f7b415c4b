"""Study storages and the workers that share one: bad --storage values, admission, config claims, recovery.

Runs without PostgreSQL (tests/tuner/test_postgres.py has the real server's tests).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import optuna
import pytest
from optuna.trial import TrialState

from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore
from pipedeck.tuner import open_storage, parse_fixes, run_study
from pipedeck.tuner.storage import StudyLock
from pipedeck.tuner.workers import DONE, GO, WAIT, admit, run_one
from tests.postgres_server import free_port
from tests.tune_support import SMALL, spec

ALLOWED = "allowed: a journal file path, sqlite:///FILE or postgresql://USER@HOST:PORT/DATABASE"


def tune_error(tmp_path, capsys, storage: str) -> str:
    """The one line `tune --storage STORAGE` fails with; it must leave no run store and no journal behind."""
    folder = tmp_path / "work"
    folder.mkdir()
    status = run_cli(
        cli, ["tune", *SMALL, "--trials", "2", "--db", str(folder / "pipedeck.duckdb"), "--storage", storage]
    )
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert list(folder.iterdir()) == []
    return err.strip()


def test_a_storage_that_is_not_one_is_refused_in_one_line(tmp_path, capsys):
    assert (
        tune_error(tmp_path, capsys, "bogus://x")
        == f"pipedeck: error: Invalid value for --storage: 'bogus://x' is not a storage; {ALLOWED}"
    )


def test_a_journal_in_a_missing_folder_is_refused_in_one_line(tmp_path, capsys):
    assert tune_error(tmp_path, capsys, str(tmp_path / "nowhere" / "j.jsonl")).startswith(
        f"pipedeck: error: Invalid value for --storage: no folder {tmp_path / 'nowhere'}"
    )


def test_postgresql_without_its_driver_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if pipedeck were installed without [postgres]
    assert tune_error(tmp_path, capsys, "postgresql://tuner:secret@127.0.0.1:5432/studies") == (
        "pipedeck: error: Invalid value for --storage: postgresql:// needs the PostgreSQL driver psycopg 3; "
        "pip install 'pipedeck[postgres]'"
    )


def test_a_database_nobody_answers_is_one_line_without_its_password(tmp_path, capsys):
    pytest.importorskip("psycopg", reason="psycopg 3 is not installed (pip install 'pipedeck[postgres]')")
    port = free_port()
    err = tune_error(tmp_path, capsys, f"postgresql://tuner:secret@127.0.0.1:{port}/studies")
    assert err.startswith(
        f"pipedeck: error: Invalid value for --storage: cannot use "
        f"postgresql://tuner:***@127.0.0.1:{port}/studies: connection failed"
    )
    assert "secret" not in err


@pytest.mark.parametrize("held, wanted", [("s", "s/goodput_ci"), ("", "s"), ("s", "t")])
def test_locks_of_different_names_on_one_journal_do_not_wait_on_each_other(tmp_path, held, wanted):
    """A finalist's repeated-seed measurement (minutes, live) must not stop other workers' admissions."""
    url = str(tmp_path / "study.jsonl")
    for name, waits in ((wanted, False), (held, True)):  # the second is the control: one name is one lock
        other = StudyLock(url, name)
        taker = threading.Thread(target=other.acquire)
        with StudyLock(url, held):
            taker.start()
            taker.join(timeout=0.5 if waits else 10)
            assert taker.is_alive() == waits, f"the lock on {name!r} {'did not wait' if waits else 'waited'}"
        taker.join(timeout=10)
        other.close()


def test_a_released_lock_leaves_no_file_behind(tmp_path):
    """Every study name has its own lock file; they must not pile up beside the journal."""
    url = str(tmp_path / "study.jsonl")
    for name in ("", "s", "s/goodput_ci"):
        with StudyLock(url, name):
            assert [p.name for p in tmp_path.glob("*.pipedeck-lock")]
    assert list(tmp_path.iterdir()) == []


def test_a_waiter_woken_on_a_removed_lock_file_still_excludes_a_newcomer(tmp_path):
    """The holder removes the file as it releases; whoever was waiting on that file and whoever opens the path
    afterwards (a new file) must not both hold the lock."""
    url = str(tmp_path / "study.jsonl")
    first, waiter, newcomer = StudyLock(url, "s"), StudyLock(url, "s"), StudyLock(url, "s")
    first.acquire()
    waiting = threading.Thread(target=waiter.acquire)
    waiting.start()
    waiting.join(timeout=0.5)
    assert waiting.is_alive()  # blocked on the file the first holder is about to remove
    first.close()
    waiting.join(timeout=10)
    assert waiter.held
    coming = threading.Thread(target=newcomer.acquire)
    coming.start()
    coming.join(timeout=0.5)
    assert coming.is_alive(), "the newcomer took the lock the waiter holds"
    waiter.close()
    coming.join(timeout=10)
    assert newcomer.held
    newcomer.close()
    assert list(tmp_path.iterdir()) == []


def test_admission_keeps_finished_and_running_trials_within_the_target(tmp_path):
    target = spec(tmp_path, trials=4)
    study = optuna.create_study(study_name="t", storage=open_storage(target.storage))
    stop = threading.Event()
    for attrs in ({}, {}, {"duplicate_of": 0}):  # a repeat answered from trial 0 is not counted
        study.add_trial(optuna.create_trial(state=TrialState.COMPLETE, value=1.0, user_attrs=attrs))
    assert admit(study, target, stop, cap=None) == GO
    running = [study.ask() for _ in range(2)]
    for trial in running:
        trial.set_user_attr("worker", {"host": socket.gethostname(), "pid": os.getpid(), "number": 0})
    assert admit(study, target, stop, cap=None) == WAIT  # 2 finished + 2 running: one may fail and need a worker
    study.tell(running[0], 2.0)
    assert admit(study, target, stop, cap=None) == WAIT
    study.tell(running[1], state=TrialState.PRUNED)
    assert admit(study, target, stop, cap=None) == DONE
    assert admit(study, spec(tmp_path, trials=9), stop, cap=len(study.trials)) == DONE  # a space that ran out
    stop.set()
    assert admit(study, spec(tmp_path, trials=9), stop, cap=None) == DONE


def test_a_trial_whose_worker_died_before_naming_itself_is_failed_and_retried_once(tmp_path):
    """Killed between asking for its trial and naming itself on it: seen nameless under the lock, it is failed
    and queued again, while a live worker's trial and a dead worker's of another host are left running."""
    target = spec(tmp_path, trials=4)
    study = optuna.create_study(study_name="t", storage=open_storage(target.storage))
    study.set_user_attr("worker_processes", [{"host": socket.gethostname(), "pid": os.getpid(), "joined": 0.0}])
    nameless = study.ask({"chunk": optuna.distributions.IntDistribution(1, 8)})
    alive = study.ask()
    alive.set_user_attr("worker", {"host": socket.gethostname(), "pid": os.getpid(), "number": 0})
    elsewhere = study.ask()
    elsewhere.set_user_attr("worker", {"host": "another-host", "pid": 1, "number": 1})
    assert admit(study, target, threading.Event(), cap=None) == GO
    states = {t.number: t.state for t in study.trials}
    assert states[nameless.number] == TrialState.FAIL
    assert states[alive.number] == states[elsewhere.number] == TrialState.RUNNING
    retries = [t for t in study.trials if t.user_attrs.get("retry_of") == nameless.number]
    assert len(retries) == 1 and retries[0].state == TrialState.WAITING
    assert retries[0].system_attrs["fixed_params"] == nameless.params
    admit(study, target, threading.Event(), cap=None)
    assert sum(t.user_attrs.get("retry_of") == nameless.number for t in study.trials) == 1


def test_a_trial_failed_under_its_worker_is_let_go(tmp_path):
    """A worker stalled past the heartbeat's grace finds its trial failed by another; it goes on, it does not die."""
    study = optuna.create_study(study_name="t", storage=open_storage(str(tmp_path / "j.jsonl")))

    def failed_elsewhere(trial: optuna.Trial) -> float:
        study.tell(trial.number, state=TrialState.FAIL)  # what another worker's heartbeat check does
        return 1.0

    run_one(study, failed_elsewhere)
    assert [t.state for t in study.trials] == [TrialState.FAIL]

    def broken(trial: optuna.Trial) -> float:
        raise RuntimeError("a bug in the objective")

    with pytest.raises(RuntimeError, match="a bug in the objective"):  # its own failures still surface
        run_one(study, broken)


def test_workers_proposing_one_config_at_once_measure_it_once(tmp_path):
    """Every proposal of a pinned space is one config: three processes at once measure it once, the rest repeat."""
    pinned = parse_fixes(["tp=4", "pp=1", "chunk=2k", "max-running=256", "delay-scheduling=off"])
    outcome = run_study(spec(tmp_path, trials=2, fixed=pinned), tmp_path / "runs.duckdb", jobs=3)
    study = optuna.load_study(study_name="t", storage=open_storage(str(tmp_path / "journal.jsonl")))
    measured = [t for t in study.trials if t.state != TrialState.FAIL and "duplicate_of" not in t.user_attrs]
    repeats = [t for t in study.trials if "duplicate_of" in t.user_attrs]
    assert len(measured) == 1 and outcome.trials == 1
    assert repeats and all(t.user_attrs["duplicate_of"] == measured[0].number for t in repeats)
    assert all(t.value == measured[0].value for t in repeats if t.state == TrialState.COMPLETE)
    assert study.user_attrs["workers"] == 3  # three registered workers: three seed streams
    assert {t.user_attrs["worker"]["number"] for t in study.trials} <= {0, 1, 2}


def test_report_from_a_run_store_without_the_study_reads_its_storage(tmp_path, capsys):
    db, elsewhere = tmp_path / "runs.duckdb", tmp_path / "elsewhere.duckdb"
    assert (
        run_cli(cli, ["tune", *SMALL, "--trials", "2", "--repeats", "1", "--study", "s", "--db", str(db), "--json"])
        == 0
    )
    trials = json.loads(capsys.readouterr().out)["trials"]
    page = tmp_path / "report.html"
    journal = str(tmp_path / "runs.optuna.jsonl")
    assert run_cli(cli, ["report", "--study", "s", "--db", str(elsewhere), "--out", str(page)]) == 2
    assert (
        run_cli(cli, ["report", "--study", "s", "--storage", journal, "--db", str(elsewhere), "--out", str(page)]) == 0
    )
    assert f"Optuna storage: {journal}" in page.read_text()
    with RunStore.open(elsewhere, read_only=True) as store:
        assert sum(t.state in ("COMPLETE", "PRUNED") for t in store.trials("s")) >= trials
    capsys.readouterr()
    assert (
        run_cli(cli, ["report", "--study", "other", "--storage", journal, "--db", str(elsewhere), "--out", str(page)])
        == 2
    )
    assert capsys.readouterr().err.strip() == f"pipedeck: error: study: no study 'other' in {journal}"


def small_journal(path) -> bytes:
    """A journal of one study with three finished trials, written by Optuna; its bytes."""
    study = optuna.create_study(study_name="j", storage=open_storage(str(path)))
    for value in (1.0, 2.0, 3.0):
        study.add_trial(optuna.create_trial(state=TrialState.COMPLETE, value=value, user_attrs={"v": value}))
    return path.read_bytes()


BAD_LINES = {
    "binary": (b"\x00\x89PNG\xff\xfe\n", "bytes that are not UTF-8 text"),
    "text": (b"not a record\n", "text that is not JSON: 'not a record'"),
    "keys": (b'{"hello": "world"}\n', "a JSON line without Optuna's keys (op_code, worker_id)"),
}


@pytest.mark.parametrize("command", ["tune", "studies"])
@pytest.mark.parametrize("bad", list(BAD_LINES))
def test_a_corrupt_journal_line_is_one_line_naming_file_and_line_and_nothing_changes(tmp_path, capsys, command, bad):
    journal = tmp_path / "j.jsonl"
    lines = small_journal(journal).splitlines(keepends=True)
    line, reason = BAD_LINES[bad]
    journal.write_bytes(b"".join([*lines[:3], line, *lines[3:]]))
    before = journal.read_bytes()
    argv = (
        ["tune", *SMALL, "--trials", "2", "--study", "j", "--db", str(tmp_path / "r.duckdb")]
        if command == "tune"
        else ["studies"]
    )
    assert run_cli(cli, [*argv, "--storage", str(journal)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"{journal}:4: must be an Optuna journal record, got {reason}; nothing was changed" in err
    assert journal.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith("lock")) == ["j.jsonl"]


def test_a_journal_whose_last_line_was_cut_off_is_set_aside_and_the_study_resumes(tmp_path, capsys):
    db, journal = tmp_path / "runs.duckdb", tmp_path / "runs.optuna.jsonl"
    argv = ["tune", *SMALL, "--repeats", "1", "--study", "s", "--db", str(db), "--json"]
    first = subprocess.run(
        [sys.executable, "-m", "pipedeck.console", *argv, "--trials", "2"], capture_output=True, text=True, timeout=600
    )  # a process of its own: its trial cut short is a dead worker's
    assert first.returncode == 0, first.stderr
    whole = journal.read_bytes()
    last = whole.rstrip(b"\n").rfind(b"\n") + 1
    cut = whole[: last + (len(whole) - last) // 2]  # a power loss mid-way through the last record
    journal.write_bytes(cut)
    kept = {
        t.number: (t.state, t.value)
        for t in optuna.load_study(study_name="s", storage=open_storage(str(journal))).trials
        if t.state.is_finished()
    }
    capsys.readouterr()
    assert run_cli(cli, [*argv, "--trials", "3"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    backups = [p for p in tmp_path.iterdir() if p.name.startswith("runs.optuna.jsonl.damaged-")]
    assert len(backups) == 1 and backups[0].read_bytes() == cut
    complete = cut.count(b"\n")
    assert err == [
        f"{journal}: its last line was cut off (an interrupted write); kept the whole file as "
        f"{backups[0]} and resumed from its {complete} complete lines"
    ]
    resumed = {t.number: t for t in optuna.load_study(study_name="s", storage=open_storage(str(journal))).trials}
    assert all((resumed[n].state, resumed[n].value) == was for n, was in kept.items())
    assert sum(t.state.is_finished() and "duplicate_of" not in t.user_attrs for t in resumed.values()) >= 3
    assert journal.read_bytes().startswith(cut[: cut.rfind(b"\n") + 1])
