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
    chunk = format_tokens(config.chunk) if isinstance(config.chunk, int) else str(config.chunk)
    return f"{config.model} {config.hardware} tp{config.tp} pp{config.pp} {config.mode} {chunk}"


def source_options(form: ServingConfig, configs: Sequence[ConfigRow], runs: Sequence[RunRow]) -> list[tuple[str, str]]:
    """(label, value) pairs for a picker: the form's config, then named configs, then the newest stored runs."""
    options = [(f"form: {describe(form)}", FORM)]
    options += [(f"named {row.name}: {_named(row)}", f"named:{row.name}") for row in configs]
    options += [
        (
            f"run {row.id}: "
            + describe(
                ServingConfig(
                    model=row.model or "?",
                    hardware=row.hardware or "?",
                    tp=row.tp,
                    pp=row.pp,
                    mode=row.mode or "?",
                    chunk=row.chunk,
                )
            ),
            f"run:{row.id}",
        )
        for row in runs[:RUN_CHOICES]
    ]
    return options


def load_source(source: str, form: ServingConfig, db: Path) -> ServingConfig:
    """The config a picker value names; named configs and runs are read from the store."""
    kind, _, key = source.partition(":")
    if kind == FORM:
        return form
    with open_store(db) as store:
        data = store.get_config(key) if kind == "named" else store.get_run(int(key), timeline=False).result.config
    return ServingConfig.from_dict(data)


def _named(row: ConfigRow) -> str:
    try:
        return describe(ServingConfig.from_dict(row.config))
    except ConfigError as err:
        return f"unreadable ({err})"
