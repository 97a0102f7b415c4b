"""The launcher and `pipedeck serve`: the export's flags, health, logs, a clean stop, every failure one line."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from pipedeck.backends import ExportError, LaunchError, ServerLaunch, ServingConfig, serving
from pipedeck.backends.live.launcher import SERVER_NICENESS, Terminated, server_command, start_failure
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from tests.paths import DATA, ROOT

FAKE = (sys.executable, str(DATA / "fake_engine.py"))
LAUNCH_FLAGS = {"--program", "--log", "--health-timeout"}
CPU = dict(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=1, pp=1, chunk=512, max_running=4, kv_capacity=4096)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_llama_server_gets_the_flags_its_config_maps_to():
    argv, env = server_command(ServingConfig.of(**CPU).resolve(), "llama-server", "tiny.gguf", "127.0.0.1", 8123)
    assert argv == [
        "llama-server",
        "--model",
        "tiny.gguf",
        "--kv-unified",
        "--ctx-size",
        "4096",
        "--batch-size",
        "512",
        "--ubatch-size",
        "512",
        "--parallel",
        "4",
        "--metrics",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
    ]
    assert env == {}
    with pytest.raises(ExportError, match=r"^tp: llama-server runs one process"):
        server_command(ServingConfig.of(**{**CPU, "pp": 2}).resolve(), "llama-server", "tiny.gguf", "127.0.0.1", 1)


@pytest.mark.parametrize(
    "weights, words",
    [
        ("ggml-org/Qwen2.5-0.5B-Instruct-GGUF", ["-hf", "ggml-org/Qwen2.5-0.5B-Instruct-GGUF"]),
        ("ggml-org/Qwen2.5-0.5B-Instruct-GGUF:Q8_0", ["-hf", "ggml-org/Qwen2.5-0.5B-Instruct-GGUF:Q8_0"]),
        ("tiny.gguf", ["--model", "tiny.gguf"]),
        ("models/tiny.gguf", ["--model", "models/tiny.gguf"]),
        ("/models/tiny", ["--model", "/models/tiny"]),
    ],
)
def test_llama_server_loads_a_local_file_with_model_and_a_hub_id_with_hf(weights, words):
    argv, _ = server_command(ServingConfig.of(**CPU).resolve(), "llama-server", weights, "127.0.0.1", 8123)
    assert argv[1:3] == words


def test_a_local_folder_named_like_a_hub_id_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "name").write_bytes(b"GGUF")
    argv, _ = server_command(ServingConfig.of(**CPU).resolve(), "llama-server", "org/name", "127.0.0.1", 8123)
    assert argv[1:3] == ["--model", "org/name"]


def test_vllm_gets_the_same_flags_and_environment_as_its_export():
    config = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2, layer_split=(25, 23)).resolve()
    argv, env = server_command(config, "vllm", "Qwen/Qwen2.5-14B-Instruct", "127.0.0.1", 8000)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-14B-Instruct"]
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2" and argv[-4:] == [
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
    ]
    assert env["VLLM_PP_LAYER_PARTITION"] == "25,23"


def test_a_live_server_loads_the_operator_s_model_without_the_profile_s_checkpoint_flags():
    """DeepSeek-V3.1 on Ascend exports vllm-ascend's W8A8 checkpoint (--quantization ascend, from ModelScope); a
    launched server serves the model path it is given, which may be BF16 and local."""
    config = ServingConfig.of(model="deepseek-v3.1", hardware="ascend-910c", tp=8, pp=2).resolve()
    argv, env = server_command(config, "vllm-ascend", "/data/deepseek-v3.1-bf16", "127.0.0.1", 8000)
    assert "/data/deepseek-v3.1-bf16" in argv and "--quantization" not in argv
    assert "VLLM_USE_MODELSCOPE" not in env


def test_a_server_starts_answers_health_and_stops_by_its_pid(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_ENGINE_DELAY", "0.3")
    log = tmp_path / "server.log"
    with ServerLaunch("llama-server", "tiny.gguf", log, program=FAKE).start(
        ServingConfig.of(**CPU).resolve()
    ) as server:
        assert httpx.get(f"{server.url}/health").status_code == 200
        pid = server.process.pid
    assert not alive(pid) and "--parallel 4" in log.read_text()


def test_a_started_server_yields_the_cpu_to_the_load_generator(tmp_path):
    """The engine runs below pipedeck's priority: as a process, and as its session's autogroup where the kernel
    schedules sessions (Linux with sched_autogroup)."""
    with ServerLaunch("llama-server", "tiny.gguf", tmp_path / "server.log", program=FAKE).start(
        ServingConfig.of(**CPU).resolve()
    ) as server:
        pid = server.process.pid
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + SERVER_NICENESS)
        autogroup = Path(f"/proc/{pid}/autogroup")
        if autogroup.exists():
            assert autogroup.read_text().split()[-1] == str(SERVER_NICENESS)


@pytest.mark.parametrize("leader", ["running", "killed"])
def test_stopping_a_server_stops_its_whole_process_group_even_after_its_first_process_died(
    tmp_path, monkeypatch, leader
):
    """vLLM's API server starts an engine core and workers in its process group, which outlive it when it is killed
    and take their time over SIGTERM: the group goes whole, SIGKILL for what SIGTERM leaves."""
    monkeypatch.setenv("FAKE_ENGINE_CHILD", "1")
    log = tmp_path / "server.log"
    server = ServerLaunch("llama-server", "tiny.gguf", log, program=FAKE).start(ServingConfig.of(**CPU).resolve())
    child = int(re.search(r"^child: (\d+)$", log.read_text(), re.MULTILINE).group(1))
    assert os.getpgid(child) == server.process.pid
    if leader == "killed":
        server.process.kill()
        server.process.wait()
        assert running(child)  # what a killed API server leaves: its engine core
    server.stop(grace_s=0.5)
    assert not running(child) and not (tmp_path / "server.log.pid").exists()


def test_serving_stops_its_server_when_sigterm_interrupts_the_block_and_restores_the_handlers(tmp_path):
    """The one lifecycle: whoever holds a server in `serving` (serve, calibrate, the Live view) gets it stopped."""
    before = signal.getsignal(signal.SIGTERM)
    launch = ServerLaunch("llama-server", "tiny.gguf", tmp_path / "server.log", program=FAKE)
    with pytest.raises(Terminated), serving(launch, ServingConfig.of(**CPU).resolve()) as server:
        assert (tmp_path / "server.log.pid").exists()
        os.kill(os.getpid(), signal.SIGTERM)
        pytest.fail("SIGTERM did not interrupt the block")  # the handler raises as soon as os.kill returns
    assert not alive(server.process.pid) and not (tmp_path / "server.log.pid").exists()
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_launch_options_are_declared_once_for_every_command_that_takes_them():
    """serve, calibrate and tune --launch take --program, --log and --health-timeout from console/backend_options.py."""
    from pipedeck.console.calibrate import calibrate
    from pipedeck.console.serve import serve

    console = ROOT / "console"
    declaring = {
        path.name
        for path in console.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "option"
        and any(isinstance(a, ast.Constant) and a.value in LAUNCH_FLAGS for a in node.args)
    }
    assert declaring == {"backend_options.py"}
    for command in (serve, calibrate):
        assert {opt for p in command.params for opt in p.opts} >= LAUNCH_FLAGS


@pytest.mark.parametrize(
    "behaviour, message",
    [
        (
            "crash",
            r"^engine: llama-server exited with status 3 before it was healthy; log: .*\(last line: fake engine: giving up\)$",
        ),
        ("never", r"^health: llama-server at http://127.0.0.1:\d+ was not healthy within 1 s; log: "),
    ],
)
def test_a_server_that_never_gets_healthy_is_one_line_and_leaves_nothing_running(
    tmp_path, monkeypatch, behaviour, message, popen_log
):
    monkeypatch.setenv("FAKE_ENGINE", behaviour)
    started = popen_log
    with pytest.raises(LaunchError, match=message):
        ServerLaunch("llama-server", "tiny.gguf", tmp_path / "log", program=FAKE, health_timeout_s=1.0).start(
            ServingConfig.of(**CPU).resolve()
        )
    assert started and not alive(started[0].pid)


def test_a_start_failure_names_the_first_exception_of_the_log_else_its_last_line(tmp_path):
    """vLLM's engine core logs the root cause first and later lines that only point back at it."""
    log = tmp_path / "server.log"
    log.write_text(
        "(APIServer pid=1) WARNING [system_utils.py:255] failed to increase the ulimit with error EPERM\n"
        "(Worker pid=7) ERROR 12-07 17:46:09 [multiproc_executor.py:1063] ValueError: Available memory on node 0 "
        "(20.74/23.54 GiB) is less than requested memory for kv (400.0 GiB).\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
        "  warnings.warn('resource_tracker: There appear to be %d ')\n"
    )
    assert start_failure(log) == (
        " (error: ValueError: Available memory on node 0 (20.74/23.54 GiB) is less than requested memory for kv "
        "(400.0 GiB).)"
    )
    log.write_text("usage: api_server.py [-h]\napi_server.py: error: unrecognized arguments: --no-such-option\n")
    assert start_failure(log) == " (last line: api_server.py: error: unrecognized arguments: --no-such-option)"


@pytest.mark.parametrize("earlier_log", [None, "the last serve's output\n"])
def test_a_missing_engine_program_is_one_line_and_leaves_the_log_as_it_was(tmp_path, capsys, earlier_log):
    log = tmp_path / "log"
    if earlier_log is not None:
        log.write_text(earlier_log)
    status = run_cli(
        cli,
        [
            "serve",
            "--engine",
            "llama-server",
            "--model-path",
            "tiny.gguf",
            "--model",
            "qwen2.5-14b",
            "--hardware",
            "a100-40g-pcie",
            "--tp",
            "1",
            "--pp",
            "1",
            "--kv-capacity",
            "4096",
            "--program",
            str(tmp_path / "no-such-llama-server"),
            "--log",
            str(log),
        ],
    )
    assert status == 1  # the server could not start: a failure while running, not a flag refused
    missing = str(tmp_path / "no-such-llama-server")
    assert capsys.readouterr().err.strip() == (
        f"pipedeck: error: engine: {missing!r} not found; install llama-server or give its program"
    )
    assert (log.read_text() if log.exists() else None) == earlier_log, "no empty log; an earlier one kept"


def test_a_program_that_cannot_start_leaves_no_log(tmp_path):
    program = tmp_path / "not-a-program"
    program.write_bytes(b"\x00\x01")  # executable by its mode, but the system cannot run it (exec format error)
    program.chmod(0o755)
    log = tmp_path / "log"
    with pytest.raises(LaunchError, match=r"^log: cannot start llama-server"):
        ServerLaunch("llama-server", "tiny.gguf", log, program=(str(program),)).start(ServingConfig.of(**CPU).resolve())
    assert not log.exists()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a background job (`pipedeck serve ... &`)


def serve_argv(log: Path) -> list[str]:
    """`pipedeck serve` of the fake engine, logging to `log`."""
    return [
        str(Path(sys.executable).parent / "pipedeck"),
        "serve",
        "--engine",
        "llama-server",
        "--model-path",
        "t.gguf",
        "--model",
        "qwen2.5-14b",
        "--hardware",
        "a100-40g-pcie",
        "--tp",
        "1",
        "--pp",
        "1",
        "--kv-capacity",
        "4096",
        "--program",
        " ".join(FAKE),
        "--log",
        str(log),
    ]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint-in-background"])
def test_pipedeck_serve_runs_until_sigterm_or_sigint_and_stops_the_engine(tmp_path, sig):
    argv = serve_argv(tmp_path / "serve.log")
    serve = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_ignore_sigint)
    try:
        line = serve.stdout.readline()
        assert line.startswith("serving llama-server at http://127.0.0.1:"), line + serve.stderr.read()
        url = line.split(" at ")[1].split()[0]
        assert httpx.get(f"{url}/health").status_code == 200
        serve.send_signal(sig)
        assert serve.wait(10) == 0 and serve.stdout.readline().startswith("stopped llama-server")
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/health", timeout=1.0)
    finally:
        serve.kill()


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie that no parent has reaped yet has stopped)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def start_serving(log: Path) -> tuple[subprocess.Popen, str, int]:
    """A `pipedeck serve` process, the URL it serves on and its server's PID, once the server is healthy."""
    serve = subprocess.Popen(serve_argv(log), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = serve.stdout.readline()
    match = re.match(r"serving llama-server at (\S+) \(pid (\d+),", line)
    assert match, line + serve.stderr.read()
    return serve, match[1], int(match[2])


def test_a_server_left_by_a_killed_pipedeck_is_stopped_by_the_next_launch(tmp_path):
    log = tmp_path / "serve.log"
    first, url, orphan = start_serving(log)
    first.kill()  # kill -9: no handler runs, the server is left behind
    first.wait()
    assert httpx.get(f"{url}/health").status_code == 200
    second = None
    try:
        second, _, server = start_serving(log)  # the same command again
        assert not running(orphan) and running(server)
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/health", timeout=1.0)
        second.terminate()
        assert second.wait(10) == 0 and not running(server)
        assert second.stderr.read() == (
            f"pipedeck: stopped llama-server (pid {orphan}) left running by pipedeck "
            f"(pid {first.pid}), which is gone; its log: {log}\n"
        )
        assert not list(tmp_path.glob("*.pid"))  # a server stopped by its pipedeck leaves no pid file
    finally:
        for process in (first, second):
            if process is not None:
                process.kill()
        if running(orphan):
            os.killpg(orphan, signal.SIGKILL)


def test_a_server_whose_pipedeck_still_runs_is_left_alone(tmp_path):
    first, url, server = start_serving(tmp_path / "first.log")
    (tmp_path / "other.pid").write_text(f"{server}\n")  # another program's pid file: not pipedeck's to act on
    try:
        second, _, _ = start_serving(tmp_path / "second.log")
        second.terminate()
        assert second.wait(10) == 0 and "left running" not in second.stderr.read()
        assert running(server) and httpx.get(f"{url}/health").status_code == 200
        assert (tmp_path / "other.pid").read_text() == f"{server}\n"
    finally:
        first.terminate()
        first.wait(10)


def test_serving_a_weights_file_without_a_config_takes_the_engine_s_own_defaults(tmp_path):
    """No catalog model, hardware or parallelism: llama-server picks its slots, context and batch itself."""
    log = tmp_path / "serve.log"
    argv = [
        str(Path(sys.executable).parent / "pipedeck"),
        "serve",
        "--engine",
        "llama-server",
        "--model-path",
        "tiny.gguf",
        "--program",
        " ".join(FAKE),
        "--log",
        str(log),
    ]
    serve = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = serve.stdout.readline()
        assert line.startswith("serving llama-server at http://127.0.0.1:"), line + serve.stderr.read()
        serve.terminate()
        assert serve.wait(10) == 0
        assert serve.stderr.read() == (
            "pipedeck: no config option given: llama-server runs with its own defaults; "
            "pipedeck passes only the weights, --metrics, --host and --port\n"
        )
        launched = log.read_text().splitlines()[0].split()[1:]
        assert launched[:3] == ["--model", "tiny.gguf", "--metrics"] and launched[3] == "--host"
    finally:
        serve.kill()


def test_the_engine_s_own_defaults_launch_passes_no_config_flags():
    argv, env = server_command(None, "vllm", "Qwen/Qwen2.5-14B-Instruct", "127.0.0.1", 8000)
    assert argv == ["vllm", "serve", "Qwen/Qwen2.5-14B-Instruct", "--host", "127.0.0.1", "--port", "8000"]
    assert env == {}
    assert server_command(None, "sglang", "m", "127.0.0.1", 1)[0][3:6] == ["--model-path", "m", "--enable-metrics"]
