"""Bodies of POST /v1/capacity: given hardware (one GPU type, a GPU count), a workload's shape and
SLOs in; the largest request rate it sustains, the configuration that reaches it, what binds,
the per-replica ρ–latency curve and (with `verify`) the simulator's steps out.

Times at the edge are milliseconds (`ttft_ms`, `tpot_ms`) and seconds for end-to-end (`e2e_s`), as
in /v1/plans; rates are requests per second over the whole deployment unless named per replica.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.schemas.catalog import Slug
from api.schemas.plans import MS_PER_S, PlanPrecision, PlanSlo
from api.schemas.workload import WorkloadShape
from planner.capacity import CapacityResult


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CapacityWorkloadShape(WorkloadShape):
    """The traffic's shape without its rate (the rate is what is asked for)."""


class CapacityRequest(_Input):
    """How much traffic `gpus` GPUs of type `gpu` serving `model` hold within `slo`."""

    model: Slug = Field(description="Model to serve (a catalog slug).", examples=["llama-3.1-8b"])
    gpu: Slug = Field(description="GPU type (a catalog slug).", examples=["h100-sxm"])
    gpus: int = Field(ge=1, le=100_000, description="GPUs available; replicas = gpus // tp, the rest stay idle.", examples=[16])
    workload: CapacityWorkloadShape
    slo: PlanSlo
    tp: int | None = Field(
        default=None, ge=1, le=1024, description="Pin the tensor-parallel degree; default searched (1, 2, 4, 8 up to `gpus`)."
    )
    batch_limit: int | None = Field(
        default=None, ge=1, le=65_536, description="Pin the batch limit (vLLM max_num_seqs); default searched."
    )
    chunk_tokens: int | None = Field(
        default=None,
        ge=2,
        le=10_000_000,
        description="Pin the chunked-prefill budget (vLLM max_num_batched_tokens); default searched, including no chunking.",
    )
    precision: PlanPrecision | None = Field(
        default=None, description="Pin weights and KV-cache precision; default bf16/bf16 and fp8/fp8."
    )
    efficiency_profile: Slug = Field(
        default="calibrated",
        description="`calibrated` (the GPU's catalog calibration), `ideal` (pure roofline) or a stored profile name.",
    )
    provider: Slug | None = Field(
        default=None,
        description="Whose price to report the hardware's cost at; default the service's default provider. The answer "
        "does not depend on it; without a price the cost is null.",
    )
    verify: bool = Field(
        default=False, description="Simulate at the answer's rate, lowering it by 10 % steps until the simulator agrees."
    )

    @model_validator(mode="after")
    def _consistent_pins(self) -> Self:
        if self.tp is not None and self.tp > self.gpus:
            raise ValueError(f"tp ({self.tp}) cannot exceed gpus ({self.gpus})")
        if self.chunk_tokens is not None and self.batch_limit is not None and self.chunk_tokens <= self.batch_limit:
            raise ValueError(f"chunk_tokens ({self.chunk_tokens}) must exceed batch_limit ({self.batch_limit})")
        return self


class CapacityPrecision(BaseModel):
    weights: str
    kv_cache: str


class CapacityConfigurationRead(BaseModel):
    gpu: str
    tp: int
    replicas: int = Field(description="gpus // tp.")
    gpus_used: int = Field(description="replicas × tp.")
    precision: CapacityPrecision
    batch_limit: int = Field(description="vLLM max_num_seqs.")
    chunk_tokens: int | None = Field(description="vLLM max_num_batched_tokens with chunked prefill; null = no chunking.")


class CapacityCurvePoint(BaseModel):
    """One replica's latencies at `slo.percentile` at one utilisation; null where the queue is unstable."""

    utilisation: float = Field(description="Per-replica rate / per-replica saturation rate (ρ).")
    arrival_rate_rps: float = Field(description="Per-replica rate.")
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_s: float | None
    meets_slo: bool


class CapacityVerifyStep(BaseModel):
    """One simulation at a rate: one replica at its share of the random split."""

    arrival_rate_rps: float = Field(description="Whole deployment.")
    per_replica_rate_rps: float
    ttft_ms: float = Field(description="Simulated at slo.percentile.")
    tpot_ms: float = Field(description="Simulated at slo.percentile.")
    e2e_s: float = Field(description="Simulated at slo.percentile.")
    stable: bool
    misses: list[str]
    meets_slo: bool
    requests_simulated: int


class CapacityCost(BaseModel):
    usd_per_hour: float | None = Field(
        description="gpus_used × on-demand USD per GPU-hour; null when the provider does not price the GPU."
    )
    price_usd_per_gpu_hour: float | None
    provider: str
    notes: list[str] = Field(default_factory=list)


class CapacityResponse(BaseModel):
    max_arrival_rate_rps: float = Field(
        description="Largest sustainable request rate within the SLOs (the simulator's agreed rate with verify)."
    )
    analytic_arrival_rate_rps: float = Field(description="replicas × max_rps_per_replica from the queueing model.")
    output_tokens_per_s: float = Field(description="max_arrival_rate_rps × mean output tokens.")
    configuration: CapacityConfigurationRead
    max_rps_per_replica: float = Field(description="μ: the largest per-replica rate meeting every SLO (queueing model).")
    saturation_rps_per_replica: float
    utilisation: float = Field(description="μ / saturation.")
    binding: Literal["ttft", "tpot", "e2e", "saturation"] = Field(
        description="The SLO metric at its target at μ, or `saturation` when every SLO holds up to 99 % of saturation."
    )
    per_replica_arrival_cv: float = Field(
        description="Inter-arrival CV one replica sees: √(c²/r + (r − 1)/r) under a random split."
    )
    curve: list[CapacityCurvePoint] = Field(description="Per-replica ρ–latency curve up to μ.")
    cost: CapacityCost
    verification: list[CapacityVerifyStep] | None = Field(
        description="Each simulated rate, last the one agreed; null without verify."
    )
    configurations_evaluated: int = Field(description="Configurations whose μ was root-found (the rest were bounded out).")
    configurations_considered: int


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * MS_PER_S


def capacity_response(result: CapacityResult, cost: CapacityCost) -> CapacityResponse:
    c = result.configuration
    return CapacityResponse(
        max_arrival_rate_rps=result.max_arrival_rate_rps,
        analytic_arrival_rate_rps=result.analytic_arrival_rate_rps,
        output_tokens_per_s=result.output_tokens_per_s,
        configuration=CapacityConfigurationRead(
            gpu=c.gpu,
            tp=c.tp,
            replicas=c.replicas,
            gpus_used=c.gpus_used,
            precision=CapacityPrecision(weights=c.weights_precision, kv_cache=c.kv_precision),
            batch_limit=c.batch_limit,
            chunk_tokens=c.chunk_tokens,
        ),
        max_rps_per_replica=result.max_rps_per_replica,
        saturation_rps_per_replica=result.saturation_rps_per_replica,
        utilisation=result.utilisation,
        binding=result.binding,  # type: ignore[arg-type]
        per_replica_arrival_cv=result.per_replica_arrival_cv,
        curve=[
            CapacityCurvePoint(
                utilisation=p.utilisation,
                arrival_rate_rps=p.arrival_rate_rps,
                ttft_ms=_ms(p.ttft_s),
                tpot_ms=_ms(p.tpot_s),
                e2e_s=p.e2e_s,
                meets_slo=p.meets_slo,
            )
            for p in result.curve
        ],
        cost=cost,
        verification=None
        if result.verification is None
        else [
            CapacityVerifyStep(
                arrival_rate_rps=s.arrival_rate_rps,
                per_replica_rate_rps=s.per_replica_rate_rps,
                ttft_ms=s.ttft_s * MS_PER_S,
                tpot_ms=s.tpot_s * MS_PER_S,
                e2e_s=s.e2e_s,
                stable=s.stable,
                misses=list(s.misses),
                meets_slo=s.meets_slo,
                requests_simulated=s.requests_simulated,
            )
            for s in result.verification
        ],
        configurations_evaluated=result.configurations_evaluated,
        configurations_considered=result.configurations_considered,
    )
