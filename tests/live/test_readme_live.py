"""The README's llama-server examples run as written, in order, from a fresh clone's root (tests/project/test_readme.py)."""

from __future__ import annotations

from tests.postgres_server import free_port
from tests.project.test_readme import SKIPPED, examples, fresh_clone, is_live, normalised, run_in_order

README_PORT = "8080"  # the port the README serves on; the test serves on a free one, so that nothing else collides


def test_the_live_examples_run_in_order(tmp_path, llama_server_binary):
    """Write the tiny model, link the llama-server the fixture built, serve it, run against it, calibrate."""
    port = str(free_port())
    commands = [
        c.replace(f":{README_PORT}", f":{port}").replace(f"--port {README_PORT}", f"--port {port}")
        for c in examples()
        if normalised(c) not in SKIPPED and is_live(c)
    ]
    assert any(normalised(c).startswith("pipedeck serve") for c in commands)
    run_in_order(commands, fresh_clone(tmp_path))
