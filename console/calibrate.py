"""`pipedeck calibrate`: fit a hardware profile's constants to a live server, and score it on runs it did not fit."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Unpack

import click
from rich import box
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from ..backends import ENGINES, ResolvedConfig, RunResult, load_hardware, open_backend, profile_toml, serving
from ..errors import InputError
from ..store import RunStore
from ..tuner import (
    PASSES,
    QUICK_PASSES,
    Fit,
    Measured,
    Point,
    Provenance,
    Variant,
    calibrated_profile,
    calibration_record,
    constants_to_fit,
    fit,
    measure,
    parse_fixes,
    plan,
    profile,
    profiled_points,
)
from .backend_options import LoggedLaunchOptions, launch_from_options, launch_options
from .db import WRITE_LOCK_WAIT_S, DbOptions, db_option, db_path
from .options import check_writable, config_from_options, config_options, given_config
from .output import output_console
from .progress import PlainProgress, ProgressOptions, make_progress, progress_mode, progress_option


class CalibrateOptions(LoggedLaunchOptions, DbOptions, ProgressOptions):
    """`pipedeck calibrate`'s options (`config_from_options` reads the config's own)."""

    variants: tuple[str, ...]
    held_out_variants: tuple[str, ...]
    endpoint: str | None
    engine: str | None
    model_path: str | None
    served_model: str | None
    out: str
    name: str | None
    seed: int
    quick: bool
    no_store: bool


@click.command()
@click.option("--endpoint", default=None, help="The running server to calibrate against, e.g. http://127.0.0.1:8080.")
@click.option(
    "--launch",
    "engine",
    type=click.Choice(list(ENGINES)),
    default=None,
    help="Start this engine with the config's launch for the calibration instead (stopped when it ends).",
)
@click.option("--model-path", default=None, help="--launch: the weights the engine loads (llama-server: a GGUF file).")
@launch_options(when="--launch: ")
@click.option("--served-model", default=None, help="The model name to request (default: the first /v1/models lists).")
@config_options
@click.option(
    "--variant",
    "variants",
    multiple=True,
    metavar="'KEY=VALUE ...'",
    help="--launch: also measure and fit on the config with these changes (tune's --fix names: pp=2, "
    "layer-split=3,1, chunk=128), on a server of its own; repeatable.",
)
@click.option(
    "--hold-out",
    "held_out_variants",
    multiple=True,
    metavar="'KEY=VALUE ...'",
    help="--launch: also measure such a config, only to score the fit on it (every run held out); repeatable.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="The calibrated hardware profile (TOML) to write; a file there is replaced once the fit succeeds.",
)
@click.option("--name", default=None, help="The calibrated profile's name (default: --out's file name without .toml).")
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the runs' prompts and arrivals."
)
@click.option(
    "--quick",
    is_flag=True,
    help=f"{QUICK_PASSES} passes of the runs instead of {PASSES}: a third of the time, noisier.",
)
@db_option
@click.option("--no-store", is_flag=True, help="Do not store the live runs.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@progress_option
def calibrate(**opts: Unpack[CalibrateOptions]) -> None:
    """Fit the hardware profile's constants to a live server's latencies; report the error on held-out runs."""
    started = time.monotonic()
    config = config_from_options(opts)
    _check_server_options(opts)
    variants = [Variant("", config, held_out=False), *_variants(opts)]
    out = Path(opts["out"])
    if out.suffix != ".toml":
        raise click.BadParameter(
            f"a hardware profile is a .toml file (--hardware reads only those), got {out}", param_hint="--out"
        )
    check_writable(str(out), "--out")
    plans = [plan(v.config, variant=v.label, held_out=v.held_out) for v in variants]
    passes = QUICK_PASSES if opts["quick"] else PASSES
    store = None if opts["no_store"] else db_path(opts)
    if store is not None:  # a bad --db fails here, before any work; nothing is created until a run is stored
        RunStore.check_writable(store)
    console = Console(stderr=True)
    run_ids: list[int] = []
    progress = make_progress(progress_mode(opts), console)
    measured: list[Measured] = []
    urls: list[str] = []  # one server per config launched (--endpoint: that one)
    with progress:
        task = progress.add_task(
            "measuring", total=sum(passes * len(p) + len(_profiled(opts, v, p)) for v, p in zip(variants, plans))
        )

        def done(runs: Measured, result: RunResult, what: str) -> None:
            if store is not None:
                with RunStore.open(store, lock_timeout_s=WRITE_LOCK_WAIT_S) as db:
                    run_ids.append(db.save_run(result, label=f"calibrate {runs.point.name} {what}"))
            progress.update(task, advance=1, description=f"measured {runs.point.name} ({what})")

        for index, (variant, points) in enumerate(zip(variants, plans)):
            profiled = _profiled(opts, variant, points)
            with tempfile.TemporaryDirectory(prefix="pipedeck-calibrate-") as traces:
                folder = Path(traces) if profiled else None
                with _server(opts, variant.config, progress, index=index, profile_dir=folder) as url:
                    urls.append(url)
                    with open_backend("live", endpoint=url, model=opts["served_model"]) as backend:
                        runs = measure(
                            backend,
                            variant.config,
                            points,
                            passes,
                            opts["seed"],
                            on_run=lambda m, n, r: done(m, r, f"pass {n + 1}/{passes}"),
                        )
                    if folder is not None:
                        with open_backend(
                            "live", endpoint=url, model=opts["served_model"], profile_dir=folder
                        ) as backend:
                            profile(
                                backend,
                                [m for m in runs if m.point in profiled],
                                opts["seed"],
                                on_run=lambda m, r: done(m, r, "profiled"),
                            )
                    measured += runs
        provenance = Provenance(_engine(measured), ", ".join(urls), datetime.now(UTC).isoformat(timespec="seconds"))
        progress.remove_task(task)
        fitting = progress.add_task("fitting", total=None)
        shared_pool = bool(opts["engine"]) and ENGINES[str(opts["engine"])].shared_kv_pool
        pipeline = any(v.config.parallelism.pp > 1 for v in variants if not v.held_out)
        result = fit(
            measured,
            config.hardware_profile,
            constants_to_fit(config.hardware_profile, shared_pool=shared_pool, pipeline=pipeline),
            on_evaluation=lambda n: progress.update(fitting, description=f"fitting: {n} simulations"),
        )
    name = opts["name"] or out.stem
    profile_ = calibrated_profile(result, config, name, provenance)
    record = calibration_record(result, measured, variants, provenance, passes, opts["seed"])
    _write(out, profile_toml(profile_, {"calibration": record}, comment=_header(result, config, provenance)))
    wall = time.monotonic() - started
    if opts["as_json"]:
        click.echo(json.dumps(_json(result, record, out, store, run_ids, wall), indent=2))
    else:
        _print(result, config, provenance, out, store, run_ids, wall)


def _variants(opts: CalibrateOptions) -> list[Variant]:
    """The --variant and --hold-out configs: the calibrated config with each one's changes, resolved."""
    given = [(text, False) for text in opts["variants"]] + [(text, True) for text in opts["held_out_variants"]]
    if given and not opts["engine"]:
        flag = "--variant" if opts["variants"] else "--hold-out"
        raise click.BadParameter(
            "needs --launch: a server at --endpoint runs the one config it was started with", param_hint=flag
        )
    variants = []
    for text, held_out in given:
        flag = "--hold-out" if held_out else "--variant"
        try:
            changes = parse_fixes(text.split())
            variant = given_config(opts).replace(**changes).resolve() if changes else None
        except InputError as err:
            raise click.BadParameter(str(err).removeprefix("fix: "), param_hint=flag) from None
        if variant is None:
            raise click.BadParameter(
                f"expected KEY=VALUE changes such as 'pp=2 layer-split=3,1', got {text!r}", param_hint=flag
            )
        variants.append(Variant(" ".join(text.split()), variant, held_out=held_out))
    return variants


def _profiled(opts: CalibrateOptions, variant: Variant, points: tuple[Point, ...]) -> list[Point]:
    """The runs of `variant` profiled for their per-rank timelines: a pipeline's, on a launched engine with a
    profiler pipedeck reads (none otherwise)."""
    engine = opts["engine"]
    if not engine or variant.config.parallelism.pp < 2 or ENGINES[str(engine)].profiler is None:
        return []
    return profiled_points(points)


def _check_server_options(opts: CalibrateOptions) -> None:
    """Exactly one of --endpoint and --launch; --launch with --model-path; the launch flags only with --launch."""
    if bool(opts["endpoint"]) == bool(opts["engine"]):
        raise click.UsageError("give the server to calibrate against: --endpoint URL or --launch ENGINE (one of them)")
    if opts["engine"] and not opts["model_path"]:
        raise click.BadParameter("--launch needs the weights the engine loads", param_hint="--model-path")
    if opts["endpoint"] and (opts["model_path"] or opts["program"]):
        raise click.BadParameter(
            "only with --launch (the server at --endpoint is already running)", param_hint="--model-path/--program"
        )


@contextlib.contextmanager
def _server(
    opts: CalibrateOptions,
    config: ResolvedConfig,
    progress: Progress | PlainProgress,
    *,
    index: int,
    profile_dir: Path | None,
) -> Iterator[str]:
    """The URL to calibrate `config` against: --endpoint's, or an engine started now (the `index`th launch, which
    logs beside --log; its profiler writing to `profile_dir` when given) and stopped however this ends."""
    if opts["endpoint"]:
        yield opts["endpoint"].rstrip("/")
        return
    task = progress.add_task(f"starting {opts['engine']}", total=None)
    launch = launch_from_options(opts, engine=str(opts["engine"]), model_path=str(opts["model_path"]))
    if index:
        launch = dataclasses.replace(launch, log_path=launch.log_path.with_suffix(f".{index}{launch.log_path.suffix}"))
    with serving(dataclasses.replace(launch, profile_dir=profile_dir), config) as server:
        progress.remove_task(task)
        yield server.url


def _engine(measured: list[Measured]) -> str:
    """The engine and version the server reported, or a note that it did not."""
    versions = {
        result.live.engine_version
        for m in measured
        for _, result in m.passes
        if result.live and result.live.engine_version is not None
    }
    return ", ".join(sorted(versions)) or "a server that did not report its version"


def _write(out: Path, text: str) -> None:
    """Write `text` beside `out` and check it loads as a hardware profile, then rename it over `out`."""
    handle, temporary = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".toml", dir=out.parent.resolve())
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        load_hardware(temporary)
        os.replace(temporary, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _header(result: Fit, config: ResolvedConfig, provenance: Provenance) -> str:
    ttft, tpot = result.worst(held_out=True)
    bubble = result.worst_bubble(held_out=True)
    shares = "" if bubble is None else f", bubble share {bubble:.1%}"
    return (
        f"Calibrated by pipedeck calibrate from {config.hardware} against {provenance.engine}\n"
        f"at {provenance.endpoint}, {provenance.date}; fitted: {', '.join(result.spread)}.\n"
        f"Held-out runs' worst P50 errors: TTFT {ttft:.1%}, TPOT {tpot:.1%}{shares}; every run is in [calibration]."
    )


def _print(
    result: Fit,
    config: ResolvedConfig,
    provenance: Provenance,
    out: Path,
    store: Path | None,
    run_ids: list[int],
    wall: float,
) -> None:
    console = output_console()
    console.print(
        f"calibrated [bold]{result.hardware.name}[/] from {config.hardware} against {provenance.engine} "
        f"at {provenance.endpoint}"
    )
    constants = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("fitted constant", "start", "fitted", "pinned"):
        constants.add_column(col, justify="left" if col == "fitted constant" else "right")
    for name in result.spread:
        spread = result.spread[name]
        pinned = (
            f"{result.at_bound[name]} bound"
            if name in result.at_bound
            else "free"
            if spread == float("inf")
            else f"x/÷ {spread:.3g}"
        )
        constants.add_row(name, f"{getattr(result.start, name):.4g}", f"{getattr(result.hardware, name):.4g}", pinned)
    console.print(constants)
    runs = Table(
        box=box.SIMPLE_HEAD, pad_edge=False, title="P50 latency (ms), live and simulated", title_justify="left"
    )
    for col in ("run", "set", "served", "TTFT", "sim", "error", "±", "TPOT", "sim", "error", "±"):
        runs.add_column(col, justify="left" if col in ("run", "set") else "right")
    for row in sorted(result.rows, key=lambda r: r.point.held_out):
        runs.add_row(
            row.point.name,
            "held" if row.point.held_out else "fit",
            str(row.served),
            f"{row.ttft * 1e3:.2f}",
            f"{row.sim_ttft * 1e3:.2f}",
            f"{row.ttft_error:+.0%}",
            f"{row.ttft_spread:.0%}",
            f"{row.tpot * 1e3:.3f}",
            f"{row.sim_tpot * 1e3:.3f}",
            f"{row.tpot_error:+.0%}",
            f"{row.tpot_spread:.0%}",
        )
    console.print(runs)
    console.print("±: run-to-run spread, half the range of the passes' own P50s")
    profiled = [r for r in result.rows if r.bubble is not None and r.sim_bubble is not None]
    if profiled:
        bubbles = Table(
            box=box.SIMPLE_HEAD, pad_edge=False, title="bubble share of the profiled runs", title_justify="left"
        )
        for col in ("run", "set", "measured", "sim", "error"):
            bubbles.add_column(col, justify="left" if col in ("run", "set") else "right")
        for row in sorted(profiled, key=lambda r: r.point.held_out):
            error = row.bubble_error
            bubbles.add_row(
                row.point.name,
                "held" if row.point.held_out else "fit",
                f"{row.bubble:.1%}",
                f"{row.sim_bubble:.1%}",
                "-" if error is None else f"{error:+.0%}",
            )
        console.print(bubbles)
    failed = [f"{row.point.name} {row.failed}" for row in result.rows if row.failed]
    if failed:
        console.print(f"failed requests (left out of the P50s): {', '.join(failed)}")
    ttft, tpot = result.worst(held_out=True)
    bubble = result.worst_bubble(held_out=True)
    shares = "" if bubble is None else f", bubble share {bubble:.1%}"
    console.print(
        f"held out: worst P50 error TTFT {ttft:.1%}, TPOT {tpot:.1%}{shares}; "
        f"{result.evaluations} simulations ({result.message})"
    )
    stored = f"; stored runs {run_ids[0]}-{run_ids[-1]} in {store}" if run_ids else ""
    console.print(f"wrote {out}{stored} ({wall:.0f} s)")


def _json(
    result: Fit, record: dict[str, object], out: Path, store: Path | None, run_ids: list[int], wall: float
) -> dict[str, object]:
    ttft, tpot = result.worst(held_out=True)
    return {
        "out": str(out),
        "hardware": result.hardware.name,
        "fitted": record["fitted"],
        "held_out_worst": {"ttft": ttft, "tpot": tpot, "bubble": result.worst_bubble(held_out=True)},
        "runs": record["runs"],
        "engine": record["engine"],
        "endpoint": record["endpoint"],
        "evaluations": result.evaluations,
        "stopped": result.message,
        "db": None if store is None else str(store),
        "run_ids": run_ids,
        "wall_s": wall,
    }
