"""Stage-to-rank layouts: where each virtual stage of the model runs."""

from __future__ import annotations


def linear_layout(pp: int) -> tuple[int, ...]:
    """Stage i on rank i (classic pipeline parallelism)."""
    return tuple(range(pp))


def foldback_layout(pp: int) -> tuple[int, ...]:
    """V-shaped layout over 2*pp virtual stages: forward across the ranks, then back.

    Stage i runs on rank i for i < pp and on rank 2*pp-1-i after that, so the
    middle two stages share the last rank (the fold point) and the first and
    last stages share rank 0.
    """
    return tuple(range(pp)) + tuple(reversed(range(pp)))


LAYOUTS = {"linear": linear_layout, "foldback": foldback_layout}
