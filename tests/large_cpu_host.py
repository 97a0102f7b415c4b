"""A CPU host that holds Qwen2.5-14B on two ranks: the packaged cpu-host with 128 GB of memory instead of 25 GB
(its ranks share it, so the weights must fit once), written once per test session to a temporary folder."""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from pathlib import Path

from tests.paths import ROOT


def _write() -> str:
    folder = Path(tempfile.mkdtemp(prefix="pipedeck-large-cpu-host-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    text = (ROOT / "backends/profiles/hardware/cpu-host.toml").read_text()
    text = re.sub(r"^memory_gb = .*$", "memory_gb = 128.0", text, count=1, flags=re.M)
    path = folder / "cpu-host-128g.toml"
    path.write_text(text.replace('name = "cpu-host"', 'name = "cpu-host-128g"', 1))
    return str(path)


LARGE_CPU_HOST = _write()
