"""A fingerprint of a run's results: two runs with equal digests produced the same results to the last bit."""

from __future__ import annotations

import hashlib

from ..result import RunResult


def run_digest(result: RunResult) -> str:
    """SHA-256 of every record, rank time, counter and span of `result` (floats by their exact repr)."""
    fields = (
        result.records,
        result.ranks,
        result.makespan_s,
        result.steps,
        result.chunks,
        result.stage_executions,
        result.spans,
        result.preemptions,
    )
    return hashlib.sha256(repr(fields).encode()).hexdigest()
