"""The one error type raised for bad profile input."""

from __future__ import annotations

from ...errors import InputError


class ProfileError(InputError):
    """A profile, name or config.json is invalid; the message is one line naming the field."""
