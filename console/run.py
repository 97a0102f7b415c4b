"""`pipedeck run`: one scenario under one config on any backend, a live server included."""

from __future__ import annotations

from typing import Unpack

import click

from ..backends import STALL_S, RunResult, ServerError, backend_entry
from .backend_options import backend_option
from .options import config_from_options, config_given, config_options, workload_options
from .simulate import RunOptions, execute, output_options


class RunCommandOptions(RunOptions):
    """`pipedeck run`'s options beside those `execute` reads: the backend, and what a live one is given."""

    backend: str
    endpoint: str | None
    served_model: str | None
    fresh_prompts: bool
    stall_timeout: float | None
    profile_dir: str | None


@click.command("run")
@backend_option(help="Backend to run on.")
@click.option("--endpoint", default=None, help="The live backend's server, e.g. http://127.0.0.1:8080.")
@click.option(
    "--served-model", default=None, help="Live: the model name to request (default: the first one /v1/models lists)."
)
@click.option(
    "--fresh-prompts",
    is_flag=True,
    help="Live: draw this rate's own prompts, so that none is served from a prefix cache an earlier run "
    "at another rate filled (default: the seed's prompts, the same at every rate).",
)
@click.option(
    "--stall-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help=f"Live: seconds a stream may go without an event before its request fails (default: {STALL_S:g}).",
)
@click.option(
    "--profile-dir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Live: profile the run with the server's own profiler (vLLM's /start_profile and /stop_profile) and read "
    "each pipeline rank's trace from this folder, where the server writes them (pipedeck serve --profile-dir, or "
    "vLLM's --profiler-config torch_profiler_dir): a measured per-rank timeline and time split, stored with the run.",
)
@config_options
@workload_options
@output_options
def run(**opts: Unpack[RunCommandOptions]) -> None:
    """Run one scenario under one serving config on a backend (a live server: the config it was started with)."""
    endpoint = backend_entry(opts["backend"]).capabilities.endpoint
    for given, flag, lacks in (
        (opts["fresh_prompts"], "--fresh-prompts", "has no prefix cache"),
        (opts["profile_dir"], "--profile-dir", "has no profiler to start"),
        (opts["stall_timeout"] is not None, "--stall-timeout", "streams nothing"),
    ):
        if given and not endpoint:
            raise click.BadParameter(
                f"the {opts['backend']} backend {lacks}; it is for --backend live", param_hint=flag
            )
    options: dict[str, object] = (
        {"endpoint": opts["endpoint"], "model": opts["served_model"], "fresh_prompts": opts["fresh_prompts"]}
        if endpoint
        else {}
    )
    if opts["stall_timeout"] is not None:
        options["stall_s"] = opts["stall_timeout"]
    if opts["profile_dir"]:
        options["profile_dir"] = opts["profile_dir"]
    # a server started elsewhere runs its own config: without options, record what it says, not pipedeck's defaults
    config = config_from_options(opts) if not endpoint or config_given(click.get_current_context()) else None
    report_unserved(*execute(opts, opts["backend"], config, **options))


def report_unserved(result: RunResult, run_id: int | None) -> None:
    """A warning line when some requests were not served; a ServerError (one line, exit 2) when none was."""
    if result.live is None or not result.live.failures():
        return
    line = result.live.served_line()
    if not result.records:
        raise ServerError(line + ("" if run_id is None else f" (stored as run {run_id})"))
    click.echo(f"pipedeck: warning: {line}", err=True)
