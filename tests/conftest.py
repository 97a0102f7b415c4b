"""Shared test setup: no test writes the default run store (./pipedeck.duckdb) by accident."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_run_store(tmp_path_factory, monkeypatch):
    """Point $PIPEDECK_DB at a fresh file outside the test's own tmp_path and working directory."""
    monkeypatch.setenv("PIPEDECK_DB", str(tmp_path_factory.mktemp("store") / "pipedeck.duckdb"))
