"""Chunk sizes that run but are likely mistakes: below the hardware's GEMM tile, above the model's context."""

from __future__ import annotations

from .config import ResolvedConfig
from .tokens import format_tokens


def chunk_warnings(config: ResolvedConfig) -> list[str]:
    """One line per thing odd about the config's chunk (the step token budget); none when it is ordinary."""
    model, hardware, chunk = config.model_profile, config.hardware_profile, int(config.scheduling.chunk)
    lines = []
    if chunk < hardware.gemm_tile_tokens:
        lines.append(
            f"chunk: {chunk} tokens is below the {hardware.gemm_tile_tokens}-token GEMM tile of "
            f"{hardware.name}: every step pays for a whole tile, and a prompt takes a step per {chunk} "
            "tokens"
        )
    context = model.max_position_embeddings
    if context and chunk > context:
        lines.append(
            f"chunk: {format_tokens(chunk)} tokens is above the {format_tokens(context)}-token context of "
            f"{model.name} (max_position_embeddings): no one prompt fills a chunk, only several together"
        )
    return lines
