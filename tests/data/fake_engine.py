"""A stand-in serving engine for launcher tests: a real process that answers GET /health on --host/--port.

It takes any engine flags, prints them (the launcher's log shows them) and
behaves as FAKE_ENGINE says: `healthy` (default) answers 200 after
FAKE_ENGINE_DELAY seconds, `never` answers 503 forever, `crash` exits 3 at once,
`serve` streams completions as pipedeck's mock server does (a whole fake
engine for the live backend; with vLLM's --profiler-config, its stand-in
profiler writes to the torch_profiler_dir given), and `crash-once` exits 3
the first time (creating the file FAKE_ENGINE_ONCE) and serves every later time.
With FAKE_ENGINE_CHILD set it first starts a process of its own, in its
process group, that ignores SIGTERM and outlives it (as vLLM's engine core
can), and prints `child: PID`.
"""

import asyncio
import http.server
import json
import os
import subprocess
import sys
import time
from pathlib import Path

args = sys.argv[1:]
print("argv:", " ".join(args), flush=True)
if os.environ.get("FAKE_ENGINE_CHILD"):
    lingering = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    print("child:", subprocess.Popen([sys.executable, "-c", lingering]).pid, flush=True)
behaviour = os.environ.get("FAKE_ENGINE", "healthy")
if behaviour == "crash-once":
    marker = Path(os.environ["FAKE_ENGINE_ONCE"])
    behaviour = "serve" if marker.exists() else "crash"
    marker.touch()
if behaviour == "crash":
    print("fake engine: giving up", flush=True)
    sys.exit(3)
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
if behaviour == "serve":
    from pipedeck.backends.live.mock_profiler import MockProfiler
    from pipedeck.backends.live.mock_server import MockServer

    profiler = None
    if "--profiler-config" in args:
        folder = json.loads(args[args.index("--profiler-config") + 1])["torch_profiler_dir"]
        profiler = MockProfiler(Path(folder))

    async def serve() -> None:
        async with MockServer(port=port, profiler=profiler):
            await asyncio.Event().wait()

    asyncio.run(serve())
ready_at = time.monotonic() + float(os.environ.get("FAKE_ENGINE_DELAY", "0"))


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        ok = self.path == "/health" and behaviour == "healthy" and time.monotonic() >= ready_at
        self.send_response(200 if ok else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


http.server.HTTPServer((host, port), Health).serve_forever()
