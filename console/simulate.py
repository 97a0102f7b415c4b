"""`pipedeck simulate`: one scenario under one config on the simulator; what it shares with `pipedeck run`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol, TypedDict, Unpack, cast

import click

from .. import store as run_store  # its RunStore, and DuckDB with it, loads only when a run is stored
from ..backends import (
    ResolvedConfig,
    RunResult,
    RunSummary,
    ServingConfig,
    backend_entry,
    check_footprint,
    check_knobs_read,
    open_backend,
    write_chrome_trace,
)
from ..scenarios import Scenario, load_scenario
from .db import WRITE_LOCK_WAIT_S, DbOptions, db_option, db_path
from .options import WorkloadOptions, check_writable, config_from_options, config_options, workload_options
from .render import print_run


class OutputOptions(DbOptions):
    """The values `output_options` adds to a command's options."""

    as_json: bool
    timeline: str | None
    label: str | None
    no_store: bool


class RunOptions(WorkloadOptions, OutputOptions):
    """What `execute` reads of a command's options (`config_from_options` reads the config's own)."""


class _OwnConfigRunner(Protocol):
    """A backend's `run` that also takes no config: a server started elsewhere runs its own (the live backend
    records what the server reports)."""

    def run(
        self,
        scenario: Scenario,
        config: ServingConfig | ResolvedConfig | None,
        *,
        rate: float | None,
        seed: int,
        num_requests: int | None,
        timeline: bool,
    ) -> RunResult: ...


def output_options(fn: Callable[..., Any]) -> Callable[..., Any]:
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
def simulate(**opts: Unpack[RunOptions]) -> None:
    """Simulate one scenario under one serving config."""
    execute(opts, "sim", config_from_options(opts))


def execute(
    opts: RunOptions, backend_name: str, config: ResolvedConfig | None, **backend_options: object
) -> tuple[RunResult, int | None]:
    """Run `config` (None: a live server's own, recorded as it describes itself), store and print it as `opts`
    say; the run and its id in the store (None: not stored)."""
    if config is not None:  # a knob the backend does not read would be recorded as if it had run
        check_knobs_read(backend_name, config.values())
    scenario = load_scenario(opts["scenario"])
    timeline = opts["timeline"]
    if timeline:
        # a live server draws one when its profiler is read (profile_dir)
        if not (backend_entry(backend_name).capabilities.timeline or backend_options.get("profile_dir")):
            raise click.BadParameter(
                f"the {backend_name} backend draws no per-rank timeline"
                + (" without --profile-dir" if backend_entry(backend_name).capabilities.endpoint else ""),
                param_hint="--timeline",
            )
        check_writable(timeline, "--timeline")
    store = not opts["no_store"]
    # the workload's arguments and the run's memory, before drawing the workload (alone a fifth of the simulator's)
    check_footprint(
        backend_name,
        scenario,
        config,
        num_requests=opts["num_requests"],
        seed=opts["seed"],
        rate=opts["rate"],
        timeline=bool(timeline) or store,
    )
    path = db_path(opts)
    if store:  # a bad --db fails here, before any work; nothing is created until there is a run to store
        run_store.RunStore.check_writable(path)
    with open_backend(backend_name, **backend_options) as backend:
        # `run` (run.py) gives no config only to a backend with an endpoint, whose run takes None; the Backend
        # protocol's run always takes one
        runner = cast(_OwnConfigRunner, backend)
        result = runner.run(
            scenario,
            config,
            rate=opts["rate"],
            seed=opts["seed"],
            num_requests=opts["num_requests"],
            timeline=bool(timeline) or store,
        )
    run_id = None
    if store:
        with run_store.RunStore.open(path, lock_timeout_s=WRITE_LOCK_WAIT_S) as db:
            run_id = db.save_run(result, label=opts["label"])
    if timeline:
        write_chrome_trace(result, timeline)
    if opts["as_json"]:
        click.echo(json.dumps({**run_json(result), "run_id": run_id}, indent=2))
    else:
        print_run(result)
        if timeline:
            click.echo(f"timeline: {timeline}")
        if run_id is not None:
            click.echo(f"stored run {run_id} in {path}")
    return result, run_id


class ServerMetricsJson(TypedDict):
    """What a live run's server said at /metrics, as `simulate --json` prints it."""

    engine: str | None
    missing: list[str]  # pipedeck's metric names absent from every scrape
    scrapes: int
    scrape_errors: list[str]  # one line per failed scrape
    counters: dict[str, float]  # what the run added to each counter
    last: dict[str, float]  # each gauge and counter at its last scrape (histograms left out)


class RunJson(RunSummary):
    """The JSON object `simulate --json` prints: the run's summary, what it ran and, for a live run, its server."""

    scenario: str
    backend: str
    seed: int
    rate: float | None
    config: dict[str, object]


class LiveRunJson(RunJson):
    """`simulate --json`'s object for a live run (`pipedeck run --backend live`): its server's metrics too."""

    server_metrics: ServerMetricsJson | None  # None when the server was not scraped


def run_json(result: RunResult) -> RunJson:
    """The JSON object `simulate --json` prints."""
    data: RunJson = {
        "scenario": result.scenario,
        "backend": result.backend,
        "seed": result.seed,
        "rate": result.rate,
        **result.summary(),
        "config": result.config,
    }
    if result.live is None:
        return data
    server = result.live.server
    live: LiveRunJson = {
        **data,
        "server_metrics": None
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
        },
    }
    return live
