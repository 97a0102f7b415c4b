"""A stored run as text cells: the rows of `pipedeck runs` and of the console's Runs view."""

from __future__ import annotations

from ..backends import backend_tag, format_tokens
from ..store import RunRow


def row_cells(r: RunRow) -> tuple[str, ...]:
    """A listed run as text cells: id, created, scenario, model, config, TTFT p90, TPOT p90, bubble, and a
    label cell: the backend unless simulated, failed requests, the run's label and trial."""
    scenario = r.scenario if r.rate is None else f"{r.scenario}@{r.rate:.3g}"
    config = " ".join(
        part
        for part in (
            r.mode,
            None if r.tp is None else f"{r.tp}×{r.pp}",
            format_tokens(int(r.chunk)) if r.chunk is not None else None,
        )
        if part
    )
    label = " ".join(
        part
        for part in (
            backend_tag(r.backend),
            f"{r.failed} failed" if r.failed else None,
            r.label,
            None if r.trial is None else f"#{r.trial}",
        )
        if part
    )
    return (
        str(r.id),
        r.created_at.astimezone().strftime("%m-%d %H:%M"),
        scenario,
        r.model or "",
        config,
        _number(r.ttft_p90_s, ".4g"),
        _number(r.tpot_p90_s, ".4g"),
        _number(r.bubble_ratio, ".1%"),
        label,
    )


def _number(value: float | None, spec: str) -> str:
    """A figure, or n/a where the run could not measure it (a live server has no bubble)."""
    return "n/a" if value is None else format(value, spec)
