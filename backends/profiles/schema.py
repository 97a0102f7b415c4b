"""Model and hardware profile types: the numbers the cost model reads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

PLATFORMS = ("cuda", "ascend", "cpu")  # device platforms: NVIDIA GPUs, Ascend NPUs, CPU hosts
HUBS = ("huggingface", "modelscope")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The weights a deployment on one device platform serves: the ones whose size the simulation assumed.

    `quantization` is the engine's `--quantization` method ("ascend" for
    vLLM-Ascend's ModelSlim weights); empty, the engine reads the method from
    the checkpoint's own config. `source` says where the id, hub and method
    are published.
    """

    id: str
    precision: str = ""  # what the weights are, e.g. "W8A8 int8"; empty: as published under that id
    quantization: str = ""
    hub: str = "huggingface"
    source: str = ""


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """Architecture of one model, as its Hugging Face config.json states it.

    Attention is "gqa" (grouped-query, MHA when kv_heads == heads) or "mla"
    (multi-head latent attention, DeepSeek style). A model with
    ``index_topk > 0`` uses DSA sparse attention: each query attends to at
    most ``index_topk`` keys, chosen by a lightweight indexer that still
    scores every prefix key.
    """

    name: str
    hf_id: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    attention: str = "gqa"
    # MLA (attention == "mla")
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # Feed-forward: dense layers use intermediate_size; MoE layers use
    # num_experts routed experts (experts_per_token active) plus shared ones.
    intermediate_size: int = 0
    moe_intermediate_size: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    # DSA sparse attention (0 = dense attention)
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    # Layers that run their own indexer, 0 = every layer; the others reuse
    # the previous indexer's top-k (GLM-5.2 IndexShare: 21 of 78 layers).
    indexer_layers: int = 0
    # Size and deployment precision
    total_params_b: float = 0.0
    active_params_b: float = 0.0
    weight_bytes: float = 2.0
    kv_bytes: float = 2.0
    # Longest sequence (prompt + output) the model takes, config.json's max_position_embeddings
    # (vLLM's default max_model_len); 0 when unknown.
    max_position_embeddings: int = 0
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    # [checkpoints.<platform>]: the weights served on that platform when they are not hf_id as published
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict, compare=False)

    def checkpoint(self, platform: str) -> Checkpoint:
        """The weights a deployment on `platform` serves: its [checkpoints] entry, else hf_id as published."""
        return self.checkpoints.get(platform) or Checkpoint(self.hf_id, source=f"hf_id of model profile {self.name}")

    @property
    def is_moe(self) -> bool:
        """True when some layers route tokens to experts."""
        return self.num_experts > 0

    @property
    def moe_layers(self) -> int:
        """Number of MoE layers (all layers past the leading dense ones)."""
        return self.num_layers - self.first_dense_layers if self.is_moe else 0


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """One accelerator and its links, with the cost model's fitted constants.

    Spec-sheet figures (memory, bandwidth, peak FLOP rate) and fitted
    efficiencies and overheads; ``sources`` says where each number comes from.
    """

    name: str
    memory_gb: float
    memory_bandwidth_gbs: float
    peak_tflops: float
    # Achieved fraction of peak for large matmuls, and the tokens per GEMM at
    # which a matmul reaches half of that (small matmuls run less efficiently).
    matmul_efficiency: float
    matmul_half_tokens: float
    attention_efficiency: float
    memory_efficiency: float
    kernel_launch_us: float
    kernels_per_layer: int
    step_overhead_ms: float
    sampling_ms: float
    # Fixed cost of one TP all-reduce, as launched in eager mode (steps with
    # prefill tokens), and as replayed inside a captured graph (decode-only
    # steps: CUDA graphs / ACL graphs), where the host no longer orchestrates it.
    collective_latency_us: float
    graph_collective_latency_us: float
    collective_bandwidth_gbs: float
    p2p_latency_us: float
    p2p_bandwidth_gbs: float
    memory_utilization: float = 0.9
    activation_reserve_gb: float = 2.0
    # Matmuls run in tiles of this many token rows: a batch one token past a tile
    # boundary pays for a whole extra tile (the step shape delay scheduling exploits).
    gemm_tile_tokens: int = 1
    # Query rows per sequence at which attention reaches half of attention_efficiency (0: no fall-off).
    # A prefill chunk has as many rows as tokens; a decode has one, so it runs at
    # attention_efficiency / (1 + attention_half_tokens): one-row attention is a matrix-vector product.
    attention_half_tokens: float = 0.0
    # Host time from a request's arrival until the scheduler can run it (the API server reading,
    # parsing and queueing it): it delays that request's first token, not the steps of others.
    request_overhead_ms: float = 0.0
    # Host time each rank spends on every micro-batch it runs, outside its layers' operations (the model
    # runner preparing the batch's inputs and metadata on that rank): paid once per stage execution, on every
    # rank, whatever its layers; 0 where it is part of step_overhead_ms (the published fits, one rank per step).
    stage_overhead_ms: float = 0.0
    # Time per query row, per layer, per KV token held anywhere in the pool, for an engine whose attention
    # masks one KV pool all sequences share (llama.cpp's unified cache) rather than reading each sequence's
    # own blocks (paged attention): 0, the paged engines' case, adds nothing.
    kv_pool_scan_ns: float = 0.0
    # The ranks of one instance run on this one device and split it evenly: its compute, memory bandwidth and
    # memory, each rank a 1/(tp x pp) share (vLLM's CPU build binds each rank's threads to its own share of the
    # host's cores). False, the accelerators' case: every rank has a device of its own.
    ranks_share_device: bool = False
    # Decode-only steps replay a captured graph (CUDA graphs, ACL graphs): they launch no kernels from the host
    # and their collectives pay graph_collective_latency_us. False (an engine on a CPU): every step's operations
    # are dispatched from the host, so decode steps pay kernel_launch_us per operation as prefill steps do.
    decode_graphs: bool = True
    # One of PLATFORMS: which engines run on it and which weights it serves (exports); "" when a profile
    # does not say (the simulation needs none of it).
    platform: str = ""
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def per_rank(self, ranks: int) -> HardwareProfile:
        """What each of an instance's `ranks` ranks runs on: this device, or its even share of it where the ranks
        share the device (`ranks_share_device`)."""
        if not self.ranks_share_device or ranks == 1:
            return self
        return replace(
            self,
            memory_gb=self.memory_gb / ranks,
            memory_bandwidth_gbs=self.memory_bandwidth_gbs / ranks,
            peak_tflops=self.peak_tflops / ranks,
        )
