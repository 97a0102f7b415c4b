"""The scenario error and the checks that raise it."""

from __future__ import annotations

import math
import numbers
from typing import TypeGuard, TypeVar

from ..errors import InputError


class ScenarioError(InputError):
    """A scenario input is invalid; the message is one line naming the field."""


def require(ok: bool, field: str, allowed: str, got: object) -> None:
    """Raise ``ScenarioError("<field>: must be <allowed>, got <got>")`` unless ok."""
    if not ok:
        raise ScenarioError(f"{field}: must be {allowed}, got {got_text(got)}")


def got_text(value: object) -> str:
    """A value an error quotes: its repr, or "no value" for a missing one (never Python's None)."""
    return "no value" if value is None else repr(value)


def is_int(value: object) -> TypeGuard[int]:
    """True for an integer (Python or numpy: numpy registers its types with `numbers`), False for bools and floats."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[float]:
    """True for a finite real number, False for bools."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_rate(rate: object) -> None:
    """Check a request rate (requests per second)."""
    require(is_number(rate) and rate > 0, "rate", "a positive number of requests per second", rate)


Value = TypeVar("Value")


def head(values: tuple[Value, ...], n: int) -> tuple[Value, ...]:
    """The first ``n`` values of a recorded trace column."""
    require(n <= len(values), "num_requests", f"at most {len(values)} (the trace's rows)", n)
    return values[:n]
