"""The one error type raised for bad profile input."""

from __future__ import annotations

from ...scenarios import PipedeckError


class ProfileError(PipedeckError):
    """A profile, name or config.json is invalid; the message is one line naming the field."""
