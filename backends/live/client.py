"""One streamed `/v1/completions` request, measured the way `vllm bench serve` measures it.

As vLLM's benchmark client (`vllm/benchmarks/lib/endpoint_request_func.py`)
does, every SSE event with a non-empty `choices` list is a token time,
whether or not its text is empty (a token that decodes to nothing yet still
arrived) and however many tokens it carries; the usage-only event at the end
is not. TTFT runs from the send to the first such event, the inter-token
gaps between them, E2E to the last of them; the output token count is the
server's `usage.completion_tokens`, or the events that carried text when it
sends no usage. Whatever goes
wrong (an HTTP status, a refused connection, a stream that breaks, stalls,
is not JSON, reports an error, or ends without `[DONE]`) becomes a one-line
`error` on the returned `LiveRequest`; nothing is raised.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from ..live_result import LiveRequest


def completion_body(model: str, prompt: list[int] | str, max_tokens: int) -> bytes:
    """A streaming completion that must produce exactly `max_tokens` tokens, with usage in the last event."""
    return json.dumps(
        {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()


class ClientPool:
    """httpx clients of at most `size` streams each, opened as the load needs them.

    httpcore's pool scans all its connections, and for each idle one all of
    them again, whenever a request starts or ends (httpcore 1.0); one client
    holding hundreds of streams spends more CPU on that than on the streams.
    Small clients keep each scan short, and no request ever queues for a
    connection (that wait would be coordinated omission).
    """

    def __init__(self, base_url: str, stall_s: float, size: int = 16) -> None:
        self.base_url, self.stall_s, self.size = base_url, stall_s, size
        self.clients: list[httpx.AsyncClient] = []
        self.busy: list[int] = []
        self._ssl = ssl.create_default_context()  # one for all clients: building one per client is slow

    def client(self) -> httpx.AsyncClient:
        """A client for control requests (models, metrics), outside the leases."""
        limits = httpx.Limits(max_connections=self.size, max_keepalive_connections=self.size)
        return httpx.AsyncClient(
            base_url=self.base_url, limits=limits, timeout=self.stall_s, verify=self._ssl, trust_env=False
        )

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client with a free connection slot, held for one request."""
        i = next((i for i, n in enumerate(self.busy) if n < self.size), len(self.clients))
        if i == len(self.clients):
            self.clients.append(self.client())
            self.busy.append(0)
        self.busy[i] += 1
        try:
            yield self.clients[i]
        finally:
            self.busy[i] -= 1

    async def aclose(self) -> None:
        await asyncio.gather(*(client.aclose() for client in self.clients))


class _Stream:
    """What has arrived so far on one response."""

    def __init__(self) -> None:
        self.times: list[float] = []  # when each event with a choice arrived
        self.text_events = 0  # those that carried text: the output count when the server sends no usage
        self.usage: dict[str, int] = {}
        self.done = False

    @property
    def received(self) -> str:
        n = len(self.times)
        return f"{n} token event{'' if n == 1 else 's'}"


async def stream_completion(
    pool: ClientPool,
    body: bytes,
    *,
    request_id: int,
    prompt_tokens: int,
    max_tokens: int,
    scheduled_s: float,
    t0: float,
    stall_s: float,
    deadline: float,
) -> LiveRequest:
    """Send `body` to `/v1/completions` and measure it; times are loop time minus `t0`."""
    loop = asyncio.get_running_loop()
    stream = _Stream()
    send = loop.time()
    error = None
    try:
        async with asyncio.timeout_at(deadline), pool.lease() as client:
            error = await _read(client, body, stream, loop, stall_s)
    except TimeoutError:
        error = f"run time limit: still streaming after {stream.received}"
    except httpx.ReadTimeout:
        error = f"stalled: no event for {stall_s:g} s after {stream.received}"
    except httpx.ConnectError as err:
        error = _connect_error(err)
    except (httpx.RemoteProtocolError, httpx.ReadError) as err:  # the server closed or reset the connection
        error = f"stream broken: {err or type(err).__name__} (after {stream.received})"
    except httpx.HTTPError as err:
        error = f"{type(err).__name__}: {err}"
    times = stream.times
    if error is None and not times:
        error = "no tokens: the stream ended with no choice"
    if error is not None:
        error = " ".join(error.split())  # one line, whatever the server or the exception said
    counted = "usage" if "completion_tokens" in stream.usage else "events"
    return LiveRequest(
        id=request_id,
        scheduled_s=scheduled_s,
        send_s=send - t0,
        first_token_s=times[0] - t0 if times else None,
        end_s=(times[-1] if error is None else loop.time()) - t0,
        prompt_tokens=stream.usage.get("prompt_tokens", prompt_tokens),
        max_tokens=max_tokens,
        output_tokens=stream.usage.get("completion_tokens", stream.text_events),
        tokens_from=counted,
        gaps_s=tuple(b - a for a, b in itertools.pairwise(times)),
        error=error,
        cached_tokens=stream.usage.get("cached_tokens"),
    )


ERROR_CHARS = 200  # the most of a failed response's body an error line quotes


def http_error_line(status: int, body: str, reason: str) -> str:
    """`http 500: <what the response says>` on one line (`_error_text`); the reason without a body."""
    return f"http {status}: {_error_text(body) or reason}"


def clip(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters, cut at a word with " ..." (mid-word only when its first
    word alone is longer)."""
    short = textwrap.shorten(text, width, placeholder=" ...")
    return short if short != "..." else text[: width - 4] + " ..."


async def _read(
    client: httpx.AsyncClient, body: bytes, stream: _Stream, loop: asyncio.AbstractEventLoop, stall_s: float
) -> str | None:
    """Read the response into `stream`; return the error line, or None if it ended with `[DONE]`."""
    timeout = httpx.Timeout(stall_s, pool=None)
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    async with client.stream("POST", "/v1/completions", content=body, headers=headers, timeout=timeout) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            return http_error_line(response.status_code, text, response.reason_phrase)
        rest = b""
        async for chunk in response.aiter_bytes():
            now = loop.time()  # every event in this read arrived now
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if stream.done or not line.startswith(b"data:"):
                    continue  # blank separators, comments, event names; after [DONE], the rest of the body
                data = line[5:].strip()
                if data == b"[DONE]":
                    stream.done = True  # read on to the end of the body, so that the connection is reused
                    continue
                error = _event(data, stream, now)
                if error:
                    return error
    if stream.done:
        return None
    return f"ended early: the stream closed without [DONE] after {stream.received}"


def _event(data: bytes, stream: _Stream, now: float) -> str | None:
    """Record one SSE data payload; return an error line if it is malformed or reports an error."""
    try:
        event = json.loads(data)
    except ValueError:
        return f"malformed stream: not JSON: {data[:80].decode(errors='replace')!r}"
    if not isinstance(event, dict):
        return f"malformed stream: not a JSON object: {data[:80].decode(errors='replace')!r}"
    if "error" in event or event.get("object") == "error":  # {"error": {...}}, or vLLM's older flat error
        return f"server error: {_error_message(event)}"
    choices = event.get("choices")
    if choices and isinstance(choices, list):
        stream.times.append(now)
        stream.text_events += bool(isinstance(choices[0], dict) and choices[0].get("text"))
    usage = event.get("usage")
    if isinstance(usage, dict):
        stream.usage.update(
            {k: v for k, v in usage.items() if k in ("prompt_tokens", "completion_tokens") and isinstance(v, int)}
        )
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            stream.usage["cached_tokens"] = details["cached_tokens"]  # served from the prefix cache
    return None


def _error_message(payload: dict[str, object]) -> str:
    """The message of an OpenAI-style error object: `{"error": {"message": ...}}`, `{"error": "..."}` or flat."""
    detail = payload.get("error", payload)
    return str(detail.get("message", detail)) if isinstance(detail, dict) else str(detail)


def _error_text(body: str) -> str:
    """What an error response says: its JSON error's message, whole; else its text, cut at a word past ERROR_CHARS."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and ("error" in payload or "message" in payload):
        return _error_message(payload)
    return clip(body, ERROR_CHARS) if body.strip() else ""


def _connect_error(err: httpx.ConnectError) -> str:
    """`connection refused: ...` when nothing listens at the endpoint, else `connect: ...`, with the root cause."""
    cause: BaseException = err
    seen = {id(cause)}
    while (inner := cause.__cause__ or cause.__context__) is not None and id(inner) not in seen:
        cause = inner
        seen.add(id(cause))
    kind = "connection refused" if isinstance(cause, ConnectionRefusedError) else "connect"
    return f"{kind}: {cause}"
