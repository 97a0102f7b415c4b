"""`pipedeck simulate`: one scenario under one config on the simulator; what it shares with `pipedeck run`."""

from __future__ import annotations

import json
from collections.abc import Callable

import click

from .. import store as run_store  # its RunStore, and DuckDB with it, loads only when a run is stored
from ..backends import RunResult, ServingConfig, backend_entry, check_footprint, open_backend, write_chrome_trace
from ..scenarios import load_scenario
from .db import WRITE_LOCK_WAIT_S, db_option, db_path
from .options import check_writable, config_from_options, config_options, workload_options
from .render import print_run


def output_options(fn: Callable) -> Callable:
    """--json, --timeline, --db, --label and --no-store: what to print and where to keep the run."""
    for option in reversed(
        (
            click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables."),
            click.option(
                "--timeline",
                type=click.Path(dir_okay=False),
                default=None,
                help="Write the per-rank timeline as a Chrome trace (open in Perfetto; backends that draw one).",
            ),
            db_option,
            click.option("--label", default=None, help="A label stored with the run (shown by pipedeck runs)."),
            click.option("--no-store", is_flag=True, help="Do not store the run."),
        )
    ):
        fn = option(fn)
    return fn


@click.command()
@config_options
@workload_options
@output_options
def simulate(**opts: object) -> None:
    """Simulate one scenario under one serving config."""
    execute(opts, "sim", config_from_options(opts))


def execute(
    opts: dict[str, object], backend_name: str, config: ServingConfig | None, **backend_options: object
) -> tuple[RunResult, int | None]:
    """Run `config` (None: a live server's own, recorded as it describes itself), store and print it as `opts`
    say; the run and its id in the store (None: not stored)."""
    scenario = load_scenario(str(opts["scenario"]))
    if opts["timeline"]:
        # a live server draws one when its profiler is read (profile_dir)
        if not (backend_entry(backend_name).capabilities.timeline or backend_options.get("profile_dir")):
            raise click.BadParameter(
                f"the {backend_name} backend draws no per-rank timeline"
                + (" without --profile-dir" if backend_entry(backend_name).capabilities.endpoint else ""),
                param_hint="--timeline",
            )
        check_writable(str(opts["timeline"]), "--timeline")
    store = not opts["no_store"]
    # the workload's arguments and the run's memory, before drawing the workload (alone a fifth of the simulator's)
    check_footprint(
        backend_name,
        scenario,
        config,
        num_requests=opts["num_requests"],
        seed=opts["seed"],
        rate=opts["rate"],
        timeline=bool(opts["timeline"]) or store,
    )
    path = db_path(opts)
    if store:  # a bad --db fails here, before any work; nothing is created until there is a run to store
        run_store.RunStore.check_writable(path)
    with open_backend(backend_name, **backend_options) as backend:
        result = backend.run(
            scenario,
            config,
            rate=opts["rate"],
            seed=opts["seed"],
            num_requests=opts["num_requests"],
            timeline=bool(opts["timeline"]) or store,
        )
    run_id = None
    if store:
        with run_store.RunStore.open(path, lock_timeout_s=WRITE_LOCK_WAIT_S) as db:
            run_id = db.save_run(result, label=opts["label"])
    if opts["timeline"]:
        write_chrome_trace(result, opts["timeline"])
    if opts["as_json"]:
        click.echo(json.dumps({**run_json(result), "run_id": run_id}, indent=2))
    else:
        print_run(result)
        if opts["timeline"]:
            click.echo(f"timeline: {opts['timeline']}")
        if run_id is not None:
            click.echo(f"stored run {run_id} in {path}")
    return result, run_id


def run_json(result: RunResult) -> dict[str, object]:
    """The JSON object `simulate --json` prints."""
    data = {
        "scenario": result.scenario,
        "backend": result.backend,
        "seed": result.seed,
        "rate": result.rate,
        **result.summary(),
        "config": result.config,
    }
    if result.live is not None:
        server = result.live.server
        data["server_metrics"] = (
            None
            if server is None
            else {
                "engine": server.engine,
                "missing": list(server.missing),
                "scrapes": len(server.samples),
                "scrape_errors": server.errors,
                "counters": server.counter_deltas(),
                "last": {
                    name: value
                    for sample in server.samples
                    for name, value in sample.values.items()
                    if isinstance(value, int | float)
                },
            }
        )
    return data
