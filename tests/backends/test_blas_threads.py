"""pipedeck's processes run OpenBLAS on one thread (its pool spins a tenth of a CPU second per thread at numpy's
import); the engines it launches get the user's environment unchanged."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipedeck.backends import one_blas_thread
from pipedeck.backends.blas_threads import SET_BY_PIPEDECK, THREADS, user_environment

# threads of this process once numpy is loaded, printed at exit; argv[1] == "cli" goes through pipedeck's entry point
PROBE = """
import atexit, os, sys
atexit.register(lambda: print("THREADS", len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS")))
if sys.argv[1] == "cli":
    from pipedeck.console.cli import main
    main(["simulate", "--scenario", "azure-conv", "--requests", "4", "--model", "qwen2.5-14b",
          "--hardware", "a100-40g-pcie", "--no-store"])
import numpy
"""


def threads_after_numpy(how: str, **env: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k not in (THREADS, SET_BY_PIPEDECK)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, how], capture_output=True, text=True, timeout=120, env={**base, **env}
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.rpartition("THREADS ")[2].split()


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
    reason="counts threads in /proc/self/task; one core has no OpenBLAS pool to limit",
)
def test_the_cli_runs_numpy_on_one_thread_where_numpy_alone_starts_a_pool():
    assert int(threads_after_numpy("bare")[0]) > 1  # the control: numpy's OpenBLAS starts a thread per core
    assert threads_after_numpy("cli") == ["1", "1"]


def test_a_thread_count_the_user_chose_is_kept_and_passed_on(monkeypatch):
    monkeypatch.setenv(THREADS, "3")
    monkeypatch.delenv(SET_BY_PIPEDECK, raising=False)
    one_blas_thread()
    assert os.environ[THREADS] == "3" and SET_BY_PIPEDECK not in os.environ
    assert user_environment()[THREADS] == "3"


def test_engines_get_the_environment_without_pipedeck_s_own_limit(monkeypatch):
    monkeypatch.delenv(THREADS, raising=False)
    monkeypatch.delenv(SET_BY_PIPEDECK, raising=False)
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    one_blas_thread()
    assert os.environ[THREADS] == "1"
    env = user_environment()
    assert THREADS not in env and SET_BY_PIPEDECK not in env and env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"
