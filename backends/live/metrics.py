"""The engine's own view of a run: `/metrics` scraped on an interval and mapped to pipedeck's names.

One table maps each engine's Prometheus series to pipedeck's names (live.md,
"Metric names"); the engine is recognised from the series it exposes. A name
the engine does not expose, or did not expose in any scrape, is listed in
`missing`, never reported as 0. Series with several label sets (vLLM's
`engine` label under data parallelism) are summed, except KV use, which is
averaged. A series exported once per pipeline stage (SGLang's scheduler
series carry a `pp_rank` label, each stage counting the same requests) is
read from one stage only, never summed over stages.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..live_result import NAMES, Histogram, MetricsTimeline, Sample

ENGINES = ("vllm", "sglang", "llamacpp")


class Series(NamedTuple):
    """One pipedeck metric and the series each engine exposes it as (None: the engine has none; several: their sum)."""

    name: str
    kind: str  # "sum" or "mean" over label sets, or "histogram"
    vllm: str | tuple[str, ...] | None
    sglang: str | tuple[str, ...] | None
    llamacpp: str | tuple[str, ...] | None


TABLE = (
    Series("running", "sum", "vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    Series("waiting", "sum", "vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    Series("kv_usage", "mean", "vllm:kv_cache_usage_perc", "sglang:token_usage", None),
    Series(
        "prompt_tokens_total",
        "sum",
        "vllm:prompt_tokens_total",
        "sglang:prompt_tokens_total",
        "llamacpp:prompt_tokens_total",
    ),
    Series(
        "generation_tokens_total",
        "sum",
        "vllm:generation_tokens_total",
        "sglang:generation_tokens_total",
        "llamacpp:tokens_predicted_total",
    ),
    Series("preemptions_total", "sum", "vllm:num_preemptions_total", "sglang:num_retracted_requests_total", None),
    # prompt tokens looked up in the prefix cache, and found there; llama-server counts the two apart
    Series(
        "prefix_cache_hits_total", "sum", "vllm:prefix_cache_hits_total", None, "llamacpp:prompt_tokens_cached_total"
    ),
    Series(
        "prefix_cache_queries_total",
        "sum",
        "vllm:prefix_cache_queries_total",
        None,
        ("llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"),
    ),
    Series("prefix_cache_hit_rate", "mean", None, "sglang:cache_hit_rate", None),  # SGLang's last prefill batch's
    Series("ttft_s", "histogram", "vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds", None),
    Series(
        "tpot_s",
        "histogram",
        "vllm:request_time_per_output_token_seconds",
        "sglang:request_time_per_output_token_seconds",
        None,
    ),
    Series("itl_s", "histogram", "vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds", None),
    Series("e2e_s", "histogram", "vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds", None),
    Series("queue_s", "histogram", "vllm:request_queue_time_seconds", "sglang:queue_time_seconds", None),
)
STAGE_LABEL = "pp_rank"  # the pipeline stage a per-stage series belongs to (SGLang's scheduler labels)


class Scrape(NamedTuple):
    """One parsed `/metrics` page: the engine recognised and the pipedeck metrics it gave."""

    engine: str | None
    values: dict[str, float | Histogram]

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(name for name in NAMES if name not in self.values)


def detect_engine(names: Iterable[str]) -> str | None:
    """The engine whose prefix (`vllm:`, `sglang:`, `llamacpp:`) most of the series carry; None if none does."""
    counts = {engine: sum(name.startswith(engine + ":") for name in names) for engine in ENGINES}
    best = max(ENGINES, key=counts.__getitem__)
    return best if counts[best] else None


def _mapped_names() -> frozenset[str]:
    """Every series some engine exposes a pipedeck metric as, by family name (a counter's without `_total`)."""
    names = set()
    for series in TABLE:
        for engine in ENGINES:
            given = getattr(series, engine)
            for name in (given,) if isinstance(given, str) else given or ():
                names |= {name, name.removesuffix("_total")}
    return frozenset(names)


MAPPED = _mapped_names()
SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum", "_created", "_total")


def mapped_lines(text: str) -> str:
    """The lines of an exposition page that belong to a series pipedeck maps (their HELP and TYPE lines too).

    vLLM's page is 50-60 KB, most of it histograms pipedeck does not read; parsing all of it in the load
    generator's event loop held every stream back (1.6 s once, on a 2-core host serving a pipeline), so that
    their tokens reached the client all at once.
    """

    def mapped(line: str) -> bool:
        if line.startswith("#"):
            words = line.split(maxsplit=3)
            return len(words) > 2 and words[2] in MAPPED
        name = line.split("{", 1)[0].split(" ", 1)[0]
        return name in MAPPED or any(name.removesuffix(suffix) in MAPPED for suffix in SAMPLE_SUFFIXES)

    return "".join(line for line in text.splitlines(keepends=True) if mapped(line))


def parse(text: str) -> Scrape:
    """Map one Prometheus exposition page to pipedeck's names; raises ValueError if it is not one."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(mapped_lines(text)):
        for sample in family.samples:
            samples[sample.name].append((sample.labels, sample.value))
    samples = {name: _first_stage(found) for name, found in samples.items()}
    engine = detect_engine(samples)
    values: dict[str, float | Histogram] = {}
    for series in TABLE:
        name = getattr(series, engine) if engine else None
        value = _read(series.kind, name, samples) if name else None
        if value is not None:
            values[series.name] = value
    return Scrape(engine, values)


def _first_stage(found: list[tuple[dict[str, str], float]]) -> list[tuple[dict[str, str], float]]:
    """The label sets of the first pipeline stage, when the series has one per stage; else all of them."""
    stages = {labels[STAGE_LABEL] for labels, _ in found if STAGE_LABEL in labels}
    if not stages:
        return found
    first = min(stages, key=lambda rank: (len(rank), rank))  # "10" after "9": whole numbers in text
    return [(labels, value) for labels, value in found if labels.get(STAGE_LABEL) == first]


def _read(
    kind: str, name: str | tuple[str, ...], samples: dict[str, list[tuple[dict[str, str], float]]]
) -> float | Histogram | None:
    if kind == "histogram":
        if not isinstance(name, str):
            raise TypeError(f"{name}: a histogram is read from one series, not a sum of several")
        return _histogram(name, samples)
    names = (name,) if isinstance(name, str) else name
    if not all(n in samples for n in names):
        return None  # a sum of series is missing when any of them is
    found = [float(value) for n in names for _, value in samples[n]]
    if not found:
        return None
    return sum(found) / len(found) if kind == "mean" else sum(found)


def _histogram(name: str, samples: dict[str, list[tuple[dict[str, str], float]]]) -> Histogram | None:
    counts: dict[float, float] = defaultdict(float)
    for labels, value in samples.get(name + "_bucket", ()):
        counts[float(labels["le"])] += value
    if not counts:
        return None
    total = float(sum(value for _, value in samples.get(name + "_sum", ())))
    count = float(sum(value for _, value in samples.get(name + "_count", ())))
    return Histogram(tuple(sorted(counts.items())), total, count)


async def poll(
    client: httpx.AsyncClient, interval_s: float, stop: asyncio.Event, t0: float, timeline: MetricsTimeline
) -> None:
    """Scrape `/metrics` into `timeline` every `interval_s` until `stop` is set, then once more.

    Times are loop time minus `t0`; `timeline` fills as the run goes, so the
    run's observer can read the latest scrape.
    """
    loop = asyncio.get_running_loop()
    while True:
        await _scrape_into(timeline, client, loop, t0)
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
        except TimeoutError:
            continue
        await _scrape_into(timeline, client, loop, t0)
        return


async def _scrape_into(
    timeline: MetricsTimeline, client: httpx.AsyncClient, loop: asyncio.AbstractEventLoop, t0: float
) -> None:
    """Append one scrape to `timeline`, or one line to its errors if the scrape failed."""
    try:
        response = await client.get("/metrics")
        response.raise_for_status()
        scrape = await asyncio.to_thread(parse, response.text)  # the streams' event loop goes on meanwhile
    except httpx.HTTPStatusError as err:
        timeline.errors.append(f"/metrics: http {err.response.status_code}")
    except httpx.HTTPError as err:
        timeline.errors.append(f"/metrics: {type(err).__name__}: {err}")
    except ValueError as err:
        timeline.errors.append(" ".join(f"/metrics: not Prometheus text: {err}".split()))
    else:
        timeline.engine = timeline.engine or scrape.engine
        timeline.samples.append(Sample(loop.time() - t0, scrape.values))
