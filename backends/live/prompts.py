"""Prompts of a requested length, reproducible from the seed: token-id lists, or text for servers that refuse ids.

Token ids are drawn uniformly from [low, high). The default range, 100..999,
skips the control and byte tokens that sit at the start of common vocabularies
and the special tokens that sit at their end (Llama 3 from 128000, Qwen from
151643); it is clipped to the vocabulary a server reports (llama-server's
`n_vocab`). Text prompts are common English words, about one token each, so
their length is approximate; the server's `usage.prompt_tokens` says the truth.

The same seed and request give the same prompt, so every rate of a goodput
search replays the same prompts and a server's prefix cache serves the later
rates from what the earlier ones left. Drawn "fresh at" a rate, each
request's prompt comes from a stream keyed by that rate as well: the same
for the same seed, request and rate, different (from the first token on,
but for chance) at any other rate.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError

DEFAULT_TOKEN_IDS = (100, 1000)
WORDS = tuple(
    " " + word
    for word in (
        "the of and to in is that for it as was with be by on not he this are or his from at which but have an they"
        " you were her she there one all we their has been if more when will would who so no time people year way day"
        " man thing woman life child world school state family student group country problem hand part place case"
        " week company system program question work government number night point home water room mother area money"
    ).split()
)


def token_range(requested: tuple[int, int] | None, n_vocab: int | None) -> tuple[int, int]:
    """The [low, high) prompt-id range: the one requested, else the default clipped to the server's vocabulary."""
    if requested is not None:
        low, high = requested
        if not 0 <= low < high:
            raise ConfigError(f"token_ids: need 0 <= low < high, got {requested!r}")
        if n_vocab is not None and high > n_vocab:
            raise ConfigError(f"token_ids: high {high} is beyond the server's vocabulary of {n_vocab} tokens")
        return low, high
    low, high = DEFAULT_TOKEN_IDS
    if n_vocab is not None:
        high = min(high, n_vocab)
        if high - low < 10:
            raise ConfigError(
                f"token_ids: the server's vocabulary ({n_vocab} tokens) is too small for the default "
                f"range {DEFAULT_TOKEN_IDS}; pass token_ids"
            )
    return low, high


def token_prompt(
    seed: int, request_id: int, length: int, ids: tuple[int, int], fresh_at: float | None = None
) -> list[int]:
    """`length` token ids in [ids[0], ids[1]), the same for the same seed and request (and `fresh_at` rate)."""
    drawn = prompt_stream(seed, request_id, fresh_at).integers(ids[0], ids[1], length)
    prompt: list[int] = drawn.tolist()  # numpy types tolist() as Any
    return prompt


def text_prompt(seed: int, request_id: int, length: int, fresh_at: float | None = None) -> str:
    """About `length` tokens of words, the same for the same seed and request (and `fresh_at` rate)."""
    return "".join(WORDS[i] for i in prompt_stream(seed, request_id, fresh_at).integers(0, len(WORDS), length))


def prompt_stream(seed: int, request_id: int, fresh_at: float | None) -> np.random.Generator:
    """The random stream of one request's prompt: the seed's and the request's, and the rate's when fresh."""
    if fresh_at is None:
        return np.random.default_rng((seed, request_id))
    return np.random.default_rng((seed, request_id, int(np.float64(fresh_at).view(np.uint64))))  # the rate's bits
