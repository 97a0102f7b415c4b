"""Where tests find the repository and their data files, whichever folder under tests/ a test module sits in."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the repository's root
DATA = TESTS / "data"
