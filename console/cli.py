"""`pipedeck`: one command group, one module per command, each imported only when its command runs.

A command's module pulls in what that command needs (DuckDB, Optuna,
Plotly, Textual); `pipedeck --help` and `pipedeck simulate` should not pay
for the others. The group lists each command's one-line help from the table
below, with each command's one-line help read from its module's source, and
imports a module only when click asks for that command.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import click

from ..backends import one_blas_thread
from .errors import exit_with, report_on_stderr, run_cli

# command -> (its module under pipedeck.console, the function click made the command from)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("simulate", "simulate"),
    "run": ("run", "run"),
    "runs": ("runs", "runs"),
    "show": ("show", "show"),
    "tune": ("tune", "tune"),
    "studies": ("studies", "studies"),
    "export": ("export", "export"),
    "serve": ("serve", "serve"),
    "compare": ("compare", "compare"),
    "report": ("report", "report"),
    "console": ("console_cmd", "console"),
    "calibrate": ("calibrate", "calibrate"),
}


def short_help(module: str, function: str) -> str:
    """The first line of a command function's docstring, read from its source without importing it."""
    spec = importlib.util.find_spec(f"{__package__}.{module}")
    assert spec is not None and spec.origin is not None, f"COMMANDS names {module}, a module with a source file"
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    return (ast.get_docstring(node) or "").strip().splitlines()[0]


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f"{__package__}.{module}"), attribute)
        assert isinstance(command, click.Command), f"COMMANDS names {module}.{attribute}, a click command"
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands section of --help from the commands' docstrings, importing none of their modules."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        # click shortens a stand-in command's help exactly as it would the real one's
        rows = [
            (name, click.Command(name, help=short_help(*where)).get_short_help_str(limit))
            for name, where in COMMANDS.items()
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="pipedeck", prog_name="pipedeck")
def cli() -> None:
    """Simulate, tune and export pipeline-parallel LLM serving configs."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    one_blas_thread()  # before anything loads numpy
    report_on_stderr()
    exit_with(lambda: run_cli(cli, argv))
