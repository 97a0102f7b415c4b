"""`pipedeck simulate`: run one scenario under one config on the simulator."""

from __future__ import annotations

import json

import click

from ..backends.result import RunResult
from ..backends.registry import make_backend
from ..backends.timeline import write_chrome_trace
from ..store import RunStore
from .options import check_writable, config_from_options, config_options, scenario_from_options, workload_options
from .render import print_run
from .runs import WRITE_LOCK_WAIT_S, db_option, db_path


@click.command()
@config_options
@workload_options("long-128k")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--timeline", type=click.Path(dir_okay=False), default=None,
              help="Write the per-rank timeline as a Chrome trace (open in Perfetto).")
@db_option
@click.option("--label", default=None, help="A label stored with the run (shown by pipedeck runs).")
@click.option("--no-store", is_flag=True, help="Do not store the run.")
def simulate(**opts: object) -> None:
    """Simulate one scenario under one serving config."""
    config = config_from_options(opts)
    scenario = scenario_from_options(opts)
    if opts["timeline"]:
        check_writable(str(opts["timeline"]), "--timeline")
    store = not opts["no_store"]
    path = db_path(opts)
    if store:
        RunStore.open(path).close()  # a bad --db fails here, before any work; the file is not held while simulating
    result = make_backend("sim").run(scenario, config, rate=opts["rate"], seed=opts["seed"],
                                     num_requests=opts["num_requests"], timeline=bool(opts["timeline"]) or store)
    run_id = None
    if store:
        with RunStore.open(path, lock_timeout_s=WRITE_LOCK_WAIT_S) as db:
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


def run_json(result: RunResult) -> dict[str, object]:
    """The JSON object `simulate --json` prints."""
    return {
        "scenario": result.scenario, "backend": result.backend, "seed": result.seed, "rate": result.rate,
        **result.summary(), "config": result.config,
    }
