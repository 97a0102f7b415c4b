"""Profiling a live run: the server's profiler started and stopped around the workload, this run's traces waited
for and read, and the measured timeline in the RunResult, the store, `show`, `compare` and `--timeline`.

The mock server (and the fake engine launched with vLLM's --profiler-config) answers /start_profile and
/stop_profile and writes stand-in worker traces a moment after the stop (backends/live/mock_profiler.py); the
real vLLM's are read in test_rank_trace.py.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

from pipedeck.backends import ConfigError, RunResult, ServingConfig, make_backend
from pipedeck.backends.live.launcher import server_command
from pipedeck.backends.live.profiling import POLL_S, ProfileError, ProfileSession, Profiling
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore
from tests.mock_program import mock_program
from tests.paths import DATA, TESTS

TINY = load_scenario(str(DATA / "tiny-chat.toml"))
OLD_TRACES = TESTS / "backends" / "live" / "data" / "vllm-cpu-pp2"
FAKE = f"{sys.executable} {DATA / 'fake_engine.py'}"
PP2 = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=1, pp=2, chunk=512)


def profiled_run(url: str, folder: Path, config: ServingConfig | None = None) -> RunResult:
    backend = make_backend("live", endpoint=url, profile_dir=str(folder), profile_wait_s=30)
    assert backend.capabilities.timeline
    backend.check()
    return backend.run(TINY, config, rate=20, seed=1, num_requests=4)


def test_a_profiled_run_gets_the_timeline_of_its_own_traces(tmp_path):
    folder = tmp_path / "profile"
    shutil.copytree(OLD_TRACES, folder)  # an earlier run's traces: not this run's
    with mock_program("--token-s", "0.002", "--profile-dir", str(folder)) as url:
        result = profiled_run(url, folder, PP2)
    assert [r.rank for r in result.ranks] == [0, 1]
    for rank in result.ranks:
        assert rank.compute + rank.exposed_comm + rank.bubble + rank.idle == pytest.approx(result.makespan_s)
    tokens = sum(r.output_tokens for r in result.records)
    assert (result.steps, result.chunks, result.stage_executions) == (tokens, 4, 2 * tokens)
    assert all(0 <= s.start < s.end <= result.makespan_s for s in result.spans)
    # the mock notes on the wall clock when each completion arrived and starts its prefill step then (or when
    # rank 0 is next free, a few 0.5 ms steps later): after the client sent it, so the traces and the run share
    # one clock
    prefills = sorted(s.start for s in result.spans if s.kind == "prefill" and s.rank == 0)
    for record, start in zip(sorted(result.records, key=lambda r: r.arrival_s), prefills, strict=True):
        assert record.arrival_s <= start < record.arrival_s + 0.05
    assert result.live is not None and result.live.started_at is not None
    assert len(list(folder.glob("rank*.pt.trace.json.gz"))) == 4  # two old, two new: the old left alone


def test_a_run_that_keeps_no_timeline_keeps_the_time_split(tmp_path):
    with mock_program("--profile-dir", str(tmp_path)) as url:
        backend = make_backend("live", endpoint=url, profile_dir=str(tmp_path), profile_wait_s=30)
        result = backend.run(TINY, None, rate=20, num_requests=2, timeline=False)
    assert not result.spans and len(result.ranks) == 2 and result.steps


def test_a_server_without_a_profiler_fails_the_run_in_one_line(tmp_path):
    with mock_program() as url, pytest.raises(ProfileError) as failed:
        profiled_run(url, tmp_path)
    assert str(failed.value) == (
        f"profile: the server has no profiler (POST {url}/start_profile answered 404); start it with one writing "
        f"to {tmp_path} (pipedeck serve --profile-dir, or vLLM's --profiler-config torch_profiler_dir)"
    )


def test_traces_that_never_come_fail_the_run_after_the_wait(tmp_path):
    elsewhere, here = tmp_path / "server", tmp_path / "pipedeck"
    elsewhere.mkdir()
    here.mkdir()
    with mock_program("--profile-dir", str(elsewhere)) as url:
        backend = make_backend("live", endpoint=url, profile_dir=str(here), profile_wait_s=2)
        with pytest.raises(ProfileError, match=rf"^profile: no new trace came to {here} within 2 s of /stop_profile$"):
            backend.run(TINY, None, rate=20, num_requests=2)


def test_the_run_s_config_says_how_many_pipeline_ranks_to_wait_for(tmp_path):
    with mock_program("--profile-dir", str(tmp_path)) as url:
        backend = make_backend("live", endpoint=url, profile_dir=str(tmp_path), profile_wait_s=3)
        with pytest.raises(ProfileError, match=r"^profile: traces of 2 of the 4 pipeline ranks came to .* within 3 s"):
            backend.run(TINY, PP2.replace(pp=4), rate=20, num_requests=2)


def test_traces_are_taken_once_written_whole(tmp_path):
    """A trace still being written (a gzip cut short) is waited for, not read."""
    whole = (OLD_TRACES / "rank0.1796662330093570477.pt.trace.json.gz").read_bytes()
    target = tmp_path / "rank0.1.pt.trace.json.gz"
    session = ProfileSession(Profiling(tmp_path, wait_s=30))
    now = [0.0]
    writes = iter([whole[:2000], whole[:4000], whole])

    def sleep(seconds: float) -> None:  # between polls the worker writes a little more
        now[0] += seconds
        target.write_bytes(next(writes, whole))

    target.write_bytes(whole[:100])
    traces = session.traces(1, clock=lambda: now[0], sleep=sleep)
    assert [t.path for t in traces] == [target] and len(traces[0].steps) == 96
    assert now[0] == 4 * POLL_S  # three polls saw it grow; the fourth found it as the third had left it


def test_the_profile_folder_must_exist_for_a_server_at_an_endpoint(tmp_path):
    with pytest.raises(ConfigError, match=r"^profile_dir: no folder .*missing; give the one the server's profiler"):
        make_backend("live", endpoint="http://127.0.0.1:9", profile_dir=str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=r"^profile_wait_s: a positive number of seconds, got 0$"):
        make_backend("live", endpoint="http://127.0.0.1:9", profile_dir=str(tmp_path), profile_wait_s=0)


def test_vllm_is_launched_with_its_torch_profiler_writing_to_the_folder(tmp_path):
    argv, _ = server_command(None, "vllm", "m", "127.0.0.1", 8000, profile_dir=Path("traces"))
    settings = json.loads(argv[argv.index("--profiler-config") + 1])
    assert settings == {
        "profiler": "torch",
        "torch_profiler_dir": str(Path("traces").absolute()),
        "torch_profiler_with_stack": False,
    }
    with pytest.raises(ConfigError, match=r"^profile_dir: llama-server writes no profiler traces pipedeck reads; "):
        server_command(None, "llama-server", "m.gguf", "127.0.0.1", 1, profile_dir=tmp_path)


def test_a_launched_server_is_profiled_on_every_run(model, tmp_path):
    backend = make_backend(
        "live",
        launch="vllm",
        model_path=str(model),
        program=FAKE,
        log_dir=str(tmp_path / "logs"),
        health_timeout_s=20,
        profile_dir=str(tmp_path / "traces"),
        profile_wait_s=30,
    )
    try:
        first = backend.run(TINY, PP2, rate=20, num_requests=2)
        second = backend.run(TINY, PP2, rate=40, num_requests=3)  # the same server, its next traces
    finally:
        backend.close()
    assert first.spans and second.spans and second.chunks == 3
    assert len(list((tmp_path / "traces").glob("rank*.pt.trace.json.gz"))) == 4
    with pytest.raises(ConfigError, match=r"^profile_dir: llama-server writes no profiler traces"):
        make_backend("live", launch="llama-server", model_path=str(model), program=FAKE, profile_dir=str(tmp_path))


def test_run_show_compare_and_timeline_draw_a_measured_run_beside_a_simulated_one(capsys, tmp_path):
    db, folder = tmp_path / "runs.duckdb", tmp_path / "profile"
    folder.mkdir()
    common = ["--model", "qwen2.5-14b", "--hardware", "a100-40g-pcie", "--pp", "2", "--db", str(db)]
    workload = ["--scenario", str(DATA / "tiny-chat.toml"), "--requests", "4", "--rate", "20"]
    with mock_program("--token-s", "0.002", "--profile-dir", str(folder)) as url:
        argv = ["run", "--backend", "live", "--endpoint", url, "--profile-dir", str(folder), *common, *workload]
        assert run_cli(cli, [*argv, "--timeline", str(tmp_path / "t.json"), "--json"]) == 0
    live = json.loads(capsys.readouterr().out)
    assert live["bubble_ratio"] is not None and len(live["per_rank"]) == 2
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("cat") == "prefill"} >= {"s0 prefill b0", "s1 prefill b0"}
    assert run_cli(cli, ["simulate", *common, *workload, "--json"]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert run_cli(cli, ["show", str(live["run_id"]), "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "time per rank (s), measured by the engine's profiler" in shown and "bubble ratio" in shown
    with RunStore.open(db, read_only=True) as store:
        assert store.count_spans(live["run_id"]) == len(store.get_run(live["run_id"]).result.spans) > 0
    page = tmp_path / "compare.html"
    compare = ["compare", str(live["run_id"]), str(simulated["run_id"]), "--db", str(db), "--out", str(page)]
    assert run_cli(cli, compare) == 0
    html = page.read_text()
    assert f"run {live['run_id']} live (measured): all " in html and "measured prefill \\u002f mixed step" in html
    assert "A measured timeline (a live run, from the engine&#x27;s profiler) names no request" in html
    assert "Not shown" not in html  # both runs have a per-rank timeline


def test_profile_dir_is_for_a_backend_that_drives_a_server_and_an_engine_that_profiles(capsys, tmp_path):
    assert run_cli(cli, ["run", "--profile-dir", str(tmp_path), "--no-store"]) == 2
    assert "the sim backend has no profiler to start; it is for --backend live" in capsys.readouterr().err
    serve = ["serve", "--engine", "llama-server", "--model-path", "m.gguf", "--profile-dir", str(tmp_path / "p")]
    assert run_cli(cli, [*serve, "--program", FAKE, "--log", str(tmp_path / "serve.log")]) == 2
    assert capsys.readouterr().err.startswith(
        "pipedeck: error: profile_dir: llama-server writes no profiler traces pipedeck reads; engines that do: "
    )
    assert not (tmp_path / "serve.log").exists() and not (tmp_path / "p").exists()  # refused before any start


def test_a_plain_json_trace_is_read_as_a_gzipped_one(tmp_path):
    plain = tmp_path / "rank0.pt.trace.json"
    plain.write_bytes(gzip.decompress((OLD_TRACES / "rank0.1796662330093570477.pt.trace.json.gz").read_bytes()))
    session = ProfileSession(Profiling(tmp_path, wait_s=5))
    [trace] = session.traces(None, sleep=lambda s: None)
    assert trace.path == plain and len(trace.sends) == 96
