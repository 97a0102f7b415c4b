"""Parameter counts of a model computed from its architecture.

Counted: the embedding and the output head (once when tied), the attention
projections of every layer (GQA: q, k, v, o; MLA: q_a, q_b or q, kv_a, kv_b,
o), the DSA indexer projections (q, k, head weights) of each layer that runs
its own indexer, the dense FFN (gate, up, down) of dense layers, and for MoE
layers the router plus all routed and shared experts (total) or the
``experts_per_token`` routed plus the shared experts (active). Norms and
biases are left out (under 0.1%), and so are multi-token-prediction layers,
as in the published totals (DeepSeek-V3: 671B main model + 14B MTP).
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema import ModelProfile


@dataclass(frozen=True, slots=True)
class ParamCount:
    """Total parameters and those used per token."""

    total: int
    active: int


def count_params(model: ModelProfile, tied_embeddings: bool = False) -> ParamCount:
    """Count total and active parameters of `model` from its architecture."""
    embeddings = model.vocab_size * model.hidden_size * (1 if tied_embeddings else 2)
    shared = embeddings + model.num_layers * _attention(model) + _indexers(model)
    if not model.is_moe:
        dense = model.num_layers * _ffn(model, model.intermediate_size)
        return ParamCount(total=shared + dense, active=shared + dense)
    shared += model.first_dense_layers * _ffn(model, model.intermediate_size)
    expert = _ffn(model, model.moe_intermediate_size)
    router = model.num_experts * model.hidden_size
    total_moe = (model.num_experts + model.num_shared_experts) * expert + router
    active_moe = (model.experts_per_token + model.num_shared_experts) * expert + router
    return ParamCount(
        total=shared + model.moe_layers * total_moe,
        active=shared + model.moe_layers * active_moe,
    )


def _attention(m: ModelProfile) -> int:
    """Attention projection weights of one layer."""
    h = m.hidden_size
    if m.attention != "mla":
        return 2 * h * m.num_heads * m.head_dim + 2 * h * m.num_kv_heads * m.head_dim
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    q_in = m.q_lora_rank or h
    q = (h * m.q_lora_rank if m.q_lora_rank else 0) + q_in * m.num_heads * qk
    kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)
    kv_b = m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
    return q + kv_a + kv_b + m.num_heads * m.v_head_dim * h


def _indexers(m: ModelProfile) -> int:
    """DSA indexer weights over all layers that run their own indexer."""
    if not m.index_topk:
        return 0
    q_in = m.q_lora_rank or m.hidden_size
    q = q_in * m.index_n_heads * m.index_head_dim
    one = q + m.hidden_size * (m.index_head_dim + m.index_n_heads)
    return (m.indexer_layers or m.num_layers) * one


def _ffn(m: ModelProfile, intermediate: int) -> int:
    """Gated FFN (gate, up, down) weights of the given intermediate size."""
    return 3 * m.hidden_size * intermediate
