"""End to end on a real llama-server: `pipedeck serve` starts it, `pipedeck run --backend live` measures it.

Checks the counts, the monotone timings, that the client's token counts match
the server's own counters, and that a server killed mid-run fails the
requests in flight with one line each, the run still stored, nothing left running.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from pipedeck.backends import ServerLaunch, ServingConfig, make_backend
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore

CPU = dict(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=1, pp=1, chunk=512, max_running=4, kv_capacity=8192)


@pytest.fixture()
def server(llama_server_binary, tiny_model, tmp_path):
    launch = ServerLaunch(
        "llama-server",
        str(tiny_model),
        tmp_path / "server.log",
        program=(str(llama_server_binary),),
        health_timeout_s=30,
    )
    with launch.start(ServingConfig.of(**CPU).resolve()) as running:
        yield running


def test_a_live_run_counts_what_the_server_counted(server, capsys, tmp_path):
    db = tmp_path / "runs.duckdb"
    argv = [
        "run",
        "--backend",
        "live",
        "--endpoint",
        server.url,
        "--scenario",
        "sharegpt",
        "--rate",
        "8",
        "--requests",
        "24",
        "--db",
        str(db),
        "--json",
        *[arg for k, v in CPU.items() for arg in ("--" + k.replace("_", "-"), str(v))],
    ]
    assert run_cli(cli, argv) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 24 and out["live"]["failed"] == 0 and out["server_metrics"]["engine"] == "llamacpp"
    with RunStore.open(db) as store:
        result = store.get_run(out["run_id"]).result
    asked = load_scenario("sharegpt").workload(seed=0, rate=8, num_requests=24).requests
    for request, record in zip(asked, sorted(result.records)):
        assert record.output_tokens == request.output_tokens  # EOS is never sampled: exactly what was asked
        assert record.arrival_s < record.first_token_s <= record.finish_s
    for live in result.live.requests:
        assert all(gap >= 0 for gap in live.gaps_s) and live.tokens_from == "usage"
    counters = out["server_metrics"]["counters"]  # the server's own count of what this run asked of it
    assert counters["generation_tokens_total"] == sum(r.output_tokens for r in result.records)


def test_a_server_killed_mid_run_fails_the_requests_in_flight_with_one_line(server):
    backend = make_backend("live", endpoint=server.url, stall_s=5.0)
    threading.Timer(1.0, lambda: os.kill(server.process.pid, signal.SIGKILL)).start()
    result = backend.run(load_scenario("cnn-reversed"), ServingConfig.of(**CPU), rate=20.0, num_requests=60)
    failed = result.live.failed()
    assert failed and len(result.records) + len(failed) + result.live.unsent == 60
    assert all("\n" not in r.error for r in failed)
    assert {r.error.split(":")[0] for r in failed} <= {
        "connection refused",
        "connect",
        "stream broken",
        "http 500",
        "ended early",
    }
    assert server.process.wait(5) == -signal.SIGKILL


def test_the_prefix_cache_hit_rate_falls_when_each_rate_draws_fresh_prompts(server):
    def hit_rate(rate: float, fresh: bool) -> float:
        backend = make_backend("live", endpoint=server.url, fresh_prompts=fresh)
        live = backend.run(load_scenario("sharegpt"), ServingConfig.of(**CPU), rate=rate, num_requests=8).live.summary()
        assert live["failed"] == 0 and live["prefix_cache_from"] == "usage"  # llama-server's cached_tokens
        return live["prefix_cache_hit_rate"]

    first, replayed, fresh = hit_rate(4.0, False), hit_rate(8.0, False), hit_rate(16.0, True)
    assert first < 0.1 and fresh < 0.1  # prompts it has not seen
    assert replayed > 0.5, replayed  # the first rate's prompts again: served from its cache


def test_the_launched_slots_share_one_context_pool(server):
    """--parallel with --kv-unified: every slot may use the whole --ctx-size, as llama-server's own default."""
    log = server.log_path.read_text()
    assert "n_slots = 4, n_ctx_slot = 8192, kv_unified = 'true'" in log, log[-2000:]
