"""The load generator against the in-process mock server on 127.0.0.1: counts, timings, schedules and faults."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from pipedeck.backends import ConfigError, RunCancelled, RunObserver
from pipedeck.backends.live import (
    LoadOptions,
    ServerUnreachable,
    replay,
    run_result,
    run_scenario,
)
from pipedeck.backends.live.client import _event, _Stream
from pipedeck.backends.live.loadgen import _body
from pipedeck.backends.live.mock_server import MOCK_ERROR, Behaviour, MockServer
from pipedeck.backends.live.prompts import text_prompt, token_prompt, token_range
from pipedeck.backends.live_result import LiveRequest, LiveRun
from pipedeck.scenarios import Request, Workload, load_scenario

QUIET = {"model": "mock", "token_ids": (100, 1000), "metrics_interval_s": None}


def workload(n: int, gap_s: float = 0.0, output: int = 4, concurrency: int | None = None) -> Workload:
    return Workload(tuple(Request(i, i * gap_s, 16, output) for i in range(n)), concurrency)


def drive(behaviour: Behaviour, load: Workload, observer: RunObserver | None = None, **options):
    """Replay `load` against a fresh mock; return the LiveRun and the mock."""

    async def main():
        mock = MockServer(behaviour)
        async with mock as url:
            live = await replay(load, url, LoadOptions(**{**QUIET, **options}), observer=observer)
        return live, mock

    return asyncio.run(main())


def test_every_request_is_served_with_monotone_times_and_the_server_count_of_tokens():
    live, mock = drive(Behaviour(first_token_s=0.01, token_s=0.005), workload(6, 0.01, output=5))
    assert mock.completions == 6 and live.unsent == 0 and live.failed() == []
    assert [r.id for r in live.requests] == list(range(6))
    for r in live.requests:
        assert 0 <= r.scheduled_s <= r.send_s < r.first_token_s <= r.end_s
        assert (r.output_tokens, r.max_tokens, r.tokens_from, len(r.gaps_s)) == (5, 5, "usage", 4)
        assert all(g >= 0 for g in r.gaps_s)
        assert r.end_s - r.first_token_s == pytest.approx(sum(r.gaps_s))


def test_ttft_tpot_and_gaps_match_the_servers_delays():
    live, _ = drive(Behaviour(first_token_s=0.06, token_s=0.02), workload(3, output=6, concurrency=1))
    result = run_result(live, "mock", {}, 0, None)
    for record, r in zip(result.records, live.requests, strict=True):
        # at least the server's delays (a busy machine only adds to them: no upper bound on wall time)
        assert record.ttft_s >= 0.06 and record.tpot_s >= 0.02  # TPOT: (E2E - TTFT) / (output - 1)
        assert record.tpot_s == pytest.approx(sum(r.gaps_s) / 5)
        assert min(r.gaps_s) >= 0.015


def test_open_loop_sends_on_schedule_while_the_server_is_slow():
    live, _ = drive(Behaviour(first_token_s=0.5), workload(10, gap_s=0.02, output=2))
    assert live.failed() == []
    last_send = max(r.send_s for r in live.requests)
    # each sent at its arrival time, not when an earlier one finished: all 10 out before any answer came back
    assert last_send < min(r.first_token_s for r in live.requests)


def test_closed_loop_keeps_at_most_concurrency_requests_in_flight():
    live, mock = drive(Behaviour(first_token_s=0.03), workload(6, output=2, concurrency=2))
    assert mock.completions == 6 and live.failed() == []
    sends = [r.send_s for r in live.requests]  # in flight at each send: those sent before and not yet ended
    assert max(sum(o.send_s <= t < o.end_s for o in live.requests) for t in sends) <= 2
    first_two_end = sorted(r.end_s for r in live.requests)[0]
    assert live.requests[2].send_s >= first_two_end


@pytest.mark.parametrize(
    "fault, kind",
    [
        ("http500", "http 500: "),
        ("die", "stream broken: "),
        ("stall", "stalled: no event for 0.2 s after 1 token event"),
        ("malformed", "malformed stream: not JSON: "),
        ("truncate", "ended early: the stream closed without [DONE] after 1 token event"),
    ],
)
def test_each_fault_is_one_line_on_its_request_and_the_others_are_served(fault, kind):
    live, _ = drive(Behaviour(fault=fault, fault_every=2, fault_after=1), workload(4, output=3), stall_s=0.2)
    failed = live.failed()
    assert [r.id for r in failed] == [0, 2] or len(failed) == 2
    for r in failed:
        assert r.error.startswith(kind) and "\n" not in r.error
    served = [r for r in live.requests if r.error is None]
    assert len(served) == 2 and all(r.output_tokens == 3 for r in served)
    result = run_result(live, "mock", {}, 0, None)
    summary = json.loads(json.dumps(result.summary()))
    assert summary["requests"] == 2 and summary["live"]["failed"] == 2
    assert summary["live"]["first_error"].startswith(kind)


def test_a_refused_connection_fails_each_request_without_raising():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    live = asyncio.run(replay(workload(3), f"http://127.0.0.1:{port}", LoadOptions(**QUIET)))
    assert len(live.failed()) == 3 and all(r.error.startswith("connection refused: ") for r in live.requests)
    assert live.served_line() == "0 of 3 requests served: 3 connection refused"
    result = run_result(live, "down", {}, 0, None)
    assert result.records == [] and result.summary()["ttft_s"] is None  # nothing measured, not 0


def test_an_unreachable_server_without_a_model_name_is_one_clear_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ServerUnreachable, match=r"^endpoint: .*v1/models lists no model"):
        asyncio.run(replay(workload(1), f"http://127.0.0.1:{port}", LoadOptions(metrics_interval_s=None)))


def test_several_tokens_per_event_are_counted_from_usage_else_from_events():
    live, _ = drive(Behaviour(tokens_per_event=3), workload(2, output=7))
    assert [(r.output_tokens, r.tokens_from, len(r.gaps_s)) for r in live.requests] == [(7, "usage", 2)] * 2
    live, _ = drive(Behaviour(tokens_per_event=3, usage=False), workload(2, output=7))
    assert [(r.output_tokens, r.tokens_from) for r in live.requests] == [(3, "events")] * 2
    assert live.summary()["short_outputs"] == 2 and live.summary()["tokens_from"] == {"events": 2}


def test_the_run_time_limit_fails_streams_in_flight_and_leaves_later_requests_unsent():
    load = Workload((Request(0, 0.0, 16, 50), Request(1, 5.0, 16, 2)))
    live, mock = drive(Behaviour(token_s=0.02), load, max_duration_s=0.3)
    assert mock.completions == 1 and live.unsent == 1
    (only,) = live.requests
    assert only.error.startswith("run time limit: still streaming after ") and only.end_s >= 0.3
    events = int(only.error.removeprefix("run time limit: still streaming after ").split()[0])
    assert events < 50  # cut at the limit: the server had not sent all 50 tokens


def test_model_and_vocabulary_come_from_the_server_and_bound_the_prompt_ids():
    live, _ = drive(Behaviour(n_vocab=500), workload(2), model=None, token_ids=None)
    assert live.failed() == []
    assert token_range(None, 500) == (100, 500) and token_range(None, None) == (100, 1000)
    with pytest.raises(ConfigError, match="token_ids"):
        drive(Behaviour(n_vocab=500), workload(1), model=None, token_ids=(100, 800))


def test_prompts_are_reproducible_and_of_the_requested_length():
    ids = token_prompt(7, 3, 64, (100, 200))
    assert ids == token_prompt(7, 3, 64, (100, 200)) != token_prompt(8, 3, 64, (100, 200))
    assert len(ids) == 64 and all(100 <= i < 200 for i in ids)
    text = text_prompt(7, 3, 20)
    assert text == text_prompt(7, 3, 20) and len(text.split()) == 20


def test_text_prompts_are_sent_when_asked():
    live, mock = drive(Behaviour(), workload(2), prompt="text")
    assert live.failed() == [] and mock.prompt_tokens == 32  # the mock counts words


def test_the_observer_sees_each_served_request_and_can_stop_the_run():
    class Stopper(RunObserver):
        def __init__(self):
            self.done = []

        def request_done(self, record):
            self.done.append(record.id)

        def should_stop(self):
            return len(self.done) >= 2

    observer = Stopper()
    with pytest.raises(RunCancelled):
        drive(Behaviour(), workload(50, gap_s=0.05), observer=observer)
    assert observer.done[:2] == [0, 1] and len(observer.done) < 50


class SnapshotRecorder(RunObserver):
    def __init__(self):
        self.snapshots = []

    def snapshot(self, snap):
        self.snapshots.append(snap)


def test_the_observer_hears_progress_and_the_servers_gauges_while_the_run_goes():
    observer = SnapshotRecorder()
    # 6 requests at once, each streaming for about 1.2 s: the server has 6 running for most of the run
    live, _ = drive(Behaviour(token_s=0.1), workload(6, output=12), observer=observer, metrics_interval_s=0.1)
    snaps = observer.snapshots
    assert len(snaps) >= 2 and [s.time_s for s in snaps] == sorted(s.time_s for s in snaps)
    assert [s.done for s in snaps] == sorted(s.done for s in snaps) and snaps[-1].done <= 6
    assert max(s.running for s in snaps if s.running is not None) == 6  # llamacpp:requests_processing
    assert {s.waiting for s in snaps[1:]} == {0}  # llamacpp:requests_deferred
    assert {s.kv_used for s in snaps} == {None}  # llama-server has no KV series: unknown, not 0
    assert live.failed() == []


def test_without_scraping_the_servers_gauges_are_unknown():
    observer = SnapshotRecorder()
    drive(Behaviour(token_s=0.05), workload(2, output=12), observer=observer)
    assert observer.snapshots and {(s.running, s.waiting, s.kv_used) for s in observer.snapshots} == {(None,) * 3}


def test_a_scenario_run_scrapes_the_server_and_fills_a_run_result():
    async def main():
        async with MockServer() as url:
            return await asyncio.to_thread(
                run_scenario,
                load_scenario("sharegpt"),
                url,
                rate=50.0,
                num_requests=8,
                options=LoadOptions(metrics_interval_s=0.02),
                config={"model": "mock"},
            )

    result = asyncio.run(main())
    assert result.backend == "live" and len(result.records) == 8 and result.ranks == [] and result.spans == []
    assert (result.steps, result.chunks, result.stage_executions, result.preemptions) == (None, None, None, None)
    summary = json.loads(json.dumps(result.summary()))
    assert summary["breakdown_s"] is None and summary["bubble_ratio"] is None and summary["per_rank"] == []
    live = summary["live"]
    assert live["engine"] == "llamacpp" and "kv_usage" in live["server_missing"]
    assert live["engine_version"] == "llama.cpp b0-mock"  # from the build llama-server reports at /props
    assert live["server_counters"]["generation_tokens_total"] == sum(r.output_tokens for r in result.records)


def test_options_are_checked_before_anything_is_sent():
    with pytest.raises(ConfigError, match="prompt"):
        LoadOptions(prompt="ids")
    with pytest.raises(ConfigError, match="stall_s"):
        LoadOptions(stall_s=0)


def test_server_error_events_in_either_shape_are_read_as_errors():
    for payload in (
        b'{"error": {"message": "out of KV cache", "code": 500}}',
        b'{"object": "error", "message": "out of KV cache", "code": 500}',
    ):
        assert _event(payload, _Stream(), 0.0) == "server error: out of KV cache"


def failed(i: int, error: str) -> LiveRequest:
    return LiveRequest(i, 0.0, 0.0, None, 0.1, 16, 4, 0, "events", (), error=error)


def test_the_requests_not_served_are_counted_by_kind_most_first_with_the_unsent():
    refused = [failed(i, "connection refused: [Errno 111] Connect call failed") for i in range(2, 49)]
    live = LiveRun([failed(0, "http 400: too long"), failed(1, "http 400: too long"), *refused], 0, 0.0)
    assert live.served_line() == "0 of 49 requests served: 47 connection refused, 2 http 400"
    assert live.summary()["errors"] == {"connection refused": 47, "http 400": 2}
    served = LiveRequest(9, 0.0, 0.0, 0.05, 0.1, 16, 4, 4, "usage", (0.02,) * 3)
    assert LiveRun([served, failed(1, "stalled: no event")], 3, 0.0).served_line() == (
        "1 of 5 requests served: 3 not sent (run time limit), 1 stalled"
    )
    assert LiveRun([served], 0, 0.0).served_line() == "1 of 1 requests served"


def test_an_http_error_line_keeps_the_servers_whole_message_on_one_line():
    live, _ = drive(Behaviour(fault="http500"), workload(1))
    (only,) = live.requests
    assert only.error == f"http 500: {MOCK_ERROR}" and len(MOCK_ERROR) > 200


def test_every_event_with_a_choice_is_a_token_time_as_vllm_bench_serve_counts_them():
    stream = _Stream()
    events = [
        (1.0, {"choices": [{"text": "Hello"}]}),
        (2.0, {"choices": [{"text": ""}]}),  # a token with no text yet
        (4.0, {"choices": [{"text": " a b c"}]}),
        (5.0, {"choices": [{"text": "", "finish_reason": "length"}]}),
        (6.0, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7}}),
    ]  # usage: no token
    for now, event in events:
        assert _event(json.dumps(event).encode(), stream, now) is None
    assert stream.times == [1.0, 2.0, 4.0, 5.0] and stream.text_events == 2
    assert stream.usage == {"prompt_tokens": 3, "completion_tokens": 7}


def test_blank_and_multi_token_events_give_a_gap_each_and_tpot_from_the_servers_token_count():
    # 8 tokens in 4 events of 2, every second one with no text: vLLM's client takes a time at each of the 4
    live, _ = drive(Behaviour(token_s=0.03, tokens_per_event=2, blank_every=2), workload(2, output=8))
    result = run_result(live, "mock", {}, 0, None)
    for r, record in zip(live.requests, result.records, strict=True):
        assert (r.output_tokens, r.tokens_from, len(r.gaps_s)) == (8, "usage", 3)
        assert min(r.gaps_s) >= 0.025 and r.end_s - r.first_token_s == pytest.approx(sum(r.gaps_s))
        assert record.tpot_s == pytest.approx(sum(r.gaps_s) / 7)  # (E2E - TTFT) / (usage tokens - 1)
    live, _ = drive(Behaviour(tokens_per_event=2, blank_every=2, usage=False), workload(1, output=8))
    assert (live.requests[0].output_tokens, live.requests[0].tokens_from) == (2, "events")  # events with text


def test_prompts_are_drawn_afresh_for_each_rate_when_asked_and_else_replayed():
    request, ids = Request(3, 0.0, 64, 4), (100, 1000)
    assert _body(request, "m", ids, 0, fresh_at=None) == _body(request, "m", ids, 0, fresh_at=None)
    at_2, at_4 = _body(request, "m", ids, 0, fresh_at=2.0), _body(request, "m", ids, 0, fresh_at=4.0)
    assert len({at_2, at_4, _body(request, "m", ids, 0, fresh_at=None)}) == 3
    assert at_2 == _body(request, "m", ids, 0, fresh_at=2.0)  # seeded: the same rate draws the same prompts
    first = [json.loads(at)["prompt"][0] for at in (at_2, at_4)]
    assert len(set(first)) == 2  # they differ from the first token on: no prefix in common
    assert (
        json.loads(_body(request, "m", None, 0, fresh_at=2.0))["prompt"]
        != json.loads(_body(request, "m", None, 0, fresh_at=4.0))["prompt"]
    )  # text prompts too


def test_the_prefix_cache_hit_rate_comes_from_usage_and_fresh_prompts_defeat_the_cache():
    async def main():
        async with MockServer(Behaviour()) as url:
            runs = []
            for rate, fresh in ((2.0, False), (4.0, False), (8.0, True)):
                options = LoadOptions(**{**QUIET, "metrics_interval_s": 0.02, "fresh_prompts": fresh})
                runs.append(
                    await asyncio.to_thread(
                        run_scenario, load_scenario("sharegpt"), url, rate=rate * 10, num_requests=6, options=options
                    )
                )
            return runs

    first, replayed, fresh = (run.live.summary() for run in asyncio.run(main()))
    assert (first["prefix_cache_hit_rate"], first["prefix_cache_from"]) == (0.0, "usage")
    assert replayed["prefix_cache_hit_rate"] == 1.0  # the same prompts again: the mock served them from its cache
    assert fresh["prefix_cache_hit_rate"] == 0.0
    counters = replayed["server_counters"]  # the mock's /metrics agree (llama-server's series)
    assert counters["prefix_cache_hits_total"] == counters["prefix_cache_queries_total"] > 0


def test_without_usage_details_the_hit_rate_comes_from_the_servers_counters_or_is_unknown():
    live, _ = drive(Behaviour(usage=False), workload(2), metrics_interval_s=0.02)
    assert (live.summary()["prefix_cache_hit_rate"], live.summary()["prefix_cache_from"]) == (0.0, "server")
    live, _ = drive(Behaviour(usage=False), workload(2))
    assert (live.summary()["prefix_cache_hit_rate"], live.summary()["prefix_cache_from"]) == (None, None)
