"""`pipedeck export`: serve.sh, the engine YAML and pipedeck-best.json for vLLM-Ascend, vLLM and SGLang."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipedeck.backends import ENGINES, ExportError, ServingConfig, ServingEngine, profiles
from pipedeck.backends.launch import Flag, Launch, ModeSupport, Release, register_support
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore
from pipedeck.tuner import best_from_json, export_best, write_export
from pipedeck.tuner.export import BestConfig
from tests.large_cpu_host import LARGE_CPU_HOST

QWEN = dict(model="qwen2.5-14b", hardware="a100-40g-pcie")  # 48 layers, HF id Qwen/Qwen2.5-14B-Instruct
DSV3 = dict(model="deepseek-v3.1", hardware="ascend-910c", tp=8)  # 61 layers
SLO = {"ttft": {"limit_s": 2.0, "percentile": 90.0}, "tpot": {"limit_s": 0.2, "percentile": 90.0}}
METRICS = {"goodput_rps": 1.5, "attainment": 0.97, "ttft_p90_s": 1.2, "tpot_p90_s": 0.11}
VPP_MODES = ("vpp-sync", "vpp-async", "vpp")


def best(**config) -> BestConfig:
    """A BestConfig around a resolved config, with provenance as a study would give it."""
    return BestConfig(ServingConfig.of(**config).resolve(), METRICS, "s1", 7, "long-128k", SLO, 3)


def export(tmp_path: Path, engine: str, version: str | None = None, **config) -> dict[str, Path]:
    """Export into tmp_path/engine and return the written files by name."""
    paths = write_export(best(**config), engine, tmp_path / engine, version)
    return {p.name: p for p in paths}


def parse_script(path: Path) -> tuple[dict[str, str], list[str]]:
    """The `export K=V` environment and the launch argv (without `exec` and the trailing "$@")."""
    lines = path.read_text().splitlines()
    env = dict(shlex.split(line[len("export ") :])[0].split("=", 1) for line in lines if line.startswith("export "))
    start = next(i for i, line in enumerate(lines) if line.startswith("exec "))
    argv = shlex.split(" ".join(line.rstrip("\\") for line in lines[start:]))
    assert argv[0] == "exec" and argv[-1] == "$@"
    return env, argv[1:-1]


def options(argv: list[str]) -> dict[str, object]:
    """--flag value pairs; a bare switch maps to True."""
    found: dict[str, object] = {}
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            found[arg] = argv[i + 1] if has_value else True
    return found


def yaml_view(argv_options: dict[str, object]) -> dict[str, object]:
    """What the YAML must hold for these options: --no-X is X: false, numbers are numbers."""
    view: dict[str, object] = {}
    for flag, value in argv_options.items():
        if value is True and flag.startswith("--no-"):
            view[flag[5:]] = False
        else:
            view[flag[2:]] = int(value) if isinstance(value, str) and value.isdigit() else value
    return view


# -- vLLM and vLLM-Ascend -------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "vllm-ascend"])
def test_vllm_flags_carry_tp_pp_chunk_and_max_seqs(tmp_path, engine):
    env, argv = parse_script(export(tmp_path, engine, **QWEN, tp=2, pp=2, chunk=16384, max_running=64)["serve.sh"])
    assert argv[:3] == ["vllm", "serve", "${MODEL:-Qwen/Qwen2.5-14B-Instruct}"]
    assert options(argv) == {
        "--tensor-parallel-size": "2",
        "--pipeline-parallel-size": "2",
        "--max-num-batched-tokens": "16384",
        "--enable-chunked-prefill": True,
        "--max-num-seqs": "64",
    }
    assert "VLLM_PP_LAYER_PARTITION" not in env  # 24,24 is vLLM's own split


def test_vllm_ascend_sets_the_ascend_environment_but_keeps_operator_values(tmp_path):
    text = export(tmp_path, "vllm-ascend", **DSV3, pp=2)["serve.sh"].read_text()
    assert 'export HCCL_OP_EXPANSION_MODE="${HCCL_OP_EXPANSION_MODE:-AIV}"' in text
    assert 'export PYTORCH_NPU_ALLOC_CONF="${PYTORCH_NPU_ALLOC_CONF:-expandable_segments:True}"' in text
    assert 'export TASK_QUEUE_ENABLE="${TASK_QUEUE_ENABLE:-1}"' in text
    for name in ("ASCEND_RT_VISIBLE_DEVICES", "HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        assert f"# export {name}=" in text
    assert "HCCL_OP_EXPANSION_MODE" not in export(tmp_path, "vllm", **DSV3, pp=2)["serve.sh"].read_text()


@pytest.mark.parametrize(
    "engine, variable",
    [
        ("vllm", "VLLM_PP_LAYER_PARTITION"),
        ("vllm-ascend", "VLLM_PP_LAYER_PARTITION"),
        ("sglang", "SGLANG_PP_LAYER_PARTITION"),
    ],
)
def test_uneven_split_is_the_partition_env_per_pp_rank(tmp_path, engine, variable):
    env, _ = parse_script(export(tmp_path, engine, **DSV3, pp=2, layer_split=(32, 29))["serve.sh"])
    assert env[variable] == "32,29"
    env, _ = parse_script(export(tmp_path, engine, **QWEN, tp=1, pp=4, layer_split=(14, 12, 12, 10))["serve.sh"])
    assert env[variable] == "14,12,12,10"


@pytest.mark.parametrize("engine", ["vllm", "vllm-ascend"])
def test_vllms_default_split_writes_no_partition_env(tmp_path, engine):
    # deepseek-v3.1: 61 layers over 2 ranks -> vLLM's default 31,30
    env, _ = parse_script(export(tmp_path, engine, **DSV3, pp=2, layer_split=(31, 30))["serve.sh"])
    assert "VLLM_PP_LAYER_PARTITION" not in env


def test_sglang_leaves_only_an_exact_split_implicit(tmp_path):
    env, _ = parse_script(export(tmp_path, "sglang", **QWEN, tp=2, pp=4, layer_split=(12, 12, 12, 12))["serve.sh"])
    assert "SGLANG_PP_LAYER_PARTITION" not in env
    # SGLang's own default for 61 layers on 2 ranks is 30,31, so vLLM's 31,30 must be spelled out
    env, _ = parse_script(export(tmp_path, "sglang", **DSV3, pp=2, layer_split=(31, 30))["serve.sh"])
    assert env["SGLANG_PP_LAYER_PARTITION"] == "31,30"


DCPP_SETTINGS = {
    "profiling_chunk_config": {"enabled": True, "smooth_factor": 0.8, "min_chunk": 2048},
    "enable_balance_scheduling": False,
}


@pytest.mark.parametrize(
    "version, expected",
    [
        (None, DCPP_SETTINGS),  # 0.23.0, the newest release, reads only the top-level keys
        ("0.23.0", DCPP_SETTINGS),
        ("0.25.1rc1", {"scheduler_config": DCPP_SETTINGS}),  # reads scheduler_config first
    ],
)
def test_dcpp_on_vllm_ascend_puts_profiling_chunk_config_where_the_release_reads_it(tmp_path, version, expected):
    _env, argv = parse_script(
        export(
            tmp_path, "vllm-ascend", version, **DSV3, pp=2, mode="dcpp", chunk=32768, smooth_factor=0.8, min_chunk=2048
        )["serve.sh"]
    )
    flags = options(argv)
    assert json.loads(flags["--additional-config"]) == expected
    assert flags["--no-async-scheduling"] is True
    assert flags["--max-num-batched-tokens"] == "32768" and flags["--enable-chunked-prefill"] is True


def test_dcpp_whose_min_chunk_reaches_the_chunk_is_exported_as_the_cpp_it_is(tmp_path):
    """Its floor is the whole chunk, so it never shrinks one: the launch is plain chunked prefill, and says why."""
    files = export(tmp_path, "vllm-ascend", **DSV3, pp=2, mode="dcpp", chunk=2048, min_chunk=4096)
    text = files["serve.sh"].read_text()
    assert 'profiling_chunk_config":' not in text and "--no-async-scheduling" not in text
    notes = [line for line in text.splitlines() if "In force" in line]
    assert notes == [
        "# In force: mode cpp. It sets dcpp with min_chunk 4096 >= chunk 2048, so it never shrinks "
        "a chunk and runs as cpp."
    ], text
    record = json.loads(files["pipedeck-best.json"].read_text())
    assert record["config"]["mode"] == "cpp" and record["config"]["min_chunk"] == ServingConfig().dcpp.min_chunk


@pytest.mark.parametrize("mode", VPP_MODES)
@pytest.mark.parametrize("pp, split", [(2, None), (2, (14, 16, 17, 14)), (4, (8, 7, 8, 7, 8, 8, 8, 7))])
def test_vpp_env_and_ranges_cover_every_layer_in_execution_order(tmp_path, mode, pp, split):
    config = ServingConfig.of(**DSV3, pp=pp, mode=mode, layer_split=split).resolve()
    path = export(tmp_path, "vllm-ascend", **DSV3, pp=pp, mode=mode, layer_split=split)["serve.sh"]
    env, argv = parse_script(path)
    assert env["ENABLE_VPP"] == "true" and "VLLM_PP_LAYER_PARTITION" not in env
    settings = json.loads(options(argv)["--additional-config"])
    assert settings["virtual_pipeline_parallel_size"] == 2
    ranges = settings["vpp_layer_ranges"]
    assert len(ranges) == pp and all(len(per_rank) == 2 for per_rank in ranges)
    # walk the fold-back: stage i runs on rank i, then back from rank pp-1 to rank 0
    seen = [0] * pp
    executed = []
    for rank in config.stage_ranks:
        executed.append(ranges[rank][seen[rank]])
        seen[rank] += 1
    assert executed[0][0] == 0 and executed[-1][1] == 61
    assert all(a[1] == b[0] for a, b in itertools.pairwise(executed))
    assert [end - start for start, end in executed] == list(config.parallelism.layer_split)


@pytest.mark.parametrize("mode", VPP_MODES)
def test_vpp_export_warns_about_the_development_branch_and_names_the_variant(tmp_path, mode):
    text = export(tmp_path, "vllm-ascend", **DSV3, pp=2, mode=mode)["serve.sh"].read_text()
    assert "WARNING: this launch needs vLLM-Ascend's VPP development branch" in text
    assert f"VPP variant chosen: {mode} (of vpp-sync, vpp-async, vpp)" in text


def test_a_cpu_host_config_exports_vllms_cpu_build_as_its_api_server_module(tmp_path, four_cores):
    cpu = {**QWEN, "hardware": LARGE_CPU_HOST, "tp": 1, "pp": 2, "layer_split": (30, 18), "kv_capacity": 8192}
    files = export(tmp_path, "vllm", **cpu, chunk=256)
    env, argv = parse_script(files["serve.sh"])
    module = ["python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[:5] == [*module, "--model", "${MODEL:-Qwen/Qwen2.5-14B-Instruct}"]
    assert options(argv)["--kv-cache-memory-bytes"] == str(8192 * 4096 * 30)  # 4 KiB a token and layer, 30 layers
    assert env == {
        "VLLM_PP_LAYER_PARTITION": "30,18",
        "VLLM_CPU_OMP_THREADS_BIND": "${VLLM_CPU_OMP_THREADS_BIND:-0-1|2-3}",
    }
    text = files["serve.sh"].read_text()
    assert "WARNING" not in text  # a cpu profile on vLLM's CPU build: what was simulated is what runs
    assert (
        "# Run: python -m vllm.entrypoints.openai.api_server --config vllm-config.yaml"
        in files["vllm-config.yaml"].read_text()
    )


# -- SGLang ---------------------------------------------------------------------------


def test_sglang_flags(tmp_path):
    env, argv = parse_script(export(tmp_path, "sglang", **QWEN, tp=2, pp=2, chunk=4096, max_running=32)["serve.sh"])
    assert argv[:5] == ["python", "-m", "sglang.launch_server", "--model-path", "${MODEL:-Qwen/Qwen2.5-14B-Instruct}"]
    assert options(argv) == {
        "--model-path": "${MODEL:-Qwen/Qwen2.5-14B-Instruct}",
        "--tp-size": "2",
        "--pp-size": "2",
        "--chunked-prefill-size": "4096",
        "--max-running-requests": "32",
        "--enable-mixed-chunk": True,
        "--enable-metrics": True,
    }
    assert env == {}


def test_sglang_mixes_decodes_in_exactly_when_the_config_did(tmp_path):
    sglang = dict(**QWEN, tp=2, pp=2, sticky_decodes=True)
    unmixed = export(tmp_path / "a", "sglang", **sglang, mixed_batches=False, decode_in_budget=False)
    assert "--enable-mixed-chunk" not in options(parse_script(unmixed["serve.sh"])[1])
    assert "cannot match" not in unmixed["serve.sh"].read_text()
    mismatched = export(tmp_path / "b", "sglang", **sglang, decode_in_budget=False)["serve.sh"].read_text()
    assert (
        "simulated with decode_in_budget=off, mixed_batches=on and sticky_decodes=on, which SGLang cannot match"
        in mismatched
    )
    floating = export(tmp_path / "c", "sglang", **QWEN, tp=2, pp=2)["serve.sh"].read_text()
    assert "keeps each request in its micro-batch's running batch" in floating  # vLLM's decode semantics


@pytest.mark.parametrize("engine", ["vllm", "vllm-ascend"])
def test_vllm_notes_semantics_it_cannot_run(tmp_path, engine):
    model = QWEN if engine == "vllm" else DSV3
    assert "cannot match" not in export(tmp_path / "a", engine, **model, pp=2)["serve.sh"].read_text()
    text = export(tmp_path / "b", engine, **model, pp=2, mixed_batches=False)["serve.sh"].read_text()
    assert "vLLM always mixes decodes into prefill steps" in text
    assert (
        "simulated with decode_in_budget=on, mixed_batches=off and sticky_decodes=off, which vLLM cannot match" in text
    )
    sticky = export(tmp_path / "c", engine, **model, pp=2, sticky_decodes=True)["serve.sh"].read_text()
    assert "lets any running request join any step" in sticky and "sticky_decodes=on" in sticky


@pytest.mark.parametrize("mode, strategy", [("fastpp-greedy", "greedy"), ("fastpp-alp", "alp")])
def test_fastpp_is_the_forks_dynamic_chunk_launch_marked_as_the_fork(tmp_path, mode, strategy):
    files = export(tmp_path, "fastpp", **QWEN, tp=1, pp=4, mode=mode, chunk=2048, tpot_violation=1.2)
    assert set(files) == {"serve.sh", "pipedeck-best.json"}  # SGLang 0.4.1 reads no --config file
    _env, argv = parse_script(files["serve.sh"])
    flags = options(argv)
    assert flags["--dynamic-chunk-strategy"] == strategy and flags["--chunked-prefill-size"] == "2048"
    for switch in (
        "--enable-dynamic-chunk",
        "--disable-radix-cache",
        "--enable-mixed-chunk",
        "--disable-overlap-schedule",
    ):
        assert flags[switch] is True
    assert "--enable-batch-rebalancing" not in flags
    script = files["serve.sh"].read_text()
    assert "# Launch script generated by pipedeck" in script and "for fastpp 0.4.1-fastpp." in script
    assert (
        "# This launch is for the FastPP fork of SGLang 0.4.1, installed in place of upstream SGLang, which "
        "refuses --dynamic-chunk-strategy and reads --enable-dynamic-chunk as its own --enable-dynamic-chunking "
        "(argparse prefix matching)" in script
    )
    assert ("tpot_violation=1.2" in script) == (mode == "fastpp-greedy")  # only the knobs the mode reads
    assert json.loads(files["pipedeck-best.json"].read_text())["engine"] == "fastpp"


def test_a_fastpp_launch_with_no_fork_only_flag_says_it_runs_on_upstream_sglang(tmp_path):
    plain = export(tmp_path / "plain", "fastpp", **QWEN, tp=2, pp=2)["serve.sh"].read_text()
    assert (
        "# uses no FastPP-only flag: runs on upstream SGLang 0.5.23 as written (the --format sglang launch plus "
        "--disable-radix-cache --disable-overlap-schedule)." in plain
    )
    assert "installed in place of upstream SGLang" not in plain
    forked = export(tmp_path / "forked", "fastpp", **QWEN, tp=2, pp=2, delay_scheduling=True)["serve.sh"].read_text()
    assert "FastPP-only flag" not in forked
    assert (
        "# This launch is for the FastPP fork of SGLang 0.4.1, installed in place of upstream SGLang, which "
        "refuses --enable-batch-rebalancing." in forked
    )


@pytest.mark.parametrize("mode", ["fastpp-greedy", "fastpp-alp"])
def test_upstream_sglang_does_not_launch_the_forks_modes(tmp_path, mode):
    with pytest.raises(
        ExportError,
        match=rf"^format: mode {mode} cannot run on sglang; "
        r"engines that can: fastpp \(FastPP fork of SGLang 0.4.1\)$",
    ):
        write_export(best(**QWEN, tp=1, pp=4, mode=mode), "sglang", tmp_path / "out")


def test_delay_scheduling_is_the_forks_batch_rebalancing_and_refused_elsewhere(tmp_path):
    flags = options(parse_script(export(tmp_path, "fastpp", **QWEN, tp=2, pp=2, delay_scheduling=True)["serve.sh"])[1])
    assert flags["--enable-batch-rebalancing"] is True
    for engine in ("vllm", "sglang"):
        with pytest.raises(ExportError) as err:
            write_export(best(**QWEN, tp=2, pp=2, delay_scheduling=True), engine, tmp_path / "out")
        assert str(err.value) == (
            f"format: delay scheduling cannot run on {engine}; engines that can: fastpp (FastPP fork of SGLang 0.4.1)"
        )


def test_sglang_dcpp_is_dynamic_chunking_with_the_smooth_factor_env(tmp_path):
    path = export(tmp_path, "sglang", **QWEN, tp=2, pp=2, mode="dcpp", smooth_factor=0.75)["serve.sh"]
    env, argv = parse_script(path)
    assert options(argv)["--enable-dynamic-chunking"] is True
    assert env["SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR"] == "0.75"
    assert "no minimum-chunk option" in path.read_text()


@pytest.mark.parametrize(
    "engine, flag",
    [
        ("vllm", "--pipeline-parallel-size"),
        ("vllm-ascend", "--pipeline-parallel-size"),
        ("sglang", "--pp-size"),
    ],
)
def test_tp_baseline_runs_everywhere(tmp_path, engine, flag):
    env, argv = parse_script(export(tmp_path, engine, **QWEN, tp=4, pp=1)["serve.sh"])
    assert options(argv)[flag] == "1"
    assert not any(name.endswith("_PP_LAYER_PARTITION") for name in env)


# -- the YAML and the JSON record ------------------------------------------------------


@pytest.mark.parametrize(
    "engine, mode, name, model_key, model",
    [
        ("vllm", "cpp", "vllm-config.yaml", "model", "deepseek-ai/DeepSeek-V3.1"),
        ("vllm-ascend", "dcpp", "vllm-config.yaml", "model", "vllm-ascend/DeepSeek-V3.1-W8A8"),
        ("vllm-ascend", "vpp", "vllm-config.yaml", "model", "vllm-ascend/DeepSeek-V3.1-W8A8"),
        ("sglang", "dcpp", "sglang-config.yaml", "model-path", "deepseek-ai/DeepSeek-V3.1"),
    ],
)
def test_yaml_agrees_with_the_flags(tmp_path, engine, mode, name, model_key, model):
    files = export(
        tmp_path, engine, **DSV3, pp=2, mode=mode, layer_split=(16, 15, 15, 15) if "vpp" in mode else (32, 29)
    )
    assert set(files) == {"serve.sh", name, "pipedeck-best.json"}
    _, argv = parse_script(files["serve.sh"])
    flags = options(argv)
    flags.pop("--model-path", None)
    text = files[name].read_text()
    data = yaml.safe_load(text)
    assert data.pop(model_key) == model
    # a switch set off is left out of the YAML (`--config` loaders drop false values) and named on the Run line
    off = {flag for flag in flags if flag.startswith("--no-")}
    assert data == yaml_view({flag: value for flag, value in flags.items() if flag not in off})
    run = next(line for line in text.splitlines() if line.startswith("# Run: "))
    assert all(flag in run.split() for flag in off)
    assert ("--no-async-scheduling" in off) == ((engine, mode) == ("vllm-ascend", "dcpp"))


def test_sglang_before_0_5_8_gets_no_yaml(tmp_path):
    old = export(tmp_path, "sglang", "0.5.7", **QWEN, tp=2, pp=2, mixed_batches=False, decode_in_budget=False)
    assert set(old) == {"serve.sh", "pipedeck-best.json"}
    assert "sglang-config.yaml" in export(tmp_path / "new", "sglang", "0.5.23", **QWEN, tp=2, pp=2)


def test_sglang_0_5_7_refuses_mixed_chunks_in_a_pipeline(tmp_path):
    with pytest.raises(ExportError) as err:
        write_export(best(**QWEN, tp=2, pp=2), "sglang", tmp_path / "out", "0.5.7")
    assert str(err.value) == (
        "mixed_batches: SGLang 0.5.7 refuses --enable-mixed-chunk with --pp-size 2 "
        "(ServerArgs.check_server_args in sglang/srt/server_args.py: pipeline parallelism is "
        "not compatible with mixed chunked prefill); export a config with mixed_batches off, "
        "or for SGLang 0.5.23"
    )
    assert "--enable-mixed-chunk" in export(tmp_path, "sglang", "0.5.7", **QWEN, tp=4, pp=1)["serve.sh"].read_text()


def test_record_round_trips_into_the_config(tmp_path):
    chosen = best(**DSV3, pp=2, mode="dcpp", chunk=16384, layer_split=(32, 29), smooth_factor=0.5)
    path = Path(write_export(chosen, "vllm-ascend", tmp_path)[-1])
    record = json.loads(path.read_text())
    assert ServingConfig.from_dict(record["config"]).resolve() == chosen.config
    assert record["engine"] == "vllm-ascend" and record["pipedeck_version"]
    assert record["generated_at"].endswith("+00:00")
    assert (record["study"], record["trial"], record["scenario"], record["seed"]) == ("s1", 7, "long-128k", 3)
    assert record["slo"] == SLO and record["metrics"] == METRICS
    assert best_from_json(record) == chosen


def test_header_names_study_slo_and_goodput(tmp_path):
    text = export(tmp_path, "vllm", **QWEN, tp=2, pp=2)["serve.sh"].read_text()
    assert "# Study: s1  trial: 7  scenario: long-128k  seed: 3" in text
    assert "# SLO: ttft p90 <= 2 s; tpot p90 <= 0.2 s" in text
    assert "goodput 1.5 req/s" in text
    assert re.search(r"^# Launch script generated by pipedeck \S+ for vllm 0\.33\.0\.$", text, re.M)


def test_header_keeps_odd_names_inside_comments(tmp_path):
    odd = BestConfig(ServingConfig.of(**QWEN, tp=2, pp=2).resolve(), {}, "evil\nrm -rf /", None, "a\rb", None, None)
    path = write_export(odd, "vllm", tmp_path)[0]
    assert "# Study: evil rm -rf /  trial: -  scenario: a b  seed: -" in path.read_text()
    assert "# SLO: -" in path.read_text() and "Predicted by the simulator: -" in path.read_text()
    subprocess.run(["bash", "-n", str(path)], check=True)


# -- the script runs as written -------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "vllm-ascend", "sglang"])
def test_script_is_executable_and_parses(tmp_path, engine):
    path = export(tmp_path, engine, **DSV3, pp=2, mode="vpp" if engine == "vllm-ascend" else "cpp")["serve.sh"]
    assert path.stat().st_mode & 0o777 == 0o755
    assert path.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in path.read_text()
    subprocess.run(["bash", "-n", str(path)], check=True)


STUB = """#!{python}
import json, os, sys
names = [n for n in os.environ if n.endswith(("_PARTITION", "_FACTOR")) or n in ("ENABLE_VPP", "HCCL_OP_EXPANSION_MODE")]
json.dump({{"argv": sys.argv[1:], "env": {{n: os.environ[n] for n in names}}}}, open(os.environ["STUB_OUT"], "w"))
"""


@pytest.mark.parametrize("engine, program", [("vllm-ascend", "vllm"), ("sglang", "python")])
def test_script_launches_the_engine_with_its_environment(tmp_path, engine, program):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / program).write_text(STUB.format(python=sys.executable))
    (bin_dir / program).chmod(0o755)
    path = export(tmp_path, engine, **DSV3, pp=2, mode="dcpp", layer_split=(32, 29))["serve.sh"]
    expected_env, argv = parse_script(path)
    out = tmp_path / "launched.json"
    base = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "STUB_OUT": str(out),
        "HCCL_OP_EXPANSION_MODE": "HOST",
    }
    subprocess.run(["bash", str(path), "--port", "8123"], env=base, check=True)
    launched = json.loads(out.read_text())
    model = "vllm-ascend/DeepSeek-V3.1-W8A8" if engine == "vllm-ascend" else "deepseek-ai/DeepSeek-V3.1"
    want = [model if a.startswith("${MODEL") else a for a in argv[1:]]
    assert launched["argv"] == [*want, "--port", "8123"]
    partition = "VLLM_PP_LAYER_PARTITION" if program == "vllm" else "SGLANG_PP_LAYER_PARTITION"
    assert launched["env"][partition] == expected_env[partition] == "32,29"
    if engine == "vllm-ascend":
        assert launched["env"]["HCCL_OP_EXPANSION_MODE"] == "HOST"  # the operator's value wins
    subprocess.run(["bash", str(path)], env={**base, "MODEL": "/weights/dsv3"}, check=True)
    assert "/weights/dsv3" in json.loads(out.read_text())["argv"]


def test_a_llama_server_script_loads_a_gguf_file_with_model_and_a_hub_id_with_hf(tmp_path):
    """The profile's checkpoint (safetensors on the hub) is no GGUF: the script asks for MODEL and maps it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llama-server").write_text(STUB.format(python=sys.executable))
    (bin_dir / "llama-server").chmod(0o755)
    path = export(tmp_path, "llama-server", **QWEN, tp=1, pp=1, kv_capacity=4096, max_running=4)["serve.sh"]
    out, gguf = tmp_path / "launched.json", tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    base = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "STUB_OUT": str(out)}
    for model, words in (
        (str(gguf), ["--model", str(gguf)]),
        ("ggml-org/Qwen2.5-0.5B-Instruct-GGUF:Q8_0", ["-hf", "ggml-org/Qwen2.5-0.5B-Instruct-GGUF:Q8_0"]),
    ):
        subprocess.run(["bash", str(path)], env={**base, "MODEL": model}, check=True)
        assert json.loads(out.read_text())["argv"][:2] == words
    out.unlink()
    unset = subprocess.run(["bash", str(path)], env=base, capture_output=True, text=True)
    assert unset.returncode != 0 and not out.exists()
    assert "MODEL: set it to a local GGUF file or a hub id org/name[:quant]" in unset.stderr


# -- what cannot be exported ----------------------------------------------------------


@pytest.mark.parametrize(
    "engine, mode, message",
    [
        ("vllm", "vpp", "format: mode vpp cannot run on vllm; engines that can: vllm-ascend (VPP development branch)"),
        (
            "sglang",
            "vpp-async",
            "format: mode vpp-async cannot run on sglang; engines that can: vllm-ascend (VPP development branch)",
        ),
        ("vllm", "dcpp", "format: mode dcpp cannot run on vllm; engines that can: vllm-ascend, sglang"),
        (
            "vllm",
            "fastpp-alp",
            "format: mode fastpp-alp cannot run on vllm; engines that can: fastpp (FastPP fork of SGLang 0.4.1)",
        ),
        ("vllm-ascend", "vpp-adaptive", "format: mode vpp-adaptive cannot run on vllm-ascend; engines that can: none"),
    ],
)
def test_mode_engine_mismatch_is_one_line_naming_the_engines_that_can(tmp_path, engine, mode, message):
    with pytest.raises(ExportError) as err:
        write_export(best(**DSV3, pp=2, mode=mode), engine, tmp_path / "out")
    assert str(err.value) == message
    assert not (tmp_path / "out").exists()


def test_dcpp_without_a_pipeline_is_refused(tmp_path):
    with pytest.raises(ExportError, match=r"^pp: mode dcpp on sglang needs pp >= 2, got 1$"):
        write_export(best(**QWEN, tp=2, pp=1, mode="dcpp"), "sglang", tmp_path)


def test_a_model_id_a_shell_would_expand_is_refused(tmp_path):
    packaged = Path(profiles.__file__).parent / "models" / "qwen2.5-14b.toml"
    evil = tmp_path / "evil.toml"
    evil.write_text(re.sub(r"(?m)^hf_id = .*$", 'hf_id = "org/$(touch pwned)"', packaged.read_text()))
    with pytest.raises(ExportError, match=r"^model: checkpoint 'org/\$\(touch pwned\)' has a character a shell"):
        write_export(best(model=str(evil), hardware="a100-40g-pcie", tp=2, pp=2), "vllm", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unknown_engine(tmp_path):
    allowed = "vllm-ascend, vllm, sglang, llama-server, fastpp"
    with pytest.raises(ExportError, match=rf"^format: unknown engine 'trt'; allowed: {allowed}$"):
        write_export(best(**QWEN, tp=2, pp=2), "trt", tmp_path)


def test_a_new_engine_or_mode_is_a_registration(tmp_path, monkeypatch):
    fork = ServingEngine(
        name="sglang-fork",
        program=("python", "-m", "sglang.launch_server"),
        model_flag="--model-path",
        common=lambda c, r: Launch(flags=(Flag("--tp-size", c.parallelism.tp),)),
        releases=(Release("1.0", "the only one"),),
    )
    monkeypatch.setitem(ENGINES, fork.name, fork)
    register_support(fork.name, "cpp", ModeSupport(render=lambda c, r: Launch(flags=(Flag("--enable-dynamic-chunk"),))))
    files = {p.name: p for p in write_export(best(**QWEN, tp=2, pp=2), "sglang-fork", tmp_path)}
    assert set(files) == {"serve.sh", "pipedeck-best.json"}  # no --config YAML for this engine
    assert options(parse_script(files["serve.sh"])[1]) == {
        "--model-path": "${MODEL:-Qwen/Qwen2.5-14B-Instruct}",
        "--tp-size": "2",
        "--enable-dynamic-chunk": True,
    }


# -- files -----------------------------------------------------------------------------


def test_existing_files_are_replaced_without_leftovers(tmp_path):
    (tmp_path / "serve.sh").write_text("old\n")
    write_export(best(**QWEN, tp=2, pp=2), "vllm", tmp_path)
    assert (tmp_path / "serve.sh").read_text().startswith("#!/usr/bin/env bash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipedeck-best.json", "serve.sh", "vllm-config.yaml"]


def test_no_file_holds_a_secret_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sk-pipedeck-test-key-0123456789")
    monkeypatch.setenv("HF_TOKEN", "hf_pipedecktesttoken0123456789")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-another-test-key-abcdef")
    secrets = [
        value
        for name, value in os.environ.items()
        if re.search(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", name, re.I) and len(value) >= 8
    ]
    for engine, mode in (("vllm-ascend", "vpp"), ("vllm", "cpp"), ("sglang", "dcpp")):
        for path in write_export(best(**DSV3, pp=2, mode=mode), engine, tmp_path / engine):
            text = path.read_text()
            assert not [s for s in secrets if s in text], path
            assert not re.search(r"api[-_]?key|\btoken\b|_TOKEN", text, re.I), path


# -- from the run store and the CLI ----------------------------------------------------


def make_store(path: Path, objective: str = "goodput") -> ServingConfig:
    """A run store with study s1: a worse, a best, a failed and a running trial; return the best config."""
    configs = [ServingConfig.of(**DSV3, pp=2, mode=mode).resolve() for mode in ("cpp", "dcpp", "vpp", "vpp-async")]
    with RunStore.open(path) as store:
        store.save_study("s1", scenario="long-128k", objective=objective, slo=SLO, settings={"seed": 3}, storage="j")
        for number, (config, value, state) in enumerate(
            zip(configs, (1.0, 2.0, None, None), ("COMPLETE", "COMPLETE", "FAIL", "RUNNING"))
        ):
            store.save_trial(
                "s1",
                number,
                state=state,
                params={},
                config=config.to_dict(),
                metrics={**METRICS, "goodput_rps": value} if value else {},
                objective=value,
                duration_s=1.0,
            )
    return configs[1] if objective != "ttft" else configs[0]


@pytest.mark.parametrize("objective", ["goodput", "ttft"])
def test_export_best_reads_the_best_completed_trial_and_its_study(tmp_path, objective):
    chosen = make_store(tmp_path / "runs.duckdb", objective)
    with RunStore.open(tmp_path / "runs.duckdb") as store:
        record = json.loads(export_best(store, "s1", "vllm-ascend", str(tmp_path / "out"))[-1].read_text())
    assert ServingConfig.from_dict(record["config"]).resolve() == chosen
    assert (record["study"], record["scenario"], record["seed"], record["slo"]) == ("s1", "long-128k", 3, SLO)
    assert record["trial"] == (1 if objective == "goodput" else 0)


def test_export_best_of_a_study_without_completed_trials(tmp_path):
    with RunStore.open(tmp_path / "runs.duckdb") as store:
        store.save_study("empty", scenario="long-128k", objective="goodput", slo=SLO, settings={}, storage="j")
        with pytest.raises(ExportError, match=r"^study: empty has no completed trial yet$"):
            export_best(store, "empty", "vllm", tmp_path / "out")


def run(capsys, argv):
    status = run_cli(cli, argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_exports_a_saved_record_or_a_plain_config(tmp_path, capsys):
    record = write_export(best(**DSV3, pp=2, mode="vpp"), "vllm-ascend", tmp_path / "first")[-1]
    status, out, err = run(
        capsys, ["export", "--config", str(record), "--format", "vllm-ascend", "--out", str(tmp_path / "again")]
    )
    assert status == 0, err
    assert out.split() == [str(tmp_path / "again" / n) for n in ("serve.sh", "vllm-config.yaml", "pipedeck-best.json")]
    assert (tmp_path / "again" / "serve.sh").read_text() == (tmp_path / "first" / "serve.sh").read_text()
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({**QWEN, "tp": 2, "pp": 2}))
    status, out, err = run(
        capsys, ["export", "--config", str(plain), "--format", "sglang", "--out", str(tmp_path / "p")]
    )
    assert status == 0, err
    assert "--tp-size 2" in (tmp_path / "p" / "serve.sh").read_text()


def test_cli_exports_a_study_from_the_run_store(tmp_path, capsys):
    chosen = make_store(tmp_path / "runs.duckdb")
    status, out, err = run(
        capsys,
        [
            "export",
            "--study",
            "s1",
            "--format",
            "sglang",
            "--out",
            str(tmp_path / "o"),
            "--db",
            str(tmp_path / "runs.duckdb"),
        ],
    )
    assert status == 0, err
    assert out.split() == [str(tmp_path / "o" / n) for n in ("serve.sh", "sglang-config.yaml", "pipedeck-best.json")]
    written = json.loads((tmp_path / "o" / "pipedeck-best.json").read_text())["config"]
    assert ServingConfig.from_dict(written).resolve() == chosen


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--format", "vllm", "--study", "nope", "--db", "{db}"], "study: no study 'nope' in"),
        (["--format", "vllm", "--study", "s1", "--db", "{missing}"], "db: no run store at"),
        (["--format", "vllm"], "give exactly one of --study NAME or --config FILE.json"),
        (
            ["--format", "vllm", "--study", "s", "--config", "{config}"],
            "give exactly one of --study NAME or --config FILE.json",
        ),
        (
            ["--format", "vllm", "--config", "{config}"],
            "format: mode vpp cannot run on vllm; engines that can: vllm-ascend (VPP development branch)",
        ),
        (["--format", "vllm", "--config", "{bad}"], "config: cannot read"),
        (["--format", "nope", "--config", "{config}"], "'nope' is not one of"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    config = write_export(best(**DSV3, pp=2, mode="vpp"), "vllm-ascend", tmp_path / "first")[-1]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    make_store(tmp_path / "runs.duckdb")
    argv = [
        a.format(config=config, bad=bad, db=tmp_path / "runs.duckdb", missing=tmp_path / "none.duckdb") for a in argv
    ]
    status, out, err = run(capsys, ["export", *argv, "--out", str(tmp_path / "o")])
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("pipedeck: error: ") and message in err


# -- the weights, the engine release, the engine's own rules, and loud mismatches -------


def test_vllm_ascend_launches_the_w8a8_checkpoint_the_ascend_profile_assumed(tmp_path):
    path = export(tmp_path, "vllm-ascend", **DSV3, pp=2)["serve.sh"]
    _env, argv = parse_script(path)
    assert argv[2] == "${MODEL:-vllm-ascend/DeepSeek-V3.1-W8A8}"
    assert options(argv)["--quantization"] == "ascend"
    assert 'export VLLM_USE_MODELSCOPE="${VLLM_USE_MODELSCOPE:-True}"' in path.read_text()  # a ModelScope id
    text = path.read_text()
    assert (
        "# Weights: vllm-ascend/DeepSeek-V3.1-W8A8 (W8A8 int8 (ModelSlim), --quantization ascend, from modelscope)"
        in text
    )
    assert "multi_node.md" in text  # the published source of the id
    assert "WARNING" not in text  # an Ascend study exported for Ascend


def test_a_gpu_export_of_an_ascend_study_says_loudly_that_its_predictions_do_not_hold(tmp_path, capsys):
    path = export(tmp_path, "vllm", **DSV3, pp=2)["serve.sh"]
    lines = path.read_text().splitlines()
    assert lines[2] == (
        "# WARNING: predicted for ascend-910c (ascend), but vllm serves on cuda or cpu; the simulation "
        "assumed the weights vllm-ascend/DeepSeek-V3.1-W8A8 (W8A8 int8 (ModelSlim)), this launch "
        "loads deepseek-ai/DeepSeek-V3.1: the predictions do not hold for this launch"
    )
    _, argv = parse_script(path)
    assert argv[2] == "${MODEL:-deepseek-ai/DeepSeek-V3.1}" and "--quantization" not in argv  # the FP8 Hub release
    record = write_export(best(**DSV3, pp=2), "vllm", tmp_path / "rec")[-1]
    status, _out, err = run(
        capsys, ["export", "--config", str(record), "--format", "sglang", "--out", str(tmp_path / "s")]
    )
    assert status == 0 and err.startswith("WARNING: predicted for ascend-910c (ascend), but sglang serves on cuda")


def test_an_export_for_another_engine_than_the_study_was_tuned_for_says_so(tmp_path):
    tuned = BestConfig(ServingConfig.of(**QWEN, tp=2, pp=2).resolve(), METRICS, "s1", 7, "azure-conv", SLO, 3, "vllm")
    text = write_export(tuned, "sglang", tmp_path)[0].read_text()
    assert (
        "# WARNING: study s1 was tuned for vllm (its baseline and the modes it searched), but this launch is "
        "sglang: its gain over the default is vllm's"
    ) in text
    assert "WARNING" not in write_export(tuned, "vllm", tmp_path / "same")[0].read_text()


def test_the_warnings_an_export_hands_back_are_the_ones_its_script_opens_with(tmp_path):
    """`pipedeck export` prints them, `tune --export` too, and the console shows them: one list, made once."""
    tuned = BestConfig(ServingConfig.of(**DSV3, pp=2).resolve(), METRICS, "s1", 7, "azure-conv", SLO, 3, "vllm-ascend")
    warned: list[str] = []
    script = write_export(tuned, "sglang", tmp_path, warn=warned.append)[0].read_text()
    assert len(warned) == 2 and warned[0].startswith("WARNING: predicted for ascend-910c")
    assert warned[1].startswith("WARNING: study s1 was tuned for vllm-ascend")
    assert [line for line in script.splitlines() if line.startswith("# WARNING")] == [f"# {w}" for w in warned]
    quiet: list[str] = []
    write_export(tuned, "vllm-ascend", tmp_path / "same", warn=quiet.append)
    assert quiet == []


@pytest.mark.parametrize("engine", ["vllm", "vllm-ascend"])
def test_a_step_budget_vllm_refuses_is_not_exported(tmp_path, engine):
    with pytest.raises(ExportError) as err:
        write_export(best(**QWEN, tp=2, pp=2, chunk=10, max_running=256), engine, tmp_path / "out")
    assert str(err.value) == (
        "chunk: vLLM refuses --max-num-batched-tokens 10 below --max-num-seqs 256 "
        "(SchedulerConfig in vllm/config/scheduler.py: max_num_batched_tokens must be >= "
        "max_num_seqs); export a config with chunk >= max_running (256)"
    )
    assert not (tmp_path / "out").exists()
    assert (
        options(parse_script(export(tmp_path, engine, **QWEN, tp=2, pp=2, chunk=256, max_running=256)["serve.sh"])[1])[
            "--max-num-batched-tokens"
        ]
        == "256"
    )  # equal is allowed


def test_an_unknown_engine_release_is_one_line_naming_the_known_ones(tmp_path):
    with pytest.raises(
        ExportError,
        match=r"^engine_version: vllm-ascend '0\.9' is not a release pipedeck knows; "
        r"allowed: 0\.23\.0, 0\.25\.1rc1, or one newer than 0\.25\.1rc1$",
    ):
        write_export(best(**DSV3, pp=2), "vllm-ascend", tmp_path / "out", "0.9")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "engine, version, message",
    [
        (
            "vllm",
            "0.30.0",
            "engine_version: vllm '0.30.0' is not a release pipedeck knows; "
            "allowed: 0.23.0, 0.32.0, 0.33.0, or one newer than 0.33.0",
        ),
        (
            "vllm",
            "latest",
            "engine_version: vllm 'latest' is not a version number; allowed: 0.23.0, 0.32.0, 0.33.0, or one newer than 0.33.0",
        ),
        ("fastpp", "0.5.0", "engine_version: fastpp '0.5.0' is not a release pipedeck knows; allowed: 0.4.1-fastpp"),
    ],
)
def test_an_unknown_old_or_malformed_release_is_refused_naming_the_range(engine, version, message):
    with pytest.raises(ExportError) as err:
        ENGINES[engine].release(version)
    assert str(err.value) == message


def test_a_release_newer_than_the_newest_known_is_exported_as_the_newest_with_a_note(tmp_path, capsys):
    release = ENGINES["vllm"].release("v0.34.0")
    assert (release.version, release.behaves_as) == ("0.34.0", "0.33.0")
    assert release.reads_config_file == ENGINES["vllm"].release("0.33.0").reads_config_file
    record = write_export(best(**QWEN, tp=2, pp=2), "vllm", tmp_path / "first")[-1]
    status, _out, err = run(
        capsys,
        [
            "export",
            "--config",
            str(record),
            "--format",
            "vllm",
            "--engine-version",
            "0.34.0",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert status == 0 and err == (
        "NOTE: vllm 0.34.0 is newer than 0.33.0, the newest release pipedeck knows; written as 0.33.0 runs\n"
    )
    script = (tmp_path / "o" / "serve.sh").read_text()
    assert "for vllm 0.34.0." in script and f"# {err.strip()}" in script
    assert json.loads((tmp_path / "o" / "pipedeck-best.json").read_text())["engine_version"] == "0.34.0"


def installed(tmp_path: Path, monkeypatch, package: str, version: str) -> None:
    """An installed distribution `package` at `version` (its metadata on sys.path, as pip leaves it)."""
    info = tmp_path / "site" / f"{package}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


@pytest.mark.parametrize("version", ["0.34.0", "0.23.0"])
def test_the_default_release_is_the_installed_engine_s(tmp_path, monkeypatch, version):
    installed(tmp_path, monkeypatch, "vllm", version)
    assert ENGINES["vllm"].release().version == version
    assert ENGINES["sglang"].release().version == "0.5.23"  # not installed: its newest known


def test_an_installed_release_pipedeck_does_not_know_is_refused_naming_it(tmp_path, monkeypatch):
    installed(tmp_path, monkeypatch, "vllm_ascend", "0.11.0")
    with pytest.raises(
        ExportError,
        match=r"^engine_version: vllm-ascend '0\.11\.0' \(installed\) is not a release "
        r"pipedeck knows; allowed: 0\.23\.0, 0\.25\.1rc1, or one newer",
    ):
        ENGINES["vllm-ascend"].release()


def test_the_default_release_is_the_newest_that_is_not_a_candidate():
    assert {name: engine.release().version for name, engine in ENGINES.items()} == {
        "vllm-ascend": "0.23.0",
        "vllm": "0.33.0",
        "sglang": "0.5.23",
        "llama-server": "0.3.36",
        "fastpp": "0.4.1-fastpp",
    }
    assert ENGINES["vllm-ascend"].release("v0.25.1rc1").version == "0.25.1rc1"


def test_the_record_names_release_weights_and_the_studys_engine(tmp_path):
    tuned = BestConfig(ServingConfig.of(**DSV3, pp=2).resolve(), METRICS, "s1", 7, "long-128k", SLO, 3, "vllm-ascend")
    record = json.loads(write_export(tuned, "vllm-ascend", tmp_path, "0.25.1rc1")[-1].read_text())
    assert record["engine_version"] == "0.25.1rc1" and record["study_engine"] == "vllm-ascend"
    assert record["checkpoint"] == {
        "id": "vllm-ascend/DeepSeek-V3.1-W8A8",
        "quantization": "ascend",
        "hub": "modelscope",
    }
    assert best_from_json(record).engine == "vllm-ascend"


def test_cli_engine_version_is_checked_in_one_line(tmp_path, capsys):
    record = write_export(best(**DSV3, pp=2), "vllm-ascend", tmp_path / "first")[-1]
    status, out, err = run(
        capsys,
        [
            "export",
            "--config",
            str(record),
            "--format",
            "sglang",
            "--engine-version",
            "0.5.9",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert (
        status == 2
        and out == ""
        and err
        == (
            "pipedeck: error: engine_version: sglang '0.5.9' is not a release pipedeck knows; "
            "allowed: 0.5.7, 0.5.23, or one newer than 0.5.23\n"
        )
    )
    status, out, err = run(
        capsys,
        [
            "export",
            "--config",
            str(record),
            "--format",
            "vllm-ascend",
            "--engine-version",
            "0.25.1rc1",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert status == 0, err
    assert "for vllm-ascend 0.25.1rc1." in (tmp_path / "o" / "serve.sh").read_text()


TUNE = [
    "--model",
    "qwen2.5-14b",
    "--hardware",
    "a100-40g-pcie",
    "--devices",
    "4",
    "--scenario",
    "azure-conv",
    "--requests",
    "40",
    "--slo",
    "ttft=2s,tpot=200ms",
    "--trials",
    "2",
    "--repeats",
    "1",
    "--fix",
    "mode=cpp",
    "--fix",
    "delay-scheduling=off",
]


def test_tune_export_on_a_finished_study_exports_its_winner(tmp_path, capsys):
    db = str(tmp_path / "r.duckdb")
    assert run_cli(cli, ["tune", *TUNE, "--db", db, "--json"]) == 0
    study = json.loads(capsys.readouterr().out)["study"]
    out = tmp_path / "deploy"
    status = run_cli(cli, ["tune", *TUNE, "--db", db, "--json", "--export", str(out), "--format", "vllm"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert json.loads(captured.out)["exported"] == [
        str(out / n) for n in ("serve.sh", "vllm-config.yaml", "pipedeck-best.json")
    ]
    assert json.loads((out / "pipedeck-best.json").read_text())["study"] == study


def test_tune_export_on_another_host_of_a_shared_study_exports_its_winner(tmp_path, capsys):
    """A host whose run store never saw the study resumes it with the settings its storage holds."""
    journal = str(tmp_path / "shared.jsonl")
    assert run_cli(cli, ["tune", *TUNE, "--db", str(tmp_path / "host1.duckdb"), "--storage", journal]) == 0
    capsys.readouterr()
    out = tmp_path / "deploy"
    status = run_cli(
        cli,
        [
            "tune",
            *TUNE,
            "--db",
            str(tmp_path / "host2.duckdb"),
            "--storage",
            journal,
            "--export",
            str(out),
            "--format",
            "vllm",
        ],
    )
    assert status == 0, capsys.readouterr().err
    assert (out / "serve.sh").exists()
