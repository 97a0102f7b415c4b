"""The import layering of the architecture, as import-linter contracts (pyproject.toml), holds."""

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import ROOT


def test_the_layering_contracts_are_kept():
    """`lint-imports`, run as a developer would from the repository root, keeps every contract."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in done.stdout
