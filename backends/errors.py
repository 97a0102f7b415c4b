"""The error types for invalid serving configurations and for servers that fail under measurement."""

from ..scenarios import PipedeckError


class ConfigError(PipedeckError):
    """A config value is not allowed; the message is one line naming the field."""


class ServerError(PipedeckError):
    """A server under measurement failed: it would not start, died, or served nothing; one line naming the cause.

    It fails the measurement of that config only (a tuner trial, a confirm row), never the whole tune.
    """
