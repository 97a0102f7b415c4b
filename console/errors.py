"""The CLI's error boundary: bad input becomes one line on stderr and exit status 2."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import click

from ..scenarios import PipedeckError


def run_cli(command: click.Command, argv: list[str] | None = None) -> int:
    """Run a click command; user errors print one line and return 2, never a traceback."""
    try:
        result = command.main(args=argv, prog_name="pipedeck", standalone_mode=False)
    except PipedeckError as err:
        return _fail(str(err))
    except click.ClickException as err:
        return _fail(err.format_message())
    except (KeyboardInterrupt, click.Abort):
        print("pipedeck: interrupted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


def _fail(message: str) -> int:
    print(f"pipedeck: error: {message.splitlines()[0] if message else 'invalid input'}", file=sys.stderr)
    return 2


def exit_with(run: Callable[[], int]) -> None:
    """Exit the process with `run()`'s status."""
    sys.exit(run())


class _StderrLines(logging.Handler):
    """Each record as one `pipedeck: ...` line on the stderr of the moment (click's, so tests can capture it)."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"pipedeck: {record.getMessage()}", err=True)


def report_on_stderr() -> None:
    """What the core tells the operator through the `pipedeck` loggers (a leftover server stopped) goes to stderr."""
    logger = logging.getLogger("pipedeck")
    if not any(isinstance(handler, _StderrLines) for handler in logger.handlers):
        logger.addHandler(_StderrLines(logging.WARNING))
    logger.propagate = False
