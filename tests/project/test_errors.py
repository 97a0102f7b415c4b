"""One error base (pipedeck.errors), two kinds: bad input exits 2, a failure while running exits 1; each error is
one line naming its field, never a traceback."""

import ast
import importlib
import socket
import subprocess
import sys

import click
import pytest

from pipedeck.backends import ConfigError, ExportError, RunCancelled, ServerError, ServingConfig, load_hardware
from pipedeck.backends.live.client import http_error_line
from pipedeck.backends.profiles import ProfileError
from pipedeck.console.errors import exit_status, run_cli
from pipedeck.errors import Cancelled, InputError, PipedeckError, RuntimeFailure
from pipedeck.scenarios import ScenarioError, load_scenario
from pipedeck.store import StoreError, StoreFailure, StoreInputError
from pipedeck.tuner import SLOError, TuneInputError, TuneInputs, build_spec, parse_slo
from pipedeck.tuner.storage import StorageLost
from tests.paths import ROOT


@pytest.mark.parametrize(
    "kind", [ConfigError, ProfileError, ScenarioError, SLOError, StoreInputError, ExportError, TuneInputError]
)
def test_every_input_error_shares_the_base_and_is_a_value_error(kind):
    assert issubclass(kind, InputError) and issubclass(kind, PipedeckError) and issubclass(kind, ValueError)


@pytest.mark.parametrize(
    "fail, field",
    [
        (lambda: ServingConfig.of(tp=3).resolve(), "tp"),
        (lambda: load_hardware("no-such-card"), "hardware"),
        (lambda: load_scenario("azure-conv").workload(rate=-1.0), "rate"),
        (lambda: parse_slo("ttft=fast"), "slo"),
        (lambda: build_spec(TuneInputs(scenario="azure-conv"), "x.duckdb"), "slo"),
    ],
)
def test_the_error_names_its_field(fail, field):
    with pytest.raises(PipedeckError) as err:
        fail()
    assert err.value.field == field and "\n" not in str(err.value)


def test_a_long_http_error_is_cut_at_a_word_with_an_ellipsis():
    page = (
        "<html><body><h1>502 Bad Gateway</h1><p>The upstream engine did not answer; "
        + "raise the proxy timeout or lower --max-num-seqs, " * 6
        + "then retry.</p></body></html>"
    )
    line = http_error_line(502, page, "Bad Gateway")
    assert line.startswith("http 502: <html><body><h1>502 Bad Gateway") and line.endswith(" ...")
    assert len(line) <= len("http 502: ") + 200 and "\n" not in line
    assert not line[10:-4].endswith(("proxy timeo", "--max-num-se")), "cut between words"
    message = "The engine ran out of KV cache blocks; " + "raise --gpu-memory-utilization, " * 8
    assert http_error_line(500, f'{{"error": {{"message": "{message}"}}}}', "x") == f"http 500: {message}", (
        "an error object's message is whole"
    )
    assert http_error_line(503, "", "Service Unavailable") == "http 503: Service Unavailable"
    assert http_error_line(500, "x" * 300, "x") == "http 500: " + "x" * 196 + " ...", "one long word is still cut"


# -- kinds: every error class derives from one, and the CLI gives each its exit status -------------------------

PACKAGES = ("errors", "scenarios", "backends", "store", "tuner", "console")
KINDS = (InputError, RuntimeFailure, Cancelled)


def project_modules() -> list[str]:
    """Every module of pipedeck's packages, by installed name (the entry point and the core's build helper aside)."""
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(("pipedeck", *(parts[:-1] if parts[-1] == "__init__" else parts))))
    return [name for name in names if not name.endswith((".__main__", ".corebuild"))]


def project_exceptions() -> list[type[Exception]]:
    """Every Exception subclass defined in a pipedeck module (KeyboardInterrupt's kin are signals, not errors)."""
    found = {}
    for name in project_modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return [found[key] for key in sorted(found)]


def constructed_names() -> set[str]:
    """Every name the project's code calls (`StoreError(...)` raises or returns a StoreError)."""
    calls = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    calls.add(node.func.id)
    return calls


def test_every_exception_class_of_the_project_derives_from_the_base_and_one_kind():
    """Callers catch one base; the CLI maps kinds to exit statuses, so a class of no kind (or two) would exit as
    bad input by default, or as whichever kind came first. A family that joins both kinds for its callers
    (`StoreError`) is never raised itself."""
    classes = project_exceptions()
    assert len(classes) >= 20 and StoreError in classes and RunCancelled in classes
    assert [c.__qualname__ for c in classes if not issubclass(c, PipedeckError)] == []
    constructed = constructed_names()
    kinds_of = {c: [kind.__name__ for kind in KINDS if issubclass(c, kind)] for c in classes if c not in KINDS}
    assert {c.__qualname__: kinds for c, kinds in kinds_of.items() if len(kinds) > 1} == {}
    kindless = [c.__qualname__ for c, kinds in kinds_of.items() if not kinds]
    assert kindless == ["PipedeckError", "StoreError"]
    assert not {"PipedeckError", "StoreError"} & constructed, "a kindless family is raised"


def test_the_check_of_kinds_would_see_a_new_error_class_of_no_kind():
    """The walk finds classes wherever they are defined: one added to a module is seen, and it has no kind."""
    module = importlib.import_module("pipedeck.backends.errors")
    stray = type("StrayError", (ValueError,), {"__module__": module.__name__})
    module.StrayError = stray
    try:
        found = project_exceptions()
        assert stray in found and not issubclass(stray, PipedeckError)
    finally:
        delattr(module, "StrayError")


@pytest.mark.parametrize(
    ("kind", "status"),
    [(ConfigError, 2), (ScenarioError, 2), (StoreInputError, 2), (ServerError, 1), (StoreFailure, 1), (StorageLost, 1)],
)
def test_each_kind_has_its_exit_status(kind, status):
    assert exit_status(kind("field: what went wrong")) == status


def pipedeck(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The CLI as an operator runs it, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "pipedeck.console", *argv], capture_output=True, text=True, timeout=timeout
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """stderr's one line, checked to be one line with no traceback."""
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_bad_input_exits_2_with_one_line_naming_the_field():
    done = pipedeck("simulate", "--scenario", "azure-conv", "--rate", "-1", "--no-store")
    assert done.returncode == 2
    assert one_line(done) == "pipedeck: error: rate: must be a positive number of requests per second, got -1.0\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_dead_server_exits_1_with_one_line():
    """Nobody listens at the endpoint: the server is down, which is no fault of the flags."""
    url = f"http://127.0.0.1:{free_port()}"
    done = pipedeck("run", "--backend", "live", "--endpoint", url, "--scenario", "azure-conv", "--requests", "2")
    assert done.returncode == 1
    assert one_line(done).startswith(f"pipedeck: error: endpoint: {url}/v1/models lists no model (ConnectError")


HOLD = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE held (x INTEGER)")
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_store_locked_by_another_process_exits_1_with_one_line(tmp_path):
    db = tmp_path / "held.duckdb"
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout.readline() == "holding\n"
            done = pipedeck("runs", "--db", str(db))
        finally:
            holder.stdin.close()
    assert done.returncode == 1
    line = one_line(done)
    assert line.startswith(f"pipedeck: error: db: {db} is in use by another process (PID {holder.pid})"), line


def test_a_cancelled_run_reports_an_interruption_not_an_error(capsys):
    """A stop request that reaches the CLI is reported as Ctrl-C is: one line and 130."""

    @click.command()
    def stops() -> None:
        raise RunCancelled("the observer stopped the run")

    assert run_cli(stops, []) == 130
    assert capsys.readouterr().err == "pipedeck: interrupted\n"
