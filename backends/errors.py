"""The error type for invalid serving configurations."""


class ConfigError(ValueError):
    """A config value is not allowed; the message is one line naming the field."""
