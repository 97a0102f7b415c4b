"""pipedeck's errors by kind: one base to catch, bad input apart from failures while running.

The bottom of the layering: every package may import it and it imports
nothing of pipedeck. Every error pipedeck raises derives from one kind below
(tests/project/test_errors.py walks the modules to hold it); the CLI turns each kind
into one line on stderr and its exit status (console/errors.py).
"""

from __future__ import annotations

__all__ = ["Cancelled", "InputError", "PipedeckError", "RuntimeFailure"]


class PipedeckError(Exception):
    """Base of pipedeck's errors: a one-line message that starts with what it concerns (`field: what went wrong`).

    Callers catch this one base. `field` is the text before the first colon unless given.
    """

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field if field is not None else message.partition(":")[0].strip()


class InputError(PipedeckError, ValueError):
    """Bad input (a flag, a file, a value), refused before any work: the message names the field and what is
    allowed. The CLI exits with status 2."""


class RuntimeFailure(PipedeckError):
    """The input was fine but running failed: a server died or served nothing, a store is locked or went away,
    a database storage was lost. The CLI exits with status 1."""


class Cancelled(PipedeckError):
    """Not a failure: the work was asked to stop (an observer, a signal, the operator). The CLI exits with status
    130, as for Ctrl-C."""

    def __init__(self, message: str = "", field: str | None = None):
        super().__init__(message, field)
