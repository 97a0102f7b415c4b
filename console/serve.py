"""`pipedeck serve`: start a serving engine with the flags `export` writes, until Ctrl-C."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Unpack

import click

from ..backends import ENGINES, LOOPBACK, LaunchError, serving
from ..tuner import best_from_json
from .backend_options import LoggedLaunchOptions, launch_from_options, launch_options
from .export import read_config_json
from .options import config_from_options, config_given, config_options


class ServeOptions(LoggedLaunchOptions):
    """`pipedeck serve`'s options (`config_from_options` reads the config's own)."""

    engine: str
    model_path: str
    from_file: Path | None
    host: str
    port: int | None
    profile_dir: Path | None


@click.command()
@click.option("--engine", type=click.Choice(list(ENGINES)), required=True, help="Engine to start.")
@click.option(
    "--model-path",
    required=True,
    help="Weights the engine loads: a path or hub id (llama-server: a GGUF file, or org/name[:quant] from the hub).",
)
@click.option(
    "--from",
    "from_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Serve the config of a pipedeck-best.json (or a config JSON) instead of the config options.",
)
@config_options
@click.option("--host", default=LOOPBACK, show_default=True, help="Address the server listens on.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port (default: a free one).")
@click.option(
    "--profile-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Start the engine with its torch profiler writing to this folder (vLLM and vLLM-Ascend: "
    "--profiler-config), so that pipedeck run --profile-dir measures each run's per-rank timeline.",
)
@launch_options()
def serve(**opts: Unpack[ServeOptions]) -> None:
    """Start an engine with the launch `pipedeck export` writes for a config (none: its own defaults); Ctrl-C stops it."""
    engine = opts["engine"]
    launch = dataclasses.replace(  # before anything is said: an engine without a profiler is refused here
        launch_from_options(opts, engine=engine, model_path=opts["model_path"]),
        host=opts["host"],
        port=opts["port"],
        profile_dir=opts["profile_dir"],
    )
    if opts["from_file"] is not None:
        config = best_from_json(read_config_json(opts["from_file"])).config
    elif config_given(click.get_current_context()):
        config = config_from_options(opts).resolve()
    else:  # a weights file alone: no catalog model, hardware or parallelism the engine would not use
        config = None
        passed = ", ".join(["the weights", *(flag.name for flag in ENGINES[engine].always), "--host"])
        click.echo(
            f"pipedeck: no config option given: {engine} runs with its own defaults; pipedeck passes only "
            f"{passed} and --port",
            err=True,
        )
    stopped_by_us = False
    # SIGTERM and SIGINT stop the server from here on (a shell starts a background job with SIGINT ignored, and
    # `kill -INT` should still stop it); the line below tells whoever waits for it that a signal now stops it
    with serving(launch, config) as server:
        try:
            profiled = "" if launch.profile_dir is None else f", profiler writing to {launch.profile_dir}"
            click.echo(
                f"serving {server.engine} at {server.url} (pid {server.process.pid}, log {server.log_path}"
                f"{profiled}); Ctrl-C stops it"
            )
            server.process.wait()
        except KeyboardInterrupt:
            stopped_by_us = True
    status = server.process.returncode
    if stopped_by_us:
        click.echo(f"stopped {server.engine} (exit status {status})")
    else:
        raise LaunchError(f"engine: {server.engine} exited with status {status} while serving; log: {server.log_path}")
