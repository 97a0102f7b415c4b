"""`pipedeck`: one command group, one module per command."""

from __future__ import annotations

import click

from .errors import exit_with, run_cli
from .simulate import simulate


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="pipedeck", prog_name="pipedeck")
def cli() -> None:
    """Simulate, tune and export pipeline-parallel LLM serving configs."""


cli.add_command(simulate)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    exit_with(lambda: run_cli(cli, argv))
