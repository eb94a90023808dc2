"""Request and response bodies of the catalog endpoints (`/v1/gpus`, `/v1/models`, `/v1/quantizations`).

Field names are the catalog record format (docs/TEAM-CONTRACTS.md); units are in the names and
the descriptions (GB = 1e9 bytes, TB/s = 1e12 B/s, TFLOP/s = 1e12 FLOP/s, dense, no sparsity).
Families per resource:

- `<Kind>Create`: POST body, the whole record including `slug`.
- `<Kind>Update`: PUT body, a full replacement of every member except `slug` (the path names it).
- `<Kind>Patch`: PATCH body, only the members to change; a nested block (`peak_tflops`,
  `price_usd_per_hour`, `efficiency`, `moe`, `mla`) is replaced as a whole, and an explicit
  null clears an optional member.
- `<Kind>Read`: a stored record plus `version` (the ETag), `created_at`, `updated_at`.
- `<Kind>Page`: a list response `{items, total, limit, offset}`.

Input bodies reject unknown members (a typo, or a datatype outside the seven), and check what
one record can check by itself; the catalog re-checks the merged record on every write.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator, model_validator

from catalog.records import CHECKPOINT_PATTERN, ENGINE_NAME_PATTERN, ENGINES
from planner import specs
from planner.confidence import GRADES
from planner.specs import ARCHITECTURE_GENERATIONS
from planner.units import GB

Slug = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$",
        description="Stable identifier: lowercase letters, digits, '.', '_', '-'; at most 64 characters.",
        examples=["h100-sxm"],
    ),
]
Name = Annotated[str, Field(min_length=1, max_length=200, description="Human-readable name.")]
#: Longest free text a record carries (`source`, notes): a citation with its URL and a sentence on
#: how values were derived fits in far less; a 10 MB string is not a source, and every list returns it.
MAX_TEXT_LENGTH = 4_000
Source = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_TEXT_LENGTH,
        description="Where the numbers come from: datasheet or model-card URL / title; at most 4,000 characters.",
    ),
]
OptionalText = Annotated[str | None, Field(default=None, max_length=MAX_TEXT_LENGTH)]

# Bounds in the record's units, from planner/specs.py's SI bounds (docs/reliability.md "Bounds" says why each).
MEMORY_GB = (specs.MIN_MEMORY_BYTES / GB, specs.MAX_MEMORY_BYTES / GB)  # 1 – 4,096 GB
BANDWIDTH_GB_PER_S = (specs.MIN_BANDWIDTH_BYTES_PER_S / GB, specs.MAX_BANDWIDTH_BYTES_PER_S / GB)  # 1 – 1e8 GB/s
INTERCONNECT_GB_PER_S = (specs.MIN_INTERCONNECT_BYTES_PER_S / GB, specs.MAX_INTERCONNECT_BYTES_PER_S / GB)  # 0.1 – 1e5 GB/s
TFLOPS = (specs.MIN_PEAK_FLOPS_PER_S / 1e12, specs.MAX_PEAK_FLOPS_PER_S / 1e12)  # 0.001 – 1e6 TFLOP/s
MAX_INTERCONNECT_LATENCY_US = specs.MAX_INTERCONNECT_LATENCY_S * 1e6  # 10,000 µs
#: The scale-out NIC share per GPU in Gb/s: the interconnect's range in bits (0.8 – 800,000 Gb/s).
SCALE_OUT_GBIT_PER_S = (specs.MIN_INTERCONNECT_BYTES_PER_S * 8 / GB, specs.MAX_INTERCONNECT_BYTES_PER_S * 8 / GB)
MAX_STEP_OVERHEAD_MS = specs.MAX_STEP_OVERHEAD_S * 1e3  # 10,000 ms
MAX_PRICE = specs.MAX_PRICE_USD_PER_HOUR  # $1,000 per GPU-hour
Engine = Literal[ENGINES]  # type: ignore[valid-type]
EngineName = Annotated[str, Field(pattern=ENGINE_NAME_PATTERN.pattern, description="The engine's own name for the scheme.")]
Datatype = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"]
if TYPE_CHECKING:
    Architecture = str  # the generations are catalog data (ARCHITECTURE_GENERATIONS), which a static Literal cannot name
else:
    Architecture = Literal[tuple(g for gs in ARCHITECTURE_GENERATIONS.values() for g in gs)]

_Tflops = Annotated[
    float | None,
    Field(
        default=None,
        ge=TFLOPS[0],
        le=TFLOPS[1],
        description="Dense peak in TFLOP/s (1e12 FLOP/s), 0.001 (one old CPU core) to 1,000,000 (8× Cerebras WSE-3); "
        "null where the chip has no such unit.",
    ),
]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class PeakTflops(_Input):
    """Dense peak throughput per datatype in TFLOP/s (no sparsity); null where the chip lacks the datatype."""

    fp32: _Tflops = None
    tf32: _Tflops = None
    bf16: _Tflops = None
    fp16: _Tflops = None
    fp8: _Tflops = None
    int8: _Tflops = None
    fp4: _Tflops = None

    @model_validator(mode="after")
    def _some_peak(self) -> Self:
        if all(value is None for value in self.model_dump().values()):
            raise ValueError("peak_tflops needs a peak for at least one datatype")
        return self


class GpuPrice(_Input):
    """Deprecated: the price this GPU carried before prices had a table of their own (`/v1/prices`, one
    row per provider); kept and returned as written, but plans no longer read it."""

    on_demand: float = Field(ge=0, le=MAX_PRICE, description="On-demand price in USD per GPU-hour, at most 1,000.")
    reserved_1y: float | None = Field(
        default=None,
        ge=0,
        le=MAX_PRICE,
        description="Effective 1-year reserved price in USD per GPU-hour, at most 1,000; null if not offered.",
    )
    as_of: date | None = Field(default=None, strict=False, description="Date the prices were read (YYYY-MM-DD).")
    source: str | None = Field(
        default=None, max_length=MAX_TEXT_LENGTH, description="Price list the numbers come from; at most 4,000 characters."
    )


class CalibrationConfidence(_Input):
    """How far the calibrated efficiencies can be trusted: a grade and the evidence it was given for
    (docs/calibration.md states the rule; bench/confidence.py grades the reference GPUs)."""

    grade: Literal[GRADES] = Field(  # type: ignore[valid-type]
        description="low, medium or high. low: no published point of this GPU (carried over), efficiencies below the range "
        "other GPUs fit, no more points than fitted parameters, or out-of-sample error above 20 %; high: two or "
        "more independent sources and out-of-sample error within 10 %; medium otherwise.",
    )
    points: int = Field(ge=0, le=1_000_000, description="Published measurements the GPU's own fit used (0 when carried over).")
    sources: int = Field(ge=0, le=1_000_000, description="Distinct publications among those points.")
    out_of_sample_error: float | None = Field(
        default=None,
        ge=0,
        le=1_000,
        description="Median |predicted / measured − 1| of the GPU's points predicted by fits that never saw their source or "
        "their model (dimensionless, 0.1 = 10 %); null without points of its own.",
    )
    carried_over_from: Slug | None = Field(default=None, description="The GPU whose fitted efficiencies this one ships, if any.")
    below_usual_range: bool = Field(
        default=False, description="The fitted η lie below the range every other GPU fits (LOW CONFIDENCE)."
    )


class GpuEfficiency(_Input):
    """Calibrated fraction of the datasheet a serving engine reaches on this GPU (the roofline's η)."""

    memory: float = Field(gt=0, le=1, description="η_mem: achieved / datasheet memory bandwidth, in (0, 1].")
    compute: float = Field(gt=0, le=1, description="η_compute: achieved / datasheet peak FLOP/s, in (0, 1].")
    step_overhead_ms: float = Field(
        default=0.0,
        ge=0,
        le=MAX_STEP_OVERHEAD_MS,
        description="Fixed time added to every batching step, in milliseconds; at most 10,000 (1,000× any engine's scheduler overhead).",
    )
    memory_reserve_fraction: float = Field(
        default=0.0, ge=0, lt=1, description="Fraction of HBM unavailable to weights and KV cache, in [0, 1)."
    )
    memory_compute_overlap: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description=(
            "Dimensionless, in [0, 1]: how a step's memory time a and compute time b combine, "
            "max(a, b) + (1 − overlap) · min(a, b). 1 = fully overlapped (max of the two, the roofline), 0 = serial (their sum)."
        ),
    )
    source: str | None = Field(
        default=None,
        max_length=MAX_TEXT_LENGTH,
        description="Measurement or publication the efficiencies come from; at most 4,000 characters.",
    )
    confidence: CalibrationConfidence | None = Field(
        default=None, description="The calibration's grade and evidence; null: ungraded (planned as low)."
    )


class GpuFields(_Input):
    name: Name
    vendor: str = Field(min_length=1, max_length=32, description="Vendor, lowercase: nvidia, amd.", examples=["nvidia"])
    architecture: str = Field(
        min_length=1,
        max_length=32,
        description="Architecture generation, lowercase: ampere, ada, hopper, blackwell, cdna3, …",
        examples=["hopper"],
    )
    memory_gb: float = Field(
        ge=MEMORY_GB[0],
        le=MEMORY_GB[1],
        description="HBM/GDDR capacity per GPU in GB (1e9 bytes), 1 to 4,096 (14× the largest shipped, 288 GB).",
        examples=[80],
    )
    memory_bandwidth_gb_per_s: float = Field(
        ge=BANDWIDTH_GB_PER_S[0],
        le=BANDWIDTH_GB_PER_S[1],
        description="Memory bandwidth per GPU in GB/s (1e9 bytes/s), 1 to 100,000,000 (5× Cerebras WSE-3's on-wafer 21 PB/s).",
        examples=[3350],
    )
    peak_tflops: PeakTflops = Field(description="Dense peak TFLOP/s per datatype.")
    interconnect_gb_per_s: float = Field(
        ge=INTERCONNECT_GB_PER_S[0],
        le=INTERCONNECT_GB_PER_S[1],
        description="GPU-to-GPU bandwidth per GPU in GB/s (NVLink, Infinity Fabric, PCIe), one direction; 0.1 (1 Gbit/s Ethernet) "
        "to 100,000 (100× NVLink 5).",
        examples=[450],
    )
    interconnect_latency_us: float | None = Field(
        default=None,
        ge=0,
        le=MAX_INTERCONNECT_LATENCY_US,
        description="Latency of one all-reduce hop in microseconds, at most 10,000 (a round trip between data centres); "
        "null for the planner's default.",
    )
    gpus_per_node: int = Field(
        ge=1,
        le=specs.MAX_GPUS_PER_NODE,
        description="GPUs per node sharing the fast interconnect (the largest tensor-parallel group), 1 to 1,024.",
        examples=[8],
    )
    scale_out_gbit_per_s: float | None = Field(
        default=None,
        ge=SCALE_OUT_GBIT_PER_S[0],
        le=SCALE_OUT_GBIT_PER_S[1],
        description="Scale-out network between nodes per GPU in Gb/s (1e9 bits/s), one direction: the GPU's NIC, or the "
        "instance's network divided by its GPUs; the link a disaggregated plan's KV cache crosses between nodes. "
        "0.8 to 800,000; null for the planner's default (one ConnectX-7 NDR 400 Gb/s per GPU).",
        examples=[400],
    )
    scale_out_latency_us: float | None = Field(
        default=None,
        ge=0,
        le=MAX_INTERCONNECT_LATENCY_US,
        description="Latency of one transfer over the scale-out network in microseconds, at most 10,000; null for the "
        "planner's default (10 µs, RDMA).",
    )
    scale_out_source: str | None = Field(
        default=None, max_length=MAX_TEXT_LENGTH, description="Where the scale-out figures come from."
    )
    price_usd_per_hour: GpuPrice | None = Field(
        default=None, description="Deprecated: plans read the per-provider prices of /v1/prices; this block is kept as written."
    )
    efficiency: GpuEfficiency | None = Field(default=None, description="Calibrated efficiencies; null for the ideal roofline.")
    source: Source


class _Slugged(_Input):
    slug: Slug


class GpuCreate(GpuFields, _Slugged):
    """A new GPU type (POST /v1/gpus)."""


class GpuUpdate(GpuFields):
    """A full replacement of a GPU's members (PUT /v1/gpus/{slug}); the slug stays."""


class _Record(BaseModel):
    version: int = Field(ge=1, description="Row version; sent as the ETag, and expected back in If-Match.")
    created_at: datetime = Field(description="When the record was created (UTC).")
    updated_at: datetime = Field(description="When the record was last changed (UTC).")


class GpuRead(_Record, GpuCreate):
    """A stored GPU."""

    model_config = ConfigDict(extra="ignore", strict=False)


class MoeLayout(_Input):
    """Mixture-of-experts layout."""

    experts: int = Field(ge=1, le=specs.MAX_MODEL_DIMENSION, description="Routed experts per MoE layer, at most 2^20.")
    experts_per_token: int = Field(ge=1, le=specs.MAX_MODEL_DIMENSION, description="Routed experts each token activates (top-k).")
    shared_experts: int = Field(
        ge=0, le=specs.MAX_MODEL_DIMENSION, description="Always-active shared experts per MoE layer, at most 2^20."
    )
    expert_params: int = Field(
        ge=1, le=int(specs.MAX_PARAMS), description="Parameters of ONE routed expert in ONE MoE layer, at most 1e14."
    )
    moe_layers: int = Field(ge=1, le=specs.MAX_MODEL_DIMENSION, description="Layers with a MoE block.")

    @field_validator("experts_per_token")
    @classmethod
    def _k_at_most_experts(cls, value: int, info: ValidationInfo) -> int:
        experts = info.data.get("experts")
        if experts is not None and value > experts:
            raise ValueError(f"experts_per_token ({value}) must not exceed experts ({experts})")
        return value


class MlaLayout(_Input):
    """Multi-head latent attention: the KV cache stores a compressed latent plus a RoPE key."""

    kv_lora_rank: int = Field(
        ge=1, le=specs.MAX_MODEL_DIMENSION, description="Width of the compressed KV latent per token per layer, at most 2^20."
    )
    rope_head_dim: int = Field(
        ge=0, le=specs.MAX_MODEL_DIMENSION, description="Width of the decoupled RoPE key per token per layer, at most 2^20."
    )


class ModelFields(_Input):
    name: Name
    params_total: int = Field(
        ge=1,
        le=int(specs.MAX_PARAMS),
        description="Total parameters (all experts), at most 1e14 (50× the largest published).",
        examples=[70_000_000_000],
    )
    params_active: int = Field(
        ge=1,
        le=int(specs.MAX_PARAMS),
        description="Parameters active per token (dense models: = params_total).",
        examples=[70_000_000_000],
    )
    layers: int = Field(ge=1, le=specs.MAX_MODEL_DIMENSION, description="Transformer layers, at most 2^20.", examples=[80])
    hidden_size: int = Field(
        ge=1,
        le=specs.MAX_MODEL_DIMENSION,
        description="Model (residual stream) width, at most 2^20 (40× the widest published).",
        examples=[8192],
    )
    attention_heads: int = Field(
        ge=1, le=specs.MAX_MODEL_DIMENSION, description="Query heads per layer, at most 2^20.", examples=[64]
    )
    kv_heads: int = Field(
        ge=1,
        le=specs.MAX_MODEL_DIMENSION,
        description="Key/value heads per layer (GQA); must divide attention_heads.",
        examples=[8],
    )
    head_dim: int = Field(
        ge=1, le=specs.MAX_MODEL_DIMENSION, description="Width of one attention head, at most 2^20.", examples=[128]
    )
    intermediate_size: int = Field(
        ge=1,
        le=specs.MAX_INTERMEDIATE_SIZE,
        description="MLP hidden width (per expert for MoE models), at most 2^22.",
        examples=[28672],
    )
    vocab_size: int = Field(
        ge=1,
        le=specs.MAX_VOCAB_SIZE,
        description="Vocabulary size in tokens, at most 2^24 (64× the largest published).",
        examples=[32000],
    )
    max_context_tokens: int = Field(
        ge=1, le=specs.MAX_CONTEXT_TOKENS, description="Longest supported context in tokens, at most 10,000,000.", examples=[4096]
    )
    moe: MoeLayout | None = Field(default=None, description="Mixture-of-experts layout; null for dense models.")
    mla: MlaLayout | None = Field(default=None, description="Multi-head latent attention; null for standard attention.")
    checkpoint: str | None = Field(
        default=None,
        max_length=200,
        pattern=CHECKPOINT_PATTERN.pattern,
        description="Public checkpoint id (a Hugging Face repo id) the serving engines load; "
        "GET /v1/plans/{id}/deploy needs it. Null: none recorded.",
        examples=["meta-llama/Llama-3.1-8B-Instruct"],
    )
    source: Source

    @field_validator("params_active")
    @classmethod
    def _active_at_most_total(cls, value: int, info: ValidationInfo) -> int:
        total = info.data.get("params_total")
        if total is not None and value > total:
            raise ValueError(f"params_active ({value}) must not exceed params_total ({total})")
        return value

    @field_validator("kv_heads")
    @classmethod
    def _kv_heads_divide_heads(cls, value: int, info: ValidationInfo) -> int:
        heads = info.data.get("attention_heads")
        if heads is not None and heads % value != 0:
            raise ValueError(f"kv_heads ({value}) must divide attention_heads ({heads})")
        return value

    @field_validator("moe")
    @classmethod
    def _moe_within_model(cls, value: MoeLayout | None, info: ValidationInfo) -> MoeLayout | None:
        layers = info.data.get("layers")
        if value is not None and layers is not None and value.moe_layers > layers:
            raise ValueError(f"moe.moe_layers ({value.moe_layers}) must not exceed layers ({layers})")
        return value


class ModelCreate(ModelFields, _Slugged):
    """A new model (POST /v1/models)."""


class ModelUpdate(ModelFields):
    """A full replacement of a model's members (PUT /v1/models/{slug}); the slug stays."""


class ModelRead(_Record, ModelCreate):
    """A stored model."""

    model_config = ConfigDict(extra="ignore", strict=False)


class QuantizationFields(_Input):
    name: Name
    weight_bytes_per_param: float = Field(
        ge=specs.MIN_BYTES_PER_VALUE,
        le=specs.MAX_BYTES_PER_VALUE,
        description="Bytes per weight including scale overhead (INT4 group-128 AWQ: 0.53125), 1/16 (half a bit) to 16.",
        examples=[0.53125],
    )
    element_bytes: float = Field(
        ge=specs.MIN_BYTES_PER_VALUE,
        le=specs.MAX_BYTES_PER_VALUE,
        description="Bytes of one stored value without scales; what a KV-cache entry in this format costs; 1/16 to 16.",
        examples=[0.5],
    )
    compute_dtype: Datatype = Field(
        description="Datatype the matrix multiplies run in: the GPU peak that applies (W4A16 computes in fp16)."
    )
    kv_cache_dtypes: list[Slug] = Field(
        default_factory=list, description="Quantization slugs allowed for the KV cache with these weights."
    )
    min_architecture: Architecture | None = Field(
        default=None, description="Oldest architecture generation that runs it natively; null for any."
    )
    engine_names: dict[Engine, EngineName] | None = Field(
        default=None,
        description="Serving engine → the name that engine documents for this scheme (vLLM and SGLang `--quantization`, "
        "TensorRT-LLM QuantAlgo); null or a missing engine: none recorded (16-bit schemes need none).",
        examples=[{"vllm": "fp8", "sglang": "fp8", "trt-llm": "FP8"}],
    )
    source: Source

    @field_validator("element_bytes")
    @classmethod
    def _scales_never_negative(cls, value: float, info: ValidationInfo) -> float:
        weight_bytes = info.data.get("weight_bytes_per_param")
        if weight_bytes is not None and weight_bytes < value:
            raise ValueError(f"element_bytes ({value}) must not exceed weight_bytes_per_param ({weight_bytes})")
        return value

    @field_validator("kv_cache_dtypes")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("kv_cache_dtypes must not repeat a slug")
        return value


class QuantizationCreate(QuantizationFields, _Slugged):
    """A new quantization scheme (POST /v1/quantizations)."""


class QuantizationUpdate(QuantizationFields):
    """A full replacement of a scheme's members (PUT /v1/quantizations/{slug}); the slug stays."""


class QuantizationRead(_Record, QuantizationCreate):
    """A stored quantization scheme."""

    model_config = ConfigDict(extra="ignore", strict=False)


def _partial(model: type[BaseModel], name: str, doc: str) -> type[BaseModel]:
    """`model` with every member optional and without default: only the members sent are changed."""
    fields: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        # A type built at run time for pydantic: it is a value here, which only Any describes.
        annotation: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
        fields[field_name] = (annotation | None, Field(default=None, description=info.description))
    return create_model(name, __base__=_Input, __doc__=doc, __module__=__name__, **fields)


GpuPatch = _partial(
    GpuUpdate, "GpuPatch", "Members of a GPU to change (PATCH /v1/gpus/{slug}); nested blocks are replaced whole."
)
ModelPatch = _partial(
    ModelUpdate, "ModelPatch", "Members of a model to change (PATCH /v1/models/{slug}); `moe`/`mla` are replaced whole."
)
QuantizationPatch = _partial(
    QuantizationUpdate, "QuantizationPatch", "Members of a quantization scheme to change (PATCH /v1/quantizations/{slug})."
)

ItemT = TypeVar("ItemT")


class Page(BaseModel, Generic[ItemT]):
    """One page of a list, in stored order (by slug)."""

    items: list[ItemT] = Field(description="The records on this page.")
    total: int = Field(ge=0, description="Records matching the filters, on all pages.")
    limit: int = Field(ge=1, description="Page size requested.")
    offset: int = Field(ge=0, description="Records skipped before this page.")


class GpuPage(Page[GpuRead]):
    """A page of GPUs."""


class ModelPage(Page[ModelRead]):
    """A page of models."""


class QuantizationPage(Page[QuantizationRead]):
    """A page of quantization schemes."""


def record(body: BaseModel, **identity: str) -> dict[str, Any]:
    """The catalog record (JSON types: dates as YYYY-MM-DD) of a Create/Update body; `identity`
    adds the slug the path names."""
    return {**identity, **body.model_dump(mode="json")}


def changes(body: BaseModel) -> dict[str, Any]:
    """Only the members a Patch body sent, as catalog record members."""
    return body.model_dump(mode="json", exclude_unset=True)
