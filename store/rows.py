"""What the store's reads return: a stored run, and light rows for runs, studies, trials and configs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..backends import RunResult


@dataclass(frozen=True)
class StoredRun:
    """One stored run: its store metadata and the RunResult rebuilt exactly as it was saved."""

    id: int
    created_at: datetime  # UTC, timezone-aware
    study: str | None
    trial: int | None
    label: str | None
    pipedeck_version: str
    result: RunResult


@dataclass(frozen=True)
class RunRow:
    """A stored run without its requests and spans: what it ran and its key metrics."""

    id: int
    created_at: datetime
    backend: str
    scenario: str
    mode: str | None
    model: str | None
    hardware: str | None
    tp: int | None
    pp: int | None
    chunk: int | None
    rate: float | None
    seed: int
    study: str | None
    trial: int | None
    label: str | None
    requests: int
    ttft_p90_s: float | None  # None: no request was served (every one failed)
    tpot_p90_s: float | None  # None: no request decoded past its first token (one-token outputs)
    throughput_tok_s: float
    makespan_s: float
    bubble_ratio: float | None  # None: not measured (a live run not profiled)
    failed: int | None = None  # a live run's requests that failed; None for a simulated run


@dataclass(frozen=True)
class StudyRow:
    """One tuning study's settings and how many of its trials the store holds."""

    name: str
    created_at: datetime
    scenario: str | None
    objective: str | None
    slo: dict[str, object]
    settings: dict[str, object]
    storage: str | None
    pipedeck_version: str
    trials: int
    completed: int


@dataclass(frozen=True)
class TrialRow:
    """One trial of a study: its parameters, config, metrics and objective value."""

    study: str
    number: int
    state: str
    params: dict[str, object]
    config: dict[str, object] | None
    metrics: dict[str, object]
    objective: float | None
    duration_s: float | None
    completed_at: datetime | None
    run_id: int | None
    started_at: datetime | None = None  # None: stored before schema 4 recorded it
    worker: str | None = None  # the tuner worker that ran it, "host:pid"; None: unknown (stored before schema 4)


@dataclass(frozen=True)
class ConfigRow:
    """A named serving config."""

    name: str
    created_at: datetime
    config: dict[str, object]
