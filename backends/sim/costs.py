"""Analytic cost of one micro-batch on each virtual stage of the pipeline.

Every micro-batch is summarised by a `BatchShape` (token counts and attention
work); the cost model turns it into, per virtual stage, the busy time of the
rank that runs it and the part of that time spent in TP collectives.

Per layer and per device (weights and heads sharded over the TP group; where
the ranks of an instance share one device, a CPU host, a rank's device is its
share of it: `HardwareProfile.per_rank`):
- linear layers (attention projections, dense FFN, routed and shared experts):
  FLOPs / (peak * eff(m)), where eff(m) = matmul_efficiency * m / (m + half)
  falls for small matmuls of m tokens, with m rounded up to whole
  gemm_tile_tokens tiles, but never faster than reading the weights the step
  touches (memory bound decode); routed experts run as one grouped GEMM in
  which only the experts the batch touches (expected distinct experts of n
  tokens with k of E each) have rows, each seeing n * k / touched tokens
  (at prefill sizes every expert is touched);
- attention: causal query-key pairs * FLOPs per pair at attention_efficiency,
  or the KV bytes it reads, whichever is slower; DSA sparse attention caps each
  query at index_topk keys and adds its indexer, which scores every prefix key;
  like a matmul, attention runs less efficiently with few query rows per
  sequence: at attention_efficiency * r / (r + attention_half_tokens) for r
  rows, a prefill chunk's tokens or a decode's one (0, the default: no
  fall-off, decode then bound by its KV reads as on GPUs and NPUs);
- an engine whose attention masks one KV pool all sequences share (llama.cpp's
  unified cache: ggml's CPU flash attention scans the mask of every KV tile in
  use) pays kv_pool_scan_ns per query row for every KV token held in the pool,
  whoever holds it (0, paged engines: each sequence reads only its own blocks);
- MLA prefill re-expands the cached latent prefix to full K/V for every chunk
  (vLLM's chunked-context MLA), a cost paid again for each chunk;
- per-kernel launch overhead in eager mode (steps with prefill tokens);
  decode-only steps replay a captured graph (CUDA/ACL graphs), as vLLM does,
  and pay none, unless the hardware has no graphs (decode_graphs false: an
  engine on a CPU dispatches every step's operations from the host);
- two all-reduces of the activations per layer over the TP group (latency +
  ring traffic / bus bandwidth); the latency is the eager, host-orchestrated
  figure (collective_latency_us) in steps with prefill tokens, and the
  collective's latency inside a replayed graph (graph_collective_latency_us)
  in decode-only steps;
- the last stage also runs the LM head for the sampled tokens and sampling.

Per stage execution, every rank also pays stage_overhead_ms of host time
outside its layers (its model runner preparing the batch), whatever it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from ..memory import kv_bytes_per_token_layer
from ..profiles.schema import HardwareProfile, ModelProfile

ACT_BYTES = 2  # bf16 activations on the wire


class BatchShape:
    """What a micro-batch asks of the model, independent of the stage (a plain class: it is made every step)."""

    __slots__ = (
        "tokens",
        "prefill_tokens",
        "prefill_pairs",
        "prefill_pairs_capped",
        "decode_pairs",
        "decode_pairs_capped",
        "prefix_tokens",
        "sampled",
        "prefill_chunks",
        "pool_tokens",
    )

    def __init__(
        self,
        tokens: int,
        prefill_tokens: int,
        prefill_pairs: float,
        prefill_pairs_capped: float,
        decode_pairs: float,
        decode_pairs_capped: float,
        prefix_tokens: int,
        sampled: int,
        prefill_chunks: int = 1,
        pool_tokens: int = 0,
    ):
        self.tokens = tokens  # all tokens (prefill chunk tokens + one per decode)
        self.prefill_tokens = prefill_tokens  # tokens of the prefill chunks
        self.prefill_pairs = prefill_pairs  # causal query-key pairs of the prefill chunks
        self.prefill_pairs_capped = prefill_pairs_capped  # the same, each query capped at index_topk
        self.decode_pairs = decode_pairs  # keys read by decode queries (context + 1 each)
        self.decode_pairs_capped = decode_pairs_capped
        self.prefix_tokens = prefix_tokens  # cached prefix tokens the prefill chunks attend to
        self.sampled = sampled  # requests that emit a token at the end of this step
        self.prefill_chunks = prefill_chunks  # prompt chunks among the prefill tokens (one per prompt in the step)
        self.pool_tokens = pool_tokens  # KV tokens held in the pool by every request, in this batch or not


def capped_pairs(prefix: int, chunk: int, cap: int) -> float:
    """Query-key pairs of a causal chunk after `prefix` tokens, each query seeing at most `cap` keys."""
    first, last = prefix + 1, prefix + chunk  # keys seen by the first and last query
    if cap <= 0 or last <= cap:
        return (first + last) * chunk / 2
    if first >= cap:
        return float(cap * chunk)
    return (first + cap) * (cap - first + 1) / 2 + (last - cap) * cap


@mypyc_attr(allow_interpreted_subclasses=True)
class StageCosts:
    """What the engine asks of a cost model: `CostModel`, or a stand-in with costs of its own (tests subclass it).

    A base class, not a Protocol: the compiled engine calls a class's methods
    natively and a Protocol's through Python, which cost 5% of a run.
    """

    def __init__(self, step_overhead_s: float = 0.0, request_overhead_s: float = 0.0):
        self.step_overhead_s = step_overhead_s  # host-side scheduling of one step
        self.request_overhead_s = request_overhead_s  # the server taking in one request

    def stage_costs(self, b: BatchShape) -> tuple[list[float], list[float]]:
        """Busy time of each virtual stage for this batch, and the collective part of it."""
        raise NotImplementedError

    def transfer_time(self, tokens: int) -> float:
        """Time to send a micro-batch's boundary activations to the next rank."""
        raise NotImplementedError


@dataclass(frozen=True)
class StageLayers:
    """Which layers a virtual stage holds."""

    dense: int  # layers with a dense FFN
    moe: int  # layers with routed experts
    first: bool  # holds the embedding
    last: bool  # holds the LM head and sampling

    @property
    def layers(self) -> int:
        return self.dense + self.moe


def stage_layers(model: ModelProfile, layer_split: tuple[int, ...]) -> list[StageLayers]:
    """Split the model's layers into virtual stages (execution order)."""
    stages, start = [], 0
    for i, count in enumerate(layer_split):
        end = start + count
        dense = max(0, min(end, model.first_dense_layers if model.is_moe else end) - start)
        stages.append(StageLayers(dense, count - dense, i == 0, i == len(layer_split) - 1))
        start = end
    return stages


class CostModel(StageCosts):
    """Per-stage execution time of micro-batches for one model on one cluster."""

    def __init__(self, model: ModelProfile, hw: HardwareProfile, tp: int, layer_split: tuple[int, ...]):
        super().__init__(hw.step_overhead_ms * 1e-3, hw.request_overhead_ms * 1e-3)
        self.model, self.hw, self.tp = model, hw, tp
        self.stages = stage_layers(model, layer_split)
        m, h = model, model.hidden_size
        flops = hw.peak_tflops * 1e12
        bw = hw.memory_bandwidth_gbs * 1e9 * hw.memory_efficiency
        wb = m.weight_bytes
        self._flops, self._bw = flops, bw
        self._half = hw.matmul_half_tokens
        self._tile = hw.gemm_tile_tokens
        self._mm_eff = hw.matmul_efficiency
        self._attn_half = hw.attention_half_tokens
        self._pool_scan_s = hw.kv_pool_scan_ns * 1e-9
        attn_rate = flops * hw.attention_efficiency

        # Attention projections: parameters per layer (each token costs 2 FLOPs per parameter).
        if m.attention == "mla":
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            q = h * m.q_lora_rank + m.q_lora_rank * m.num_heads * qk if m.q_lora_rank else h * m.num_heads * qk
            proj = q + h * (m.kv_lora_rank + m.qk_rope_head_dim)
            proj += m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
            proj += m.num_heads * m.v_head_dim * h
            prefill_pair = 2 * m.num_heads * (qk + m.v_head_dim)
            decode_pair = 2 * m.num_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
            reexpand = 2 * m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
        else:
            proj = 2 * h * m.num_heads * m.head_dim + 2 * h * m.num_kv_heads * m.head_dim
            prefill_pair = decode_pair = 4 * m.num_heads * m.head_dim
            reexpand = 0
        self._proj_flops = 2 * proj / tp
        self._proj_bytes = proj * wb / tp
        self._prefill_pair_s = prefill_pair / tp / attn_rate
        self._decode_pair_s = decode_pair / tp / attn_rate
        # DSA: layers without their own indexer reuse the previous layer's top-k;
        # the indexer's cost is spread evenly over all layers.
        indexed = (m.indexer_layers or m.num_layers) / m.num_layers
        self._index_pair_s = 2 * m.index_n_heads * m.index_head_dim / tp / attn_rate * indexed
        self._kv_token_s = kv_bytes_per_token_layer(m, tp) / bw
        self._reexpand_flops = reexpand / tp
        self._sparse = m.index_topk > 0

        ffn = 3 * h * m.intermediate_size
        expert = 3 * h * m.moe_intermediate_size
        self._dense_flops, self._dense_bytes = 2 * ffn / tp, ffn * wb / tp
        self._expert_flops, self._expert_bytes = 2 * expert / tp, expert * wb / tp
        self._shared_flops = 2 * expert * m.num_shared_experts / tp
        self._shared_bytes = expert * m.num_shared_experts * wb / tp
        self._router_flops = 2 * h * m.num_experts

        self._head_flops = 2 * h * m.vocab_size / tp
        self._head_bytes = h * m.vocab_size * wb / tp
        self._launch_s = hw.kernels_per_layer * hw.kernel_launch_us * 1e-6
        self._decode_graphs = hw.decode_graphs
        self._stage_s = hw.stage_overhead_ms * 1e-3
        self._sampling_s = hw.sampling_ms * 1e-3
        if tp > 1:
            ring = 2 * (tp - 1) / tp
            self._coll_lat = 2 * hw.collective_latency_us * 1e-6
            self._graph_coll_lat = 2 * hw.graph_collective_latency_us * 1e-6
            self._coll_token = 2 * ring * h * ACT_BYTES / (hw.collective_bandwidth_gbs * 1e9)
        else:
            self._coll_lat = self._graph_coll_lat = self._coll_token = 0.0
        self._moe = (m.experts_per_token, m.num_experts) if m.is_moe else None
        self._dense = bool(m.intermediate_size)
        self._shared = bool(m.num_shared_experts)
        self._rows = [(s.layers, s.dense, s.moe, s.last) for s in self.stages]
        self._p2p_lat = hw.p2p_latency_us * 1e-6
        self._p2p_token = h * ACT_BYTES / (hw.p2p_bandwidth_gbs * 1e9)

    def _matmul(self, flops: float, tokens_per_gemm: float, weight_bytes: float) -> float:
        """Time of a matmul: compute at size-dependent efficiency, or weight reads if slower.

        Token rows are computed in whole tiles, so the compute term steps up at
        every tile boundary.
        """
        tile = self._tile
        padded = -(-tokens_per_gemm // tile) * tile if tile > 1 else tokens_per_gemm
        compute = flops * (padded + self._half) / (self._flops * self._mm_eff * tokens_per_gemm)
        memory = weight_bytes / self._bw
        return compute if compute > memory else memory

    def stage_costs(self, b: BatchShape) -> tuple[list[float], list[float]]:
        """Busy time of each virtual stage for this batch, and the collective part of it."""
        n = b.tokens
        attn_layer = self._matmul(self._proj_flops * n, n, self._proj_bytes)
        if self._sparse:
            pre, dec = b.prefill_pairs_capped, b.decode_pairs_capped
        else:
            pre, dec = b.prefill_pairs, b.decode_pairs
        half = self._attn_half
        if half:  # query rows per sequence: a chunk's tokens in prefill, one in decode
            rows = b.prefill_tokens / b.prefill_chunks if b.prefill_tokens else 1.0
            attn = pre * self._prefill_pair_s * (rows + half) / rows + dec * self._decode_pair_s * (1.0 + half)
        else:
            attn = pre * self._prefill_pair_s + dec * self._decode_pair_s
        if self._sparse:
            attn += (b.prefill_pairs + b.decode_pairs) * self._index_pair_s
        if self._pool_scan_s:
            attn += n * b.pool_tokens * self._pool_scan_s
        kv_read = (b.prefix_tokens + b.prefill_tokens + dec) * self._kv_token_s
        attn_layer += attn if attn > kv_read else kv_read
        if b.prefill_tokens or not self._decode_graphs:  # eager step: kernels launched one by one by the host
            attn_layer += self._launch_s
            coll = self._coll_lat + self._coll_token * n
        else:  # decode-only step: a captured graph is replayed
            coll = self._graph_coll_lat + self._coll_token * n
        if self._reexpand_flops and b.prefix_tokens:
            attn_layer += self._matmul(self._reexpand_flops * b.prefix_tokens, b.prefix_tokens, 0.0)

        dense_layer = self._matmul(self._dense_flops * n, n, self._dense_bytes) if self._dense else 0.0
        moe_layer = 0.0
        if self._moe:
            k, e = self._moe
            touched = e * (1.0 - (1.0 - k / e) ** n)
            # Grouped GEMM (vLLM-Ascend npu_grouped_matmul, vLLM fused_moe): experts without rows do no work.
            moe_layer = self._matmul(self._expert_flops * n * k, n * k / touched, self._expert_bytes * touched)
            moe_layer += self._router_flops * n / self._flops
            if self._shared:
                moe_layer += self._matmul(self._shared_flops * n, n, self._shared_bytes)

        layer = attn_layer + coll
        stage = self._stage_s
        busy = [stage + layers * layer + dense * dense_layer + moe * moe_layer for layers, dense, moe, _ in self._rows]
        if b.sampled and self._rows[-1][3]:
            busy[-1] += self._matmul(self._head_flops * b.sampled, b.sampled, self._head_bytes) + self._sampling_s
        comm = [row[0] * coll for row in self._rows]
        return busy, comm

    def transfer_time(self, tokens: int) -> float:
        """Time to send a micro-batch's boundary activations to the next rank."""
        return self._p2p_lat + self._p2p_token * tokens
