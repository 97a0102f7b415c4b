"""Replays a scenario's workload against an OpenAI-compatible server and returns pipedeck's RunResult.

Open loop (Poisson, trace, all-at-once): a scheduler task launches each
request at its arrival time whether or not earlier ones have finished, so a
slow server cannot slow the offered load (no coordinated omission); how late
each send was is kept (`scheduled_s` against `send_s`). Closed loop: as many
workers as the workload's concurrency, each sending its next request when
its last one ends. Everything is bounded: the workload's count, and
`max_duration_s` for the whole run (requests still streaming then fail, later
ones are not sent). Records take the send time as arrival, so TTFT and TPOT
are those of `vllm bench serve`; a live server has no per-rank timeline, so
`ranks` and `spans` are empty and steps, chunks and the bubble breakdown are
None, unless the run is profiled (profiling.py: the server's profiler runs
while the workload does, and the live backend reads its traces).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import httpx

from ...scenarios import Request, Scenario, Workload
from ..base import RunCancelled, RunObserver, Snapshot
from ..errors import ConfigError, ServerError
from ..footprint import check_footprint
from ..live_result import LiveRequest, LiveRun, MetricsTimeline
from ..result import RunResult
from .client import ClientPool, completion_body, stream_completion
from .identity import STALL_S
from .metrics import poll
from .profiling import ProfileError, ProfileSession
from .prompts import text_prompt, token_prompt, token_range
from .version import engine_version

PROMPT_KINDS = ("tokens", "text")
SNAPSHOT_INTERVAL_S = 0.5  # how often an observer hears the run's progress and the server's gauges


class ServerUnreachable(ServerError):
    """The server could not tell which model it serves; the message is one line naming the endpoint."""


@dataclass(frozen=True)
class LoadOptions:
    """How to drive the server."""

    model: str | None = None  # None: the first model /v1/models lists
    prompt: str = "tokens"  # "tokens" (token-id lists) or "text" (for servers that refuse ids)
    token_ids: tuple[int, int] | None = None  # [low, high) of prompt ids; None: prompts.DEFAULT_TOKEN_IDS
    stall_s: float = STALL_S  # a stream with no event for this long fails
    max_duration_s: float = 3600.0  # the whole run
    metrics_interval_s: float | None = 1.0  # None: do not scrape /metrics
    fresh_prompts: bool = False  # each rate its own prompts: none served from the prefix cache an earlier rate filled

    def __post_init__(self) -> None:
        if self.prompt not in PROMPT_KINDS:
            raise ConfigError(f"prompt: one of {', '.join(PROMPT_KINDS)}, got {self.prompt!r}")
        for name in ("stall_s", "max_duration_s", "metrics_interval_s"):
            value = getattr(self, name)
            if value is None and name == "metrics_interval_s":
                continue
            if not (isinstance(value, int | float) and value > 0):
                raise ConfigError(f"{name}: a positive number of seconds, got {value!r}")


def run_scenario(
    scenario: Scenario,
    base_url: str,
    *,
    rate: float | None = None,
    seed: int = 0,
    num_requests: int | None = None,
    options: LoadOptions = LoadOptions(),
    config: dict[str, object] | None = None,
    observer: RunObserver | None = None,
    profile: ProfileSession | None = None,
) -> RunResult:
    """Replay `scenario`'s workload for `seed` against the server at `base_url` and return the run.

    `config` is recorded with the run; None: what the server says of itself (`LiveRun.described`). With a
    `profile`, the server's profiler runs while the workload does (its traces are read afterwards).
    """
    check_footprint(
        "live", scenario, None, num_requests=num_requests, seed=seed, rate=rate
    )  # before any request is drawn
    workload = scenario.workload(seed=seed, rate=rate, num_requests=num_requests)
    live = asyncio.run(replay(workload, base_url, options, seed, observer, rate=rate, profile=profile))
    return run_result(live, scenario.name, live.described() if config is None else config, seed, rate)


def run_result(live: LiveRun, scenario: str, config: dict[str, object], seed: int, rate: float | None) -> RunResult:
    """pipedeck's RunResult of a live run: served requests as records, the rest kept in `live`."""
    records = [record for record in (r.record() for r in live.requests) if record is not None]
    preemptions = live.server.counter_deltas().get("preemptions_total") if live.server else None
    return RunResult(
        config=config,
        scenario=scenario,
        backend="live",
        seed=seed,
        rate=rate,
        records=records,
        ranks=[],
        makespan_s=max((r.end_s for r in live.requests), default=0.0),
        steps=None,
        chunks=None,
        stage_executions=None,
        preemptions=None if preemptions is None else int(preemptions),
        live=live,
    )


async def replay(
    workload: Workload,
    base_url: str,
    options: LoadOptions = LoadOptions(),
    seed: int = 0,
    observer: RunObserver | None = None,
    rate: float | None = None,
    profile: ProfileSession | None = None,
) -> LiveRun:
    """Send every request of `workload` on schedule, measure each, and scrape `/metrics` meanwhile.

    `rate` (None: the scenario's own) keys the prompts when `options.fresh_prompts` asks for each rate's own.
    A `profile` starts the server's profiler just before the clock starts and stops it however the run ends.
    """
    pool = ClientPool(base_url, options.stall_s)
    try:
        async with pool.client() as control:
            model, ids = await _target(control, options)
            version = await engine_version(control)
            fresh_at = (rate or 0.0) if options.fresh_prompts else None
            bodies = [_body(r, model, ids, seed, fresh_at) for r in workload.requests]  # before the clock starts
            server = MetricsTimeline() if options.metrics_interval_s is not None else None
            if profile is not None:
                await profile.start(control)
            try:
                run, cpu = await _measure(pool, control, options, observer, server, workload, bodies)
            except BaseException:
                if profile is not None:  # not left profiling; the run's own error is the one to raise
                    with contextlib.suppress(ProfileError):
                        await profile.stop(control)
                raise
            if profile is not None:
                await profile.stop(control)
    finally:
        await pool.aclose()
    requests = sorted(run.done, key=lambda r: r.id)
    return LiveRun(
        requests=requests,
        unsent=len(workload) - len(requests),
        loadgen_cpu_s=cpu,
        server=server,
        engine_version=version,
        served_model=model,
        started_at=run.started_at,
    )


async def _measure(
    pool: ClientPool,
    control: httpx.AsyncClient,
    options: LoadOptions,
    observer: RunObserver | None,
    server: MetricsTimeline | None,
    workload: Workload,
    bodies: list[bytes],
) -> tuple[_Run, float]:
    """Start the clock, send the workload and scrape `/metrics` meanwhile; the run and the CPU seconds it took."""
    run = _Run(pool, options, observer, server)
    stop = asyncio.Event()
    poller = None
    if server is not None and options.metrics_interval_s is not None:  # a server timeline: the interval is set
        poller = asyncio.create_task(poll(control, options.metrics_interval_s, stop, run.t0, server))
    cpu = time.process_time()
    try:
        await run.drive(workload, bodies)
    finally:
        stop.set()
        if poller:
            await poller
    return run, time.process_time() - cpu


def _body(request: Request, model: str, ids: tuple[int, int] | None, seed: int, fresh_at: float | None) -> bytes:
    """The completion request for `request`: token ids in `ids`, or text when `ids` is None (`fresh_at`: see
    prompts.prompt_stream)."""
    if ids is None:
        prompt: list[int] | str = text_prompt(seed, request.id, request.prompt_tokens, fresh_at)
    else:
        prompt = token_prompt(seed, request.id, request.prompt_tokens, ids, fresh_at)
    return completion_body(model, prompt, request.output_tokens)


async def _target(client: httpx.AsyncClient, options: LoadOptions) -> tuple[str, tuple[int, int] | None]:
    """The model to ask for and the prompt-id range; `/v1/models` fills in what the options leave open."""
    tokens = options.prompt == "tokens"
    entry: dict[str, Any] = {}
    if options.model is None or (tokens and options.token_ids is None):
        entry = await _first_model(client, required=options.model is None)
    n_vocab = (entry.get("meta") or {}).get("n_vocab")
    ids = token_range(options.token_ids, n_vocab if isinstance(n_vocab, int) else None) if tokens else None
    return options.model or entry["id"], ids


async def _first_model(client: httpx.AsyncClient, required: bool) -> dict[str, Any]:
    """The first entry `/v1/models` lists; {} if there is none and the model is not `required`."""
    try:
        response = await client.get("/v1/models")
        response.raise_for_status()
        entry = response.json()["data"][0]
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise ValueError("the first entry has no id")
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as err:
        if required:
            raise no_model_listed(str(client.base_url.join("/v1/models")), err) from None
        return {}
    return entry


def no_model_listed(url: str, err: Exception) -> ServerUnreachable:
    """The one-line error of a `/v1/models` at `url` that did not answer with a model."""
    return ServerUnreachable(
        f"endpoint: {url} lists no model ({type(err).__name__}: {err}); is the server up? (or name the model to request)"
    )


def check_endpoint(base_url: str, timeout_s: float = 10.0) -> None:
    """ServerUnreachable (one line) unless the server at `base_url` answers GET /v1/models."""
    url = f"{base_url}/v1/models"
    try:
        httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as err:
        raise no_model_listed(url, err) from None


class _Run:
    """One replay in progress: the clock, the deadline and the requests done."""

    def __init__(
        self, pool: ClientPool, options: LoadOptions, observer: RunObserver | None, server: MetricsTimeline | None
    ) -> None:
        self.pool, self.options, self.observer, self.server = pool, options, observer, server
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.started_at = time.time()  # the same instant on the wall clock, which profiler traces use
        self.deadline = self.t0 + options.max_duration_s
        self.done: list[LiveRequest] = []
        self.tasks: set[asyncio.Task[None]] = set()

    async def drive(self, workload: Workload, bodies: list[bytes]) -> None:
        """Send the workload (open or closed loop); raise RunCancelled if the observer asks to stop."""
        jobs = list(zip(workload.requests, bodies, strict=True))
        if workload.concurrency is None:
            task = asyncio.create_task(self._open_loop(jobs))
        else:
            task = asyncio.create_task(self._closed_loop(jobs, workload.concurrency))
        watcher = asyncio.create_task(self._watch(task)) if self.observer else None
        try:
            await task
        except asyncio.CancelledError:
            if watcher is None or not watcher.done():
                raise
            raise RunCancelled("the observer stopped the live run") from None
        finally:
            for t in (*self.tasks, *([watcher] if watcher else [])):
                t.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _watch(self, main: asyncio.Task[None]) -> None:
        """Report a snapshot every SNAPSHOT_INTERVAL_S, and cancel the run when the observer says stop."""
        assert self.observer is not None
        next_snapshot = self.t0
        while not self.observer.should_stop():
            if self.loop.time() >= next_snapshot:
                self.observer.snapshot(self.snapshot())
                next_snapshot += SNAPSHOT_INTERVAL_S
            await asyncio.sleep(0.1)
        main.cancel()

    def snapshot(self) -> Snapshot:
        """Requests served so far, and the server's running, waiting and KV use at its latest scrape."""
        latest = self.server.samples[-1].values if self.server and self.server.samples else {}

        def gauge(name: str) -> float | None:
            value = latest.get(name)
            return value if isinstance(value, float | int) else None

        running, waiting = gauge("running"), gauge("waiting")
        served = sum(r.error is None for r in self.done)
        return Snapshot(
            self.loop.time() - self.t0,
            served,
            None if running is None else int(running),
            None if waiting is None else int(waiting),
            gauge("kv_usage"),
        )

    async def _open_loop(self, jobs: list[tuple[Request, bytes]]) -> None:
        for request, body in jobs:
            at = self.t0 + request.arrival_s
            if at >= self.deadline:
                break
            delay = at - self.loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self._send(request, body, request.arrival_s))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        await asyncio.gather(*self.tasks)

    async def _closed_loop(self, jobs: list[tuple[Request, bytes]], concurrency: int) -> None:
        queue = iter(jobs)

        async def worker() -> None:
            for request, body in queue:  # shared: each worker takes the next request in list order
                now = self.loop.time()
                if now >= self.deadline:
                    return
                await self._send(request, body, now - self.t0)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(jobs)))))

    async def _send(self, request: Request, body: bytes, scheduled_s: float) -> None:
        result = await stream_completion(
            self.pool,
            body,
            request_id=request.id,
            prompt_tokens=request.prompt_tokens,
            max_tokens=request.output_tokens,
            scheduled_s=scheduled_s,
            t0=self.t0,
            stall_s=self.options.stall_s,
            deadline=self.deadline,
        )
        self.done.append(result)
        record = result.record()
        if record is not None and self.observer is not None:
            self.observer.request_done(record)
