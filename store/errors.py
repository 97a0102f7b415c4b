"""The store's errors: `StoreError` to catch either kind, `StoreInputError` for what it refuses, `StoreFailure` for
what it could not do."""

from __future__ import annotations

from ..errors import InputError, PipedeckError, RuntimeFailure


class StoreError(PipedeckError):
    """Anything the run store refused or could not do; one line naming the store file (or the record) and what.

    Callers catch this one class; the store raises one of its two kinds below, never this class itself.
    """


class StoreInputError(StoreError, InputError):
    """What the store was given cannot be used: a path that holds no store (or not one this pipedeck can read or
    write), a record that is not there, or a value it does not take."""


class StoreFailure(StoreError, RuntimeFailure):
    """The store could not do what it was asked: the file is locked by another process, or DuckDB failed (the
    file went away, the disk filled) while reading or writing."""
