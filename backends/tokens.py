"""Token counts as operators write them: 24k, 24K, 1m, 24576."""

from __future__ import annotations

import math

_SUFFIX = {"k": 1024, "m": 1024 * 1024}


def parse_tokens(value: int | str, field: str) -> int:
    """Parse a positive token count; k = 1024 and m = 1024*1024 tokens."""
    from .errors import ConfigError

    if isinstance(value, bool):
        raise ConfigError(f"{field}: expected a token count such as 24k or 24576, got {value!r}")
    if isinstance(value, int):
        tokens = value
    else:
        text = str(value).strip().lower()
        scale = _SUFFIX.get(text[-1:], 1)
        digits = text[:-1] if scale != 1 else text
        try:
            number = float(digits)
        except ValueError:
            raise ConfigError(f"{field}: expected a token count such as 24k or 24576, got {value!r}") from None
        if not math.isfinite(number):
            raise ConfigError(f"{field}: expected a token count such as 24k or 24576, got {value!r}")
        if number != int(number) and scale == 1:
            raise ConfigError(f"{field}: expected a whole number of tokens, got {value!r}")
        tokens = int(number * scale)
    if tokens <= 0:
        raise ConfigError(f"{field}: must be a positive token count, got {value!r}")
    return tokens


def format_tokens(tokens: int) -> str:
    """Render a token count compactly (24576 -> 24k, 5000 -> 5000)."""
    if tokens % (1024 * 1024) == 0:
        return f"{tokens // (1024 * 1024)}m"
    if tokens % 1024 == 0:
        return f"{tokens // 1024}k"
    return str(tokens)
