"""Export of a tuned config as deployable files: a launch script, the engine's YAML and a JSON record."""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, Protocol

import yaml

from ..backends import (
    PLATFORMS,
    Checkpoint,
    EnvVar,
    ExportError,
    Plan,
    ResolvedConfig,
    ServingConfig,
    ServingEngine,
    plan_launch,
)
from .objectives import OBJECTIVES
from .verdict import in_force, stored_verdict

__all__ = [
    "BestConfig",
    "ExportError",
    "best_from_json",
    "best_from_store",
    "export_best",
    "export_warnings",
    "write_export",
]

SCRIPT = "serve.sh"
RECORD = "pipedeck-best.json"
_UNSAFE_IN_DOUBLE_QUOTES = re.compile(r'[$`"\\}\n]')


@dataclass(frozen=True)
class BestConfig:
    """A config worth deploying and where it came from: its predicted metrics, study, trial, SLO and seed."""

    config: ResolvedConfig
    metrics: Mapping[str, Any]
    study: str | None = None
    trial: int | None = None
    scenario: str | None = None
    slo: Mapping[str, Any] | None = None
    seed: int | None = None
    engine: str | None = None  # the engine the study was tuned for: its baseline and the modes it searched


def write_export(
    best: BestConfig,
    engine: str,
    out_dir: str | os.PathLike[str],
    version: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write serve.sh, the engine's YAML (where that release reads one) and pipedeck-best.json into out_dir.

    `version` picks the engine release (None: the newest release). `warn`
    gets each way the launch differs from what was predicted, the lines
    serve.sh opens with. The config is written as it acts (`in_force`), with
    a note in serve.sh where that is not what it sets.
    """
    acting, in_force_note = in_force(best.config.to_dict())
    config = ServingConfig.from_dict(acting).resolve()
    plan = plan_launch(config, engine, version)
    model = plan.checkpoint.id
    if _UNSAFE_IN_DOUBLE_QUOTES.search(model):
        raise ExportError(f'model: checkpoint {model!r} has a character a shell would expand: one of $ ` " \\ }}')
    warnings = export_warnings(best, plan)
    files = {SCRIPT: (render_script(best, config, plan, warnings, in_force_note=in_force_note), 0o755)}
    if plan.engine.config_file and plan.release.reads_config_file:
        files[plan.engine.config_file] = (render_yaml(config, plan), 0o644)
    files[RECORD] = (render_record(best, config, plan), 0o644)
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ExportError(f"out: cannot create folder {folder}: {err.strerror or err}") from None
    paths = [_write_atomic(folder / name, text, mode) for name, (text, mode) in files.items()]
    if warn is not None:
        for line in warnings:
            warn(line)
    return paths


def export_warnings(best: BestConfig, plan: Plan) -> list[str]:
    """Where the launch is not what the study predicted for: other devices (and so other weights), another engine."""
    config = best.config
    engine, hardware = plan.engine, config.hardware_profile
    found = []
    if not hardware.platform:
        found.append(
            f"WARNING: hardware profile {config.hardware} names no platform ({', '.join(PLATFORMS)}): "
            f"whether {engine.name} serves on it, and which weights, is not known"
        )
    elif hardware.platform not in engine.platforms:
        simulated = config.model_profile.checkpoint(hardware.platform)
        weights = (
            ""
            if simulated.id == plan.checkpoint.id
            else (
                f"; the simulation assumed the weights {simulated.id}{_precision(simulated)}, this launch loads "
                f"{plan.checkpoint.id}{_precision(plan.checkpoint)}"
            )
        )
        found.append(
            f"WARNING: predicted for {config.hardware} ({hardware.platform}), but {engine.name} serves on "
            f"{' or '.join(engine.platforms)}{weights}: the predictions do not hold for this launch"
        )
    if plan.release.behaves_as:
        found.append(
            f"NOTE: {engine.name} {plan.release.version} is newer than {plan.release.behaves_as}, the newest "
            f"release pipedeck knows; written as {plan.release.behaves_as} runs"
        )
    if best.engine and best.engine != engine.name:
        found.append(
            f"WARNING: study {best.study or '-'} was tuned for {best.engine} (its baseline and the modes "
            f"it searched), but this launch is {engine.name}: its gain over the default is {best.engine}'s"
        )
    return found


def render_script(
    best: BestConfig, config: ResolvedConfig, plan: Plan, warnings: list[str], in_force_note: str = ""
) -> str:
    """The bash launch script: warnings, header, environment and the launch command, one option per line."""
    engine, launch = plan.engine, plan.launch
    rule = "# " + "=" * 76
    lines = ["#!/usr/bin/env bash", *([rule, *(_comment(w) for w in warnings), rule] if warnings else [])]
    lines += [_comment(line) for line in _header(best, config, plan)]
    if in_force_note:
        lines.append(_comment(f"In force: {in_force_note}"))
    if launch.notes:
        lines += [rule, *(_comment(note) for note in launch.notes), rule]
    lines += ["set -euo pipefail", ""]
    lines += [_env_line(var) for var in launch.env]
    if launch.env:
        lines.append("")
    command = [" ".join(shlex.quote(part) for part in ("exec", *plan.program))]
    model_flag = plan.build.model_flag if plan.build else engine.model_flag
    if engine.hub_flag:
        lines += _weights_from_model(engine)
        command.append('"${WEIGHTS[@]}"')
    else:
        model = f'"${{MODEL:-{plan.checkpoint.id}}}"'
        command.append(f"{shlex.quote(model_flag)} {model}" if model_flag else model)
    command += [" ".join(shlex.quote(part) for part in flag.argv()) for flag in launch.flags]
    command.append('"$@"')
    lines.append(" \\\n  ".join(command))
    return "\n".join(lines) + "\n"


def _weights_from_model(engine: ServingEngine) -> list[str]:
    """Script lines that require MODEL and load it as the launcher would: a file (or *.gguf) by path, else from the hub.

    The profile's checkpoint is no default here: it is not in the format such
    an engine loads (llama-server takes GGUF).
    """
    model_flag, hub_flag = engine.model_flag, engine.hub_flag
    assert model_flag and hub_flag, f"{engine.name} names no model flag"  # only engines that load by flag get here
    return [
        'MODEL="${MODEL:?set it to a local GGUF file or a hub id org/name[:quant]}"',
        f'if [[ -e "$MODEL" || "$MODEL" == *.gguf ]]; then WEIGHTS=({shlex.quote(model_flag)} "$MODEL"); '
        f'else WEIGHTS=({shlex.quote(hub_flag)} "$MODEL"); fi',
        "",
    ]


def render_yaml(config: ResolvedConfig, plan: Plan) -> str:
    """The engine's `--config` YAML: the model and every option of serve.sh, with its environment as comments.

    A switch set off (`--no-async-scheduling`) stays on the command line:
    `vllm serve --config` drops `false` values (see VLLM_RELEASES), and so
    does SGLang's loader for its switches.
    """
    engine, launch = plan.engine, plan.launch
    items = [flag.yaml_item() for flag in launch.flags]
    data: dict[str, object] = {engine.config_model_key: plan.checkpoint.id}
    data.update((key, value) for key, value in items if value is not False)
    off = [flag.name for flag, (_, value) in zip(launch.flags, items) if value is False]
    exports = [f"#   {_env_line(var)}" for var in launch.env if var.kind != "commented"]
    head = [
        f"# {engine.name} {plan.release.version} options for {config.model} (pipedeck {_version()}); "
        "same values as serve.sh.",
        f"# Run: {' '.join([*plan.program, '--config', str(engine.config_file), *off])}",
    ]
    if off:
        head.append(f"# ({', '.join(off)} must stay on the command line: the --config loader drops false values.)")
    if exports:
        head += ["# with this environment:", *exports]
    return "\n".join(head) + "\n" + str(yaml.safe_dump(data, sort_keys=False))


def render_record(best: BestConfig, config: ResolvedConfig, plan: Plan) -> str:
    """pipedeck-best.json: the resolved config, predicted metrics, the launch's engine and weights, and provenance."""
    record = {
        "pipedeck_version": _version(),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "engine": plan.engine.name,
        "engine_version": plan.release.version,
        "checkpoint": {
            "id": plan.checkpoint.id,
            "quantization": plan.checkpoint.quantization or None,
            "hub": plan.checkpoint.hub,
        },
        "study_engine": best.engine,
        "study": best.study,
        "trial": best.trial,
        "scenario": best.scenario,
        "slo": None if best.slo is None else dict(best.slo),
        "seed": best.seed,
        "metrics": dict(best.metrics),
        "config": config.to_dict(),
    }
    return json.dumps(record, indent=2, default=_plain) + "\n"


def best_from_json(data: Mapping[str, Any]) -> BestConfig:
    """A BestConfig from a pipedeck-best.json record, or from a plain config dict."""
    if not isinstance(data.get("config"), Mapping):
        return BestConfig(ServingConfig.from_dict(dict(data)).resolve(), {})
    return BestConfig(
        ServingConfig.from_dict(dict(data["config"])).resolve(),
        data.get("metrics") or {},
        data.get("study"),
        data.get("trial"),
        data.get("scenario"),
        data.get("slo"),
        data.get("seed"),
        data.get("study_engine"),
    )


class StudyStore(Protocol):
    """The part of the run store an export reads (`pipedeck.store.RunStore`)."""

    def get_study(self, name: str) -> Any: ...

    def trials(self, study: str) -> Any: ...


def best_from_store(store: StudyStore, study: str) -> BestConfig:
    """The trial a stored study recommends (ties broken as `tune` breaks them), with its scenario, SLO and seed."""
    row = store.get_study(study)
    if row.objective not in OBJECTIVES:
        raise ExportError(f"study: {study} has objective {row.objective!r}; known: {', '.join(OBJECTIVES)}")
    verdict = stored_verdict(row, store.trials(study))
    if verdict is None:
        raise ExportError(f"study: {study} has no completed trial yet")
    trial = verdict.winner
    settings = row.settings or {}
    return BestConfig(
        ServingConfig.from_dict(dict(trial.config)).resolve(),
        trial.metrics or {},
        study,
        trial.number,
        row.scenario,
        row.slo or None,
        settings.get("seed"),
        settings.get("engine"),
    )


def export_best(
    store: StudyStore,
    study: str,
    engine: str,
    out_dir: str | os.PathLike[str],
    version: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[Path]:
    """Export a study's best completed trial for `engine` (release `version`) into out_dir; return the written paths."""
    return write_export(best_from_store(store, study), engine, out_dir, version, warn)


# -- helpers ------------------------------------------------------------------------


def _header(best: BestConfig, config: ResolvedConfig, plan: Plan) -> list[str]:
    engine, release, weights = plan.engine, plan.release, plan.checkpoint
    shape = config.parallelism
    split = ",".join(map(str, shape.layer_split))
    how = ", ".join(
        part
        for part in (
            weights.precision,
            weights.quantization and f"--quantization {weights.quantization}",
            weights.hub != "huggingface" and f"from {weights.hub}",
        )
        if part
    )
    lines = [
        f"Launch script generated by pipedeck {_version()} for {engine.name} {release.version}.",
        f"{engine.name} {release.version}: {release.note}",
        f"Study: {best.study or '-'}  trial: {'-' if best.trial is None else best.trial}  "
        f"scenario: {best.scenario or '-'}  seed: {'-' if best.seed is None else best.seed}",
        f"SLO: {_slo_text(best.slo)}",
        f"Predicted by the simulator: {_metrics_text(best.metrics)}",
        f"Model {config.model} on {config.hardware}: {config.devices} devices (tp {shape.tp} x pp {shape.pp}), "
        f"mode {config.mode}, chunk {config.scheduling.chunk}, layers per virtual stage {split}",
        f"Weights: {weights.id}" + (f" ({how})" if how else "") + f"; source: {weights.source}",
        (
            f"MODEL=tiny.gguf ./{SCRIPT} loads a local file, MODEL=org/name[:quant] a hub id ({engine.hub_flag}); "
            "extra arguments (--port 8000) are passed on."
            if engine.hub_flag
            else f"MODEL=/path/or/hub-id ./{SCRIPT} overrides {weights.id}; extra arguments (--port 8000) are passed on."
        ),
    ]
    if engine.config_file:
        lines.append(f"The same options as YAML: {engine.config_file} ({' '.join(plan.program)} --config).")
    return lines


def _precision(checkpoint: Checkpoint) -> str:
    return f" ({checkpoint.precision})" if checkpoint.precision else ""


def _slo_text(slo: Mapping[str, Any] | None) -> str:
    if not slo:
        return "-"
    parts = []
    for metric, limit in slo.items():
        if isinstance(limit, Mapping) and "limit_s" in limit:
            percentile = f" p{_number(limit['percentile'])}" if "percentile" in limit else ""
            parts.append(f"{metric}{percentile} <= {_number(limit['limit_s'])} s")
        else:
            parts.append(f"{metric} {json.dumps(limit, default=_plain)}")
    return "; ".join(parts)


def _metrics_text(metrics: Mapping[str, Any]) -> str:
    parts = []
    if "goodput_rps" in metrics:
        parts.append(f"goodput {_number(metrics['goodput_rps'])} req/s")
    if "attainment" in metrics:
        parts.append(f"SLO attainment {_number(metrics['attainment'])}")
    return ", ".join(parts) or "-"


def _env_line(var: EnvVar) -> str:
    if var.kind == "default":
        if _UNSAFE_IN_DOUBLE_QUOTES.search(var.value):
            raise ExportError(f"{var.name}: default value {var.value!r} cannot sit inside double quotes")
        return f'export {var.name}="${{{var.name}:-{var.value}}}"'
    if var.kind == "commented":
        return f"# export {var.name}={var.value}" + (f"  # {var.note}" if var.note else "")
    return f"export {var.name}={shlex.quote(var.value)}"


def _comment(text: str) -> str:
    """One comment line; newlines and control characters in the text become spaces."""
    return "# " + re.sub(r"[\x00-\x1f\x7f]+", " ", text)


def _number(value: object) -> str:
    """A number for a comment: floats to four significant digits, 90.0 as 90."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _plain(value: object) -> object:
    """JSON fallback for numpy scalars and other non-JSON values in metrics."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def _version() -> str:
    return version("pipedeck")


def _write_atomic(path: Path, text: str, mode: int) -> Path:
    """Replace path with text in one step: a temporary file in the same folder, then os.replace."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
