"""`StoreError`: a run store that cannot be opened, read or written, or a missing record."""

from __future__ import annotations

from ..scenarios import PipedeckError


class StoreError(PipedeckError):
    """One line naming the store file (or the missing record) and what went wrong."""
