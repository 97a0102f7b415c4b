"""Stage-to-rank layouts: where each virtual stage of the model runs, and in what order a rank runs its work."""

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


def program_order(stage_ranks: tuple[int, ...], entry_first: bool) -> tuple[tuple[int, int], ...]:
    """Each stage's place in its rank's program: micro-batch j runs stage s at key = a * j + b (per stage).

    A rank executes its work in increasing key, whatever becomes ready first
    (the instruction stream of a real engine's worker). Linear: every rank runs
    micro-batches in order (key j). Fold-back: a rank alternates its forward
    (pre-fold) and backward (continuation) stages, a 1F1B-like interleave: the
    backward stage of micro-batch j runs after the forward stage of j + d, where
    d = pp - 1 - rank, the rounds the micro-batch spends beyond this rank (so the
    fold rank runs its two stages back to back, and rank 0 runs s_last of j-1
    before s0 of j+1, the vanilla VPP order). With `entry_first`, rank 0 takes
    one more forward stage first (s0 of j+1 before s_last of j-1: VPP-Async's
    swapped order).
    """
    pp = max(stage_ranks) + 1
    if len(stage_ranks) == pp:
        return tuple((1, 0) for _ in stage_ranks)
    order = []
    for stage, rank in enumerate(stage_ranks):
        if stage < pp:
            order.append((2, 0))
        else:
            lag = pp - 1 - rank + (1 if entry_first and rank == 0 else 0)
            order.append((2, 2 * lag + 1))
    return tuple(order)
