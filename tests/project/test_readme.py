"""The README: it starts with the two set-up commands, and its shell examples run as written, in order, in a fresh
folder that holds what a clone holds (the examples read only `tests/`) and no run store.

The examples that need an engine this machine lacks are listed in SKIPPED with the reason. The ones that drive
llama.cpp's llama-server run in tests/live/test_readme_live.py, against the real server tests/live builds;
`pipedeck serve` runs in the background, as in another terminal, until the examples after it are done.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests.paths import ROOT

README = ROOT / "README.md"
SETUP = [
    "pip install -e . && pipedeck tune --slo ttft=2s,tpot=200ms",
    "pip install -e '.[test]' && python -m pytest -q",
]
NEEDS_VLLM = "needs vLLM and four NVIDIA GPUs"
SKIPPED = {
    "pipedeck tune --slo ttft=2s,tpot=200ms --confirm live --launch vllm --model-path Qwen/Qwen2.5-32B-Instruct "
    "--model qwen2.5-32b --hardware a100-40g-pcie": NEEDS_VLLM,
    "pipedeck console": "interactive: tests/console/tui/test_tui_*.py drive the console",
    "pipedeck serve --engine vllm --model-path Qwen/Qwen2.5-32B-Instruct --from deploy/pipedeck-best.json": NEEDS_VLLM,
}
COMMAND_TIMEOUT_S = 600
SERVE_TIMEOUT_S = 120


def examples() -> list[str]:
    """Each command of the README's fenced shell blocks (untagged or sh/bash), in order, continuation lines joined."""
    blocks = re.findall(r"^```(?:sh|bash)?\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.M | re.S)
    return [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def normalised(command: str) -> str:
    """The command without its comment and with single spaces, as SKIPPED spells it."""
    return " ".join(re.sub(r"\s+#\s.*$", "", command).split())


def is_live(command: str) -> bool:
    """Whether the example drives llama-server: it names it (or its builder), or a live backend."""
    return any(word in command for word in ("llama-server", "llama_server.py", "--backend live"))


def fresh_clone(tmp_path: Path) -> Path:
    """A folder as the root of a fresh clone is for the examples: the repository's tests/, nothing written yet."""
    folder = tmp_path / "clone"
    folder.mkdir()
    (folder / "tests").symlink_to(ROOT / "tests")
    return folder


def environment() -> dict[str, str]:
    """This environment, `pipedeck` and `python` first on PATH, and no run store chosen by $PIPEDECK_DB."""
    env = {key: value for key, value in os.environ.items() if key != "PIPEDECK_DB"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_example(command: str, folder: Path) -> None:
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=folder,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@contextmanager
def serving(command: str, folder: Path) -> Iterator[None]:
    """Run a `pipedeck serve` example until it prints its URL; stop it with Ctrl-C's signal afterwards."""
    server = subprocess.Popen(
        ["bash", "-c", f"exec {command}"],
        cwd=folder,
        env=environment(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    printed: list[str] = []
    answered = threading.Event()  # the URL was printed, or the output ended

    def read() -> None:  # to the end, so that the server never blocks on a full pipe
        for line in server.stdout:
            printed.append(line)
            if "http://" in line:
                answered.set()
        answered.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        answered.wait(SERVE_TIMEOUT_S)
        assert any("http://" in line for line in printed) and server.poll() is None, (
            f"{command}\nprinted no URL:\n{''.join(printed)[-3000:]}"
        )
        yield
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        finally:
            server.kill()
            reader.join(timeout=5)


def run_in_order(commands: list[str], folder: Path) -> None:
    """Run the examples one after another (a `serve` keeps running until the last one is done); then every file
    they left that no command named is one .gitignore ignores: a clone stays clean."""
    with ExitStack() as servers:
        for command in commands:
            if normalised(command).startswith("pipedeck serve"):
                servers.enter_context(serving(command, folder))
            else:
                run_example(command, folder)
    unnamed = [p.name for p in folder.iterdir() if p.name != "tests" and not any(p.name in c for c in commands)]
    assert unnamed, "the examples left no file of their own: the check below would check nothing"
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *unnamed], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert sorted(unnamed) == sorted(ignored), f"left behind and not in .gitignore: {set(unnamed) - set(ignored)}"


def test_the_readme_starts_with_the_two_set_up_commands():
    """A fresh machine's two commands are the README's first two lines (CI may read them from there)."""
    assert [line.strip() for line in README.read_text(encoding="utf-8").splitlines()[:2]] == SETUP


def test_every_skipped_example_is_in_the_readme():
    """SKIPPED names README examples, not ones since rewritten (which would then run nowhere)."""
    assert set(SKIPPED) <= {normalised(command) for command in examples()}


def test_the_examples_run_in_order(tmp_path):
    """Every example that needs no live server, as written, in order, from a fresh clone's root."""
    commands = [c for c in examples() if normalised(c) not in SKIPPED and not is_live(c)]
    assert len(commands) >= 10
    run_in_order(commands, fresh_clone(tmp_path))
