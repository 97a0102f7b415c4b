"""The /metrics mapping on hand-written expositions of each engine (names from live.md), and the poller."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import httpx
import pytest

from pipedeck.backends import Sample
from pipedeck.backends.live.metrics import NAMES, TABLE, Histogram, MetricsTimeline, parse, poll

FIXTURES = Path(__file__).parent / "fixtures"


def scrape(name: str):
    return parse((FIXTURES / f"{name}.txt").read_text())


def test_vllm_sums_engines_averages_kv_and_reads_every_histogram():
    got = scrape("vllm")
    assert got.engine == "vllm" and got.missing == ("prefix_cache_hit_rate",)  # SGLang's gauge; vLLM counts
    v = got.values
    assert (v["running"], v["waiting"], v["kv_usage"]) == (5.0, 8.0, 0.5)  # two DP engines: sums, KV mean
    assert (v["prompt_tokens_total"], v["generation_tokens_total"], v["preemptions_total"]) == (20000, 2000, 4)
    assert v["ttft_s"] == Histogram(((0.1, 3.0), (1.0, 14.0), (math.inf, 16.0)), 8.0, 16.0)
    assert (v["tpot_s"].count, v["itl_s"].sum, v["e2e_s"].sum, v["queue_s"].sum) == (10, 59.7, 64.2, 1.25)
    assert (v["prefix_cache_hits_total"], v["prefix_cache_queries_total"]) == (5000.0, 20000.0)


def test_vllm_removed_names_are_never_read():
    got = scrape("vllm_removed_names")
    assert got.engine == "vllm" and got.values == {"running": 1.0}
    assert {"kv_usage", "tpot_s"} <= set(got.missing)
    used = {s.vllm for s in TABLE}
    assert not used & {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"}


def test_sglang_maps_token_usage_to_kv_and_its_cache_hit_rate_and_a_page_without_retractions_lacks_preemptions():
    got = scrape("sglang")
    assert got.engine == "sglang"
    assert set(got.missing) == {"preemptions_total", "prefix_cache_hits_total", "prefix_cache_queries_total"}
    v = got.values
    assert (v["running"], v["waiting"], v["kv_usage"]) == (12.0, 3.0, 0.28)
    assert v["prefix_cache_hit_rate"] == 0.007507552643049313  # the last prefill batch's, as SGLang reports it
    assert v["generation_tokens_total"] == 7557572.0 and v["queue_s"].buckets[0] == (1.0, 6.9e6)


def test_sglang_with_pipeline_stages_reads_one_stage_not_their_sum():
    got = scrape("sglang_pp")  # SGLang's scheduler labels: model_name, engine_type, tp_rank, pp_rank
    v = got.values
    assert (v["running"], v["waiting"], v["kv_usage"]) == (10.0, 4.0, 0.3)  # stage 0, as it counts them
    assert v["queue_s"] == Histogram(((1.0, 9.0), (math.inf, 10.0)), 3.5, 10.0)
    assert (v["prompt_tokens_total"], v["generation_tokens_total"]) == (5000.0, 800.0)  # no stage label: as is


def test_sglang_retracted_requests_are_its_preemptions():
    got = scrape("sglang_pp")
    assert got.values["preemptions_total"] == 7.0 and "preemptions_total" not in got.missing
    assert {s.name: s.sglang for s in TABLE}["preemptions_total"] == "sglang:num_retracted_requests_total"


def test_llamacpp_has_queue_and_tokens_only_and_the_rest_is_missing_not_zero():
    got = scrape("llamacpp")
    assert got.engine == "llamacpp"
    assert got.values == {
        "running": 2.0,
        "waiting": 5.0,
        "prompt_tokens_total": 6886.0,
        "generation_tokens_total": 3469.0,
        "prefix_cache_hits_total": 2114.0,
        "prefix_cache_queries_total": 2114.0 + 6886.0,
    }  # its prompt count leaves out cached tokens
    assert set(got.missing) == {
        "kv_usage",
        "preemptions_total",
        "ttft_s",
        "tpot_s",
        "itl_s",
        "e2e_s",
        "queue_s",
        "prefix_cache_hit_rate",
    }
    assert all(isinstance(value, float) for value in got.values.values())


def test_a_page_of_no_known_engine_reports_everything_missing():
    got = parse("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n")
    assert got.engine is None and got.values == {} and got.missing == NAMES


def test_text_that_is_not_prometheus_raises_value_error():
    with pytest.raises(ValueError):
        parse('vllm:num_requests_running{engine="0" 3\n')


def test_timeline_counters_are_the_last_value_and_the_growth_since_the_first_scrape():
    timeline = MetricsTimeline(
        "vllm",
        [
            Sample(0.0, {"running": 1.0, "generation_tokens_total": 100.0}),
            Sample(1.0, {"generation_tokens_total": 160.0, "preemptions_total": 2.0}),
            Sample(2.0, {"generation_tokens_total": 250.0, "preemptions_total": 5.0}),
        ],
    )
    assert timeline.final_counters() == {"generation_tokens_total": 250.0, "preemptions_total": 5.0}
    assert timeline.counter_deltas() == {"generation_tokens_total": 150.0, "preemptions_total": 3.0}
    assert "running" not in timeline.missing and "kv_usage" in timeline.missing


def test_poll_keeps_scraping_past_failures_and_scrapes_once_more_on_stop():
    pages = iter(
        [
            httpx.Response(200, text="llamacpp:tokens_predicted_total 10\nllamacpp:requests_processing 1\n"),
            httpx.Response(500, text="boom"),
            httpx.Response(200, text="llamacpp:requests_processing{ 1\n"),
        ]
    )

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/metrics"
        return next(pages, httpx.Response(200, text="llamacpp:tokens_predicted_total 42\n"))

    async def main() -> MetricsTimeline:
        transport = httpx.MockTransport(answer)
        async with httpx.AsyncClient(base_url="http://127.0.0.1:9", transport=transport) as client:
            stop, timeline = asyncio.Event(), MetricsTimeline()
            task = asyncio.create_task(poll(client, 0.01, stop, asyncio.get_running_loop().time(), timeline))
            await asyncio.sleep(0.1)
            assert timeline.samples, "scrapes are visible while the poll runs"
            stop.set()
            await task
            return timeline

    timeline = asyncio.run(main())
    assert timeline.engine == "llamacpp" and len(timeline.samples) >= 2
    assert timeline.errors[0] == "/metrics: http 500"
    assert timeline.errors[1].startswith("/metrics: not Prometheus text") and "\n" not in timeline.errors[1]
    assert timeline.counter_deltas() == {"generation_tokens_total": 32.0}
    times = [s.time_s for s in timeline.samples]
    assert times == sorted(times) and times[0] >= 0
