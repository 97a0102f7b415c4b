"""Packaged model/hardware profiles, the loader, and the Hugging Face config.json import."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from pipedeck.backends import HardwareProfile, hardware_names, load_hardware, model_names, profile_toml
from pipedeck.backends.profiles import ModelProfile, ProfileError, count_params, load_model, model_from_hf_config
from pipedeck.backends.profiles.build import build_profile, numeric_fields, sourced_fields
from pipedeck.backends.sim.costs import BatchShape, CostModel
from tests.paths import DATA, ROOT

HF = DATA / "hf"
MODELS = ["deepseek-v3.1", "glm-5.2", "qwen2.5-14b", "qwen2.5-32b", "qwen3-coder-30b-a3b"]
HARDWARE = ["a100-40g-pcie", "ascend-910c", "cpu-host", "h100-sxm", "h200-sxm"]
# Fields read from config.json; the published sizes and deployment precision are not.
ARCHITECTURE = tuple(
    f
    for f in numeric_fields(ModelProfile)
    if f not in ("total_params_b", "active_params_b", "weight_bytes", "kv_bytes")
)
TINY = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "vocab_size": 100,
    "num_attention_heads": 4,
    "intermediate_size": 128,
}


def error_of(call: Callable[..., Any], *args: Any) -> str:
    """The message of the ProfileError that call(*args) raises."""
    with pytest.raises(ProfileError) as caught:
        call(*args)
    return str(caught.value)


def hf_config(folder: str) -> dict[str, Any]:
    """A fixture config.json as a dict."""
    return json.loads((HF / folder / "config.json").read_text())


def test_packaged_names_are_listed() -> None:
    assert model_names() == MODELS
    assert hardware_names() == HARDWARE


@pytest.mark.parametrize("name", MODELS)
def test_packaged_model_has_a_source_for_every_numeric_field(name: str) -> None:
    model = load_model(name)
    assert model.name == name
    assert [f for f in numeric_fields(ModelProfile) if not model.sources.get(f)] == []


@pytest.mark.parametrize("name", HARDWARE)
def test_packaged_hardware_has_a_source_for_every_numeric_field(name: str) -> None:
    hardware = load_hardware(name)
    assert hardware.name == name
    assert [f for f in numeric_fields(HardwareProfile) if not hardware.sources.get(f)] == []


@pytest.mark.parametrize("name", MODELS)
def test_computed_parameters_match_published_within_four_percent(name: str) -> None:
    model = load_model(name)
    counts = count_params(model)
    assert counts.total / 1e9 == pytest.approx(model.total_params_b, rel=0.04)
    assert counts.active / 1e9 == pytest.approx(model.active_params_b, rel=0.04)


def test_glm_parameters_equal_the_checkpoint_ledger_once_norms_are_added() -> None:
    # Per layer: 2 RMSNorms (6144), q_a and kv_a norms (2048, 512); final norm;
    # indexer k-norm weight and bias (2 x 128) on 21 layers; router bias (256) on 75.
    norms = 78 * (2 * 6144 + 2048 + 512) + 6144 + 21 * 256 + 75 * 256
    assert count_params(load_model("glm-5.2")).total + norms == 743_377_019_904


def test_qwen3_coder_parameters_equal_the_safetensors_size_once_norms_are_added() -> None:
    # Per layer: 2 RMSNorms (2048) and q/k norms (128 each); final norm.
    norms = 48 * (2 * 2048 + 2 * 128) + 2048
    total_bf16_bytes = 61_064_245_248  # model.safetensors.index.json total_size
    assert count_params(load_model("qwen3-coder-30b-a3b")).total + norms == total_bf16_bytes // 2


def test_glm_indexer_sharing_counts_only_full_indexer_layers() -> None:
    glm = load_model("glm-5.2")
    every_layer = ModelProfile(**{**_fields(glm), "indexer_layers": 0})
    one_indexer = 2048 * 32 * 128 + 6144 * (128 + 32)
    assert count_params(every_layer).total - count_params(glm).total == 57 * one_indexer


@pytest.mark.parametrize(
    ("folder", "packaged"),
    [
        ("deepseek-v3", "deepseek-v3.1"),
        ("glm-5.2", "glm-5.2"),
        ("qwen2.5-32b-instruct", "qwen2.5-32b"),
        ("qwen3-coder-30b-a3b-instruct", "qwen3-coder-30b-a3b"),
    ],
)
def test_hf_import_matches_the_packaged_architecture(folder: str, packaged: str) -> None:
    imported = load_model(HF / folder)
    expected = load_model(packaged)
    assert imported.name == folder
    assert imported.attention == expected.attention
    assert {f: getattr(imported, f) for f in ARCHITECTURE} == {f: getattr(expected, f) for f in ARCHITECTURE}
    assert [f for f in ARCHITECTURE if f in imported.sources and not imported.sources[f]] == []


def test_hf_import_of_deepseek_reads_mla_moe_and_fp8() -> None:
    model = model_from_hf_config(hf_config("deepseek-v3"), "ds")
    assert (model.attention, model.q_lora_rank, model.kv_lora_rank) == ("mla", 1536, 512)
    assert (model.num_experts, model.experts_per_token, model.num_shared_experts) == (256, 8, 1)
    assert model.first_dense_layers == 3 and model.moe_layers == 58
    assert model.index_topk == 0
    assert model.weight_bytes == 1.0
    assert model.sources["first_dense_layers"] == "config.json key first_k_dense_replace"
    assert model.sources["weight_bytes"] == "config.json key quantization_config.quant_method fp8"
    assert model.total_params_b == pytest.approx(671.0, rel=0.001)
    assert model.active_params_b == pytest.approx(37.55, rel=0.001)


def test_hf_import_of_a_glm_like_config_with_index_topk_gives_a_sparse_model() -> None:
    model = model_from_hf_config(hf_config("glm-5.2"), "glm")
    assert (model.index_topk, model.index_n_heads, model.index_head_dim) == (2048, 32, 128)
    assert model.indexer_layers == 21
    assert model.sources["index_topk"] == "config.json key index_topk"
    assert model.sources["weight_bytes"] == "config.json key dtype"


def test_hf_import_of_dsa_without_indexer_types_gives_every_layer_an_indexer() -> None:
    config = {**hf_config("deepseek-v3"), "index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128}
    model = model_from_hf_config(config, "deepseek-v3.2")
    assert (model.index_topk, model.indexer_layers) == (2048, 61)


def test_hf_import_of_qwen3_moe_reads_experts_and_all_moe_layers() -> None:
    model = model_from_hf_config(hf_config("qwen3-coder-30b-a3b-instruct"), "coder")
    assert (model.attention, model.num_kv_heads, model.head_dim) == ("gqa", 4, 128)
    assert (model.num_experts, model.experts_per_token, model.moe_intermediate_size) == (
        128,
        8,
        768,
    )
    assert (model.num_shared_experts, model.first_dense_layers, model.moe_layers) == (0, 0, 48)
    assert model.active_params_b == pytest.approx(3.353, abs=0.001)


def test_hf_import_of_qwen3_moe_with_leading_mlp_only_layers_counts_them_dense() -> None:
    config = {**hf_config("qwen3-coder-30b-a3b-instruct"), "mlp_only_layers": [0, 1]}
    model = model_from_hf_config(config, "coder")
    assert (model.first_dense_layers, model.moe_layers) == (2, 46)


def test_hf_import_of_a_llama_config_defaults_head_dim_and_kv_heads() -> None:
    model = model_from_hf_config(TINY, "tiny")
    assert (model.head_dim, model.num_kv_heads, model.attention) == (16, 4, "gqa")
    assert model.sources["head_dim"] == ("computed: hidden_size / num_attention_heads (no head_dim)")
    assert model.weight_bytes == 2.0
    assert model.sources["weight_bytes"] == "default: no torch_dtype, bfloat16"


def test_hf_import_counts_tied_embeddings_once() -> None:
    config = hf_config("qwen2.5-32b-instruct")
    untied = model_from_hf_config(config, "qwen")
    tied = model_from_hf_config({**config, "tie_word_embeddings": True}, "qwen")
    assert round((untied.total_params_b - tied.total_params_b) * 1e9) == 152064 * 5120
    assert tied.sources["total_params_b"].endswith(", tied embeddings")


def test_loader_reads_a_config_json_file_and_a_toml_path(tmp_path: Path) -> None:
    assert load_model(HF / "qwen2.5-32b-instruct" / "config.json").name == "qwen2.5-32b-instruct"
    toml = tmp_path / "my-model.toml"
    toml.write_text(_packaged_text("models", "qwen2.5-14b"))
    assert load_model(toml) == load_model("qwen2.5-14b")
    hw = tmp_path / "my-gpu.toml"
    hw.write_text(_packaged_text("hardware", "h100-sxm"))
    assert load_hardware(str(hw)) == load_hardware("h100-sxm")


def test_a_user_toml_needs_only_the_fields_it_sets(tmp_path: Path) -> None:
    arch = {
        "num_layers": 2,
        "hidden_size": 64,
        "vocab_size": 100,
        "num_heads": 4,
        "num_kv_heads": 4,
        "head_dim": 16,
        "intermediate_size": 128,
    }
    toml = tmp_path / "tiny.toml"
    toml.write_text(
        'name = "tiny"\nhf_id = "me/tiny"\n'
        + "".join(f"{key} = {value}\n" for key, value in arch.items())
        + "[sources]\n"
        + "".join(f'{key} = "config.json key of me/tiny"\n' for key in arch)
    )
    model = load_model(toml)
    assert (model.num_layers, model.attention, model.weight_bytes) == (2, "gqa", 2.0)
    assert model.sources["head_dim"] == "config.json key of me/tiny"


def test_unknown_names_give_one_line_errors() -> None:
    assert error_of(load_model, "foo") == (
        "model: unknown model 'foo'; known: deepseek-v3.1, glm-5.2, qwen2.5-14b, qwen2.5-32b, "
        "qwen3-coder-30b-a3b (or a path to a .toml file, a config.json or a folder holding one)"
    )
    assert error_of(load_hardware, "tpu-v5") == (
        "hardware: unknown hardware 'tpu-v5'; known: a100-40g-pcie, ascend-910c, cpu-host, h100-sxm, "
        "h200-sxm (or a path to a .toml file)"
    )
    assert issubclass(ProfileError, ValueError)
    assert error_of(load_model, "qwen2.5-15b").startswith("model: unknown model 'qwen2.5-15b'")  # a dot is no path


def test_paths_that_do_not_exist_are_named_missing_not_unknown(tmp_path: Path) -> None:
    assert error_of(load_model, "./missing.toml") == "model: no such file ./missing.toml"
    assert error_of(load_model, str(tmp_path / "config.json")) == f"model: no such file {tmp_path / 'config.json'}"
    assert error_of(load_model, "org/model") == "model: no such file org/model"
    assert error_of(load_model, str(tmp_path)) == f"model: folder {tmp_path} holds no config.json"
    assert error_of(load_hardware, "./x.toml") == "hardware: no such file ./x.toml"


def test_config_json_missing_key_names_it() -> None:
    config = {k: v for k, v in TINY.items() if k != "num_hidden_layers"}
    assert error_of(model_from_hf_config, config, "tiny") == ("config.json of 'tiny': missing key 'num_hidden_layers'")
    moe = {k: v for k, v in hf_config("deepseek-v3").items() if k != "num_experts_per_tok"}
    assert error_of(model_from_hf_config, moe, "ds") == ("config.json of 'ds': missing key 'num_experts_per_tok'")


def test_config_json_non_numeric_value_names_the_key() -> None:
    assert error_of(model_from_hf_config, {**TINY, "num_hidden_layers": "sixty"}, "tiny") == (
        "config.json of 'tiny': key 'num_hidden_layers' must be an integer, got 'sixty'"
    )


def test_config_json_unsupported_values_name_the_key() -> None:
    assert error_of(model_from_hf_config, {**TINY, "torch_dtype": "float64"}, "tiny") == (
        "config.json of 'tiny': key 'torch_dtype' is 'float64'; supported: bfloat16, float16, "
        "float32, float8_e4m3fn, float8_e5m2, int8"
    )
    scattered = {**hf_config("qwen3-coder-30b-a3b-instruct"), "mlp_only_layers": [5]}
    assert error_of(model_from_hf_config, scattered, "coder") == (
        "config.json of 'coder': keys 'decoder_sparse_step'/'mlp_only_layers' make layers [5] "
        "dense; only leading dense layers are supported"
    )
    short = {**hf_config("glm-5.2"), "indexer_types": ["full"] * 3}
    assert error_of(model_from_hf_config, short, "glm") == (
        "config.json of 'glm': key 'indexer_types' must list 'full' or 'shared' for each of 78 layers"
    )


def test_toml_non_numeric_value_names_the_field(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, "num_layers = 61", 'num_layers = "sixty"')
    assert error_of(load_model, path) == (f"model {path}: field 'num_layers' must be an integer, got 'sixty'")


def test_toml_field_without_a_source_is_refused(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, '\nkv_bytes = "deployment', '\nkv_note = "deployment')
    assert error_of(load_model, path) == (
        f"model {path}: [sources] names 'kv_note', which is not a field that takes a source; allowed: "
        + ", ".join(sourced_fields(ModelProfile))
    )
    path = _edited_copy(tmp_path, '\nkv_bytes = "deployment', '\n# kv_bytes = "deployment')
    assert error_of(load_model, path) == (
        f"model {path}: field 'kv_bytes' has no entry in [sources]; every numeric or true/false field needs one"
    )


def test_toml_unknown_field_and_bad_attention_are_refused(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, "num_layers = 61", "num_layers = 61\nlayers = 61")
    assert error_of(load_model, path).startswith(
        f"model {path}: unknown field 'layers'; allowed: name, hf_id, num_layers,"
    )
    path = _edited_copy(tmp_path, 'attention = "mla"', 'attention = "linear"')
    assert error_of(load_model, path) == (f"model {path}: field 'attention' must be one of gqa, mla, got 'linear'")


def test_hardware_toml_efficiency_above_one_is_refused(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, "matmul_efficiency = 0.8", "matmul_efficiency = 70.0", *GPU)
    assert error_of(load_hardware, path) == (f"hardware {path}: field 'matmul_efficiency' must be in (0, 1], got 70.0")


def test_a_hardware_toml_may_carry_a_calibration_table_as_a_record(tmp_path: Path) -> None:
    text = _packaged_text("hardware", "h100-sxm") + '\n[calibration]\nengine = "x"\n[[calibration.runs]]\nname = "a"\n'
    path = tmp_path / "calibrated.toml"
    path.write_text(text)
    assert load_hardware(path) == load_hardware("h100-sxm")
    path.write_text(
        _packaged_text("hardware", "h100-sxm").replace('name = "h100-sxm"', 'name = "h100-sxm"\ncalibration = 3')
    )
    assert error_of(load_hardware, path) == f"hardware {path}: [calibration] must be a table, got 3"
    path = tmp_path / "model.toml"
    path.write_text(_packaged_text("models", "qwen2.5-14b") + '\n[calibration]\nengine = "x"\n')
    assert error_of(load_model, path).startswith(f"model {path}: unknown field 'calibration'")


def test_a_given_graph_collective_latency_needs_a_source(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, '\ngraph_collective_latency_us = "', '\n# graph_collective_latency_us = "', *GPU)
    assert error_of(load_hardware, path) == (
        f"hardware {path}: field 'graph_collective_latency_us' has no entry in [sources]; every numeric or true/false field needs one"
    )


def test_graph_collective_latency_above_the_eager_one_is_refused(tmp_path: Path) -> None:
    path = _edited_copy(tmp_path, "graph_collective_latency_us = 15.0", "graph_collective_latency_us = 16.0", *GPU)
    assert error_of(load_hardware, path) == (
        f"hardware {path}: field 'graph_collective_latency_us' must be <= collective_latency_us (15.0), got 16.0"
    )


@pytest.mark.parametrize("name", HARDWARE)
def test_packaged_hardware_sources_are_not_initial_estimates(name: str) -> None:
    """Issue 10: every constant is sourced, fitted to a named figure, derived, or says plainly that it is not."""
    sources = load_hardware(name).sources
    assert [f for f, text in sources.items() if "initial estimate" in text.lower()] == []


def _decode_and_prefill_collectives(hw: HardwareProfile) -> tuple[list[float], list[float]]:
    """Per-stage collective time of a 64-request decode-only batch and of a 64-token prefill chunk (TP8, PP2)."""
    costs = CostModel(load_model("deepseek-v3.1"), hw, 8, (31, 30))
    decode = BatchShape(64, 0, 0.0, 0.0, 64 * 1500.0, 64 * 1500.0, 0, 64)
    prefill = BatchShape(64, 64, 64 * 65 / 2, 64 * 65 / 2, 0.0, 0.0, 0, 1)
    return costs.stage_costs(decode)[1], costs.stage_costs(prefill)[1]


def test_decode_only_steps_pay_the_graph_collective_latency_prefill_steps_the_eager_one() -> None:
    hw = load_hardware("ascend-910c")
    slower = dataclasses.replace(hw, graph_collective_latency_us=hw.graph_collective_latency_us + 50.0)
    eager = dataclasses.replace(hw, collective_latency_us=hw.collective_latency_us + 50.0)
    decode, prefill = _decode_and_prefill_collectives(hw)
    # two all-reduces per layer, 31 and 30 layers per stage
    assert [b - a for a, b in zip(decode, _decode_and_prefill_collectives(slower)[0])] == pytest.approx(
        [31 * 2 * 50e-6, 30 * 2 * 50e-6]
    )
    assert _decode_and_prefill_collectives(slower)[1] == prefill
    assert _decode_and_prefill_collectives(eager)[0] == decode
    assert [b - a for a, b in zip(prefill, _decode_and_prefill_collectives(eager)[1])] == pytest.approx(
        [31 * 2 * 50e-6, 30 * 2 * 50e-6]
    )
    # same tokens, so the bandwidth term is equal: the decode step is cheaper by the latency difference only
    gap = 2 * (hw.collective_latency_us - hw.graph_collective_latency_us) * 1e-6
    assert [p - d for d, p in zip(decode, prefill)] == pytest.approx([31 * gap, 30 * gap])


def _fields(model: ModelProfile) -> dict[str, Any]:
    """The constructor arguments of a model profile."""
    return {f: getattr(model, f) for f in ModelProfile.__dataclass_fields__}


def _packaged_text(folder: str, name: str) -> str:
    """The text of a packaged TOML profile."""
    package = resources.files("pipedeck.backends.profiles")
    return package.joinpath(folder, f"{name}.toml").read_text()


GPU = ("hardware", "h100-sxm")


def _edited_copy(tmp_path: Path, old: str, new: str, folder: str = "models", name: str = "deepseek-v3.1") -> Path:
    """A copy of a packaged profile (deepseek-v3.1.toml unless named) with one piece of text replaced."""
    text = _packaged_text(folder, name)
    assert old in text
    path = tmp_path / "edited.toml"
    path.write_text(text.replace(old, new, 1))
    return path


def test_a_decode_step_pays_only_for_the_experts_it_touches() -> None:
    """One request touches 8 of DeepSeek's 256 routed experts per layer, 128 requests nearly all of them.

    The routed experts run as a grouped GEMM in which untouched experts have no rows, so a one-request
    decode step costs a small fraction of a 128-request one (charging every expert a padded tile made
    them cost the same).
    """
    costs = CostModel(load_model("deepseek-v3.1"), load_hardware("ascend-910c"), 8, (31, 30))

    def without_collectives(n: int) -> float:
        busy, comm = costs.stage_costs(BatchShape(n, 0, 0.0, 0.0, n * 1500.0, n * 1500.0, 0, n))
        return busy[0] - comm[0]

    assert without_collectives(1) < 0.1 * without_collectives(128)


def test_attention_with_few_query_rows_per_sequence_runs_less_efficiently() -> None:
    """Attention at r query rows per sequence takes (r + half) / r of its time at full efficiency.

    A decode has one row, so its attention costs 1 + half times more per key; a prefill chunk of 512 rows
    (512 + half) / 512. The model is Qwen2.5-14B at TP1 on a profile whose memory is fast enough that
    attention is never bound by its KV reads, so the difference is the attention term alone.
    """
    model = load_model("qwen2.5-14b")
    fast = dataclasses.replace(load_hardware("a100-40g-pcie"), memory_bandwidth_gbs=1e9, gemm_tile_tokens=1)
    half = dataclasses.replace(fast, attention_half_tokens=15.0)
    decode = BatchShape(4, 0, 0.0, 0.0, 4 * 1000.0, 4 * 1000.0, 0, 4)
    two_chunks = BatchShape(1024, 1024, 2 * 512 * 513 / 2, 2 * 512 * 513 / 2, 0.0, 0.0, 0, 2, prefill_chunks=2)

    def attention(hw: HardwareProfile, shape: BatchShape) -> float:
        costs = CostModel(model, hw, 1, (48,))
        no_pairs = BatchShape(
            shape.tokens,
            shape.prefill_tokens,
            0.0,
            0.0,
            0.0,
            0.0,
            shape.prefix_tokens,
            shape.sampled,
            shape.prefill_chunks,
        )  # the same step without its attention
        return costs.stage_costs(shape)[0][0] - costs.stage_costs(no_pairs)[0][0]

    assert attention(half, decode) == pytest.approx(16 * attention(fast, decode))
    assert attention(half, two_chunks) == pytest.approx((512 + 15) / 512 * attention(fast, two_chunks))


def test_a_shared_kv_pool_charges_every_query_row_for_all_the_kv_held() -> None:
    """With kv_pool_scan_ns, a step's attention grows by tokens x pool tokens x the scan time per layer; without
    it (the packaged profiles, paged engines) the KV other requests hold costs the step nothing."""
    model = load_model("qwen2.5-14b")
    paged = load_hardware("a100-40g-pcie")
    shared = dataclasses.replace(paged, kv_pool_scan_ns=2.0)
    chunk = 512

    def step(hw: HardwareProfile, pool: int) -> float:
        shape = BatchShape(chunk, chunk, chunk * (chunk + 1) / 2, chunk * (chunk + 1) / 2, 0.0, 0.0, 0, 1)
        shape.pool_tokens = pool
        return CostModel(model, hw, 1, (48,)).stage_costs(shape)[0][0]

    assert paged.kv_pool_scan_ns == 0 and step(paged, 20_000) == step(paged, chunk)
    extra = step(shared, 20_000) - step(shared, chunk)
    assert extra == pytest.approx(48 * chunk * (20_000 - chunk) * 2.0e-9)


def test_ranks_that_share_a_device_each_run_on_their_share_of_it() -> None:
    """On a host whose ranks share it (cpu-host: vLLM's CPU build splits the cores) each of n ranks has 1/n of
    its compute, memory bandwidth and memory; on an accelerator every rank has a device of its own."""
    host = load_hardware("cpu-host")
    assert host.ranks_share_device and host.per_rank(1) is host
    half = host.per_rank(2)
    assert (half.peak_tflops, half.memory_bandwidth_gbs, half.memory_gb) == pytest.approx(
        (host.peak_tflops / 2, host.memory_bandwidth_gbs / 2, host.memory_gb / 2)
    )
    assert half.step_overhead_ms == host.step_overhead_ms  # host times are each rank's own
    gpu = load_hardware("a100-40g-pcie")
    assert not gpu.ranks_share_device and gpu.per_rank(8) is gpu


def test_every_stage_execution_pays_the_stage_overhead_whatever_layers_it_holds() -> None:
    model = load_model("qwen2.5-14b")
    plain = load_hardware("a100-40g-pcie")
    paid = dataclasses.replace(plain, stage_overhead_ms=2.0)
    decode = BatchShape(4, 0, 0.0, 0.0, 4000.0, 4000.0, 0, 4)
    for split in ((48,), (40, 8)):
        before, after = (CostModel(model, hw, 1, split).stage_costs(decode)[0] for hw in (plain, paid))
        assert [b - a for a, b in zip(before, after)] == pytest.approx([2e-3] * len(split))


def test_decode_steps_launch_their_kernels_only_where_no_graph_is_replayed() -> None:
    """A decode-only step replays a captured graph (no launches) unless the hardware has none (decode_graphs
    false, a CPU engine): then it pays every layer's launches, as a prefill step does on either."""
    model = load_model("qwen2.5-14b")
    graphs = dataclasses.replace(load_hardware("a100-40g-pcie"), kernel_launch_us=5.0)
    eager = dataclasses.replace(graphs, decode_graphs=False)
    decode = BatchShape(4, 0, 0.0, 0.0, 4000.0, 4000.0, 0, 4)
    chunk = BatchShape(512, 512, 512 * 513 / 2, 512 * 513 / 2, 0.0, 0.0, 0, 1)

    def cost(hw: HardwareProfile, shape: BatchShape) -> float:
        return CostModel(model, hw, 1, (48,)).stage_costs(shape)[0][0]

    assert cost(eager, decode) - cost(graphs, decode) == pytest.approx(48 * graphs.kernels_per_layer * 5e-6)
    assert cost(eager, chunk) == cost(graphs, chunk)


def test_a_yes_no_mechanism_must_be_true_or_false_and_sourced(tmp_path: Path) -> None:
    text = (ROOT / "backends/profiles/hardware/cpu-host.toml").read_text()
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(text.replace("ranks_share_device = true", 'ranks_share_device = "yes"', 1))
    with pytest.raises(ProfileError, match="field 'ranks_share_device' must be true or false, got 'yes'"):
        load_hardware(wrong)
    unsourced = tmp_path / "unsourced.toml"
    unsourced.write_text("\n".join(line for line in text.splitlines() if not line.startswith('decode_graphs = "')))
    with pytest.raises(ProfileError, match="field 'decode_graphs' has no entry in \\[sources\\]"):
        load_hardware(unsourced)


@pytest.mark.parametrize("name", HARDWARE)
def test_a_written_profile_loads_back_equal_with_its_sources_and_records(name: str, tmp_path: Path) -> None:
    hardware = load_hardware(name)
    records = {"calibration": {"engine": 'llama.cpp "b1"', "runs": [{"name": "a", "error": -0.05}], "fit": {"n": 2}}}
    path = tmp_path / "written.toml"
    path.write_text(profile_toml(hardware, records, comment="first line\nsecond line"))
    loaded = load_hardware(path)
    assert loaded == hardware and loaded.sources == hardware.sources
    assert tomllib.loads(path.read_text())["calibration"] == records["calibration"]
    unsourced = dataclasses.replace(hardware, sources={k: v for k, v in hardware.sources.items() if k != "peak_tflops"})
    with pytest.raises(ValueError, match="peak_tflops: no source"):
        profile_toml(unsourced)


# -- platforms and checkpoints ---------------------------------------------------------


def test_every_packaged_hardware_names_its_platform() -> None:
    assert {name: load_hardware(name).platform for name in HARDWARE} == {
        "a100-40g-pcie": "cuda",
        "ascend-910c": "ascend",
        "cpu-host": "cpu",
        "h100-sxm": "cuda",
        "h200-sxm": "cuda",
    }


def test_a_platform_pipedeck_does_not_know_is_refused(tmp_path) -> None:
    path = tmp_path / "tpu.toml"
    path.write_text(profile_toml(load_hardware("h100-sxm")).replace('platform = "cuda"', 'platform = "tpu"'))
    with pytest.raises(ProfileError, match=r"field 'platform' must be one of cuda, ascend, cpu, got 'tpu'$"):
        load_hardware(path)


def test_a_checkpoint_entry_names_the_weights_served_on_its_platform() -> None:
    model = load_model("deepseek-v3.1")
    ascend = model.checkpoint("ascend")
    assert (ascend.id, ascend.quantization, ascend.hub) == ("vllm-ascend/DeepSeek-V3.1-W8A8", "ascend", "modelscope")
    assert "multi_node.md" in ascend.source
    assert model.checkpoint("cuda").id == model.hf_id == "deepseek-ai/DeepSeek-V3.1"  # the FP8 Hub release
    assert model.checkpoint("cuda").quantization == ""


def test_checkpoints_survive_the_writer(tmp_path) -> None:
    model = load_model("glm-5.2")
    path = tmp_path / "glm.toml"
    path.write_text(profile_toml(model))
    assert load_model(path).checkpoints == model.checkpoints and set(model.checkpoints) == {"ascend", "cuda"}


@pytest.mark.parametrize(
    "entry, message",
    [
        (
            '[checkpoints.tpu]\nid = "x"\nsource = "s"',
            r"\[checkpoints.tpu\]: unknown platform; allowed: cuda, ascend, cpu$",
        ),
        ('[checkpoints.ascend]\nsource = "s"', r"\[checkpoints.ascend\]: field 'id' must be a non-empty string$"),
        ('[checkpoints.ascend]\nid = "x"', r"\[checkpoints.ascend\]: field 'source' must be a non-empty string$"),
        (
            '[checkpoints.ascend]\nid = "x"\nsource = "s"\nhub = "s3"',
            r"field 'hub' must be one of huggingface, modelscope",
        ),
        (
            '[checkpoints.ascend]\nid = "x"\nsource = "s"\nbits = 8',
            r"unknown field 'bits'; allowed: id, precision, quanti",
        ),
    ],
)
def test_a_bad_checkpoint_entry_is_one_line_naming_it(tmp_path, entry, message) -> None:
    path = tmp_path / "model.toml"
    path.write_text(profile_toml(load_model("qwen2.5-14b")) + "\n" + entry + "\n")
    with pytest.raises(ProfileError, match=message):
        load_model(path)


def test_a_profile_without_the_later_fields_loads_as_the_shared_trace_s_does(tmp_path):
    """A hardware profile written before graph replay and platforms (the Vidur trace's A100) still loads: decode
    steps pay the eager collective latency, with that recorded as the source, and the platform is unknown."""
    text = (ROOT / "backends/profiles/hardware/a100-40g-pcie.toml").read_text()
    kept = [line for line in text.splitlines() if not line.startswith(("graph_collective_latency_us", "platform"))]
    old = tmp_path / "old-a100.toml"
    old.write_text("\n".join(kept) + "\n")
    profile = load_hardware(old)
    assert profile.graph_collective_latency_us == profile.collective_latency_us > 0
    assert profile.sources["graph_collective_latency_us"].startswith("not in the profile")
    assert profile.platform == ""


def test_sources_that_are_not_a_table_are_a_one_line_error_when_a_field_falls_back():
    """The fallback records its own source; a `sources` that is no table is still refused in one line."""
    text = (ROOT / "backends/profiles/hardware/a100-40g-pcie.toml").read_text()
    data = tomllib.loads(text)
    data.pop("graph_collective_latency_us")
    data["sources"] = "oops"
    with pytest.raises(ProfileError, match=r"^hw: \[sources\] must be a table"):
        build_profile(HardwareProfile, data, "hw")
