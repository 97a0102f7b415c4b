"""OpenBLAS's thread pool in pipedeck's own processes, and the environment the engines it starts get.

numpy loads OpenBLAS, which starts a thread per core that spins for about
a tenth of a CPU second before it sleeps, whether or not any matrix is ever
multiplied. pipedeck multiplies only small ones (a chunk-latency fit, a
calibration's least squares), so its processes run OpenBLAS on one thread
unless the user set OPENBLAS_NUM_THREADS. Measured on 2 cores
(benchmarks/sim_speed.py; docs/performance.md): `import numpy` takes 0.145
CPU s with the pool and 0.087 without, a 1000-request azure-conv simulation
0.29 against 0.18. On a many-core host the pool costs more per process.

A serving engine pipedeck launches gets the environment as the user left
it: on aarch64 hosts (Kunpeng, with Ascend NPUs) PyTorch's CPU math runs on
OpenBLAS too.
"""

from __future__ import annotations

import os

THREADS = "OPENBLAS_NUM_THREADS"
SET_BY_PIPEDECK = "PIPEDECK_SET_OPENBLAS_NUM_THREADS"  # spawned tuner workers inherit both


def one_blas_thread() -> None:
    """Before numpy loads: one OpenBLAS thread for this process and the ones it spawns, unless the user chose."""
    if THREADS not in os.environ:
        os.environ[THREADS] = "1"
        os.environ[SET_BY_PIPEDECK] = "1"


def user_environment() -> dict[str, str]:
    """This process's environment without the thread limit pipedeck set for itself."""
    env = dict(os.environ)
    if env.pop(SET_BY_PIPEDECK, None) is not None:
        env.pop(THREADS, None)
    return env
