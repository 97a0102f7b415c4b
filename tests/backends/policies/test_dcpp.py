"""DCPP's chunk sequence (vLLM-Ascend's profiling-chunk rule) and its step counts."""

import itertools

import pytest

from pipedeck.backends import ServingConfig
from pipedeck.backends.policies.chunking import DynamicChunk
from pipedeck.backends.sim import SimBackend
from pipedeck.backends.sim.backend import build_engine
from pipedeck.scenarios import load_scenario

K = 1024


def chunk_sequence(prompt: int, base: int, min_chunk: int = 4096, smooth: float = 1.0) -> list[int]:
    """The chunks DCPP cuts one prompt into, using the simulator's own latency profile."""
    config = ServingConfig.of(mode="dcpp", chunk=base, min_chunk=min_chunk, smooth_factor=smooth).resolve()
    policy = build_engine(config).sched.policy
    assert isinstance(policy, DynamicChunk)
    chunks, done = [], 0
    while done < prompt:
        size = min(policy.request_chunk(done), prompt - done)
        chunks.append(size)
        done += size
    return chunks


@pytest.mark.parametrize("prompt,base", [(128 * K, 16 * K), (512 * K, 24 * K), (256 * K, 32 * K)])
def test_chunks_shrink_along_the_prompt_and_respect_the_floor(prompt, base):
    chunks = chunk_sequence(prompt, base)
    body = chunks[:-1]  # the last chunk is whatever remains
    assert chunks[0] == base
    assert all(a >= b for a, b in itertools.pairwise(body))
    assert all(c >= 4096 and c % 64 == 0 for c in body)
    assert chunks[-1] <= body[-1]
    assert sum(chunks) == prompt


def test_smooth_factor_pulls_chunks_towards_the_base():
    full = chunk_sequence(512 * K, 24 * K, smooth=1.0)
    half = chunk_sequence(512 * K, 24 * K, smooth=0.5)
    assert len(half) < len(full)
    assert min(half[:-1]) > min(full[:-1])


def test_min_chunk_is_a_floor():
    chunks = chunk_sequence(512 * K, 24 * K, min_chunk=8192)
    assert min(chunks[:-1]) == 8192


def test_step_counts_on_128k_with_16k_chunks():
    """calibration.md A: CPP finishes a 128K prompt in 8 steps, DCPP in 17."""
    scenario = load_scenario("long-128k")
    steps = {
        mode: SimBackend().run(scenario, ServingConfig.of(mode=mode, chunk=16 * K), timeline=False).steps
        for mode in ("cpp", "dcpp")
    }
    assert steps["cpp"] == 8
    assert 14 <= steps["dcpp"] <= 20
