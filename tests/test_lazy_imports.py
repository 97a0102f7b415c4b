"""Each command imports only what it uses: --help and a simulation that stores nothing load no DuckDB, Optuna,
Plotly or Textual."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from pipedeck.console.cli import COMMANDS, cli, short_help

HEAVY = ("duckdb", "optuna", "plotly", "textual", "scipy")
# run the CLI in a fresh interpreter and print the top-level modules it loaded, whatever the exit status
PROBE = """
import atexit, json, sys
atexit.register(lambda: print("MODULES " + json.dumps(sorted({m.split('.')[0] for m in sys.modules}))))
from pipedeck.console.cli import main
main(sys.argv[1:])
"""


def loaded(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    line = next(line for line in done.stdout.splitlines() if line.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


def test_help_imports_no_heavy_library_and_no_numpy():
    modules = loaded("--help")
    assert not modules & {*HEAVY, "numpy", "rich"}, sorted(modules & {*HEAVY, "numpy", "rich"})


def test_a_simulation_that_stores_nothing_imports_no_store_tuner_or_plots():
    modules = loaded("simulate", "--scenario", "short-4k", "--requests", "4", "--model", "qwen2.5-14b",
                     "--hardware", "a100-40g-pcie", "--no-store")
    assert "numpy" in modules, "the probe saw the simulation run"
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_a_stored_simulation_loads_duckdb_only(tmp_path):
    modules = loaded("simulate", "--scenario", "short-4k", "--requests", "4", "--model", "qwen2.5-14b",
                     "--hardware", "a100-40g-pcie", "--db", str(tmp_path / "r.duckdb"))
    assert "duckdb" in modules and not modules & {"optuna", "plotly", "textual"}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listed_help_is_the_command_s_own(name):
    command = cli.get_command(click.Context(cli), name)
    assert command is not None and command.name == name
    assert short_help(*COMMANDS[name]) == command.help.strip().splitlines()[0]
