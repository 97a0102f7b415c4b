"""What a live run measures beyond pipedeck's common records: every request as the client saw it."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..result import RequestRecord, stats
from .metrics import Histogram, MetricsTimeline, Sample


class LiveRequest(NamedTuple):
    """One request as the load generator saw it; times in seconds from the start of the run.

    `scheduled_s` is when the workload said to send it (closed loop: when a
    slot freed). `output_tokens` is what the server returned:
    `usage.completion_tokens` when it sent usage (`tokens_from` "usage"), else
    the SSE events that carried text ("events"; an event may carry several
    tokens on some servers). `gaps_s` are the gaps between those events.
    `error` is one line when the request failed, else None; `end_s` is then
    when the failure was seen.
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

    def record(self) -> RequestRecord | None:
        """The common record (arrival = send time) of a served request; None if it failed."""
        if self.error is not None or self.first_token_s is None:
            return None
        return RequestRecord(self.id, self.send_s, self.prompt_tokens, self.output_tokens, self.first_token_s,
                             self.end_s)


@dataclass
class LiveRun:
    """Every request a live run sent, the ones it could not send in time, and the server's metrics."""

    requests: list[LiveRequest]  # in id order
    unsent: int  # workload requests whose time came after the run's time limit
    loadgen_cpu_s: float  # CPU seconds the load generator's process used during the run
    server: MetricsTimeline | None = None  # None when /metrics was not scraped
    engine_version: str | None = None  # "<engine> <version>" as the server reported it; None: it did not say
    served_model: str | None = None  # the model name the requests asked for (/v1/models' first, or as named)

    def described(self) -> dict[str, object]:
        """What the server said of itself, as a run's config when none was given: its model name and engine.

        Nothing else is known of a server started elsewhere (hardware, parallelism), so nothing else is said.
        """
        engine = self.engine_version.split()[0] if self.engine_version else None
        return {key: value for key, value in (("model", self.served_model), ("engine", engine)) if value}

    def failed(self) -> list[LiveRequest]:
        return [r for r in self.requests if r.error is not None]

    def summary(self) -> dict[str, object]:
        """The live-only part of a run's summary, JSON-ready."""
        failed = self.failed()
        served = [r for r in self.requests if r.error is None]
        lags = np.array([r.send_s - r.scheduled_s for r in self.requests])
        gaps = np.fromiter((g for r in served for g in r.gaps_s), float)
        server = self.server
        return {
            "sent": len(self.requests),
            "failed": len(failed),
            "unsent": self.unsent,
            "errors": dict(Counter(r.error.split(":")[0] for r in failed)),
            "first_error": failed[0].error if failed else None,
            "short_outputs": sum(r.output_tokens < r.max_tokens for r in served),
            "tokens_from": dict(Counter(r.tokens_from for r in served)),
            "itl_s": stats(gaps),
            "send_lag_s": {"p99": float(np.percentile(lags, 99)), "max": float(lags.max())} if lags.size else None,
            "loadgen_cpu_s": self.loadgen_cpu_s,
            "engine": server.engine if server else None,
            "engine_version": self.engine_version,
            "server_missing": list(server.missing) if server else None,
            "server_scrape_errors": len(server.errors) if server else None,
            "server_counters": server.counter_deltas() if server else None,
        }



def live_to_dict(run: LiveRun) -> dict[str, object]:
    """The whole live run as plain JSON data (histogram bounds of +inf written "+Inf", as Prometheus does)."""
    server = run.server
    return {
        "requests": [r._asdict() for r in run.requests], "unsent": run.unsent, "loadgen_cpu_s": run.loadgen_cpu_s,
        "engine_version": run.engine_version, "served_model": run.served_model,
        "server": None if server is None else {
            "engine": server.engine, "errors": server.errors,
            "samples": [{"time_s": s.time_s, "values": {k: _value_to_json(v) for k, v in s.values.items()}}
                        for s in server.samples]},
    }


def live_from_dict(data: dict) -> LiveRun:
    """Inverse of `live_to_dict`."""
    server = data["server"]
    timeline = None if server is None else MetricsTimeline(
        server["engine"], [Sample(s["time_s"], {k: _value_from_json(v) for k, v in s["values"].items()})
                           for s in server["samples"]], list(server["errors"]))
    requests = [LiveRequest(**{**r, "gaps_s": tuple(r["gaps_s"])}) for r in data["requests"]]
    return LiveRun(requests, data["unsent"], data["loadgen_cpu_s"], timeline, data.get("engine_version"),
                   data.get("served_model"))


def _value_to_json(value: float | Histogram) -> object:
    if isinstance(value, Histogram):
        return {"buckets": [["+Inf" if math.isinf(le) else le, n] for le, n in value.buckets],
                "sum": value.sum, "count": value.count}
    return value


def _value_from_json(value: object) -> float | Histogram:
    if isinstance(value, dict):
        buckets = tuple((math.inf if le == "+Inf" else le, n) for le, n in value["buckets"])
        return Histogram(buckets, value["sum"], value["count"])
    return value  # type: ignore[return-value]
