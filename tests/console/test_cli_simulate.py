"""`pipedeck simulate`: JSON and table output, Chrome-trace timelines, one-line input errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipedeck.backends import MODES, TRANSFER_KINDS, ServingConfig
from pipedeck.backends import footprint as memory
from pipedeck.backends.sim import SimBackend, footprint
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.console.options import DEFAULT_SCENARIO
from pipedeck.scenarios import load_scenario

QWEN = ["--model", "qwen2.5-14b", "--hardware", "a100-40g-pcie"]
SHORT = ["simulate", "--scenario", "short-4k", "--requests", "8", *QWEN, "--tp", "2", "--pp", "2"]
AZURE = ["simulate", "--scenario", "azure-conv", "--requests", "40", *QWEN, "--tp", "2", "--pp", "2"]
STATS = {"mean", "p50", "p90", "p99"}


def run(capsys, argv):
    """Run the CLI in-process; return (status, stdout, stderr)."""
    status = run_cli(cli, argv)
    out, err = capsys.readouterr()
    return status, out, err


def run_json(capsys, argv):
    status, out, err = run(capsys, [*argv, "--json"])
    assert status == 0, err
    return json.loads(out), out


# -- --json ---------------------------------------------------------------------


def test_json_has_the_documented_keys(capsys):
    data, _ = run_json(capsys, SHORT)
    for key in ("ttft_s", "tpot_s"):
        assert set(data[key]) >= STATS
        assert data[key]["p50"] <= data[key]["p90"] <= data[key]["p99"]
    assert data["ttft_s"]["mean"] > 0 and data["tpot_s"]["mean"] > 0
    assert data["throughput_tok_s"] > 0 and data["makespan_s"] > 0
    assert data["steps"] > 0 and data["chunks"] > 0
    assert set(data["breakdown_s"]) >= {"compute", "bubble", "exposed_comm"}
    assert 0 <= data["bubble_ratio"] < 1
    assert data["requests"] == 8
    assert [r["rank"] for r in data["per_rank"]] == [0, 1]
    # throughput is all tokens over the makespan: 8 x (4096 + 128)
    assert data["throughput_tok_s"] == pytest.approx(8 * (4096 + 128) / data["makespan_s"])


def test_json_config_is_fully_resolved(capsys):
    data, _ = run_json(capsys, [*SHORT, "--mode", "vpp", "--chunk", "4k"])
    config = data["config"]
    assert config["model"] == "qwen2.5-14b" and config["hardware"] == "a100-40g-pcie"
    assert config["tp"] == 2 and config["pp"] == 2 and config["mode"] == "vpp"
    assert config["chunk"] == 4096
    assert config["virtual_stages"] == 2
    assert config["layer_split"] == [12, 12, 12, 12]
    assert isinstance(config["kv_capacity"], int) and config["kv_capacity"] > 0
    assert set(config) >= {"smooth_factor", "min_chunk", "max_running"}


def test_json_layer_split_flag_is_honoured(capsys):
    data, _ = run_json(capsys, ["simulate", "--scenario", "long-64k", "--layer-split", "30,31"])
    assert data["config"]["layer_split"] == [30, 31]
    assert data["config"]["model"] == "deepseek-v3.1" and data["config"]["tp"] == 8


@pytest.mark.parametrize("argv", [SHORT, [*AZURE, "--mode", "vpp-sync"], ["simulate", "--scenario", "long-64k"]])
def test_json_breakdown_sums_to_makespan_per_rank(capsys, argv):
    data, _ = run_json(capsys, argv)
    makespan = data["makespan_s"]
    for r in data["per_rank"]:
        assert min(r["compute"], r["exposed_comm"], r["bubble"], r["idle"]) >= 0
        total = r["compute"] + r["exposed_comm"] + r["bubble"] + r["idle"]
        assert total == pytest.approx(makespan, rel=1e-6)
    mean = data["breakdown_s"]
    assert mean["compute"] + mean["exposed_comm"] + mean["bubble"] + mean["idle"] == pytest.approx(makespan, rel=1e-6)
    assert data["bubble_ratio"] == pytest.approx(mean["bubble"] / makespan)


def test_one_rank_has_no_bubble_its_waits_between_steps_are_idle(capsys):
    """pp=1 has no pipeline: the time the rank waits for the host's next step is idle, and the bubble ratio n/a."""
    argv = ["simulate", "--scenario", "azure-conv", "--requests", "40", *QWEN, "--tp", "2", "--pp", "1", "--no-store"]
    data, _ = run_json(capsys, argv)
    [rank] = data["per_rank"]
    assert rank["bubble"] == 0 and data["bubble_ratio"] is None
    assert rank["idle"] > 0.01 * data["makespan_s"]  # 40 steps' host overhead at least
    assert rank["compute"] + rank["exposed_comm"] + rank["idle"] == pytest.approx(data["makespan_s"], rel=1e-9)
    status, out, _ = run(capsys, argv)
    assert status == 0 and "bubble ratio n/a (one rank: no pipeline)" in out


def test_same_seed_gives_identical_json(capsys):
    _, first = run_json(capsys, [*AZURE, "--seed", "3", "--no-store"])  # stored, each run gets its own run_id
    _, second = run_json(capsys, [*AZURE, "--seed", "3", "--no-store"])
    assert first == second


def test_different_seed_gives_different_latencies(capsys):
    a, _ = run_json(capsys, [*AZURE, "--seed", "0"])
    b, _ = run_json(capsys, [*AZURE, "--seed", "1"])
    assert a["seed"] == 0 and b["seed"] == 1
    assert a["ttft_s"] != b["ttft_s"]
    assert a["tpot_s"] != b["tpot_s"]


def test_rate_changes_an_open_loop_run(capsys):
    slow, _ = run_json(capsys, [*AZURE, "--rate", "0.5"])
    fast, _ = run_json(capsys, [*AZURE, "--rate", "50"])
    assert slow["rate"] == 0.5 and fast["rate"] == 50
    assert slow["makespan_s"] > fast["makespan_s"]
    assert slow["breakdown_s"]["idle"] > fast["breakdown_s"]["idle"]


def test_run_on_the_simulator_is_simulate(capsys):
    """`run --backend sim` runs what `simulate` runs, on the same default scenario `tune` tunes on."""
    argv = [*QWEN, "--tp", "2", "--pp", "2", "--requests", "20", "--no-store"]
    simulated, _ = run_json(capsys, ["simulate", *argv])
    ran, _ = run_json(capsys, ["run", "--backend", "sim", *argv])
    assert ran == simulated
    assert simulated["scenario"] == DEFAULT_SCENARIO


def test_run_refuses_in_one_line_a_knob_its_backend_does_not_read_before_asking_any_server(capsys):
    """A live server runs as its engine was launched: a knob only the simulator's scheduler reads would be recorded
    as if it had run. Nothing listens on port 9, so the refusal comes before any request."""
    live = ["run", "--backend", "live", "--endpoint", "http://127.0.0.1:9", "--requests", "2", "--no-store"]
    status, out, err = run(capsys, [*live, "--sticky-decodes"])
    assert (status, out) == (2, "")
    assert err == (
        "pipedeck: error: sticky_decodes: set to on, but the live backend does not read it "
        "(no serving engine is launched with it); backends that read it: sim\n"
    )
    status, _, err = run(capsys, [*live, "--mode", "dcpp", "--smooth-factor", "0.5"])  # vLLM-Ascend is launched with it
    assert status == 1 and "lists no model" in err  # past the knobs, to the server that is not there
    assert (
        run(
            capsys, ["run", "--backend", "sim", *QWEN, "--tp", "2", "--requests", "4", "--sticky-decodes", "--no-store"]
        )[0]
        == 0
    )


# -- --timeline ----------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_timeline_writes_chrome_trace(capsys, tmp_path, extra):
    path = tmp_path / "trace.json"
    status, out, err = run(capsys, [*SHORT, "--mode", "vpp-sync", "--timeline", str(path), *extra])
    assert status == 0, err
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete
    assert {e["tid"] for e in complete} == {0, 1}
    threads = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {0: "rank 0", 1: "rank 1"}
    for e in complete:
        assert e["dur"] >= 0 and e["ts"] >= 0
        assert e["args"]["kind"] in {"prefill", "decode", "mixed"} | TRANSFER_KINDS
    # microseconds: the last event ends at the makespan
    if extra:
        makespan = json.loads(out)["makespan_s"]
    else:
        assert f"timeline: {path}" in out
        makespan = None
    end_us = max(e["ts"] + e["dur"] for e in complete)
    if makespan is not None:
        assert end_us == pytest.approx(makespan * 1e6, rel=1e-9)
    else:
        assert 1e6 < end_us < 1e9  # seconds-long run: microseconds, not seconds or nanoseconds
    stages = {(e["tid"], e["args"]["stage"]) for e in complete if e["args"]["kind"] not in TRANSFER_KINDS}
    assert stages == {(0, 0), (0, 3), (1, 1), (1, 2)}


def test_no_timeline_file_without_the_flag(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, _, _ = run(capsys, SHORT)
    assert status == 0
    assert list(tmp_path.iterdir()) == []


# -- tables -----------------------------------------------------------------------------


def test_table_output_mentions_latency_and_per_rank_table(capsys):
    status, out, err = run(capsys, SHORT)
    assert status == 0 and err == ""
    assert "TTFT" in out and "TPOT" in out
    assert "time per rank" in out
    for col in ("rank", "compute", "bubble", "idle", "exposed comm"):
        assert col in out
    assert "bubble ratio" in out
    assert "qwen2.5-14b" in out and "short-4k" in out


def test_a_pipe_gets_plain_columns_a_script_can_split(capsys, monkeypatch):
    """Piped (no terminal, no $COLUMNS): a row per line, a cell per whitespace-separated field, no box drawing;
    the cells are the --json figures as the table rounds them."""
    monkeypatch.delenv("COLUMNS", raising=False)
    data, _ = run_json(capsys, SHORT)
    status, out, _ = run(capsys, SHORT)
    assert status == 0 and not set(out) & set("│┃━─┏┗")
    rows = {fields[0]: fields[1:] for fields in map(str.split, out.splitlines()) if fields}
    assert rows["metric"] == ["mean", "p50", "p90", "p99"]
    for key in ("ttft_s", "tpot_s"):
        assert rows[key[:4].upper()] == [f"{data[key][k]:.4g}" for k in ("mean", "p50", "p90", "p99")]
    assert rows["rank"] == ["compute", "exposed", "comm", "bubble", "idle"]
    for rank in data["per_rank"]:
        assert rows[str(rank["rank"])] == [f"{rank[k]:.3f}" for k in ("compute", "exposed_comm", "bubble", "idle")]
    assert rows["mean"] == [f"{data['breakdown_s'][k]:.3f}" for k in ("compute", "exposed_comm", "bubble", "idle")]


# -- warnings: the run goes ahead ------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, warning",
    [
        (
            [
                "simulate",
                "--scenario",
                "long-64k",
                "--requests",
                "1",
                "--chunk",
                "100",
                "--hardware",
                "h100-sxm",
                "--model",
                "qwen2.5-14b",
                "--tp",
                "2",
                "--pp",
                "2",
            ],
            "chunk: 100 tokens is below the 128-token GEMM tile of h100-sxm: every step pays for a whole tile",
        ),
        (
            [*SHORT, "--chunk", "48k"],
            "chunk: 48k tokens is above the 32k-token context of qwen2.5-14b (max_position_embeddings)",
        ),
    ],
)
def test_an_odd_chunk_is_warned_about_in_one_line_and_runs(capsys, argv, warning):
    status, out, err = run(capsys, [*argv, "--no-store", "--json"])
    data = json.loads(out)
    assert status == 0 and data["requests"] > 0 and data["config"]["chunk"] in (100, 48 * 1024)
    assert len(err.splitlines()) == 1 and err.startswith(f"pipedeck: warning: {warning}")


def test_an_ordinary_chunk_warns_nothing(capsys):
    status, _, err = run(capsys, [*SHORT, "--no-store", "--json"])
    assert status == 0 and err == ""


# -- input errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, field",
    [
        (["simulate", "--mode", "nope"], "mode"),
        (["simulate", "--chunk", "0"], "chunk"),
        (["simulate", "--chunk", "12q"], "chunk"),
        (["simulate", "--tp", "3"], "tp"),
        (["simulate", "--layer-split", "30,30"], "layer_split"),
        (["simulate", "--layer-split", "a,b"], "layer_split"),
        (["simulate", "--scenario", "nope"], "scenario"),
        (["simulate", "--scenario", "azure-conv", "--rate", "-1"], "rate"),
        (["simulate", "--model", "nope"], "model"),
        (["simulate", "--hardware", "nope"], "hardware"),
        (["simulate", "--smooth-factor", "2"], "smooth_factor"),
        (["simulate", "--requests", "0"], "num_requests"),
        (["simulate", "--scenario", "short-4k", "--rate", "2"], "rate"),
        (["simulate", "--scenario", "long-64k", "--kv-capacity", "1000"], "kv_capacity"),
        (["simulate", "--tp", "x"], "--tp"),
        (["simulate", "--model", "./missing.toml"], "model: no such file ./missing.toml"),
        (["simulate", "--hardware", "./x.toml"], "hardware: no such file ./x.toml"),
        (["simulate", "--scenario", "./x.csv"], "scenario: no such file ./x.csv"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, field):
    status, out, err = run(capsys, argv)
    assert status == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pipedeck: error: ")
    assert field in lines[0]
    assert "Traceback" not in err


def test_bad_input_messages_are_exact(capsys):
    cases = {
        ("--mode", "nope"): "pipedeck: error: mode: unknown mode 'nope'; allowed: " + ", ".join(MODES),
        ("--chunk", "12q"): "pipedeck: error: chunk: expected a token count such as 24k or 24576, got '12q'",
        ("--chunk", "0"): "pipedeck: error: chunk: must be a positive token count, got '0'",
        (
            "--layer-split",
            "a,b",
        ): "pipedeck: error: layer_split: expected comma-separated layer counts such as 31,30, got 'a,b'",
        ("--layer-split", "30,30"): "pipedeck: error: layer_split: must sum to deepseek-v3.1's 61 layers, got 60",
    }
    for args, line in cases.items():
        status, _, err = run(capsys, ["simulate", *args])
        assert status == 2
        assert err == line + "\n"


def test_bad_config_fails_before_any_work(capsys, tmp_path):
    path = tmp_path / "trace.json"
    status, _, _ = run(capsys, ["simulate", "--tp", "3", "--timeline", str(path)])
    assert status == 2
    assert not path.exists()


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_non_finite_chunk_is_one_line_exit_2(capsys, value):
    status = run_cli(cli, ["simulate", "--scenario", "long-64k", "--chunk", value])
    _, err = capsys.readouterr()
    assert status == 2
    assert err.startswith("pipedeck: error: chunk: ")


def test_unwritable_timeline_is_one_line_exit_2(capsys, tmp_path):
    target = tmp_path / "missing-dir" / "trace.json"
    status = run_cli(cli, ["simulate", "--scenario", "long-64k", "--timeline", str(target)])
    _, err = capsys.readouterr()
    assert status == 2
    assert err.startswith("pipedeck: error: ") and len(err.splitlines()) == 1


# -- help ----------------------------------------------------------------------------------


def test_group_help(capsys):
    status, out, _ = run(capsys, ["--help"])
    assert status == 0
    assert "simulate" in out and "Usage: pipedeck" in out


def test_simulate_help_lists_every_flag(capsys):
    status, out, _ = run(capsys, ["simulate", "--help"])
    assert status == 0
    for flag in (
        "--model",
        "--hardware",
        "--tp",
        "--pp",
        "--mode",
        "--chunk",
        "--layer-split",
        "--scenario",
        "--rate",
        "--requests",
        "--seed",
        "--smooth-factor",
        "--min-chunk",
        "--json",
        "--timeline",
    ):
        assert flag in out, flag
    unwrapped = re.sub(r"-\s*\n\s*", "-", out)  # help text may wrap a mode name at its hyphen
    for mode in MODES:
        assert mode in unwrapped, mode


# -- the installed console script -------------------------------------------------------


def test_installed_console_script_prints_json():
    exe = shutil.which("pipedeck") or str(Path(sys.executable).with_name("pipedeck"))
    assert Path(exe).exists(), "the pipedeck console script is not installed"
    proc = subprocess.run(
        [exe, "simulate", "--scenario", "long-64k", "--json"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["scenario"] == "long-64k" and data["requests"] == 1
    assert data["ttft_s"]["mean"] == pytest.approx(data["makespan_s"])  # one prompt, one output token
    assert data["tpot_s"] is None  # one output token: nothing decoded, no TPOT (not 0)
    assert data["config"]["layer_split"] == [31, 30]


def test_installed_console_script_error_exit_status():
    exe = shutil.which("pipedeck") or str(Path(sys.executable).with_name("pipedeck"))
    proc = subprocess.run([exe, "simulate", "--mode", "nope"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("pipedeck: error: mode: ") and len(proc.stderr.splitlines()) == 1


# -- memory: estimated and checked before a run -------------------------------------------------------


def test_too_many_requests_are_refused_before_any_work_with_the_estimate(capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 20e9)
    start = time.process_time()
    status, out, err = run(capsys, ["simulate", "--scenario", "azure-conv", "--requests", "99999999", "--no-store"])
    assert time.process_time() - start < 5  # refused before drawing a hundred million requests
    assert status == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(
        "pipedeck: error: requests: 99999999 requests need about 62.5 GB or more to simulate "
        f"({footprint.REQUEST_BYTES} B a request, measured by benchmarks/sim_memory.py), "
        "more than the 20.0 GB available; use fewer requests"
    )


def test_the_estimate_counts_timeline_spans_from_the_chunk(monkeypatch):
    """long-64k at chunk 10 takes 6554 steps a prompt: its timeline needs far more than at chunk 8k."""
    scenario = load_scenario("long-64k")
    fine, tiny = (ServingConfig.of(chunk=c).resolve() for c in (8192, 10))
    bare = footprint.footprint(scenario, fine, 100, timeline=False)
    assert bare == 100 * footprint.REQUEST_BYTES
    spans = (footprint.footprint(scenario, fine, 100) - bare) / footprint.SPAN_BYTES
    assert spans == pytest.approx(100 * 8 * 4)  # 8 chunks a prompt, each a span per stage and a send and a recv
    assert (footprint.footprint(scenario, tiny, 100) - bare) / footprint.SPAN_BYTES == pytest.approx(100 * 6554 * 4)
    monkeypatch.setattr(memory, "available_bytes", lambda: 1e9)
    with pytest.raises(memory.FootprintError, match=r"^requests: 100 requests need about 1\.1 GB or more"):
        SimBackend().run(scenario, tiny, num_requests=100)  # the Python API is checked too
    monkeypatch.setattr(memory, "available_bytes", lambda: None)  # unknown: no check
    memory.check_footprint("sim", scenario, tiny, num_requests=10**9)


def test_tune_checks_the_footprint_of_its_workload_first(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "available_bytes", lambda: 1e9)
    status, _, err = run(
        capsys,
        [
            "tune",
            "--scenario",
            "azure-conv",
            "--requests",
            "2000000",
            "--slo",
            "ttft=2s",
            "--db",
            str(tmp_path / "t.duckdb"),
        ],
    )
    assert status == 2 and err.startswith("pipedeck: error: requests: 2000000 requests need about 1.2 GB or more")
