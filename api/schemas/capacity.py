"""Bodies of POST /v1/capacity: given hardware (one GPU type, a GPU count), a workload's shape and
SLOs in; the largest request rate it sustains, the configuration that reaches it, what binds,
the per-replica ρ–latency curve and (with `verify`) the simulator's steps out.

Times at the edge are milliseconds (`ttft_ms`, `tpot_ms`) and seconds for end-to-end (`e2e_s`), as
in /v1/plans; rates are requests per second over the whole deployment unless named per replica.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from api.schemas.catalog import Slug
from api.schemas.plan_response import EngineRead
from api.schemas.plan_result import PrefixCachingRead, SpeculativeRead
from api.schemas.plans import OneEngineSpec, PlanPin, PlanPrecision, PlanSlo
from api.schemas.workload import WorkloadShape
from planner.capacity import CapacityResult
from planner.units import MS_PER_S


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CapacityWorkloadShape(WorkloadShape):
    """The traffic's shape without its rate (the rate is what is asked for). With `prefix_reuse` the aggregated
    capacity plans a prefix cache (docs/prefix-caching.md); separate pools do not take it (a 422). With
    `prefix_reuse.sessions`, whose hit rate depends on the rate, the answer is the largest rate at which the
    hardware holds that rate with the hits the session model gives at it (docs/capacity-benchmark.md)."""


class CapacityPin(PlanPin):
    """POST /v1/plans' pin. pp as in a plan (1, 2, 4 or 8): the aggregated capacity searches pipeline stages
    where no node holds the model (GPU mode, no prefix cache); separate pools and whole instances refuse pp > 1."""

    @field_validator("ep")
    @classmethod
    def _no_expert_parallel(cls, ep: int | None) -> int | None:
        if ep is not None and ep > 1:
            raise ValueError(f"the capacity search does not offer expert parallelism yet (ep 1 only), got ep {ep}")
        return ep


class CapacityConstraints(_Input):
    """Pins on the configuration searched (as POST /v1/plans' constraints.pin)."""

    pin: CapacityPin | None = Field(
        default=None,
        description="Fix gpu (must be the request's), tp, pp (1, 2, 4 or 8; not with instances, a prefix cache or separate pools), replicas (at most what the hardware holds), batch_limit, "
        "chunk_tokens (null: no chunking), precision, draft_tokens, acceptance_rate or draft_model (a catalog model drafting "
        "instead of a head; these three with speculative auto or on) or engine (the GPU at its engine profile, docs/engines.md).",
    )
    speculative: Literal["auto", "off", "on"] = Field(
        default="off",
        description="Speculative decoding as POST /v1/plans takes it: `auto` sizes every configuration with and without the "
        "model's draft head (EAGLE, or MTP where the model ships it; pin.draft_model's catalog model instead of a head; at "
        "draft lengths 2 and 5 or pin.draft_tokens) and the largest capacity wins; `on` only with it (a 422 where no head can be costed); `off` (the default) never. "
        "`speculative` in the answer says which draft the configuration runs.",
    )
    n_plus_one: bool = Field(
        default=False,
        description="Separate pools only: each pool keeps a spare replica (its GPUs counted in `gpus`) and the capacity is "
        "what the pools sustain with the spares lost, as POST /v1/plans' pools count N+1 (`spare_replicas`). The "
        "aggregated capacity does not take it yet: 422 with topology `aggregated`; with `any` the aggregated answer is "
        "then the alternative, with that reason.",
    )
    topology: Literal["aggregated", "disaggregated", "any"] = Field(
        default="aggregated",
        description="`aggregated` (the default): every replica prefills and decodes. `disaggregated`: the largest rate a "
        "prefill pool of P GPUs and a decode pool of the other gpus − P sustain, P searched (docs/disaggregation.md); the "
        "answer's `disaggregation` section gives the pools, the P:D split and which pool binds. `any`: both, the larger "
        "capacity answered and `disaggregation.gain_fraction` says by how much. Separate pools take the gpu (the request's), "
        "precision, tp, batch_limit (the decode pool's), pp 1 and engine pins, an E2E target and `n_plus_one`, as POST "
        "/v1/plans' pools do, and `verify` simulates the pools; instances, a pinned replicas or chunk_tokens and speculative `on` "
        "are refused with a 422 (with `any` the pools are then the alternative, with the reason).",
    )


class CapacityRequest(_Input):
    """How much traffic `gpus` GPUs of type `gpu` (or `instances` whole instances of `instance_type`)
    serving `model` hold within `slo`."""

    model: Slug = Field(description="Model to serve (a catalog slug).", examples=["llama-3.1-8b"])
    gpu: Slug | None = Field(
        default=None,
        description="GPU type (a catalog slug); with `instance_type` it defaults to the instance's GPU.",
        examples=["h100-sxm"],
    )
    gpus: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="GPUs available; replicas = gpus // tp, the rest stay idle. Give this or `instances` + `instance_type`.",
        examples=[16],
    )
    instances: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="Whole instances of `instance_type` (with `provider`): gpus = instances × the instance's GPUs, and no "
        "replica straddles two instances: replicas = instances × ⌊GPUs per instance / tp⌋, tp within its NVLink domain.",
    )
    instance_type: Slug | None = Field(
        default=None, description="Instance type name at `provider` (GET /v1/instance-types), e.g. p5.48xlarge at aws."
    )
    constraints: CapacityConstraints = Field(default_factory=CapacityConstraints)
    workload: CapacityWorkloadShape
    slo: PlanSlo
    engine: OneEngineSpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Serving engine the GPU is evaluated on, optionally naming its release generation (`vllm@0.11`; "
        "`trt-llm@all`: pooled over releases; bare: its newest generation with a profile of its own): its per (GPU, "
        "engine, generation) profile and low-precision factors, or the documented fallback (docs/engines.md; the "
        "answer's `engine` says which). A generation no profile of the engine has is a 422 naming the known ones. With "
        "constraints.pin.engine the pin must match it (a bare pin matches every generation of its engine).",
    )
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
        if (self.gpus is None) == (self.instances is None):
            raise ValueError("give exactly one of gpus and instances (with instance_type)")
        if (self.instances is None) != (self.instance_type is None):
            raise ValueError("instances and instance_type go together")
        if self.gpu is None and self.instance_type is None:
            raise ValueError("gpu is required unless instance_type names it")
        if self.tp is not None and self.gpus is not None and self.tp > self.gpus:
            raise ValueError(f"tp ({self.tp}) cannot exceed gpus ({self.gpus})")
        if self.chunk_tokens is not None and self.batch_limit is not None and self.chunk_tokens <= self.batch_limit:
            raise ValueError(f"chunk_tokens ({self.chunk_tokens}) must exceed batch_limit ({self.batch_limit})")
        pin = self.constraints.pin
        if pin is not None and self.constraints.speculative == "off":
            for member in ("draft_tokens", "acceptance_rate", "draft_model"):
                if getattr(pin, member) is not None:
                    raise ValueError(f"constraints.pin.{member} needs constraints.speculative auto or on")
        if pin is not None:
            for member in ("gpu", "tp", "batch_limit", "chunk_tokens", "precision"):
                top, pinned = getattr(self, member), getattr(pin, member)
                if member in pin.model_fields_set and top is not None and top != pinned:
                    raise ValueError(f"constraints.pin.{member} ({pinned}) contradicts {member} ({top}): give one of them")
        return self

    def pinned(self) -> PlanPin:
        """The top-level pins (tp, batch_limit, chunk_tokens, precision) and constraints.pin as one pin."""
        pin = self.constraints.pin or PlanPin()
        merged = {m: getattr(self, m) for m in ("tp", "batch_limit", "chunk_tokens", "precision") if getattr(self, m) is not None}
        merged.update({member: getattr(pin, member) for member in pin.model_fields_set})
        return PlanPin(**merged)


class CapacityPrecision(BaseModel):
    weights: str
    kv_cache: str


class CapacityConfigurationRead(BaseModel):
    gpu: str
    tp: int
    pp: int = Field(
        default=1,
        description="Pipeline-parallel stages per replica: a replica is tp × pp GPUs (searched where no node holds the model).",
    )
    replicas: int = Field(description="gpus // (tp × pp), or instances × ⌊GPUs per instance / tp⌋; a pinned count when given.")
    gpus_used: int = Field(description="replicas × tp × pp.")
    precision: CapacityPrecision
    batch_limit: int = Field(description="vLLM max_num_seqs.")
    chunk_tokens: int | None = Field(description="vLLM max_num_batched_tokens with chunked prefill; null = no chunking.")
    instance_type: str | None = Field(default=None, description="The instance type, when the hardware is given as instances.")
    instances: int | None = None
    gpus_per_instance: int | None = None
    stranded_gpus: int | None = Field(default=None, description="instances × GPUs per instance − gpus_used.")
    engine: str | None = Field(
        default=None,
        description="The engine whose profile the GPU was evaluated at (request `engine` or constraints.pin.engine, without "
        "its generation: the deploy target; the top-level `engine` says which profile, docs/engines.md).",
    )


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


class CapacityPoolRead(BaseModel):
    """One pool of a disaggregated answer, sized by planner/plan_disagg.py at the capacity's rate."""

    role: Literal["prefill", "decode"]
    gpu: str
    tp: int
    pp: int = Field(default=1, description="Always 1 (capacity of given hardware does not search pipeline stages).")
    replicas: int
    gpus: int = Field(description="replicas × tp.")
    batch_limit: int | None = Field(description="The decode pool's vLLM max_num_seqs; null for prefill.")
    chunk_tokens: int | None = Field(description="The prefill pool's token budget per step; null for decode.")
    precision: CapacityPrecision
    rho: float = Field(description="Prefill: λE[S]/c; decode: mean batch over slots, at the capacity's rate.")
    binding: str = Field(description="What set this pool's replicas at the capacity's rate (docs/disaggregation.md).")
    spare_replicas: int = Field(
        default=0, description="Replicas kept for constraints.n_plus_one (in `replicas`; the capacity is without them)."
    )


class CapacityPoolsVerifyStep(BaseModel):
    """One simulation of the pools (planner/simulator_disagg.py) at a whole-deployment rate."""

    arrival_rate_rps: float
    ttft_ms: float = Field(description="Simulated at slo.percentile.")
    tpot_ms: float = Field(description="Simulated at slo.percentile.")
    e2e_s: float = Field(description="Simulated at slo.percentile.")
    misses: list[str]
    meets_slo: bool
    requests_simulated: int


class CapacityAlternative(BaseModel):
    topology: Literal["aggregated", "disaggregated"]
    max_arrival_rate_rps: float | None = Field(description="The other topology's capacity; null when it has none.")
    reason: str


class CapacityDisaggregation(BaseModel):
    """Separate prefill and decode pools on the request's GPUs (planner/capacity_disagg.py)."""

    requested: Literal["disaggregated", "any"]
    chosen: Literal["aggregated", "disaggregated"]
    why: str
    gain_fraction: float | None = Field(
        description="The chosen topology's capacity over the other's, minus 1; null when the other has none."
    )
    max_arrival_rate_rps: float | None = Field(
        description="The pools' capacity: the simulator's agreed rate with verify, else the queueing model's; null when none serve."
    )
    analytic_arrival_rate_rps: float | None = Field(description="The pools' capacity by the queueing model (Λ).")
    verification: list[CapacityPoolsVerifyStep] | None = Field(
        description="With verify: the pools simulated at Λ, then 10 % lower until the simulator agrees (the last step)."
    )
    unsustained_arrival_rate_rps: float | None = Field(
        description="The first rate found beyond it (within 1 %): no prefill and decode pools within the GPUs sustain it."
    )
    pools: list[CapacityPoolRead] = Field(description="Prefill then decode; empty when no pools serve.")
    prefill_gpus: int | None = Field(description="P, the prefill pool's GPUs.")
    decode_gpus: int | None = Field(description="The decode pool's GPUs.")
    gpus_idle: int | None = Field(description="gpus − P − decode GPUs: what neither pool needs at the capacity's rate.")
    ratio: str | None = Field(description="xPyD: prefill replicas P, decode replicas D.", examples=["1P1D"])
    binding: Literal["prefill", "decode", "both"] | None = Field(
        description="The pool(s) that miss their share of the SLOs at the next rate (unsustained_arrival_rate_rps)."
    )
    ttft_prefill_fraction: float | None = Field(description="The TTFT target's share given to the prefill pool.")
    predicted_ttft_ms: float | None = Field(description="At the pools' capacity, at slo.percentile.")
    predicted_tpot_ms: float | None
    predicted_e2e_s: float | None
    link: str | None = Field(description="The link the KV cache crosses (pools in different nodes).")
    plans_evaluated: int = Field(description="Rates at which the pools' planner was run (bracket and bisection).")
    alternative: CapacityAlternative | None = Field(description="The other topology, with `any`; null otherwise.")


class CapacityCost(BaseModel):
    usd_per_hour: float | None = Field(
        description="gpus_used × on-demand USD per GPU-hour, or instances × the instance's price; null when unpriced."
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
    configuration: CapacityConfigurationRead | None = Field(
        description="The aggregated configuration; null when separate pools are answered (see `disaggregation`)."
    )
    max_rps_per_replica: float | None = Field(
        description="μ: the largest per-replica rate meeting every SLO (queueing model); null for separate pools."
    )
    saturation_rps_per_replica: float | None
    utilisation: float | None = Field(description="μ / saturation; null for separate pools.")
    binding: Literal["ttft", "tpot", "e2e", "saturation"] | None = Field(
        description="The SLO metric at its target at μ, or `saturation` when every SLO holds up to 99 % of saturation; "
        "null for separate pools (disaggregation.binding says which pool binds)."
    )
    per_replica_arrival_cv: float | None = Field(
        description="Inter-arrival CV one replica sees: √(c²/r + (r − 1)/r) under a random split."
    )
    curve: list[CapacityCurvePoint] = Field(description="Per-replica ρ–latency curve up to μ; empty for separate pools.")
    cost: CapacityCost
    verification: list[CapacityVerifyStep] | None = Field(
        description="Each simulated rate, last the one agreed; null without verify."
    )
    configurations_evaluated: int = Field(description="Configurations whose μ was root-found (the rest were bounded out).")
    configurations_considered: int
    speculative: SpeculativeRead | None = Field(
        default=None, description="The speculative decoding the configuration runs (constraints.speculative); null without."
    )
    prefix_caching: PrefixCachingRead | None = Field(
        default=None,
        description="With workload.prefix_reuse: the hit rate, the KV tokens each replica gives the cache and the routing "
        "the capacity assumes (`as_measured` for a measured hit rate; cache_tokens 0 and hit_rate 0 when no cache raises "
        "the capacity); null without prefix_reuse.",
    )
    max_arrival_rate_rps_without_cache: float | None = Field(
        default=None,
        description="With workload.prefix_reuse: the queueing model's capacity of the same hardware without a cache "
        "(null without prefix_reuse, or when no configuration meets the SLOs without one).",
    )
    topology: Literal["aggregated", "disaggregated"] = Field(
        default="aggregated", description="The topology answered (constraints.topology `any` answers the larger capacity)."
    )
    disaggregation: CapacityDisaggregation | None = Field(
        default=None, description="The separate pools' capacity; null unless constraints.topology is disaggregated or any."
    )
    engine: EngineRead | None = Field(
        default=None,
        description="The engine the GPU was priced on (request `engine` or constraints.pin.engine): its profile, release "
        "generation (`profile.generation`) and why; null when the request named none.",
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * MS_PER_S


def capacity_response(result: CapacityResult, cost: CapacityCost, engine: EngineRead | None = None) -> CapacityResponse:
    """The aggregated answer; `engine` is the `engine` section (api/inputs.py engine_read) when an engine was asked for."""
    c = result.configuration
    return CapacityResponse(
        max_arrival_rate_rps=result.max_arrival_rate_rps,
        analytic_arrival_rate_rps=result.analytic_arrival_rate_rps,
        output_tokens_per_s=result.output_tokens_per_s,
        configuration=CapacityConfigurationRead(
            gpu=c.gpu,
            tp=c.tp,
            pp=c.pp,
            replicas=c.replicas,
            gpus_used=c.gpus_used,
            precision=CapacityPrecision(weights=c.weights_precision, kv_cache=c.kv_precision),
            batch_limit=c.batch_limit,
            chunk_tokens=c.chunk_tokens,
            instance_type=c.instance_type,
            instances=c.instances,
            gpus_per_instance=c.gpus_per_instance,
            stranded_gpus=None
            if c.instances is None or c.gpus_per_instance is None
            else c.instances * c.gpus_per_instance - c.gpus_used,
            engine=None if engine is None else engine.profile.engine,
        ),
        engine=engine,
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
        speculative=None if result.speculative is None else SpeculativeRead.model_validate(result.speculative),
        prefix_caching=None if result.prefix_caching is None else PrefixCachingRead.model_validate(result.prefix_caching),
        max_arrival_rate_rps_without_cache=result.max_arrival_rate_rps_without_cache,
    )
