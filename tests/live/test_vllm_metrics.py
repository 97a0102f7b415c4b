"""pipedeck's scrape of a real vLLM: every vllm:* series it maps is on the page, and what the load generator measures
on the client side agrees with what the server's own histograms and counters say of the same run.

The run is one of pipedeck's own (`run_scenario`, as `pipedeck run --backend live` makes it) on the session's
server, at 2 requests/s, below where this 2-core host saturates. Its first scrape is taken before the first
request and its last after the last one ends, so the differences between them are this run's alone.

Counts agree exactly: requests in each histogram, inter-token gaps, prompt and generated tokens. Means
agree within bounds that allow for where each side starts and stops its clock. vLLM times a request from
the moment its API server has parsed it (the input processor stamps its arrival) to the moment the engine's
output for it reaches the API server; pipedeck times it from the send to the moment the streamed event
arrives. So the client's TTFT and E2E are the server's plus the API server's handling at either end, never
less. On this 2-core host, with other jobs keeping both cores busy, the API server gets the CPU late and
streams a request's tokens in bursts: in ten runs of this test's workload the client's mean TTFT exceeded
the server's by 36-335 ms (the server's was 16-25 ms) and its mean E2E by 19-209 ms. A token that arrives
late shortens the gaps after it and lengthens the one before, so the client's mean TPOT and ITL were 0.11 to
1.54 times the server's: on this host the gaps a client sees say little of the engine's decode speed, and
their bound is loose. The bounds are what this shared host needs; a quiet one would meet tighter ones.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from pipedeck.backends.live import LoadOptions, run_scenario
from pipedeck.backends.live.metrics import TABLE, parse
from pipedeck.backends.live_result import Histogram
from pipedeck.scenarios import load_scenario
from tests.paths import DATA

pytestmark = pytest.mark.vllm
SCENARIO = DATA / "tiny-chat.toml"  # ~96-token prompts, ~24-token answers
RATE, REQUESTS = 2.0, 16
LATER_S = 1.0  # the client's mean TTFT and E2E exceed the server's, by at most this (measured: 19-335 ms)
DECODE_RATIO = (0.1, 2.0)  # the client's mean TPOT and ITL over the server's (measured: 0.11 to 1.54)


def test_every_vllm_series_pipedeck_maps_is_on_the_live_servers_page(vllm_server):
    page = httpx.get(f"{vllm_server.url}/metrics").text
    scrape = parse(page)
    assert scrape.engine == "vllm"
    assert scrape.missing == ("prefix_cache_hit_rate",)  # SGLang's gauge; vLLM counts hits and queries instead
    for series in TABLE:
        for name in [series.vllm] if isinstance(series.vllm, str) else series.vllm or []:
            assert f"\n{name}" in page, name  # by its own name, not an older spelling's


def delta(first: Histogram, last: Histogram) -> tuple[float, float]:
    """What a histogram gained between two scrapes: its count and the mean of the values it observed."""
    count = last.count - first.count
    return count, (last.sum - first.sum) / count


def test_a_runs_client_side_latencies_and_token_counts_agree_with_the_servers_histograms_and_counters(vllm_server):
    result = run_scenario(
        load_scenario(SCENARIO),
        vllm_server.url,
        rate=RATE,
        num_requests=REQUESTS,
        seed=7,
        options=LoadOptions(metrics_interval_s=1.0, fresh_prompts=True),
    )
    live = result.live
    assert live is not None and not live.failed() and len(result.records) == REQUESTS
    first, last = live.server.samples[0].values, live.server.samples[-1].values
    requests = [r for r in live.requests if r.error is None]
    client = {
        "ttft_s": [r.first_token_s - r.send_s for r in requests],
        "tpot_s": [t for rec in result.records if (t := rec.tpot_s) is not None],
        "itl_s": [gap for r in requests for gap in r.gaps_s],
        "e2e_s": [r.end_s - r.send_s for r in requests],
    }
    counters = live.server.counter_deltas()
    assert counters["prompt_tokens_total"] == sum(r.prompt_tokens for r in requests)
    assert counters["generation_tokens_total"] == sum(r.output_tokens for r in requests)
    assert all(len(r.gaps_s) == r.output_tokens - 1 for r in requests)  # one streamed event per token
    means = {}
    for name, values in client.items():
        count, server_mean = delta(first[name], last[name])
        assert count == len(values), name
        means[name] = (float(np.mean(values)), server_mean)
    for name in ("ttft_s", "e2e_s"):
        client_mean, server_mean = means[name]
        assert 0 <= client_mean - server_mean <= LATER_S, (name, means)
    for name in ("tpot_s", "itl_s"):
        client_mean, server_mean = means[name]
        assert DECODE_RATIO[0] <= client_mean / server_mean <= DECODE_RATIO[1], (name, means)
