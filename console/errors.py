"""The CLI's error boundary: each kind of pipedeck error becomes one line on stderr and the kind's exit status."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import click

from ..errors import Cancelled, InputError, PipedeckError, RuntimeFailure

BAD_INPUT = 2  # a flag, file or value is not allowed (click's usage errors too)
FAILED = 1  # the input was fine but running failed: a server died, a store is locked
INTERRUPTED = 130  # asked to stop (Ctrl-C, or a `Cancelled`), as a shell reports SIGINT
# the one map from a kind of error to its exit status (README.md, under the flags)
EXIT_STATUS: tuple[tuple[type[PipedeckError], int], ...] = ((InputError, BAD_INPUT), (RuntimeFailure, FAILED))


def exit_status(err: PipedeckError) -> int:
    """The exit status of an error's kind (bad input for a kindless one, which tests/project/test_errors.py finds none of)."""
    return next((status for kind, status in EXIT_STATUS if isinstance(err, kind)), BAD_INPUT)


def run_cli(command: click.Command, argv: list[str] | None = None) -> int:
    """Run a click command; an error prints one line and returns its kind's exit status, never a traceback."""
    try:
        result = command.main(args=argv, prog_name="pipedeck", standalone_mode=False)
    except (Cancelled, KeyboardInterrupt, click.Abort):
        print("pipedeck: interrupted", file=sys.stderr)
        return INTERRUPTED
    except PipedeckError as err:
        return _fail(str(err), exit_status(err))
    except click.ClickException as err:
        return _fail(err.format_message(), BAD_INPUT)
    return result if isinstance(result, int) else 0


def _fail(message: str, status: int) -> int:
    print(f"pipedeck: error: {message.splitlines()[0] if message else 'invalid input'}", file=sys.stderr)
    return status


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
