"""`pipedeck simulate`: run one scenario under one config on the simulator."""

from __future__ import annotations

import json

import click

from ..backends.result import RunResult
from ..backends.sim import SimBackend
from ..backends.timeline import write_chrome_trace
from .options import check_writable, config_from_options, config_options, scenario_from_options, workload_options
from .render import print_run


@click.command()
@config_options
@workload_options("long-128k")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--timeline", type=click.Path(dir_okay=False), default=None,
              help="Write the per-rank timeline as a Chrome trace (open in Perfetto).")
def simulate(**opts: object) -> None:
    """Simulate one scenario under one serving config."""
    config = config_from_options(opts)
    scenario = scenario_from_options(opts)
    if opts["timeline"]:
        check_writable(str(opts["timeline"]), "--timeline")
    result = SimBackend().run(scenario, config, rate=opts["rate"], seed=opts["seed"],
                              num_requests=opts["num_requests"], timeline=bool(opts["timeline"]))
    if opts["timeline"]:
        write_chrome_trace(result, opts["timeline"])
    if opts["as_json"]:
        click.echo(json.dumps(run_json(result), indent=2))
    else:
        print_run(result)
        if opts["timeline"]:
            click.echo(f"timeline: {opts['timeline']}")


def run_json(result: RunResult) -> dict[str, object]:
    """The JSON object `simulate --json` prints."""
    return {
        "scenario": result.scenario, "backend": result.backend, "seed": result.seed, "rate": result.rate,
        **result.summary(), "config": result.config,
    }
