"""Every exported launch, parsed by the real engines' argument parsers and checked by their own rules.

vLLM and SGLang install without a GPU but bring several GB of dependencies, so CI's default install leaves
them out and these tests skip there. docs/export.md ("Checking exports against the engines") says how to
install them beside pipedeck. Each export is checked against the engine release installed: vLLM-Ascend's
launches are vLLM options, checked when the vLLM it runs on is the one installed.

Checked with the engine's own code: the launch argv through the parser `vllm serve` or
`python -m sglang.launch_server` builds; the YAML through the same `--config` loading, which must give the
same arguments as serve.sh; vLLM's SchedulerConfig rules on the step budget; the layer partition env through
each engine's get_pp_indices; SGLang's model-independent resolution. What needs the model's weights or a
device (vLLM's ModelConfig, SGLang's full resolution) is not run.
"""

from __future__ import annotations

import shlex
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from pipedeck.backends import ENGINES, ServingConfig
from pipedeck.backends.launch import FASTPP_REFUSED_UPSTREAM
from pipedeck.tuner import write_export
from pipedeck.tuner.export import BestConfig


def installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


VLLM, SGLANG = installed("vllm"), installed("sglang")
WHY = "is not installed (several GB of dependencies; CI's default install leaves it out, see docs/export.md)"
# The vLLM each vLLM-Ascend release runs on (vllm-ascend's docs/source/conf.py at that tag: pip_vllm_version).
ASCEND_ON_VLLM = {"0.23.0": "0.23.0"}

QWEN = dict(model="qwen2.5-14b", hardware="a100-40g-pcie")  # 48 layers
DSV3 = dict(model="deepseek-v3.1", hardware="ascend-910c", tp=8)  # 61 layers
CASES = {
    "vllm": [
        dict(**QWEN, tp=2, pp=2, chunk=16384, max_running=64),
        dict(**QWEN, tp=1, pp=4, layer_split=(14, 12, 12, 10)),
        dict(**QWEN, tp=4, pp=1, chunk=2048, max_running=256),
        dict(**DSV3, pp=2, layer_split=(32, 29)),
    ],
    "vllm-ascend": [
        dict(**DSV3, pp=2),
        dict(**DSV3, pp=2, mode="dcpp", chunk=32768, min_chunk=4096, smooth_factor=0.8),
        dict(**DSV3, pp=2, mode="vpp", layer_split=(16, 15, 15, 15)),
        dict(**DSV3, pp=2, layer_split=(29, 32)),
    ],
    "sglang": [
        dict(**QWEN, tp=2, pp=2, chunk=4096, max_running=32),
        dict(**QWEN, tp=2, pp=2, mode="dcpp"),
        dict(**DSV3, pp=2, layer_split=(31, 30)),
        dict(**QWEN, tp=4, pp=1, mixed_batches=False, decode_in_budget=False),
    ],
}


def exported(tmp_path: Path, engine: str, release: str, config: dict) -> dict[str, Path]:
    best = BestConfig(ServingConfig.of(**config).resolve(), {"goodput_rps": 1.0}, "s1", 1)
    return {p.name: p for p in write_export(best, engine, tmp_path, release)}


def launch_line(script: Path) -> tuple[dict[str, str], list[str]]:
    """serve.sh's exports (an operator's value kept) and its launch argv with $MODEL expanded, without "$@"."""
    lines = script.read_text().splitlines()
    env = {}
    for line in lines:
        if line.startswith("export "):
            name, value = shlex.split(line[len("export ") :])[0].split("=", 1)
            env[name] = value.removeprefix("${" + name + ":-").removesuffix("}")
    start = next(i for i, line in enumerate(lines) if line.startswith("exec "))
    argv = shlex.split(" ".join(line.rstrip("\\") for line in lines[start:]))[1:-1]
    return env, [word[len("${MODEL:-") : -1] if word.startswith("${MODEL:-") else word for word in argv]


def run_line_flags(yaml_file: Path) -> list[str]:
    """The options the YAML's `# Run:` line keeps on the command line, after `--config FILE`."""
    run = next(line for line in yaml_file.read_text().splitlines() if line.startswith("# Run: "))
    words = run[len("# Run: ") :].split()
    return words[words.index("--config") + 2 :]


def releases(engine: str, installed_version: str) -> list[str]:
    """The releases of `engine` whose launches the installed engine can check."""
    if engine == "vllm-ascend":
        return [r.version for r in ENGINES[engine].releases if ASCEND_ON_VLLM.get(r.version) == installed_version]
    return [r.version for r in ENGINES[engine].releases if r.version == installed_version]


# -- vLLM ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_serve():
    """`vllm serve`'s parser as vllm's CLI main builds it: `--config` is read by the top-level parser."""
    if VLLM is None:
        pytest.skip(f"vLLM {WHY}")
    from vllm import platforms
    from vllm.entrypoints.cli import serve
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # No GPU here, and the engine arguments' device defaults need a platform: fall back to the CPU one, as
    # vLLM's own CLI main does for `vllm bench` (vllm/entrypoints/cli/main.py).
    with pytest.MonkeyPatch.context() as patch:
        if platforms.current_platform.is_unspecified():
            patch.setattr(platforms, "current_platform", CpuPlatform())
        parser = FlexibleArgumentParser()
        commands = parser.add_subparsers(dest="subparser")
        for command in serve.cmd_init():
            command.subparser_init(commands)
        yield parser


def served(args) -> dict[str, object]:
    """The parsed arguments as `vllm serve` uses them: the positional model, when given, is the model."""
    found = vars(args).copy()
    found["model"] = found.pop("model_tag", None) or found["model"]
    return found


@pytest.mark.parametrize("engine", ["vllm", "vllm-ascend"])
def test_vllm_parses_and_accepts_every_export(tmp_path, vllm_serve, monkeypatch, engine):
    from vllm.config.scheduler import SchedulerConfig
    from vllm.distributed.utils import get_pp_indices
    from vllm.engine.arg_utils import EngineArgs

    targets = releases(engine, VLLM)
    if not targets:
        pytest.skip(f"no {engine} release pipedeck exports for runs on the installed vLLM {VLLM}")
    for release in targets:
        for number, config in enumerate(CASES[engine]):
            files = exported(tmp_path / f"{release}-{number}", engine, release, config)
            env, argv = launch_line(files["serve.sh"])
            assert argv[:2] == ["vllm", "serve"]
            args = vllm_serve.parse_args(argv[1:])
            from_yaml = vllm_serve.parse_args(
                ["serve", "--config", str(files["vllm-config.yaml"]), *run_line_flags(files["vllm-config.yaml"])]
            )
            assert served(from_yaml) == served(args), f"{engine} {release} {config}: the YAML says something else"
            EngineArgs.from_cli_args(args)  # every option maps onto an engine argument
            # SchedulerConfig.verify_max_model_len; the launch leaves max_model_len to the model's config, and with
            # chunked prefill only the budget >= max_num_seqs rule reads it
            SchedulerConfig(
                max_model_len=131072,
                is_encoder_decoder=False,
                max_num_batched_tokens=args.max_num_batched_tokens,
                max_num_seqs=args.max_num_seqs,
                enable_chunked_prefill=args.enable_chunked_prefill,
            )
            resolved = ServingConfig.of(**config).resolve()
            if "VLLM_PP_LAYER_PARTITION" in env:
                monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", env["VLLM_PP_LAYER_PARTITION"])
            else:
                monkeypatch.delenv("VLLM_PP_LAYER_PARTITION", raising=False)
            if resolved.mode_spec.layout == "linear":
                spans = [
                    get_pp_indices(resolved.model_profile.num_layers, rank, resolved.parallelism.pp)
                    for rank in range(resolved.parallelism.pp)
                ]
                assert [end - start for start, end in spans] == resolved.layers_per_rank()
            if engine == "vllm-ascend":
                assert args.quantization == "ascend" and args.model_tag == "vllm-ascend/DeepSeek-V3.1-W8A8"
                if resolved.mode == "dcpp":  # where vLLM-Ascend 0.23 reads it: the top level
                    assert args.additional_config["profiling_chunk_config"]["enabled"] is True
            print(
                f"vLLM {VLLM}: {engine} {release} {resolved.mode} tp{resolved.parallelism.tp} pp{resolved.parallelism.pp} "
                f"chunk {resolved.scheduling.chunk}: parsed, YAML equal, SchedulerConfig accepted"
            )


def test_vllm_refuses_the_budget_pipedeck_refuses(vllm_serve):
    from vllm.config.scheduler import SchedulerConfig

    with pytest.raises(ValueError, match=r"must be greater than or equal to max_num_seqs"):
        SchedulerConfig(
            max_model_len=131072,
            is_encoder_decoder=False,
            max_num_batched_tokens=10,
            max_num_seqs=256,
            enable_chunked_prefill=True,
        )


def test_vllm_serve_config_drops_a_false_switch(tmp_path, vllm_serve):
    """Why the YAML leaves --no-async-scheduling to the command line."""
    config = tmp_path / "c.yaml"
    config.write_text("async-scheduling: false\n")
    assert vllm_serve.parse_args(["serve", "m", "--config", str(config)]).async_scheduling is None
    assert vllm_serve.parse_args(["serve", "m", "--no-async-scheduling"]).async_scheduling is False


# -- SGLang --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sglang_args():
    if SGLANG is None:
        pytest.skip(f"SGLang {WHY}")
    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args


def test_sglang_parses_and_accepts_every_export(tmp_path, sglang_args, monkeypatch):
    import msgspec
    from sglang.srt.distributed.utils import get_pp_indices

    targets = releases("sglang", SGLANG)
    if not targets:
        pytest.skip(f"pipedeck exports for no SGLang release equal to the installed {SGLANG}")
    for release in targets:
        for number, config in enumerate(CASES["sglang"]):
            files = exported(tmp_path / f"{release}-{number}", "sglang", release, config)
            env, argv = launch_line(files["serve.sh"])
            assert argv[:3] == ["python", "-m", "sglang.launch_server"]
            args = sglang_args(argv[3:])
            from_yaml = sglang_args(["--config", str(files["sglang-config.yaml"])])
            fields = msgspec.structs.asdict
            assert fields(from_yaml) == fields(args), f"sglang {release} {config}: the YAML says something else"
            resolved = ServingConfig.of(**config).resolve()
            if "SGLANG_PP_LAYER_PARTITION" in env:
                monkeypatch.setenv("SGLANG_PP_LAYER_PARTITION", env["SGLANG_PP_LAYER_PARTITION"])
            else:
                monkeypatch.delenv("SGLANG_PP_LAYER_PARTITION", raising=False)
            spans = [
                get_pp_indices(resolved.model_profile.num_layers, rank, resolved.parallelism.pp)
                for rank in range(resolved.parallelism.pp)
            ]
            assert [end - start for start, end in spans] == resolved.layers_per_rank()
            # the model-independent part of SGLang's resolution (the rest needs the model's config and a GPU)
            dummy = sglang_args([*argv[3:5], "--model-path", "dummy", *argv[5:]])
            dummy.resolve_once()
            print(
                f"SGLang {SGLANG}: sglang {release} {resolved.mode} tp{resolved.parallelism.tp} pp{resolved.parallelism.pp} "
                f"chunk {resolved.scheduling.chunk}: parsed, YAML equal, model-independent resolution passed"
            )


@pytest.mark.parametrize("mode", ["fastpp-alp", "fastpp-greedy"])
def test_upstream_sglang_refuses_the_fastpp_forks_launch(tmp_path, sglang_args, capsys, mode):
    """Why a FastPP launch is written for the fork: upstream refuses two of its switches and takes the third,
    --enable-dynamic-chunk, as a prefix of its own --enable-dynamic-chunking (argparse's allow_abbrev)."""
    config = dict(**QWEN, tp=1, pp=4, mode=mode, chunk=2048, delay_scheduling=True)
    files = exported(tmp_path, "fastpp", "0.4.1-fastpp", config)
    _, argv = launch_line(files["serve.sh"])
    with pytest.raises(SystemExit):
        sglang_args(argv[3:])
    refused = capsys.readouterr().err
    assert "unrecognized arguments" in refused
    assert all(flag in refused for flag in FASTPP_REFUSED_UPSTREAM) and "--enable-dynamic-chunk " not in refused
    without = [
        word
        for i, word in enumerate(argv[3:])
        if word not in FASTPP_REFUSED_UPSTREAM and not (i and argv[3:][i - 1] == "--dynamic-chunk-strategy")
    ]
    assert sglang_args(without).enable_dynamic_chunking  # the rest of the launch is SGLang's


def test_upstream_sglang_runs_a_fastpp_launch_with_no_fork_only_flag(tmp_path, sglang_args):
    files = exported(tmp_path, "fastpp", "0.4.1-fastpp", dict(**QWEN, tp=2, pp=2))
    _, argv = launch_line(files["serve.sh"])
    assert "uses no FastPP-only flag" in files["serve.sh"].read_text()
    sglang_args(argv[3:])
