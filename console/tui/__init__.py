"""The Textual console (`pipedeck console`): Live, Tune, Runs and Config views over one run store."""

from .app import PipedeckApp

__all__ = ["PipedeckApp"]
