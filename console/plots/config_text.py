"""A stored config's values as figures, tables and the TUI print them.

A stored config is JSON (`RunResult.config`, `TrialRow.config`): a value may be of any type to the checker, and a
live server's own config lacks the shape fields, so each reader narrows the value it prints.
"""

from __future__ import annotations

from ...backends import format_tokens


def tokens_text(value: object) -> str:
    """A token count as `format_tokens` writes it (24576 -> 24k); any other value as it is."""
    return format_tokens(value) if isinstance(value, int) else str(value)


def split_text(value: object) -> str:
    """A layer split as comma-separated layer counts (31,30); any other value as it is."""
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
