"""The embedded simulator as a `Backend`."""

from __future__ import annotations

import itertools

from ...scenarios import Scenario
from ..base import Capabilities, RunObserver
from ..config import ResolvedConfig, ServingConfig
from ..footprint import check_footprint
from ..policies.delay import DelayScheduler
from ..policies.modes import MODES, PolicyEnv
from ..result import RunResult
from .costs import BatchShape, CostModel, capped_pairs
from .engine import Engine
from .request import SimRequest
from .scheduler import StepScheduler


def lone_chunk(tokens: int, prefix: int, topk: int) -> BatchShape:
    """The shape of a micro-batch holding one prefill chunk and nothing else."""
    pairs = tokens * prefix + tokens * (tokens + 1) / 2
    return BatchShape(tokens, tokens, pairs, capped_pairs(prefix, tokens, topk), 0, 0, prefix, 0)


class SimBackend:
    """Discrete-event simulation of a pipeline-parallel serving cluster.

    `exact_decode` queues decoding requests one by one even where they could
    advance in groups (same results, slower; for checking the grouped path).
    """

    name = "sim"
    capabilities = Capabilities(modes=tuple(MODES), timeline=True, reconfigurable=True, paced=False, simulated=True)

    def __init__(self, *, exact_decode: bool = False):
        self.exact_decode = exact_decode

    def check(self) -> None:
        """Nothing to check: the simulator needs no server or program."""

    def close(self) -> None:
        """Nothing to release: a run holds nothing once it returns."""

    def run(
        self,
        scenario: Scenario,
        config: ServingConfig | ResolvedConfig,
        rate: float | None = None,
        seed: int = 0,
        num_requests: int | None = None,
        observer: RunObserver | None = None,
        timeline: bool = True,
    ) -> RunResult:
        """Simulate `scenario` under `config` and return every record."""
        resolved = config.resolve()
        check_footprint(
            self.name, scenario, resolved, num_requests=num_requests, seed=seed, rate=rate, timeline=timeline
        )  # before any is drawn
        workload = scenario.workload(seed=seed, rate=rate, num_requests=num_requests)
        engine = build_engine(resolved, timeline=timeline, observer=observer, exact_decode=self.exact_decode)
        requests = [SimRequest(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in workload.requests]
        makespan = engine.run(requests, workload.concurrency)
        return RunResult(
            config=resolved.to_dict(),
            scenario=scenario.name,
            backend=self.name,
            seed=seed,
            rate=rate,
            records=sorted(engine.records),
            ranks=engine.rank_times(makespan),  # records by id, their first field
            makespan_s=makespan,
            steps=engine.steps,
            chunks=engine.sched.chunks,
            stage_executions=engine.stage_execs,
            spans=engine.span_list() if timeline else [],
            preemptions=engine.sched.preemptions,
        )


def build_engine(
    config: ResolvedConfig,
    *,
    timeline: bool = False,
    observer: RunObserver | None = None,
    cost: CostModel | None = None,
    exact_decode: bool = False,
) -> Engine:
    """Wire a resolved config's cost model (or the one given), policies and scheduler into an engine."""
    spec = config.mode_spec
    if cost is None:
        cost = CostModel(
            config.model_profile, config.rank_hardware, config.parallelism.tp, config.parallelism.layer_split
        )
    topk = config.model_profile.index_topk
    ranks = config.stage_ranks
    hops = sum(a != b for a, b in itertools.pairwise(ranks))

    def chunk_latency(tokens: int) -> float:
        busy, _ = cost.stage_costs(lone_chunk(tokens, 0, topk))
        return sum(busy) + hops * cost.transfer_time(tokens)

    def entry_stage_time(tokens: int, prefix: int) -> float:
        return cost.stage_costs(lone_chunk(tokens, prefix, topk))[0][0]

    def decode_stage_time(batch: int) -> float:
        return cost.stage_costs(BatchShape(batch, 0, 0, 0, batch, batch, 0, batch))[0][0]

    env = PolicyEnv(
        pp=config.parallelism.pp,
        scheduling=config.scheduling,
        dcpp=config.dcpp,
        adaptive=config.adaptive,
        fastpp=config.fastpp,
        chunk_latency=chunk_latency,
        entry_stage_time=entry_stage_time,
        decode_stage_time=decode_stage_time,
    )
    in_flight = config.parallelism.pp + spec.extra_in_flight
    delay = (
        DelayScheduler(pp=in_flight, slo_tpot_s=config.fastpp.slo_tpot_s, settings=config.delay)
        if config.delay.delay_scheduling
        else None
    )
    scheduler = StepScheduler(
        cost=cost,
        chunk_policy=spec.chunk_policy(env),
        scheduling=config.scheduling,
        kv_capacity=config.memory.kv_capacity,
        slots=in_flight,
        topk=topk,
        delay=delay,
        pack_prompts=spec.pack_prompts,
        exact=exact_decode,
    )
    return Engine(
        cost=cost,
        scheduler=scheduler,
        stage_ranks=ranks,
        sync=spec.sync_transfers,
        in_flight=in_flight,
        entry_first=spec.entry_first,
        timeline=timeline,
        observer=observer,
    )
