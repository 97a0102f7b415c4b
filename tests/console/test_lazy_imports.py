"""Each command imports only what it uses: --help and a simulation that stores nothing load no DuckDB, Optuna,
Plotly or Textual."""

from __future__ import annotations

import json
import os
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


def run_probe(*argv: str) -> tuple[set[str], str]:
    """The top-level modules a CLI run loaded, and what it printed before them."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # its output is a pipe, as in a script
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, env=env)
    printed, _, modules = done.stdout.rpartition("MODULES ")
    return set(json.loads(modules)), printed


def loaded(*argv: str) -> set[str]:
    return run_probe(*argv)[0]


def test_help_imports_no_heavy_library_and_no_numpy():
    modules = loaded("--help")
    assert not modules & {*HEAVY, "numpy", "rich"}, sorted(modules & {*HEAVY, "numpy", "rich"})


def test_a_simulation_that_stores_nothing_imports_no_store_tuner_or_plots():
    modules, printed = run_probe(
        "simulate",
        "--scenario",
        "azure-conv",
        "--requests",
        "4",
        "--model",
        "qwen2.5-14b",
        "--hardware",
        "a100-40g-pcie",
        "--no-store",
    )
    assert "TTFT" in printed and "numpy" in modules  # it ran, and drew its lengths and arrivals with numpy
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_replaying_a_trace_with_fixed_chunks_into_a_pipe_needs_no_numpy_or_rich(tmp_path):
    """Nothing is drawn, and the fixed chunk fits nothing: numpy (a tenth of a second to import) stays out;
    a pipe gets plain columns, so rich stays out too."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,900,3\n0.5,2000,1\n1.25,64,40\n")
    modules, printed = run_probe(
        "simulate",
        "--scenario",
        str(trace),
        "--model",
        "qwen2.5-14b",
        "--hardware",
        "a100-40g-pcie",
        "--mode",
        "cpp",
        "--chunk",
        "512",
        "--no-store",
    )
    assert "requests 3" in printed
    assert not modules & {*HEAVY, "numpy", "rich"}, sorted(modules & {*HEAVY, "numpy", "rich"})


def test_a_stored_simulation_loads_duckdb_only(tmp_path):
    modules = loaded(
        "simulate",
        "--scenario",
        "short-4k",
        "--requests",
        "4",
        "--model",
        "qwen2.5-14b",
        "--hardware",
        "a100-40g-pcie",
        "--db",
        str(tmp_path / "r.duckdb"),
    )
    assert "duckdb" in modules and not modules & {"optuna", "plotly", "textual"}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listed_help_is_the_command_s_own(name):
    command = cli.get_command(click.Context(cli), name)
    assert command is not None and command.name == name
    assert short_help(*COMMANDS[name]) == command.help.strip().splitlines()[0]


@pytest.mark.parametrize("package", ["scenarios", "backends", "store", "tuner"])
def test_importing_a_package_s_surface_loads_none_of_its_modules(package):
    """A surface's names load on first use: importing the package alone runs none of its modules."""
    probe = f"import sys, pipedeck.{package}; print(sorted(m for m in sys.modules if m.startswith('pipedeck.')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout.replace("'", '"')) == [f"pipedeck.{package}"]
