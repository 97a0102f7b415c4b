"""Interrupting `pipedeck tune`: SIGINT (Ctrl-C, `kill -INT`) ends it in one line with exit 130 and no result
table, with its workers; a tune killed with SIGKILL takes its `--jobs` workers with it.

Each test drives a real `pipedeck tune` process and waits for events in its journal (trials finished, workers
registered), within bounded times.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tune_support import SMALL

WAIT_S = 120  # the most any step waits for the tune (a loaded machine)


def records(journal: Path) -> list[dict]:
    """The journal's complete records (a line being written is skipped)."""
    if not journal.exists():
        return []
    lines = journal.read_bytes().split(b"\n")[:-1]
    return [json.loads(line) for line in lines]


def finished(journal: Path) -> int:
    """Trials that completed or were pruned."""
    return sum(r["op_code"] == 6 and r["state"] in (1, 2) for r in records(journal))


def worker_pids(journal: Path) -> set[int]:
    """The process ids of the workers that ran a trial."""
    return {
        r["user_attr"]["worker"]["pid"] for r in records(journal) if r["op_code"] == 8 and "worker" in r["user_attr"]
    }


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie waiting for a parent to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}")
        time.sleep(0.05)


def start_tune(tmp_path: Path, jobs: int) -> tuple[subprocess.Popen, Path]:
    db = tmp_path / "runs.duckdb"
    argv = [
        sys.executable,
        "-m",
        "pipedeck.console",
        "tune",
        *SMALL,
        "--trials",
        "200",
        "--repeats",
        "1",
        "--jobs",
        str(jobs),
        "--study",
        "s",
        "--db",
        str(db),
        "--progress",
        "off",
    ]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ), tmp_path / "runs.optuna.jsonl"


@pytest.mark.parametrize("jobs, signals", [(1, 1), (2, 1), (2, 3)])
def test_sigint_says_interrupted_in_one_line_exits_130_and_takes_the_workers(tmp_path, jobs, signals):
    """A second and third SIGINT land while the tune stops (store writes, joining the workers): still one line."""
    tune, journal = start_tune(tmp_path, jobs)
    try:
        wait_until(lambda: finished(journal) >= 2 and len(worker_pids(journal)) >= jobs, "two finished trials")
        sent = 0
        while sent < signals and tune.poll() is None:
            tune.send_signal(signal.SIGINT)
            sent += 1
            time.sleep(0.1)
        out, err = tune.communicate(timeout=WAIT_S)
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.wait()
    assert sent >= 1
    assert (tune.returncode, out, err.splitlines()) == (
        130,
        "",
        ["interrupted: rerun the same command to resume study 's'"],
    )
    assert not any(running(pid) for pid in worker_pids(journal))


def test_a_tune_killed_with_sigkill_takes_its_workers_with_it(tmp_path):
    tune, journal = start_tune(tmp_path, jobs=2)
    try:
        wait_until(lambda: finished(journal) >= 1 and len(worker_pids(journal)) == 2, "both workers' trials")
        workers = worker_pids(journal)
        tune.kill()
        tune.wait(WAIT_S)
        wait_until(lambda: not any(running(pid) for pid in workers), "the workers to stop")
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.wait()
        for pid in worker_pids(journal):
            if running(pid):
                os.kill(pid, signal.SIGKILL)
    stopped = {r["trial_id"] for r in records(journal) if r["op_code"] == 6 and r["state"] != 0}
    begun = {r["trial_id"] for r in records(journal) if r["op_code"] == 8 and "worker" in r["user_attr"]}
    assert begun <= stopped  # each worker failed the trial it was measuring before it stopped
