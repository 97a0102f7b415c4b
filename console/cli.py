"""`pipedeck`: one command group, one module per command."""

from __future__ import annotations

import click

from .calibrate import calibrate
from .compare import compare
from .console_cmd import console
from .errors import exit_with, run_cli
from .export import export
from .report import report
from .runs import runs
from .serve import serve
from .show import show
from .studies import studies
from .simulate import run, simulate
from .tune import tune


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="pipedeck", prog_name="pipedeck")
def cli() -> None:
    """Simulate, tune and export pipeline-parallel LLM serving configs."""


cli.add_command(simulate)
cli.add_command(run)
cli.add_command(runs)
cli.add_command(show)
cli.add_command(tune)
cli.add_command(export)
cli.add_command(serve)
cli.add_command(compare)
cli.add_command(report)
cli.add_command(studies)
cli.add_command(console)
cli.add_command(calibrate)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    exit_with(lambda: run_cli(cli, argv))
