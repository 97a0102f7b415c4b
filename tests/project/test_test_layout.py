"""The test suite's own layout (docs/contributing.md, "Tests"): tests/ mirrors the packages, every test folder is a
package, and each fixture is defined in one place."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.paths import ROOT, TESTS

APART = ("project", "live")  # the repository as a whole; the tests that need a real server


def modules() -> list[Path]:
    return [path for path in TESTS.rglob("test_*.py") if "__snapshots__" not in path.parts]


def is_fixture(decorator: ast.expr) -> bool:
    """`@pytest.fixture` or `@pytest.fixture(...)`."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Attribute) and target.attr == "fixture"


def test_no_test_module_sits_flat_in_tests():
    assert sorted(path.name for path in TESTS.glob("test_*.py")) == []


def test_each_test_folder_mirrors_a_package_or_is_set_apart():
    folders = {path.parent.relative_to(TESTS) for path in modules()}
    strays = sorted(
        str(folder)
        for folder in folders
        if folder.parts[0] not in APART and not (ROOT / folder / "__init__.py").is_file()
    )
    assert folders and strays == []


def test_every_test_folder_is_a_package():
    folders = {TESTS}
    for path in modules():
        folders |= {folder for folder in path.parents if TESTS in folder.parents}
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_each_fixture_is_defined_once():
    """A fixture that several modules use lives in a conftest.py; a module may extend one under its own name
    (pytest's override that requests the fixture it overrides), never define a second one beside it."""
    defined: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any(map(is_fixture, node.decorator_list)):
                extends = node.name in {arg.arg for arg in node.args.args}
                if not extends:
                    defined[node.name].append(str(path.relative_to(TESTS)))
    assert defined and {name: paths for name, paths in defined.items() if len(paths) > 1} == {}
