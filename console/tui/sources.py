"""Where a Live run's config comes from: the Config form, a named config, or a stored run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...backends import ConfigError, ServingConfig, format_tokens
from ...store import ConfigRow, RunRow
from ...tuner import open_store

FORM = "form"
RUN_CHOICES = 30  # newest stored runs offered


def describe(config: ServingConfig) -> str:
    """A config on one line: model, hardware, shape, mode and chunk."""
    return _one_line(
        model=config.model,
        hardware=config.hardware,
        tp=config.parallelism.tp,
        pp=config.parallelism.pp,
        mode=config.mode,
        chunk=config.scheduling.chunk,
    )


def _one_line(*, model: str, hardware: str, tp: int | None, pp: int | None, mode: str, chunk: int | str | None) -> str:
    shown = format_tokens(chunk) if isinstance(chunk, int) else str(chunk)
    return f"{model} {hardware} tp{tp} pp{pp} {mode} {shown}"


def source_options(form: ServingConfig, configs: Sequence[ConfigRow], runs: Sequence[RunRow]) -> list[tuple[str, str]]:
    """(label, value) pairs for a picker: the form's config, then named configs, then the newest stored runs."""
    options = [(f"form: {describe(form)}", FORM)]
    options += [(f"named {row.name}: {_named(row)}", f"named:{row.name}") for row in configs]
    options += [(f"run {row.id}: {_run_line(row)}", f"run:{row.id}") for row in runs[:RUN_CHOICES]]
    return options


def load_source(source: str, form: ServingConfig, db: Path) -> ServingConfig:
    """The config a picker value names; named configs and runs are read from the store."""
    kind, _, key = source.partition(":")
    if kind == FORM:
        return form
    with open_store(db) as store:
        data = store.get_config(key) if kind == "named" else store.get_run(int(key), timeline=False).result.config
    return ServingConfig.from_dict(data)


def _run_line(row: RunRow) -> str:
    """A stored run's config on one line, as `describe` writes a config; ? where the run has no such field."""
    return _one_line(
        model=row.model or "?",
        hardware=row.hardware or "?",
        tp=row.tp,
        pp=row.pp,
        mode=row.mode or "?",
        chunk=row.chunk,
    )


def _named(row: ConfigRow) -> str:
    try:
        return describe(ServingConfig.from_dict(row.config))
    except ConfigError as err:
        return f"unreadable ({err})"
