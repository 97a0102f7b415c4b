"""`pipedeck run`: one scenario under one config on any backend, a live server included."""

from __future__ import annotations

import click

from ..backends.registry import BACKENDS
from .options import config_options, workload_options
from .simulate import execute, output_options


@click.command("run")
@click.option("--backend", type=click.Choice(list(BACKENDS)), default="sim", show_default=True,
              help="Backend to run on.")
@click.option("--endpoint", default=None, help="The live backend's server, e.g. http://127.0.0.1:8080.")
@click.option("--served-model", default=None,
              help="Live: the model name to request (default: the first one /v1/models lists).")
@config_options
@workload_options
@output_options
def run(**opts: object) -> None:
    """Run one scenario under one serving config on a backend (a live server: the config it was started with)."""
    options = {"endpoint": opts["endpoint"], "model": opts["served_model"]} if opts["backend"] == "live" else {}
    execute(opts, str(opts["backend"]), **options)
