"""`pipedeck export`: write a study's best config (or a saved one) as files an engine can launch."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..backends import ENGINES, ExportError
from ..store import RunStore, default_db_path
from ..tuner import best_from_json, export_best, write_export

__all__ = ["export", "export_study", "read_config_json", "warn_on_stderr"]


@click.command()
@click.option("--study", default=None, help="Export the best completed trial of this study.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Export a pipedeck-best.json or a plain config JSON instead of a study's best trial.",
)
@click.option("--format", "engine", type=click.Choice(list(ENGINES)), required=True, help="Engine to launch with.")
@click.option(
    "--engine-version",
    default=None,
    help="Engine release to write for (default: the installed one, else its newest known; docs/export.md lists them).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder to write into (created if missing; files in it are replaced).",
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Run store file (default: $PIPEDECK_DB or ./pipedeck.duckdb).",
)
def export(
    study: str | None, config_file: Path | None, engine: str, engine_version: str | None, out_dir: Path, db: Path | None
) -> None:
    """Write serve.sh, the engine's YAML and pipedeck-best.json for one config."""
    if (study is None) == (config_file is None):
        raise click.UsageError("give exactly one of --study NAME or --config FILE.json")
    if config_file is not None:
        paths = write_export(
            best_from_json(read_config_json(config_file)), engine, out_dir, engine_version, warn_on_stderr
        )
    elif study is not None:
        paths = export_study(study, engine, out_dir, db, engine_version)
    for path in paths:
        click.echo(str(path))


def export_study(
    study: str, engine: str, out_dir: Path | str, db: Path | str | None, version: str | None = None
) -> list[Path]:
    """Export a stored study's best completed trial, with its warnings on stderr."""
    path = default_db_path(db)
    if not path.is_file():
        raise ExportError(f"db: no run store at {path}")
    with RunStore.open(path, read_only=True) as store:
        return export_best(store, study, engine, out_dir, version, warn_on_stderr)


def warn_on_stderr(line: str) -> None:
    """An export's warning (the launch is not what was predicted), on stderr."""
    click.echo(line, err=True)


def read_config_json(path: Path) -> dict[str, object]:
    """A pipedeck-best.json or plain config JSON file as a dict; one-line ExportError if unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ExportError(f"config: cannot read {path} as JSON: {err}") from None
    if not isinstance(data, dict):
        raise ExportError(f"config: {path} must hold a JSON object (a config or a pipedeck-best.json)")
    return data
