"""The import layering of the architecture, as import-linter contracts (pyproject.toml), holds; each package's
surface (its `__init__`) names every public name once."""

import ast
import contextlib
import importlib
import pkgutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest
from importlinter import configuration
from importlinter.contracts.forbidden import ForbiddenContract

from pipedeck.console.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
IMPORTLINTER = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
SURFACES = ("scenarios", "backends", "store", "tuner")  # the packages other packages import


def contract(name: str) -> dict:
    """A contract of pyproject.toml by name."""
    return next(c for c in IMPORTLINTER["contracts"] if c["name"] == name)


def test_the_layering_contracts_are_kept():
    """`lint-imports`, run by this interpreter from the repository root, keeps every contract."""
    lint = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    done = subprocess.run([sys.executable, "-c", lint], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"Contracts: {len(IMPORTLINTER['contracts'])} kept, 0 broken." in done.stdout


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    configuration.configure()  # the settings import-linter's contracts read while checking
    return grimp.build_graph(*IMPORTLINTER["root_packages"], include_external_packages=True)


@contextlib.contextmanager
def added(graph: grimp.ImportGraph, importer: str, imported: str) -> Iterator[None]:
    """The graph with one more import, for the length of a `with`."""
    graph.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    try:
        yield
    finally:
        graph.remove_import(importer=importer, imported=imported)


def check(graph: grimp.ImportGraph, options: dict) -> bool:
    """Whether a forbidden contract of pyproject.toml is kept on this graph."""
    fields = {k: str(v) if isinstance(v, bool) else v for k, v in options.items() if k not in ("name", "type")}
    found = ForbiddenContract(options["name"], {"root_packages": IMPORTLINTER["root_packages"]}, fields)
    return found.check(graph, verbose=False).kept


@pytest.mark.parametrize(
    ("importer", "imported", "broken"),
    [
        (
            "pipedeck.console.tune",
            "pipedeck.backends.config",
            "other packages import pipedeck.backends only through its surface",
        ),
        (
            "pipedeck.store.rows",
            "pipedeck.scenarios.request",
            "other packages import pipedeck.scenarios only through its surface",
        ),
        (
            "pipedeck.console.tui.view",
            "pipedeck.tuner.slo",
            "other packages import pipedeck.tuner only through its surface",
        ),
        ("pipedeck.console.tui.runs", "pipedeck.console.compare", "the TUI imports no CLI command module"),
    ],
)
def test_an_import_past_a_surface_or_from_the_tui_into_a_command_breaks_its_contract(graph, importer, imported, broken):
    assert check(graph, contract(broken))
    with added(graph, importer, imported):
        assert not check(graph, contract(broken))


def test_a_package_s_own_modules_may_import_each_other(graph):
    with added(graph, "pipedeck.backends.sim.backend", "pipedeck.backends.policies.layouts"):
        assert check(graph, contract("other packages import pipedeck.backends only through its surface"))


def test_the_tui_is_kept_off_every_command_module_the_cli_lists():
    """A new command's module joins the contract's list: the TUI may not import it either."""
    forbidden = set(contract("the TUI imports no CLI command module")["forbidden_modules"])
    commands = {f"pipedeck.console.{module}" for module, _ in COMMANDS.values()}
    assert forbidden == commands | {"pipedeck.console.cli", "pipedeck.console.__main__"}


def declared(package: str) -> tuple[dict[str, str], dict[str, str]]:
    """A surface's two declarations of each name's module: its TYPE_CHECKING imports and its `_WHERE` table."""
    tree = ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    typed = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{package}: {ast.unparse(node)} must re-export as itself"
            typed[alias.name] = node.module
    where = next(n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "_WHERE")
    return typed, ast.literal_eval(where)


@pytest.mark.parametrize("package", SURFACES)
def test_a_surface_names_each_public_name_once_for_checkers_and_for_the_lazy_loader(package):
    typed, where = declared(package)
    assert typed == where
    assert importlib.import_module(f"pipedeck.{package}").__all__ == sorted(where)


@pytest.mark.parametrize("package", SURFACES)
def test_every_public_name_loads_and_none_is_shadowed_by_a_submodule(package):
    """`from pkg import x` returns the submodule `x` once it is imported: a public name may not be a module's."""
    surface = importlib.import_module(f"pipedeck.{package}")
    submodules = {m.name for m in pkgutil.iter_modules(surface.__path__)}
    assert not set(surface.__all__) & submodules
    for name in surface.__all__:
        assert getattr(surface, name) is getattr(
            importlib.import_module(f"pipedeck.{package}.{surface._WHERE[name]}"), name
        )
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = surface.no_such_name
