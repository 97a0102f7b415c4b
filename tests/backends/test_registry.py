"""The backend registry: the installed backends, found through the `pipedeck.backends` entry points."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from pipedeck.backends import ConfigError, backend_entry, backends, make_backend, open_backend, registry
from pipedeck.backends.registry import BackendLoadError
from pipedeck.backends.sim import SimBackend
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.tuner import TuneInputs, build_spec, parse_slo
from pipedeck.tuner.objective import Evaluator
from tests.paths import ROOT

THROWAWAY = EntryPoint("fixed-pace", "tests.throwaway_backend:FIXED_PACE", registry.GROUP)


@pytest.fixture()
def installed(monkeypatch):
    """Install entry points beside pipedeck's own (as another distribution would), for one test."""
    own = list(registry.entry_points(group=registry.GROUP))

    def install(*points: EntryPoint) -> None:
        monkeypatch.setattr(registry, "entry_points", lambda group: [*own, *points] if group == registry.GROUP else [])
        backends.cache_clear()

    yield install
    backends.cache_clear()


def test_the_simulator_draws_timelines_and_runs_unpaced_the_live_backend_the_opposite():
    sim, live = backend_entry("sim").capabilities, backend_entry("live").capabilities
    assert isinstance(make_backend("sim"), SimBackend)
    assert (sim.timeline, sim.paced, sim.reconfigurable, sim.simulated) == (True, False, True, True)
    assert (live.timeline, live.paced, live.reconfigurable, live.simulated) == (False, True, False, False)


def test_an_unknown_backend_is_one_line_naming_the_choices():
    with pytest.raises(ConfigError) as err:
        backend_entry("nope")
    assert str(err.value) == f"backend: unknown backend 'nope'; allowed: {', '.join(backends())}"
    assert list(backends())[:2] == ["sim", "live"]  # the default (untagged) backend first
    with pytest.raises(ConfigError, match=r"^backend: the simulator takes no options, got endpoint$"):
        make_backend("sim", endpoint="http://127.0.0.1:1")


def test_the_backends_are_the_entry_points_of_the_group(installed):
    installed(THROWAWAY)
    assert list(backends()) == ["sim", "fixed-pace", "live"]
    assert backend_entry("fixed-pace").title.startswith("every request at a fixed pace")
    assert registry.backend_tag("fixed-pace") == "fixed-pace" and registry.backend_tag("sim") == ""
    assert registry.backend_tag("gone") == "gone" and registry.capabilities_of("gone") is None


def test_an_entry_point_that_fails_to_load_is_one_line_naming_it(installed):
    installed(EntryPoint("broken", "tests.no_such_module:BROKEN", registry.GROUP))
    with pytest.raises(BackendLoadError) as err:
        backends()
    assert str(err.value).startswith(
        "backend: the pipedeck.backends entry point 'broken' (tests.no_such_module:BROKEN) failed to load: "
        "ModuleNotFoundError: "
    )
    assert "\n" not in str(err.value)


def test_an_entry_point_must_name_a_declaration_of_its_own_name(installed):
    installed(EntryPoint("other", "tests.throwaway_backend:FIXED_PACE", registry.GROUP))
    with pytest.raises(BackendLoadError, match=r"^backend: .* 'other' .* names no BackendDeclaration called 'other'$"):
        backends()


def test_a_backend_opened_is_checked_and_closed_however_the_block_ends(installed):
    installed(THROWAWAY)
    with open_backend("fixed-pace") as backend:
        assert backend.closed == 0
    assert backend.closed == 1
    with pytest.raises(RuntimeError), open_backend("fixed-pace") as failing:
        raise RuntimeError("the run failed")
    assert failing.closed == 1


def test_a_third_party_backend_is_a_choice_of_run_and_runs_there(installed, capsys, tmp_path):
    """Installed through its entry point alone: no file of pipedeck's names it."""
    installed(THROWAWAY)
    assert run_cli(cli, ["run", "--help"]) == 0
    assert "[sim|fixed-pace|live]" in capsys.readouterr().out
    argv = ["run", "--backend", "fixed-pace", "--scenario", "azure-conv", "--requests", "5", "--json"]
    assert run_cli(cli, [*argv, "--db", str(tmp_path / "runs.duckdb")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "fixed-pace" and out["requests"] == 5
    assert run_cli(cli, ["runs", "--db", str(tmp_path / "runs.duckdb")]) == 0
    assert "fixed-pace" in capsys.readouterr().out  # tagged with its name in the listing
    installed()
    assert run_cli(cli, argv) == 2
    assert "unknown backend 'fixed-pace'; allowed: sim, live" in capsys.readouterr().err


def test_reading_the_registry_loads_neither_httpx_nor_numpy():
    probe = (
        "import sys, json; from pipedeck.backends.registry import backends; backends(); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    modules = set(json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout))
    assert "pipedeck" in modules and not modules & {"httpx", "numpy"}, sorted(modules & {"httpx", "numpy"})


def imported_modules(path: Path) -> set[str]:
    """The pipedeck.backends modules `path` imports, at any depth of its code (relative imports resolved)."""
    package = ".".join(("pipedeck", *path.relative_to(ROOT).with_suffix("").parts))
    if path.name == "__init__.py":
        package += ".__init__"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: -node.level] if node.level else []
            found.add(".".join([*base, *(node.module or "").split(".")]).strip("."))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_backend_imports_the_registry_and_the_registry_names_no_backend():
    for path in sorted((ROOT / "backends").glob("*/**/*.py")):
        assert "pipedeck.backends.registry" not in imported_modules(path), path
    registry_imports = imported_modules(ROOT / "backends" / "registry.py")
    assert not {m for m in registry_imports if m.startswith(("pipedeck.backends.sim", "pipedeck.backends.live"))}
    assert '"sim"' not in (ROOT / "backends" / "registry.py").read_text()


def test_tune_runs_trials_on_the_backend_it_names(tmp_path):
    spec = build_spec(
        TuneInputs(scenario="azure-conv", slo=parse_slo("ttft=2s,tpot=200ms"), requests=20, backend="sim"),
        tmp_path / "x.duckdb",
    )
    assert spec.backend == "sim" and spec.settings()["backend"] == "sim"
    assert isinstance(Evaluator(spec).backend, SimBackend)


def name_comparisons(source: str, where: str, names: set[str]) -> list[str]:
    """Each comparison in `source` with a string that names a backend (`x == "sim"`, `x in ("live", ...)`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            literals = [c for o in operands for c in ([o] if isinstance(o, ast.Constant) else ast.walk(o))]
            named = {c.value for c in literals if isinstance(c, ast.Constant) and c.value in names}
            found += [f"{where}:{node.lineno} compares with {name!r}" for name in sorted(named)]
    return found


def test_no_code_outside_a_backend_compares_a_backend_name():
    """Code outside backends/<name>/ asks a backend's capabilities, never its name."""
    names = set(backends())
    found = [
        line
        for package in ("backends", "console", "tuner", "store", "scenarios")
        for path in sorted((ROOT / package).rglob("*.py"))
        if not any(path.is_relative_to(ROOT / "backends" / name) for name in names)
        for line in name_comparisons(path.read_text(), str(path.relative_to(ROOT)), names)
    ]
    assert not found, found


def test_the_name_check_sees_a_comparison():
    source = 'def shown(backend):\n    return None if backend != "sim" else ("x" in ("live", "y"))\n'
    assert sorted(name_comparisons(source, "f.py", {"sim", "live"})) == [
        "f.py:2 compares with 'live'",
        "f.py:2 compares with 'sim'",
    ]
