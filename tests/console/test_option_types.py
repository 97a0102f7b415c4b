"""Each command's options TypedDict names exactly the options click gives it, beside the config's own."""

from __future__ import annotations

import click
import pytest

from pipedeck.console.calibrate import CalibrateOptions, calibrate
from pipedeck.console.options import config_fields
from pipedeck.console.run import RunCommandOptions, run
from pipedeck.console.runs import RunsOptions, runs
from pipedeck.console.serve import ServeOptions, serve
from pipedeck.console.simulate import RunOptions, simulate
from pipedeck.console.tune import TuneOptions, tune

TYPED = [
    (simulate, RunOptions),
    (run, RunCommandOptions),
    (runs, RunsOptions),
    (calibrate, CalibrateOptions),
    (serve, ServeOptions),
    (tune, TuneOptions),
]


@pytest.mark.parametrize(("command", "options"), TYPED, ids=[command.name for command, _ in TYPED])
def test_a_commands_options_type_names_each_option_it_is_given(command: click.Command, options: type) -> None:
    given = {param.name for param in command.params}
    declared = set(options.__annotations__)
    assert declared - given == set(), "typed but not an option of the command"
    assert given - declared - set(config_fields()) == set(), "an option of the command left untyped"
