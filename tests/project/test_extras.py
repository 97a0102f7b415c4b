"""pyproject.toml's extras: each package an extra installs is used by pipedeck, its tests or CI, and `png`'s
plotly is one kaleido 1.x can drive."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.paths import ROOT

SOURCES = ("backends", "console", "scenarios", "store", "tuner", "tests", "benchmarks")
CI = ROOT / ".ci" / "run"  # the commands it runs (ruff, mypy) use the test extra too
# Packages used by another name than a module they provide: a pytest fixture, a command, the module stubs type.
USED_AS = {"pytest-textual-snapshot": "snap_compare", "import-linter": "lint-imports", "types-psutil": "psutil"}
KALEIDO_1_NEEDS_PLOTLY = Version("6.1.1")  # kaleido's README, "Migrating from v0 to v1"


def extras() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {name: [Requirement(text) for text in texts] for name, texts in project["optional-dependencies"].items()}


@functools.cache
def names_in_code() -> set[str]:
    """Every module imported, string literal and argument name in pipedeck's code, tests and benchmarks,
    and every command .ci/run runs."""
    names = set(re.findall(r"^([\w-]+)", CI.read_text(), flags=re.MULTILINE))
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.split(".")[0])
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    names.add(node.value)
                elif isinstance(node, ast.arg):
                    names.add(node.arg)
    return names


def names_of(requirement: Requirement) -> set[str]:
    """What code would name the package by: its top-level modules where it is installed, else its name as a module."""
    wanted = canonicalize_name(requirement.name)
    if wanted in USED_AS:
        return {USED_AS[wanted]}
    modules = {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if wanted in {canonicalize_name(d) for d in dists}
    }
    return modules or {wanted.replace("-", "_")}


EXTRA_PACKAGES = [
    (extra, req) for extra, reqs in extras().items() for req in reqs if canonicalize_name(req.name) != "pipedeck"
]  # pipedeck[postgres]: another extra, checked there


@pytest.mark.parametrize("extra, requirement", EXTRA_PACKAGES, ids=[f"{e}:{r.name}" for e, r in EXTRA_PACKAGES])
def test_every_package_an_extra_installs_is_used(extra, requirement):
    """An extra nobody imports only makes pipedeck's environment heavier (and may pull in an engine)."""
    assert names_of(requirement) & names_in_code(), (
        f"[{extra}] installs {requirement.name}, which no code or test under {', '.join(SOURCES)} nor .ci/run uses"
    )


def test_the_png_extra_installs_a_plotly_that_kaleido_1_can_drive():
    (kaleido,) = [r for r in extras()["png"] if r.name == "kaleido"]
    assert not kaleido.specifier.contains("0.2.1")  # pipedeck's PNG export calls kaleido 1.x
    (plotly,) = [r for r in extras()["png"] if r.name == "plotly"]
    assert plotly.specifier.contains(KALEIDO_1_NEEDS_PLOTLY)
    assert not plotly.specifier.contains("6.1.0") and not plotly.specifier.contains("5.24.1")
