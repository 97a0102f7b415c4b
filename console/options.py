"""Click options shared by the commands that take a cluster, a config or a workload."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

import click

from ..backends import (
    MODES,
    Knob,
    RawConfig,
    ResolvedConfig,
    ServingConfig,
    chunk_warnings,
    declared_knobs,
    knob_default,
)

_DEFAULT = ServingConfig()
DEFAULT_SCENARIO = "azure-conv"  # what simulate, run and tune use without --scenario: chat traffic under load


def _knob_option(knob: Knob) -> Callable[..., Any]:
    """A click option for one declared knob; `config_from_options` validates its value by the declaration."""
    default = knob_default(knob.field)
    if knob.kind == "bool":
        return click.option(
            f"{knob.flag}/--no-{knob.flag[2:]}", knob.field, default=default, show_default=True, help=knob.help
        )
    metavar = "[" + "|".join(knob.choices) + "]" if knob.kind == "choice" else knob.kind.upper()
    return click.option(knob.flag, knob.field, default=str(default), show_default=True, help=knob.help, metavar=metavar)


def config_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--model --hardware --tp --pp --mode --layer-split --kv-capacity and every declared knob (--chunk ...)."""
    options = [
        click.option(
            "--model",
            default=_DEFAULT.model,
            show_default=True,
            help="Model profile name, TOML file or HF config.json.",
        ),
        click.option(
            "--hardware", default=_DEFAULT.hardware, show_default=True, help="Hardware profile name or TOML file."
        ),
        click.option(
            "--tp",
            type=int,
            default=_DEFAULT.parallelism.tp,
            show_default=True,
            help="Tensor-parallel size (devices per rank).",
        ),
        click.option(
            "--pp", type=int, default=_DEFAULT.parallelism.pp, show_default=True, help="Pipeline-parallel size (ranks)."
        ),
        click.option("--mode", default=_DEFAULT.mode, show_default=True, help=f"Pipeline mode: {', '.join(MODES)}."),
        click.option(
            "--layer-split",
            default=None,
            help="Layers per virtual stage in execution order, e.g. 31,30 (default: vLLM's even split).",
        ),
        click.option(
            "--kv-capacity", default=None, help="KV cache capacity in tokens (default: device memory minus weights)."
        ),
        *(_knob_option(knob) for knob in declared_knobs()),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


SHAPE_FIELDS = ("model", "hardware", "tp", "pp", "mode", "layer_split", "kv_capacity")  # options beside the knobs


def config_fields() -> tuple[str, ...]:
    """The parameters `config_options` adds."""
    return (*SHAPE_FIELDS, *(knob.field for knob in declared_knobs()))


def config_given(ctx: click.Context) -> bool:
    """Whether the user set any config option (on the command line or in the environment), not only defaults."""
    return any(
        ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT) for name in config_fields()
    )


def config_from_options(opts: Mapping[str, object]) -> ResolvedConfig:
    """The config the parsed options give, resolved (validated); print a warning line for an odd chunk."""
    config = given_config(opts).resolve()
    for line in chunk_warnings(config):
        click.echo(f"pipedeck: warning: {line}", err=True)
    return config


def given_config(opts: Mapping[str, object]) -> ServingConfig:
    """The config the parsed options give, as given: what they leave out is derived when it is resolved."""
    return RawConfig.of({name: opts[name] for name in config_fields() if opts[name] is not None}).parse()


def check_writable(path: str, flag: str) -> None:
    """Refuse, before any work, an output path whose folder is missing or read-only."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise click.BadParameter(f"folder {folder} does not exist", param_hint=flag)
    if not os.access(folder, os.W_OK) or os.path.isdir(path):
        raise click.BadParameter(f"cannot write {path}", param_hint=flag)


class WorkloadOptions(TypedDict):
    """The values `workload_options` adds to a command's options."""

    scenario: str
    rate: float | None
    num_requests: int | None
    seed: int


def workload_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--scenario (default DEFAULT_SCENARIO) --rate --requests --seed."""
    options = [
        click.option(
            "--scenario", default=DEFAULT_SCENARIO, show_default=True, help="Catalog name, or a .toml/.csv/.jsonl file."
        ),
        click.option(
            "--rate", type=float, default=None, help="Poisson arrival rate in requests/s (default: the scenario's)."
        ),
        click.option(
            "--requests", "num_requests", type=int, default=None, help="Number of requests (default: the scenario's)."
        ),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed for arrivals and lengths."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn
