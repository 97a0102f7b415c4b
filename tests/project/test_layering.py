"""The import layering of the architecture, as import-linter contracts (pyproject.toml), holds; each package's
surface (its `__init__`) names every public name once."""

import ast
import importlib
import pkgutil
import subprocess
import sys
import tomllib

import grimp
import pytest
from importlinter.configuration import configure
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.independence import IndependenceContract

from pipedeck.console.cli import COMMANDS
from tests.paths import ROOT

# lint-imports as this interpreter runs it: a `lint-imports` found on PATH may belong to another Python, one with
# another checkout of pipedeck installed
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def test_the_layering_contracts_are_kept():
    """`lint-imports`, run as a developer would from the repository root, keeps every contract of pyproject.toml."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    done = subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in done.stdout
    assert {c["name"] for c in contracts} <= {line.rpartition(" KEPT")[0] for line in done.stdout.splitlines()}


@pytest.mark.parametrize(
    ("contract", "importer", "imported"),
    [
        (
            "the simulator and the live backend do not import each other",
            "pipedeck.backends.sim.engine",
            "pipedeck.backends.live.loadgen",
        ),
        (
            "the simulator and the live backend do not import each other",
            "pipedeck.backends.live.client",
            "pipedeck.backends.sim.scheduler",
        ),
        (
            "a run's records and the store import neither backend",
            "pipedeck.store.runstore",
            "pipedeck.backends.live.metrics",
        ),
        (
            "a run's records and the store import neither backend",
            "pipedeck.backends.live_result",
            "pipedeck.backends.live.metrics",
        ),
        (
            "a run's records and the store import neither backend",
            "pipedeck.backends.result",
            "pipedeck.backends.sim.engine",
        ),
    ],
)
def test_the_backend_contracts_break_when_a_backend_is_imported_where_it_must_not_be(contract, importer, imported):
    """The contracts are not vacuous: the project's import graph keeps each, and one added import breaks it."""
    assert_breaks(contract, importer, imported)


SETTINGS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
SURFACES = ("scenarios", "backends", "store", "tuner")  # the packages other packages import


def assert_breaks(contract: str, importer: str, imported: str) -> None:
    """The contract of pyproject.toml named `contract` is kept, and broken once `importer` imports `imported`."""
    configure()  # import-linter's own settings (its timer), as lint-imports sets them
    (declared,) = [c for c in SETTINGS["contracts"] if c["name"] == contract]
    kinds = {
        "independence": IndependenceContract,
        "forbidden": ForbiddenContract,
        "acyclic_siblings": AcyclicSiblingsContract,
    }
    checker = kinds[declared["type"]](
        name=contract,
        session_options=SETTINGS,
        contract_options={  # as lint-imports reads them: TOML's booleans as text
            k: str(v) if isinstance(v, bool) else v for k, v in declared.items() if k not in ("name", "type")
        },
    )
    graph = grimp.build_graph(*SETTINGS["root_packages"], include_external_packages=True, cache_dir=None)
    assert checker.check(graph, verbose=False).kept
    graph.add_import(importer=importer, imported=imported)
    assert not checker.check(graph, verbose=False).kept


@pytest.mark.parametrize(
    ("contract", "importer", "imported"),
    [
        (
            "other packages import pipedeck.backends only through its surface",
            "pipedeck.console.tune",
            "pipedeck.backends.config",
        ),
        (
            "other packages import pipedeck.scenarios only through its surface",
            "pipedeck.store.rows",
            "pipedeck.scenarios.request",
        ),
        (
            "other packages import pipedeck.tuner only through its surface",
            "pipedeck.console.tui.view",
            "pipedeck.tuner.slo",
        ),
        ("the TUI imports no CLI command module", "pipedeck.console.tui.runs", "pipedeck.console.compare"),
    ],
)
def test_an_import_past_a_surface_or_from_the_tui_into_a_command_breaks_its_contract(contract, importer, imported):
    assert_breaks(contract, importer, imported)


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("pipedeck.backends.live_result", "pipedeck.backends.result"),  # the records both share are their own
        ("pipedeck.backends.base", "pipedeck.backends.footprint"),  # Footprint is base's, below the registry
        (
            "pipedeck.backends.sim.request",
            "pipedeck.backends.sim.scheduler",
        ),  # SimRequest is below scheduler and groups
    ],
)
def test_an_import_that_closes_a_cycle_inside_a_package_breaks_its_contract(importer, imported):
    """Each cycle backends/ had, through type-checking imports, comes back with one import, and is refused."""
    assert_breaks("no import cycles inside a package", importer, imported)


def test_the_tui_is_kept_off_every_command_module_the_cli_lists():
    """A new command's module joins the contract's list: the TUI may not import it either."""
    (tui,) = [c for c in SETTINGS["contracts"] if c["name"] == "the TUI imports no CLI command module"]
    commands = {f"pipedeck.console.{module}" for module, _ in COMMANDS.values()}
    assert set(tui["forbidden_modules"]) == commands | {"pipedeck.console.cli", "pipedeck.console.__main__"}


def declared_names(package: str) -> tuple[dict[str, str], dict[str, str]]:
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
    typed, where = declared_names(package)
    assert typed == where
    assert importlib.import_module(f"pipedeck.{package}").__all__ == sorted(where)


@pytest.mark.parametrize("package", SURFACES)
def test_every_public_name_loads_and_none_is_shadowed_by_a_submodule(package):
    """`from pkg import x` returns the submodule `x` once it is imported: a public name may not be a module's."""
    surface = importlib.import_module(f"pipedeck.{package}")
    submodules = {m.name for m in pkgutil.iter_modules(surface.__path__)}
    assert not set(surface.__all__) & submodules
    for name in surface.__all__:
        home = importlib.import_module(f"pipedeck.{package}.{surface._WHERE[name]}")
        assert getattr(surface, name) is getattr(home, name)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = surface.no_such_name


def test_the_store_imports_of_the_backends_only_the_records_of_a_run():
    """The store writes what `RunResult` holds and nothing else of backends/: not a config, a policy or a backend."""
    import pipedeck.backends as surface

    taken = set()
    for path in (ROOT / "store").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "backends":
                taken |= {alias.name for alias in node.names}
    assert taken and {surface._WHERE[name] for name in taken} <= {"records", "result", "live_result"}, taken
