"""The options that choose a backend (`--backend`) and start a server (`--program`, `--log`, `--health-timeout`).

Declared once here for every command that takes them (`run`, `tune`;
`serve`, `calibrate`, `tune --launch`). The `--backend` choices are the
installed backends (backends/registry.py), read when the option is used.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import click

from ..backends import ConfigError, backend_entry, backends

if TYPE_CHECKING:
    from ..backends import ServerLaunch

    _NameType = click.ParamType[str]  # generic from click 8.2 on; pyproject allows 8.1
else:
    _NameType = click.ParamType

DEFAULT_LOG = "pipedeck-serve.log"
DEFAULT_HEALTH_TIMEOUT_S = 600.0


class BackendName(_NameType):
    """The name of an installed backend; the choices are whatever the registry finds when the CLI runs."""

    name = "backend"

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:  # click 8.2 adds `ctx`
        return f"[{'|'.join(backends())}]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return backend_entry(str(value)).name
        except ConfigError as err:
            self.fail(str(err).removeprefix("backend: "), param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(name) for name in backends() if name.startswith(incomplete)]


def backend_option(*, help: str, default: str = "sim") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--backend NAME`: one of the installed backends."""
    return click.option("--backend", type=BackendName(), default=default, show_default=True, help=help)


class LaunchOptions(TypedDict):
    """The values `launch_options(log=False)` adds to a command's options."""

    program: str | None
    health_timeout: float


class LoggedLaunchOptions(LaunchOptions):
    """The values `launch_options()` adds."""

    log_path: str


def launch_options(*, when: str = "", log: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--program, --log (unless `log` is False) and --health-timeout, each help line starting with `when`
    (e.g. "--launch: ")."""

    def help_text(text: str) -> str:
        return f"{when}{text}" if when else text[0].upper() + text[1:]

    options = [
        click.option(
            "--program",
            default=None,
            help=help_text("the engine's launcher command, if not its usual one on PATH (e.g. a built llama-server)."),
        ),
        click.option(
            "--log", "log_path", default=DEFAULT_LOG, show_default=True, help=help_text("file for the server's output.")
        ),
        click.option(
            "--health-timeout",
            type=click.FloatRange(min=0, min_open=True),
            default=DEFAULT_HEALTH_TIMEOUT_S,
            show_default=True,
            help=help_text("seconds the server may take to answer GET /health."),
        ),
    ]
    if not log:
        del options[1]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def launch_from_options(opts: LoggedLaunchOptions, *, engine: str, model_path: str) -> ServerLaunch:
    """The server launch --program, --log and --health-timeout ask for, at the default address (serve sets its own)."""
    from ..backends import ServerLaunch  # httpx with it: only for a command that starts a server

    return ServerLaunch(
        engine,
        model_path,
        Path(opts["log_path"]),
        program=tuple(shlex.split(opts["program"])) if opts["program"] else None,
        health_timeout_s=opts["health_timeout"],
    )
