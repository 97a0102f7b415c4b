"""The error type for invalid serving configurations."""

from ..scenarios.errors import PipedeckError


class ConfigError(PipedeckError):
    """A config value is not allowed; the message is one line naming the field."""
