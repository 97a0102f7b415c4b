"""Device memory: weights per device, KV bytes per token, KV cache capacity."""

from __future__ import annotations

from .profiles.schema import HardwareProfile, ModelProfile

GB = 1e9


def kv_bytes_per_token_layer(model: ModelProfile, tp: int) -> float:
    """KV cache bytes one token costs in one layer on one device of a TP group.

    GQA/MHA shard KV heads over the group (replicated when there are fewer KV
    heads than devices). MLA's latent has no heads to shard; pipedeck assumes it
    is sharded by tokens over the group (decode context parallelism), without
    which the 1M-token runs of calibration.md A would not fit in 64 GB NPUs.
    """
    if model.attention == "mla":
        return (model.kv_lora_rank + model.qk_rope_head_dim) * model.kv_bytes / tp
    return 2 * model.head_dim * model.kv_bytes * -(-model.num_kv_heads // tp)


def weight_bytes_per_device(model: ModelProfile, tp: int, layers: int) -> float:
    """Weight bytes on one device of a rank that holds `layers` layers."""
    return model.total_params_b * 1e9 * model.weight_bytes * layers / model.num_layers / tp


def kv_capacity_tokens(model: ModelProfile, hw: HardwareProfile, tp: int, layers_per_rank: list[int]) -> int:
    """Tokens of KV cache the cluster holds: the tightest rank decides."""
    usable = hw.memory_gb * GB * hw.memory_utilization - hw.activation_reserve_gb * GB
    per_layer = kv_bytes_per_token_layer(model, tp)
    return int(
        min((usable - weight_bytes_per_device(model, tp, layers)) / (per_layer * layers) for layers in layers_per_rank)
    )
