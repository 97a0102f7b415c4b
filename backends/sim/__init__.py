"""The embedded discrete-event simulator: the default backend."""

from .backend import SimBackend

__all__ = ["SimBackend"]
