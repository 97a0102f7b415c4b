"""Import a Hugging Face config.json as a ModelProfile.

Handles Llama/Qwen2-style dense models (GQA), Qwen3-MoE (num_experts,
decoder_sparse_step, mlp_only_layers), DeepSeek-V3-style MLA and MoE
(kv_lora_rank, n_routed_experts, first_k_dense_replace) and DSA sparse
attention as in DeepSeek-V3.2 and GLM-5 (index_topk, index_n_heads,
index_head_dim, and GLM-5.2's per-layer ``indexer_types``). Parameter
counts come from the architecture (see params.py); every field's source
names the config.json key it was read from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .build import build_profile
from .errors import ProfileError
from .params import count_params
from .schema import ModelProfile

_DTYPE_BYTES = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "float32": 2.0,
    "float8_e4m3fn": 1.0,
    "float8_e5m2": 1.0,
    "int8": 1.0,
}
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


class _Reader:
    """Typed reads of config.json keys that record each field's value and source."""

    def __init__(self, config: Mapping[str, Any], name: str) -> None:
        self.config = config
        self.label = f"config.json of {name!r}"
        self.fields: dict[str, Any] = {}
        self.sources: dict[str, str] = {}

    def has(self, key: str) -> bool:
        """True when the key is present and not null."""
        return self.config.get(key) is not None

    def integer(self, key: str) -> int:
        """The integer at `key`; ProfileError when missing or not an integer."""
        value = self.config.get(key)
        if value is None:
            raise ProfileError(f"{self.label}: missing key {key!r}")
        if not isinstance(value, int) or isinstance(value, bool):
            raise ProfileError(f"{self.label}: key {key!r} must be an integer, got {value!r}")
        return value

    def set(self, field: str, value: Any, source: str) -> None:
        """Record a field and where its value comes from."""
        self.fields[field] = value
        self.sources[field] = source

    def copy(self, field: str, key: str) -> int:
        """Set `field` from the integer at `key` and return it."""
        value = self.integer(key)
        self.set(field, value, f"config.json key {key}")
        return value

    def fail(self, message: str) -> ProfileError:
        """A ProfileError labelled with this config."""
        return ProfileError(f"{self.label}: {message}")


def model_from_hf_config(config: Mapping[str, Any], name: str) -> ModelProfile:
    """Build a ModelProfile named `name` from a parsed Hugging Face config.json."""
    r = _Reader(config, name)
    r.fields.update(name=name, hf_id=name)
    r.copy("num_layers", "num_hidden_layers")
    r.copy("hidden_size", "hidden_size")
    r.copy("vocab_size", "vocab_size")
    heads = r.copy("num_heads", "num_attention_heads")
    if r.has("num_key_value_heads"):
        r.copy("num_kv_heads", "num_key_value_heads")
    else:
        r.set("num_kv_heads", heads, "config.json key num_attention_heads (no num_key_value_heads)")
    if r.has("kv_lora_rank"):
        _read_mla(r)
    else:
        _read_gqa(r)
    _read_ffn(r)
    if r.has("index_topk") and r.integer("index_topk") > 0:
        _read_dsa(r)
    _read_precision(r)
    if r.has("max_position_embeddings"):
        r.copy("max_position_embeddings", "max_position_embeddings")
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise r.fail(f"key 'tie_word_embeddings' must be true or false, got {tied!r}")
    counts = count_params(ModelProfile(**r.fields), tied_embeddings=tied)
    formula = "computed from the architecture (params.py)" + (", tied embeddings" if tied else "")
    r.set("total_params_b", counts.total / 1e9, formula)
    r.set("active_params_b", counts.active / 1e9, formula)
    return build_profile(ModelProfile, {**r.fields, "sources": r.sources}, r.label)


def _read_gqa(r: _Reader) -> None:
    """Grouped-query attention: head_dim, defaulting to hidden_size / heads."""
    r.fields["attention"] = "gqa"
    if r.has("head_dim"):
        r.copy("head_dim", "head_dim")
        return
    hidden, heads = r.fields["hidden_size"], r.fields["num_heads"]
    if not heads or hidden % heads:
        raise r.fail(
            f"missing key 'head_dim' and hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
        )
    r.set("head_dim", hidden // heads, "computed: hidden_size / num_attention_heads (no head_dim)")


def _read_mla(r: _Reader) -> None:
    """Multi-head latent attention ranks; head_dim is the q/k head dim nope + rope."""
    r.fields["attention"] = "mla"
    if r.has("q_lora_rank"):
        r.copy("q_lora_rank", "q_lora_rank")
    else:
        r.set("q_lora_rank", 0, "config.json key q_lora_rank is null: queries not compressed")
    r.copy("kv_lora_rank", "kv_lora_rank")
    nope = r.copy("qk_nope_head_dim", "qk_nope_head_dim")
    rope = r.copy("qk_rope_head_dim", "qk_rope_head_dim")
    r.copy("v_head_dim", "v_head_dim")
    r.set("head_dim", nope + rope, "computed: qk_nope_head_dim + qk_rope_head_dim (MLA q/k head)")


def _read_ffn(r: _Reader) -> None:
    """Dense FFN size, and for MoE models the experts and the leading dense layers."""
    expert_key = next((k for k in _EXPERT_KEYS if r.has(k) and r.integer(k) > 0), None)
    if expert_key is None:
        r.copy("intermediate_size", "intermediate_size")
        return
    num_layers = r.fields["num_layers"]
    r.copy("num_experts", expert_key)
    r.copy("experts_per_token", "num_experts_per_tok")
    if r.has("moe_intermediate_size"):
        expert_size = r.copy("moe_intermediate_size", "moe_intermediate_size")
    else:
        expert_size = r.integer("intermediate_size")
        r.set(
            "moe_intermediate_size",
            expert_size,
            "config.json key intermediate_size (no moe_intermediate_size: full-size experts)",
        )
    if expert_size <= 0:
        raise r.fail(f"expert size must be > 0, got {expert_size}")
    _read_shared_experts(r, expert_size)
    dense = _dense_layers(r, num_layers)
    if dense or r.has("intermediate_size"):
        r.copy("intermediate_size", "intermediate_size")
    r.set("first_dense_layers", dense, _dense_source(r))


def _read_shared_experts(r: _Reader, expert_size: int) -> None:
    """Shared experts: n_shared_experts, or a shared FFN that is a multiple of one expert."""
    if r.has("n_shared_experts"):
        r.copy("num_shared_experts", "n_shared_experts")
        return
    if not r.has("shared_expert_intermediate_size"):
        r.set("num_shared_experts", 0, "config.json has no n_shared_experts: no shared experts")
        return
    shared_size = r.integer("shared_expert_intermediate_size")
    if shared_size % expert_size:
        raise r.fail(
            f"key 'shared_expert_intermediate_size' ({shared_size}) must be a multiple of the expert size {expert_size}"
        )
    r.set(
        "num_shared_experts",
        shared_size // expert_size,
        "config.json key shared_expert_intermediate_size / moe_intermediate_size",
    )


def _dense_layers(r: _Reader, num_layers: int) -> int:
    """Number of leading dense layers; other dense layers are refused."""
    if r.has("first_k_dense_replace"):
        if r.has("moe_layer_freq") and r.integer("moe_layer_freq") != 1:
            raise r.fail(f"key 'moe_layer_freq' must be 1, got {r.integer('moe_layer_freq')}")
        return r.integer("first_k_dense_replace")
    step = r.integer("decoder_sparse_step") if r.has("decoder_sparse_step") else 1
    if step < 1:
        raise r.fail(f"key 'decoder_sparse_step' must be >= 1, got {step}")
    only = r.config.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise r.fail(f"key 'mlp_only_layers' must be a list of layer indices, got {only!r}")
    dense = sorted(i for i in range(num_layers) if i in only or (i + 1) % step)
    if dense != list(range(len(dense))):
        raise r.fail(
            f"keys 'decoder_sparse_step'/'mlp_only_layers' make layers {dense} dense; "
            "only leading dense layers are supported"
        )
    return len(dense)


def _dense_source(r: _Reader) -> str:
    """Where the count of leading dense layers comes from."""
    if r.has("first_k_dense_replace"):
        return "config.json key first_k_dense_replace"
    if r.has("decoder_sparse_step") or r.has("mlp_only_layers"):
        return "config.json keys decoder_sparse_step and mlp_only_layers"
    return "config.json has no first_k_dense_replace or mlp_only_layers: every layer MoE"


def _read_dsa(r: _Reader) -> None:
    """DSA sparse attention: top-k, indexer heads and dims, layers with their own indexer."""
    r.copy("index_topk", "index_topk")
    r.copy("index_n_heads", "index_n_heads")
    r.copy("index_head_dim", "index_head_dim")
    num_layers = r.fields["num_layers"]
    kinds = r.config.get("indexer_types")
    if kinds is None:
        r.set("indexer_layers", num_layers, "config.json has no indexer_types: all layers")
        return
    valid = isinstance(kinds, list) and len(kinds) == num_layers
    if not valid or not all(kind in ("full", "shared") for kind in kinds):
        raise r.fail(f"key 'indexer_types' must list 'full' or 'shared' for each of {num_layers} layers")
    r.set("indexer_layers", kinds.count("full"), "config.json key indexer_types: count of 'full'")


def _read_precision(r: _Reader) -> None:
    """Weight bytes from quantization_config or torch_dtype; KV cache in 16 bits."""
    quant = r.config.get("quantization_config")
    if quant is not None:
        if not isinstance(quant, Mapping):
            raise r.fail(f"key 'quantization_config' must be an object, got {quant!r}")
        if quant.get("quant_method") == "fp8":
            r.set("weight_bytes", 1.0, "config.json key quantization_config.quant_method fp8")
        elif isinstance(quant.get("bits"), int) and not isinstance(quant.get("bits"), bool):
            r.set("weight_bytes", quant["bits"] / 8, "config.json key quantization_config.bits / 8")
        else:
            raise r.fail(
                f"key 'quantization_config' has quant_method {quant.get('quant_method')!r}; "
                "supported: fp8, or an integer 'bits'"
            )
    else:
        key = "torch_dtype" if r.has("torch_dtype") else "dtype"
        dtype = r.config.get(key, "bfloat16")
        if dtype not in _DTYPE_BYTES:
            raise r.fail(f"key {key!r} is {dtype!r}; supported: {', '.join(_DTYPE_BYTES)}")
        source = f"config.json key {key}" if r.has(key) else "default: no torch_dtype, bfloat16"
        if dtype == "float32":
            source += " (float32 is served in 16 bits)"
        r.set("weight_bytes", _DTYPE_BYTES[dtype], source)
    r.set("kv_bytes", 2.0, "default: 16-bit KV cache (kv-cache-dtype auto)")
