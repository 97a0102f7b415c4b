"""What a run against a live server measured (`RunResult.live`): every request as the client saw it, and the
server's metrics over the run.

Shared records, owned by neither backend: the live backend fills them, `RunResult` carries them and the store
writes them (`live_to_dict`, `live_from_dict`). The live backend keeps only what is live-only: how each
engine spells these metrics (`live/metrics.py`'s table), scraping and the load generator.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypedDict

import numpy as np

from .records import RequestRecord
from .stats import stats

# pipedeck's names for a server's metrics (live.md, "Metric names"); live/metrics.py maps each engine's series to them
NAMES = (
    "running",
    "waiting",
    "kv_usage",
    "prompt_tokens_total",
    "generation_tokens_total",
    "preemptions_total",
    "prefix_cache_hits_total",
    "prefix_cache_queries_total",
    "prefix_cache_hit_rate",
    "ttft_s",
    "tpot_s",
    "itl_s",
    "e2e_s",
    "queue_s",
)
COUNTERS = (
    "prompt_tokens_total",
    "generation_tokens_total",
    "preemptions_total",
    "prefix_cache_hits_total",
    "prefix_cache_queries_total",
)


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram: cumulative counts per upper bound (the last is inf), sum and count."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


class Sample(NamedTuple):
    """The pipedeck metrics of one scrape, at a time in seconds from the start of the run."""

    time_s: float
    values: dict[str, float | Histogram]

    def counters(self) -> dict[str, float]:
        """The counters (`COUNTERS`) this scrape has."""
        return {
            name: value for name, value in self.values.items() if name in COUNTERS and not isinstance(value, Histogram)
        }


@dataclass
class MetricsTimeline:
    """Every scrape of a run, in time order, and the scrapes that failed (one line each)."""

    engine: str | None = None
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def missing(self) -> tuple[str, ...]:
        """The pipedeck names absent from every scrape."""
        seen = {name for sample in self.samples for name in sample.values}
        return tuple(name for name in NAMES if name not in seen)

    def final_counters(self) -> dict[str, float]:
        """The counters at the last scrape that had each."""
        return {name: value for sample in self.samples for name, value in sample.counters().items()}

    def counter_deltas(self) -> dict[str, float]:
        """How much each counter grew from its first scrape to its last (what this run added)."""
        first: dict[str, float] = {}
        for sample in self.samples:
            for name, value in sample.counters().items():
                first.setdefault(name, value)
        return {name: last - first[name] for name, last in self.final_counters().items()}


class LiveRequest(NamedTuple):
    """One request as the load generator saw it; times in seconds from the start of the run.

    `scheduled_s` is when the workload said to send it (closed loop: when a
    slot freed). `first_token_s` and `end_s` are the first and last SSE events
    with a choice (its text may be empty), `gaps_s` the gaps between all of
    them, as `vllm bench serve` times them. `output_tokens` is what the server
    returned: `usage.completion_tokens` when it sent usage (`tokens_from`
    "usage"), else the events that carried text ("events"; an event may carry
    several tokens on some servers).
    `error` is one line when the request failed, else None; `end_s` is then
    when the failure was seen. `cached_tokens` are the prompt tokens the
    server served from its prefix cache (`usage.prompt_tokens_details`);
    None when it did not say.
    """

    id: int
    scheduled_s: float
    send_s: float
    first_token_s: float | None
    end_s: float
    prompt_tokens: int
    max_tokens: int
    output_tokens: int
    tokens_from: str
    gaps_s: tuple[float, ...]
    error: str | None = None
    cached_tokens: int | None = None

    def record(self) -> RequestRecord | None:
        """The common record (arrival = send time) of a served request; None if it failed."""
        if self.error is not None or self.first_token_s is None:
            return None
        return RequestRecord(
            self.id, self.send_s, self.prompt_tokens, self.output_tokens, self.first_token_s, self.end_s
        )


UNSENT = "not sent (run time limit)"  # the kind of a request the run's time limit left unsent


def error_kind(error: str) -> str:
    """What kind of failure an error line is: its text before the first colon (`http 500`, `connection refused`)."""
    return error.split(":", 1)[0]


class LiveSummary(TypedDict):
    """`LiveRun.summary()`: what only a live run measures, JSON-ready; the server's part None when not scraped."""

    sent: int
    failed: int
    unsent: int
    errors: dict[str, int]  # failed requests by kind, most first
    first_error: str | None
    short_outputs: int
    tokens_from: dict[str, int]
    prefix_cache_hit_rate: float | None
    prefix_cache_from: str | None
    itl_s: dict[str, float] | None  # `stats` of the gaps between tokens
    send_lag_s: dict[str, float] | None  # p99 and max
    loadgen_cpu_s: float
    engine: str | None
    engine_version: str | None
    server_missing: list[str] | None
    server_scrape_errors: int | None
    server_counters: dict[str, float] | None


@dataclass
class LiveRun:
    """Every request a live run sent, the ones it could not send in time, and the server's metrics."""

    requests: list[LiveRequest]  # in id order
    unsent: int  # workload requests whose time came after the run's time limit
    loadgen_cpu_s: float  # CPU seconds the load generator's process used during the run
    server: MetricsTimeline | None = None  # None when /metrics was not scraped
    engine_version: str | None = None  # "<engine> <version>" as the server reported it; None: it did not say
    served_model: str | None = None  # the model name the requests asked for (/v1/models' first, or as named)
    started_at: float | None = None  # wall-clock time (Unix seconds) at the run's start; None: not recorded

    def described(self) -> dict[str, object]:
        """What the server said of itself, as a run's config when none was given: its model name and engine.

        Nothing else is known of a server started elsewhere (hardware, parallelism), so nothing else is said.
        """
        engine = self.engine_version.split()[0] if self.engine_version else None
        return {key: value for key, value in (("model", self.served_model), ("engine", engine)) if value}

    def failed(self) -> list[LiveRequest]:
        return [r for r in self.requests if r.error is not None]

    def errors(self) -> list[str]:
        """The error line of each failed request, in id order."""
        return [r.error for r in self.requests if r.error is not None]

    def failures(self) -> Counter[str]:
        """The requests not served, counted by kind: each error's kind, and those left unsent."""
        kinds = Counter(map(error_kind, self.errors()))
        if self.unsent:
            kinds[UNSENT] = self.unsent
        return kinds

    def served_line(self) -> str:
        """One line: how many of the workload's requests were served, and the rest by kind, most first."""
        failures = self.failures()
        total = len(self.requests) + self.unsent
        counts = ", ".join(f"{n} {kind}" for kind, n in failures.most_common())
        return f"{total - failures.total()} of {total} requests served" + (f": {counts}" if counts else "")

    def summary(self) -> LiveSummary:
        """The live-only part of a run's summary, JSON-ready."""
        errors = self.errors()
        served = [r for r in self.requests if r.error is None]
        hit_rate, hit_rate_from = self.prefix_cache_hit_rate()
        lags = np.array([r.send_s - r.scheduled_s for r in self.requests])
        gaps = np.fromiter((g for r in served for g in r.gaps_s), float)
        server = self.server
        return {
            "sent": len(self.requests),
            "failed": len(errors),
            "unsent": self.unsent,
            "errors": dict(Counter(map(error_kind, errors)).most_common()),  # by kind, most first
            "first_error": errors[0] if errors else None,
            "short_outputs": sum(r.output_tokens < r.max_tokens for r in served),
            "tokens_from": dict(Counter(r.tokens_from for r in served)),
            "prefix_cache_hit_rate": hit_rate,
            "prefix_cache_from": hit_rate_from,
            "itl_s": stats(gaps),
            "send_lag_s": {"p99": float(np.percentile(lags, 99)), "max": float(lags.max())} if lags.size else None,
            "loadgen_cpu_s": self.loadgen_cpu_s,
            "engine": server.engine if server else None,
            "engine_version": self.engine_version,
            "server_missing": list(server.missing) if server else None,
            "server_scrape_errors": len(server.errors) if server else None,
            "server_counters": server.counter_deltas() if server else None,
        }

    def prefix_cache_hit_rate(self) -> tuple[float | None, str | None]:
        """The share of served prompt tokens found in the server's prefix cache, and where that was read.

        From the responses ("usage") when the server reports cached tokens,
        else from its counters' growth over the run ("server"); (None, None)
        when neither says.
        """
        reported = [
            (r.prompt_tokens, r.cached_tokens) for r in self.requests if r.error is None and r.cached_tokens is not None
        ]
        prompts = sum(prompt for prompt, _ in reported)
        if prompts:
            return sum(cached for _, cached in reported) / prompts, "usage"
        counters = self.server.counter_deltas() if self.server else {}
        if counters.get("prefix_cache_queries_total") and "prefix_cache_hits_total" in counters:
            return counters["prefix_cache_hits_total"] / counters["prefix_cache_queries_total"], "server"
        return None, None


def live_to_dict(run: LiveRun) -> dict[str, object]:
    """The whole live run as plain JSON data (histogram bounds of +inf written "+Inf", as Prometheus does)."""
    server = run.server
    return {
        "requests": [r._asdict() for r in run.requests],
        "unsent": run.unsent,
        "loadgen_cpu_s": run.loadgen_cpu_s,
        "engine_version": run.engine_version,
        "served_model": run.served_model,
        "started_at": run.started_at,
        "server": None
        if server is None
        else {
            "engine": server.engine,
            "errors": server.errors,
            "samples": [
                {"time_s": s.time_s, "values": {k: _value_to_json(v) for k, v in s.values.items()}}
                for s in server.samples
            ],
        },
    }


def live_from_dict(data: dict[str, Any]) -> LiveRun:
    """Inverse of `live_to_dict`."""
    server = data["server"]
    timeline = (
        None
        if server is None
        else MetricsTimeline(
            server["engine"],
            [Sample(s["time_s"], {k: _value_from_json(v) for k, v in s["values"].items()}) for s in server["samples"]],
            list(server["errors"]),
        )
    )
    requests = [LiveRequest(**{**r, "gaps_s": tuple(r["gaps_s"])}) for r in data["requests"]]
    return LiveRun(
        requests,
        data["unsent"],
        data["loadgen_cpu_s"],
        timeline,
        data.get("engine_version"),
        data.get("served_model"),
        data.get("started_at"),
    )


def _value_to_json(value: float | Histogram) -> object:
    if isinstance(value, Histogram):
        return {
            "buckets": [["+Inf" if math.isinf(le) else le, n] for le, n in value.buckets],
            "sum": value.sum,
            "count": value.count,
        }
    return value


def _value_from_json(value: object) -> float | Histogram:
    if isinstance(value, dict):
        buckets = tuple((math.inf if le == "+Inf" else le, n) for le, n in value["buckets"])
        return Histogram(buckets, value["sum"], value["count"])
    if isinstance(value, int | float):
        return value
    raise ValueError(f"live: a metric is a number or a histogram, got {value!r}")
