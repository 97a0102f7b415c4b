"""Each command's options TypedDict names exactly the options click gives its **opts, beside the config's own."""

from __future__ import annotations

import inspect

import click
import pytest

from pipedeck.console.calibrate import CalibrateOptions, calibrate
from pipedeck.console.compare import CompareOptions, compare
from pipedeck.console.console_cmd import console
from pipedeck.console.db import DbOptions
from pipedeck.console.options import config_fields
from pipedeck.console.report import ReportOptions, report
from pipedeck.console.run import RunCommandOptions, run
from pipedeck.console.runs import RunsOptions, runs
from pipedeck.console.serve import ServeOptions, serve
from pipedeck.console.show import ShowOptions, show
from pipedeck.console.simulate import RunOptions, simulate
from pipedeck.console.studies import StudiesOptions, studies
from pipedeck.console.tune import TuneOptions, tune

TYPED = [
    (simulate, RunOptions),
    (run, RunCommandOptions),
    (runs, RunsOptions),
    (show, ShowOptions),
    (tune, TuneOptions),
    (studies, StudiesOptions),
    (serve, ServeOptions),
    (compare, CompareOptions),
    (report, ReportOptions),
    (console, DbOptions),
    (calibrate, CalibrateOptions),
]


@pytest.mark.parametrize(("command", "options"), TYPED, ids=[command.name for command, _ in TYPED])
def test_a_commands_options_type_names_each_option_it_is_given(command: click.Command, options: type) -> None:
    assert command.callback is not None
    named = set(inspect.signature(command.callback).parameters) - {"opts"}  # parameters of their own (RUN, --study)
    given = {param.name for param in command.params} - named
    declared = set(options.__annotations__)
    assert declared - given == set(), "typed but not an option of the command"
    assert given - declared - set(config_fields()) == set(), "an option of the command left untyped"
