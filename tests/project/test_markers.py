"""The live marker: `python -m pytest -m 'not live'` runs the fast suite, without any test under tests/live."""

from __future__ import annotations

import subprocess
import sys

from tests.paths import ROOT

NO_TESTS_COLLECTED = 5  # pytest's exit status when every test was deselected


def test_not_live_deselects_every_test_under_tests_live():
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not live",
            "tests/live",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collected.returncode == NO_TESTS_COLLECTED, collected.stdout[-2000:]
