"""The import layering of the architecture, as import-linter contracts (pyproject.toml), holds."""

import subprocess
import sys
import tomllib

import grimp
import pytest
from importlinter.configuration import configure
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.independence import IndependenceContract

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
    configure()  # import-linter's own settings (its timer), as lint-imports sets them
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (declared,) = [c for c in settings["contracts"] if c["name"] == contract]
    kinds = {"independence": IndependenceContract, "forbidden": ForbiddenContract}
    checker = kinds[declared["type"]](
        name=contract,
        session_options=settings,
        contract_options={k: v for k, v in declared.items() if k not in ("name", "type")},
    )
    graph = grimp.build_graph(*settings["root_packages"], include_external_packages=True, cache_dir=None)
    assert checker.check(graph, verbose=False).kept
    graph.add_import(importer=importer, imported=imported)
    assert not checker.check(graph, verbose=False).kept


def test_the_store_imports_of_the_backends_only_the_records_of_a_run():
    """The store writes what `RunResult` holds and nothing else of backends/: not a config, a policy or a backend."""
    graph = grimp.build_graph("pipedeck.store", "pipedeck.backends", cache_dir=None)
    imported = {
        module
        for store_module in graph.find_children("pipedeck.store") | {"pipedeck.store"}
        for module in graph.find_modules_directly_imported_by(store_module)
        if module.startswith("pipedeck.backends")
    }
    assert imported == {"pipedeck.backends.result", "pipedeck.backends.live_result"}
