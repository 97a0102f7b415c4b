"""The simulator's compiled core: which modules it is, and whether this process runs it.

setup.py compiles the modules in CORE with mypyc into one extension group
and adds `_core_digest`, the digest of the sources it compiled. Python
imports a compiled extension in preference to the .py beside it, so where
the compiled core must not run (PIPEDECK_PURE set, or sources edited since
the build in an editable install) `load_pure_core` imports the .py files
explicitly. This module imports nothing of pipedeck: setup.py loads it by
path.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import zlib
from pathlib import Path

CORE = ("costs", "request", "groups", "scheduler", "engine")  # backends/sim modules, in import order


def source_digest(folder: Path) -> str:
    """CRC-32 over the sources of the core modules in `folder`: it tells an edited source from the one compiled
    (no adversary here), and zlib loads in a fraction of hashlib's time, which every simulate pays."""
    crc = 0
    for name in CORE:
        crc = zlib.crc32((folder / f"{name}.py").read_bytes(), crc)
    return f"{crc:08x}"


def choose_core(package: str, folder: Path) -> tuple[bool, str]:
    """Whether to run the compiled core of `package` (whose sources are in `folder`), and why or why not."""
    if os.environ.get("PIPEDECK_PURE"):
        return False, "pure Python (PIPEDECK_PURE is set)"
    try:
        digest = importlib.import_module(f"{package}._core_digest").DIGEST  # only a compiled build has it
    except ImportError:
        return False, "pure Python (installed without a compiled core)"
    if digest != source_digest(folder):
        return False, "pure Python (the core's sources changed since it was compiled; pip install -e . rebuilds it)"
    return True, "compiled with mypyc"


def load_pure_core(package: str, folder: Path) -> None:
    """Import the core modules of `package` from their .py files, before anything imports them."""
    for name in CORE:
        fullname = f"{package}.{name}"
        spec = importlib.util.spec_from_file_location(fullname, folder / f"{name}.py")
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {fullname} from {folder}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[fullname] = module
        spec.loader.exec_module(module)
