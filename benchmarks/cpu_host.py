"""Measure the spec-sheet figures of the `cpu-host` hardware profile on this machine (backends/profiles/hardware).

A CPU has no datasheet figures that a serving engine reaches, so the profile's
memory, memory bandwidth, peak FLOP rate and point-to-point figures are
measured here, the way vLLM's CPU build uses the host: torch in bfloat16 (the
dtype it serves a CPU model in) with as many threads as one rank of a
one-rank server binds (every usable core), and two processes handing an
activation-sized buffer to each other through shared memory for the
pipeline's transfers. Each figure is the best of `--repeats` tries, so that
other work on the machine lowers it as little as possible. `pipedeck
calibrate` then fits the efficiencies and overheads relative to them.

Run it with a Python that has torch (the CPU vLLM's environment has):

    $(python tests/live/vllm_server.py --print-python) benchmarks/cpu_host.py

It prints the profile's lines for these figures, with their sources.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from collections.abc import Callable

MATMUL = 2048  # square bfloat16 matmul: big enough to reach the host's rate
COPY_MB = 512  # a copy well beyond any cache
HANDOFFS = 2000  # round trips of the point-to-point latency


def best(fn: Callable[[], object], repeats: int) -> float:
    """The shortest of `repeats` timed calls (after one untimed), in seconds."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_tflops(repeats: int) -> float:
    import torch

    a, b = (torch.randn(MATMUL, MATMUL, dtype=torch.bfloat16) for _ in range(2))
    return 2 * MATMUL**3 / best(lambda: a @ b, repeats) / 1e12


def copy_gbs(repeats: int) -> float:
    """Bytes read and written per second by a large copy."""
    import torch

    source = torch.empty(COPY_MB * 2**20, dtype=torch.uint8)
    target = torch.empty_like(source)
    return 2 * source.numel() / best(lambda: target.copy_(source), repeats) / 1e9


def _echo(conn: mp.connection.Connection) -> None:
    while (message := conn.recv_bytes()) != b"":
        conn.send_bytes(message)


def handoff(size: int, repeats: int) -> float:
    """Seconds one way for `size` bytes between two processes (half a round trip through a pipe)."""
    here, there = mp.Pipe()
    echo = mp.Process(target=_echo, args=(there,), daemon=True)
    echo.start()
    payload = b"x" * size

    def round_trips() -> None:
        for _ in range(HANDOFFS if size < 2**16 else 20):
            here.send_bytes(payload)
            here.recv_bytes()

    try:
        per_trip = best(round_trips, repeats) / (HANDOFFS if size < 2**16 else 20)
    finally:
        here.send_bytes(b"")
        echo.join()
    return per_trip / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    import psutil
    import torch

    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(cores)
    memory = psutil.virtual_memory().total / 1e9
    tflops, gbs = matmul_tflops(repeats), copy_gbs(repeats)
    latency = handoff(8, repeats)
    big = 2**24
    bandwidth = big / (handoff(big, repeats) - latency) / 1e9
    how = f"measured by benchmarks/cpu_host.py on {cores} cores, best of {repeats}"
    print(f"memory_gb = {memory:.1f}  # psutil: the host's memory")
    print(f"memory_bandwidth_gbs = {gbs:.1f}  # {how}: a {COPY_MB} MB copy, bytes read and written")
    print(f"peak_tflops = {tflops:.3f}  # {how}: a {MATMUL}x{MATMUL} bfloat16 matmul in torch")
    print(f"p2p_latency_us = {latency * 1e6:.1f}  # {how}: half a round trip of 8 bytes between two processes")
    print(f"p2p_bandwidth_gbs = {bandwidth:.2f}  # {how}: 16 MiB one way between two processes, latency aside")


if __name__ == "__main__":
    main()
