"""Frozen, SI-unit descriptions of hardware, model architecture, numeric precision and efficiency.

These are what `catalog/` hands to the planner; nothing here knows about databases or HTTP.
GB = 1e9 bytes, TB/s = 1e12 B/s, TFLOP/s = 1e12 FLOP/s: conversions happen at the edges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from planner.confidence import GRADES, UNGRADED
from planner.errors import PlannerInputError

#: Datatypes a GPU can list a dense peak for (the catalog's `peak_tflops` keys).
DATATYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")

#: Architecture generations, oldest first, per vendor line. A scheme's `min_architecture`
#: is satisfied by the same or a later generation of the same line.
ARCHITECTURE_GENERATIONS: dict[str, tuple[str, ...]] = {
    "nvidia": ("volta", "turing", "ampere", "ada", "hopper", "blackwell"),
    "amd": ("cdna2", "cdna3", "cdna4"),
}


# ---- physical bounds ------------------------------------------------------------------------------
# A spec the planner accepts lies inside these ranges (SI units). Each upper bound is a wide margin
# over the largest accelerator, interconnect or model published, so no real record is refused
# while a typo or a hostile 1e308 is: with every input inside them, the planner's products (bytes
# per token × tokens, FLOPs per step, replicas × price in the MILP) stay many orders of magnitude
# below float overflow. The catalog and the API state the same bounds in their own units;
# docs/reliability.md ("Bounds") says why each is what it is.

#: One accelerator's memory: 1 GB (below any inference part) to 4,096 GB (14× the 288 GB of HBM on
#: the largest parts shipped, MI355X and B300).
MIN_MEMORY_BYTES, MAX_MEMORY_BYTES = 1e9, 4_096e9
#: Memory bandwidth: 1 GB/s (below one DDR channel) to 100 PB/s (5× the 21 PB/s on-wafer SRAM
#: bandwidth of Cerebras WSE-3, the fastest memory of any accelerator).
MIN_BANDWIDTH_BYTES_PER_S, MAX_BANDWIDTH_BYTES_PER_S = 1e9, 100e15
#: Dense peak per datatype: 1 GFLOP/s (one old CPU core) to 1 EFLOP/s (8× Cerebras WSE-3's
#: 125 PFLOP/s, 60× B300's dense FP4 of 15 PFLOP/s).
MIN_PEAK_FLOPS_PER_S, MAX_PEAK_FLOPS_PER_S = 1e9, 1e18
#: GPU-to-GPU bandwidth per GPU, one direction: 0.1 GB/s (below 1 Gbit/s Ethernet) to 100 TB/s
#: (100× NVLink 5's 900 GB/s).
MIN_INTERCONNECT_BYTES_PER_S, MAX_INTERCONNECT_BYTES_PER_S = 0.1e9, 100e12
#: One all-reduce hop: at most 10 ms, a round trip between data centres; a slower link cannot carry
#: a per-layer all-reduce at all.
MAX_INTERCONNECT_LATENCY_S = 10e-3
#: GPUs sharing the fast interconnect: at most 1,024 (NVL72 has 72; announced racks 576).
MAX_GPUS_PER_NODE = 1_024
#: Fixed time per batching step: at most 10 s, 1,000× any engine's scheduler and launch overhead.
MAX_STEP_OVERHEAD_S = 10.0
#: On-demand price per GPU-hour: at most $1,000, ~70× the dearest list price of a GPU-hour today
#: (~$14 for a B200); it also keeps replicas × price × hours well inside the MILP solver's range.
MAX_PRICE_USD_PER_HOUR = 1_000.0
#: Parameters: at most 1e14 (100 T, 50× the largest published model, ~2 T).
MAX_PARAMS = 1e14
#: Widths and counts of a transformer's shape (layers, hidden, heads, head_dim, MLP width, experts,
#: MLA rank): at most 2^20 = 1,048,576, 40× the widest published (hidden 25,600; MLP 73,728 is
#: allowed for by the MLP's own bound below).
MAX_MODEL_DIMENSION = 2**20
#: MLP hidden width: at most 2^22 (4,194,304), 50× the widest published (~73,728).
MAX_INTERMEDIATE_SIZE = 2**22
#: Vocabulary: at most 2^24 (16,777,216), 64× the largest published (Gemma's 262,144).
MAX_VOCAB_SIZE = 2**24
#: Context window: at most 10,000,000 tokens (Llama 4 Scout's 10 M, the longest published), the
#: workload's own length bound.
MAX_CONTEXT_TOKENS = 10_000_000
#: Bytes per stored value: 1/16 (half a bit, below any published 1-bit format's 0.125) to 16
#: (fp64's 8 bytes plus as much again in scales).
MIN_BYTES_PER_VALUE, MAX_BYTES_PER_VALUE = 1 / 16, 16.0


def _require(condition: bool, message: str, **extensions: object) -> None:
    if not condition:
        raise PlannerInputError(message, **extensions)


def _within(owner: str, name: str, value: float, low: float, high: float) -> None:
    """PlannerInputError (naming the field) unless low <= value <= high; NaN is outside every range."""
    _require(low <= value <= high, f"{owner}: {name} must be in [{low:g}, {high:g}], got {value:g}", field=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Efficiency:
    """How far a replica falls short of the datasheet: the calibration of the roofline.

    `memory` and `compute` scale bandwidth and peak FLOP/s (η_mem, η_compute);
    `step_overhead_s` is added to every continuous-batching step (scheduler, kernel launches);
    `memory_reserve_fraction` of HBM is unavailable to weights and KV (activations, CUDA context,
    fragmentation); `include_comm` switches tensor-parallel all-reduce time on;
    `memory_compute_overlap` = 1 combines memory and compute time as max(a, b), 0 as a + b.
    """

    name: str = "ideal"
    memory: float = 1.0
    compute: float = 1.0
    step_overhead_s: float = 0.0
    memory_reserve_fraction: float = 0.0
    include_comm: bool = False
    memory_compute_overlap: float = 1.0
    #: (datatype, factor): the realised rate of that datatype's matrix multiplies relative to its
    #: datasheet peak ratio (planner/engines.py LowPrecisionFactor); a datatype not listed runs at its datasheet peak.
    low_precision_factors: tuple[tuple[str, float], ...] = ()
    source: str = "ideal roofline: η = 1, no reserve, no communication, no overhead (docs/design.md test vectors)"

    def __post_init__(self) -> None:
        _require(0.0 < self.memory <= 1.0, f"memory efficiency must be in (0, 1], got {self.memory}")
        _require(0.0 < self.compute <= 1.0, f"compute efficiency must be in (0, 1], got {self.compute}")
        _require(
            0.0 <= self.step_overhead_s <= MAX_STEP_OVERHEAD_S,
            f"step overhead must be in [0, {MAX_STEP_OVERHEAD_S:g}] s, got {self.step_overhead_s}",
        )
        _require(
            0.0 <= self.memory_reserve_fraction < 1.0,
            f"memory reserve fraction must be in [0, 1), got {self.memory_reserve_fraction}",
        )
        _require(
            0.0 <= self.memory_compute_overlap <= 1.0,
            f"memory/compute overlap must be in [0, 1], got {self.memory_compute_overlap}",
        )
        # stored plans give the pairs back as JSON lists: normalised, so an efficiency read back equals the one planned with
        object.__setattr__(self, "low_precision_factors", tuple((str(d), float(f)) for d, f in self.low_precision_factors))
        for datatype, factor in self.low_precision_factors:
            _require(datatype in DATATYPES, f"low-precision factor for unknown datatype {datatype!r}")
            _require(0.0 < factor <= 1.0, f"low-precision factor of {datatype} must be in (0, 1], got {factor}")

    def peak_factor(self, datatype: str) -> float:
        """The multiplier on `datatype`'s datasheet peak (1 unless a low-precision factor is measured)."""
        return next((factor for name, factor in self.low_precision_factors if name == datatype), 1.0)


IDEAL = Efficiency()


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU as its datasheet describes it, with its price and calibrated efficiency."""

    slug: str
    vendor: str
    architecture: str
    memory_bytes: float
    hbm_bandwidth_bytes_per_s: float
    #: Dense peak FLOP/s per datatype; a datatype the chip lacks is absent or None.
    peak_flops_per_s: Mapping[str, float | None]
    #: Per-GPU link bandwidth used by tensor-parallel all-reduce (NVLink, Infinity Fabric, PCIe).
    interconnect_bytes_per_s: float
    #: End-to-end latency of one small-message all-reduce across the replica (docs/design.md's ring latency).
    interconnect_latency_s: float = 0.0
    gpus_per_node: int = 8
    #: The scale-out network between nodes per GPU, one direction (its NIC's share), its latency and the
    #: catalog's source for both; None where the catalog has no figure (planner/disagg.py DEFAULT_SCALE_OUT applies).
    scale_out_bytes_per_s: float | None = None
    scale_out_latency_s: float | None = None
    scale_out_source: str | None = None
    price_usd_per_hour_on_demand: float = 0.0
    price_usd_per_hour_reserved_1y: float | None = None
    efficiency: Efficiency = field(default_factory=Efficiency)
    #: How far the catalog's calibration of this GPU can be trusted (planner/confidence.py GRADES).
    calibration_grade: str = UNGRADED

    def __post_init__(self) -> None:
        _require(
            self.calibration_grade in GRADES,
            f"{self.slug}: calibration grade must be one of {', '.join(GRADES)}",
            field="calibration_grade",
        )
        # the comparisons are false for NaN, so a NaN is refused too
        _within(self.slug, "memory_bytes", self.memory_bytes, MIN_MEMORY_BYTES, MAX_MEMORY_BYTES)
        _within(
            self.slug,
            "hbm_bandwidth_bytes_per_s",
            self.hbm_bandwidth_bytes_per_s,
            MIN_BANDWIDTH_BYTES_PER_S,
            MAX_BANDWIDTH_BYTES_PER_S,
        )
        _within(
            self.slug,
            "interconnect_bytes_per_s",
            self.interconnect_bytes_per_s,
            MIN_INTERCONNECT_BYTES_PER_S,
            MAX_INTERCONNECT_BYTES_PER_S,
        )
        _within(self.slug, "interconnect_latency_s", self.interconnect_latency_s, 0.0, MAX_INTERCONNECT_LATENCY_S)
        _within(self.slug, "gpus_per_node", self.gpus_per_node, 1, MAX_GPUS_PER_NODE)
        if self.scale_out_bytes_per_s is not None:
            _within(
                self.slug,
                "scale_out_bytes_per_s",
                self.scale_out_bytes_per_s,
                MIN_INTERCONNECT_BYTES_PER_S,
                MAX_INTERCONNECT_BYTES_PER_S,
            )
        if self.scale_out_latency_s is not None:
            _within(self.slug, "scale_out_latency_s", self.scale_out_latency_s, 0.0, MAX_INTERCONNECT_LATENCY_S)
        _within(self.slug, "price_usd_per_hour_on_demand", self.price_usd_per_hour_on_demand, 0.0, MAX_PRICE_USD_PER_HOUR)
        if self.price_usd_per_hour_reserved_1y is not None:
            _within(self.slug, "price_usd_per_hour_reserved_1y", self.price_usd_per_hour_reserved_1y, 0.0, MAX_PRICE_USD_PER_HOUR)
        for dtype, flops in self.peak_flops_per_s.items():
            _require(dtype in DATATYPES, f"{self.slug}: unknown datatype {dtype!r}", datatype=dtype)
            if flops is not None:
                _within(self.slug, f"peak_flops_per_s.{dtype}", flops, MIN_PEAK_FLOPS_PER_S, MAX_PEAK_FLOPS_PER_S)

    def peak_flops(self, datatype: str) -> float | None:
        """Dense peak FLOP/s for `datatype`, or None where the chip has no such unit."""
        return self.peak_flops_per_s.get(datatype)


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeSpec:
    """Mixture-of-experts layout. `expert_params` counts one routed expert in one MoE layer."""

    experts: int
    experts_per_token: int
    shared_experts: int
    expert_params: float
    moe_layers: int

    def __post_init__(self) -> None:
        _require(self.experts >= 1, "moe.experts must be >= 1")
        _require(
            1 <= self.experts_per_token <= self.experts,
            f"moe.experts_per_token must be in [1, experts={self.experts}]",
        )
        _require(self.shared_experts >= 0, "moe.shared_experts must be >= 0")
        _require(self.expert_params > 0, "moe.expert_params must be positive")
        _require(self.moe_layers >= 1, "moe.moe_layers must be >= 1")
        _within("moe", "experts", self.experts, 1, MAX_MODEL_DIMENSION)
        _within("moe", "shared_experts", self.shared_experts, 0, MAX_MODEL_DIMENSION)
        _within("moe", "expert_params", self.expert_params, 1, MAX_PARAMS)
        _within("moe", "moe_layers", self.moe_layers, 1, MAX_MODEL_DIMENSION)

    @property
    def routed_params(self) -> float:
        """Parameters of every routed expert in every MoE layer."""
        return self.experts * self.moe_layers * self.expert_params  # E experts × L_moe layers × params each


@dataclass(frozen=True, slots=True, kw_only=True)
class MlaSpec:
    """Multi-head latent attention: the KV cache stores a compressed latent plus a RoPE key."""

    kv_lora_rank: int
    rope_head_dim: int

    def __post_init__(self) -> None:
        _require(self.kv_lora_rank >= 1, "mla.kv_lora_rank must be >= 1")
        _require(self.rope_head_dim >= 0, "mla.rope_head_dim must be >= 0")
        _within("mla", "kv_lora_rank", self.kv_lora_rank, 1, MAX_MODEL_DIMENSION)
        _within("mla", "rope_head_dim", self.rope_head_dim, 0, MAX_MODEL_DIMENSION)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A transformer's published shape (model card / config.json)."""

    slug: str
    params_total: float
    params_active: float
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int = 0
    vocab_size: int = 0
    max_context_tokens: int = 4096
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None

    def __post_init__(self) -> None:
        _require(self.params_total > 0, f"{self.slug}: params_total must be positive")
        _require(
            0 < self.params_active <= self.params_total,
            f"{self.slug}: params_active must be in (0, params_total]",
        )
        for name in ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "max_context_tokens"):
            _require(getattr(self, name) >= 1, f"{self.slug}: {name} must be >= 1", field=name)
        _within(self.slug, "params_total", self.params_total, 1, MAX_PARAMS)
        for name in ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim"):
            _within(self.slug, name, getattr(self, name), 1, MAX_MODEL_DIMENSION)
        _within(self.slug, "intermediate_size", self.intermediate_size, 0, MAX_INTERMEDIATE_SIZE)
        _within(self.slug, "vocab_size", self.vocab_size, 0, MAX_VOCAB_SIZE)
        _within(self.slug, "max_context_tokens", self.max_context_tokens, 1, MAX_CONTEXT_TOKENS)
        _require(
            self.attention_heads % self.kv_heads == 0,
            f"{self.slug}: kv_heads ({self.kv_heads}) must divide attention_heads ({self.attention_heads})",
            field="kv_heads",
        )
        if self.moe is not None:
            _require(
                self.moe.routed_params < self.params_total,
                f"{self.slug}: routed expert params exceed params_total",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantSpec:
    """A numeric format for weights or KV cache.

    `weight_bytes_per_param` includes scale overhead (grouped int4/fp4); `element_bytes` is one
    stored value with no scales, and is what a KV-cache entry of this format costs.
    `compute_dtype` names the GPU peak the matrix multiplies run at (W4A16 computes in fp16).
    """

    slug: str
    weight_bytes_per_param: float
    element_bytes: float
    compute_dtype: str
    kv_cache_dtypes: tuple[str, ...] = ()
    min_architecture: str | None = None

    def __post_init__(self) -> None:
        _require(self.weight_bytes_per_param > 0, f"{self.slug}: weight_bytes_per_param must be positive")
        _require(self.element_bytes > 0, f"{self.slug}: element_bytes must be positive")
        for name in ("weight_bytes_per_param", "element_bytes"):
            _within(self.slug, name, getattr(self, name), MIN_BYTES_PER_VALUE, MAX_BYTES_PER_VALUE)
        _require(self.compute_dtype in DATATYPES, f"{self.slug}: unknown compute dtype {self.compute_dtype!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Precision:
    """Weights and KV cache formats chosen independently."""

    weights: QuantSpec
    kv_cache: QuantSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceTypeSpec:
    """A cloud instance type as a plan buys it: `gpus` GPUs of type `gpu` (a GPU slug), of which
    `nvlink_domain` share one NVLink/Infinity-Fabric domain, sold whole at `usd_per_hour` per
    instance-hour by `provider`. A replica of tensor-parallel degree tp fits ⌊gpus / tp⌋ times
    into one instance when tp ≤ nvlink_domain; the other GPUs are stranded."""

    provider: str
    name: str
    gpu: str
    gpus: int
    nvlink_domain: int
    usd_per_hour: float
    region: str = ""

    def __post_init__(self) -> None:
        _require(self.gpus >= 1, f"instance type {self.name}: gpus must be >= 1, got {self.gpus}")
        _require(
            1 <= self.nvlink_domain <= self.gpus,
            f"instance type {self.name}: nvlink_domain must be within 1..gpus, got {self.nvlink_domain}",
        )
        _require(self.usd_per_hour > 0, f"instance type {self.name}: usd_per_hour must be > 0, got {self.usd_per_hour}")

    def replicas_per_instance(self, tp: int) -> int:
        """Whole replicas of tp GPUs one instance holds (0 when tp exceeds the NVLink domain)."""
        return self.gpus // tp if tp <= self.nvlink_domain else 0
