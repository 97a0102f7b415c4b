"""A stand-in OpenAI-compatible server, for tests and the load generator's overhead benchmark.

Streams `/v1/completions` as vLLM does (one SSE event per token, usage when
asked, then `[DONE]`, chunked HTTP/1.1 with keep-alive) with a set delay
before the first token and between tokens, and can misbehave on every k-th
request: answer HTTP 500, close the connection mid-stream, stall, send a line
that is not JSON, or end the body cleanly without `[DONE]`. Also answers
`/v1/models` (with llama-server's `n_vocab`), `/props` (its `build_info`),
`/metrics` (llama-server's series) and `/health`. A prompt it has seen before
counts as served from its prefix cache (usage's `prompt_tokens_details`,
`llamacpp:prompt_tokens_cached_total`). Given a profile folder, it answers
`/start_profile` and `/stop_profile` as vLLM does and writes stand-in worker
traces there (mock_profiler.py). Plain asyncio streams, nothing to install.
As a program it serves on 127.0.0.1 and prints its URL:

    python -m pipedeck.backends.live.mock_server [--port N] [--first-token-s S] [--token-s S]
                                                 [--fault F --fault-every K] [--profile-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .mock_profiler import MockProfiler

FAULTS = ("http500", "die", "stall", "malformed", "truncate")
MOCK_BUILD = "b0-mock"
MOCK_ERROR = (
    "mock failure: the engine raised an internal error while scheduling this request, so no tokens were "
    "generated for it; this message is longer than two hundred characters, as a real server's explanation "
    "of a failure often is."
)  # what an http500 fault answers, as {"error": {"message": ...}}


@dataclass(frozen=True)
class Behaviour:
    """How the mock answers completions."""

    first_token_s: float = 0.0  # delay from the request to the first token
    token_s: float = 0.0  # delay between tokens
    fault: str | None = None  # one of FAULTS
    fault_every: int = 1  # the fault hits requests 1, 1 + k, 1 + 2k, ... in arrival order
    fault_after: int = 1  # tokens sent before a die, stall or malformed line
    tokens_per_event: int = 1
    blank_every: int = 0  # every k-th event carries its tokens but no text yet (0: none), as vLLM may send them
    usage: bool = True  # send usage when the request asks for it
    n_vocab: int = 32000

    def __post_init__(self) -> None:
        if self.fault not in (None, *FAULTS):
            raise ValueError(f"fault: one of {', '.join(FAULTS)} or None, got {self.fault!r}")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: dict[str, object] | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return _chunk(f"data: {text}\n\n".encode())


def _response(status: str, content_type: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
DONE = _event("[DONE]") + _chunk(b"")


class MockServer:
    """The server; `async with MockServer(behaviour) as url:` serves on 127.0.0.1 until the block ends."""

    def __init__(self, behaviour: Behaviour = Behaviour(), port: int = 0, profiler: MockProfiler | None = None) -> None:
        self.behaviour = behaviour
        self.port = port
        self.profiler = profiler  # None: no /start_profile, as a server started without a profiler
        self.completions = 0  # completion requests received
        self.processing = 0
        self.prompt_tokens = 0  # not served from the cache, as llama-server counts them
        self.cached_tokens = 0
        self.predicted_tokens = 0
        self.prompts_seen: set[str | tuple[int, ...]] = set()  # a prompt seen before is served from the cache
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while await self._answer(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the server is closing
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is to be closed."""
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, path, _ = head[0].split(" ", 2)
        headers = dict((k.strip().lower(), v.strip()) for k, v in (line.split(":", 1) for line in head[1:] if line))
        body = await reader.readexactly(int(headers.get("content-length", 0)))
        if method == "POST" and path == "/v1/completions":
            return await self._complete(json.loads(body), reader, writer)
        if method == "POST" and path in ("/start_profile", "/stop_profile") and self.profiler is not None:
            if path == "/start_profile":
                self.profiler.start()
            else:
                self.profiler.stop()
            writer.write(_response("200 OK", "application/json", b"{}"))
        elif path == "/v1/models":
            models = {"object": "list", "data": [{"id": "mock", "meta": {"n_vocab": self.behaviour.n_vocab}}]}
            writer.write(_response("200 OK", "application/json", json.dumps(models).encode()))
        elif path == "/props":  # where llama-server reports its build
            writer.write(_response("200 OK", "application/json", json.dumps({"build_info": MOCK_BUILD}).encode()))
        elif path == "/metrics":
            writer.write(_response("200 OK", "text/plain; version=0.0.4", self.metrics().encode()))
        elif path == "/health":
            writer.write(_response("200 OK", "application/json", b'{"status": "ok"}'))
        else:
            writer.write(_response("404 Not Found", "text/plain", b"not found"))
        await writer.drain()
        return True

    def metrics(self) -> str:
        """llama-server's `/metrics` series, from what the mock has served."""
        rows = (
            ("prompt_tokens_total", "counter", self.prompt_tokens),
            ("prompt_tokens_cached_total", "counter", self.cached_tokens),
            ("tokens_predicted_total", "counter", self.predicted_tokens),
            ("requests_processing", "gauge", self.processing),
            ("requests_deferred", "gauge", 0),
        )
        return "".join(f"# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}\n" for name, kind, value in rows)

    async def _complete(
        self, request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        b = self.behaviour
        self.completions += 1
        fault = b.fault if (self.completions - 1) % b.fault_every == 0 else None
        if fault == "http500":
            body = json.dumps({"error": {"message": MOCK_ERROR, "type": "InternalServerError", "code": 500}}, indent=2)
            writer.write(_response("500 Internal Server Error", "application/json", body.encode()))
            await writer.drain()
            return True
        prompt = request["prompt"]
        n_prompt = len(prompt) if isinstance(prompt, list) else len(prompt.split())
        key = tuple(prompt) if isinstance(prompt, list) else prompt
        n_cached = n_prompt if key in self.prompts_seen else 0  # the whole prompt, or nothing: a prefix cache's ends
        self.prompts_seen.add(key)
        n_out = int(request["max_tokens"])
        arrived, token_times = time.time(), []
        self.processing += 1
        self.prompt_tokens += n_prompt - n_cached
        self.cached_tokens += n_cached
        try:
            writer.write(STREAM_HEAD)
            if b.first_token_s:
                await asyncio.sleep(b.first_token_s)
            sent = events = 0
            while sent < n_out:
                if fault and sent >= b.fault_after:
                    return await self._misbehave(fault, reader, writer)
                k = min(b.tokens_per_event, n_out - sent)
                sent += k
                self.predicted_tokens += k
                events += 1
                blank = b.blank_every and events % b.blank_every == 0
                choice = {
                    "index": 0,
                    "text": "" if blank else " tok" * k,
                    "logprobs": None,
                    "finish_reason": "length" if sent == n_out else None,
                }
                writer.write(
                    _event({"id": "cmpl-mock", "object": "text_completion", "model": "mock", "choices": [choice]})
                )
                token_times.append(time.time())
                if b.token_s and sent < n_out:
                    await writer.drain()
                    await asyncio.sleep(b.token_s)
            if b.usage and (request.get("stream_options") or {}).get("include_usage"):
                usage = {
                    "prompt_tokens": n_prompt,
                    "completion_tokens": n_out,
                    "total_tokens": n_prompt + n_out,
                    "prompt_tokens_details": {"cached_tokens": n_cached},
                }
                writer.write(
                    _event(
                        {"id": "cmpl-mock", "object": "text_completion", "model": "mock", "choices": [], "usage": usage}
                    )
                )
            writer.write(DONE)
            await writer.drain()
            if self.profiler is not None:
                self.profiler.served(arrived, n_prompt, token_times)
            return True
        finally:
            self.processing -= 1

    async def _misbehave(self, fault: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Break the stream as `fault` says; False closes the connection afterwards."""
        if fault == "truncate":
            writer.write(_chunk(b""))
            await writer.drain()
            return True
        if fault == "malformed":
            writer.write(_event("{not json"))
            writer.write(DONE)
        elif fault == "stall":
            await writer.drain()
            await reader.read()  # silent until the client gives up and closes
        await writer.drain()
        return False


async def _serve_forever(behaviour: Behaviour, port: int, profile_dir: str | None) -> None:
    profiler = None if profile_dir is None else MockProfiler(Path(profile_dir))
    async with MockServer(behaviour, port, profiler) as url:
        print(url, flush=True)
        await asyncio.Event().wait()


def main() -> None:
    """Serve the mock on 127.0.0.1 until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: any free port)")
    parser.add_argument("--first-token-s", type=float, default=0.0, help="delay before the first token")
    parser.add_argument("--token-s", type=float, default=0.0, help="delay between tokens")
    parser.add_argument("--fault", choices=FAULTS, default=None, help="misbehave on some completions")
    parser.add_argument("--fault-every", type=int, default=1, help="the fault hits requests 1, 1 + K, 1 + 2K, ...")
    parser.add_argument("--profile-dir", default=None, help="answer /start_profile and write worker traces here")
    args = parser.parse_args()
    behaviour = Behaviour(
        first_token_s=args.first_token_s, token_s=args.token_s, fault=args.fault, fault_every=args.fault_every
    )
    asyncio.run(_serve_forever(behaviour, args.port, args.profile_dir))


if __name__ == "__main__":
    main()
