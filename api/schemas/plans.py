"""Body of POST /v1/plans: a model, its traffic, its SLOs and the limits in (the plan that comes
out is api/schemas/plan_response.py).

Times at the edge are milliseconds (`ttft_ms`, `tpot_ms`) and seconds for end-to-end (`e2e_s`),
as SLOs are usually stated; the justification keeps the planner's SI names (`*_s`, `*_bytes`,
`*_rps`), the unit in every name, so a person can redo each number with the formulas it quotes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from api.schemas.catalog import Slug
from api.schemas.prices import PriceOverride
from api.schemas.workload import BatchWorkloadSpec, PlanWorkload
from planner.confidence import GRADES
from planner.engines import ENGINE_SPEC_PATTERN, ENGINES
from planner.optimizer import PlanConstraints
from planner.pins import Pin
from planner.pipeline import PP_DEGREES
from planner.plan_disagg import pool_refusals
from planner.plan_refusals import POOLS_REFUSE_PREFIX_REUSE
from planner.units import MS_PER_S
from planner.workload import Slo, Workload

#: Precisions considered when a request names none: 16-bit weights and cache, and FP8 weights and
#: cache — near-lossless on the models in the catalog. Int8, int4 and FP4 trade accuracy the
#: planner cannot judge, so they are opt-in through `constraints.precisions`.
DEFAULT_PRECISIONS: tuple[tuple[str, str], ...] = (("bf16", "bf16"), ("fp8", "fp8"))


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PlanSlo(_Input):
    """Latency targets at `percentile`; any subset of the three, at least one."""

    ttft_ms: float | None = Field(
        default=None, gt=0, le=3.6e6, allow_inf_nan=False, description="Time to first token.", examples=[500]
    )
    tpot_ms: float | None = Field(
        default=None, gt=0, le=3.6e6, allow_inf_nan=False, description="Time per output token after the first.", examples=[50]
    )
    e2e_s: float | None = Field(default=None, gt=0, le=86_400, allow_inf_nan=False, description="Arrival to last token.")
    percentile: float = Field(default=99.0, ge=50, lt=100, description="Percentile the targets apply to.")

    @model_validator(mode="after")
    def _at_least_one(self) -> Self:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_s is None:
            raise ValueError("give at least one of ttft_ms, tpot_ms, e2e_s")
        return self

    def to_slo(self) -> Slo:
        return Slo(
            ttft_s=None if self.ttft_ms is None else self.ttft_ms / MS_PER_S,
            tpot_s=None if self.tpot_ms is None else self.tpot_ms / MS_PER_S,
            e2e_s=self.e2e_s,
            percentile=self.percentile,
        )


class PlanPrecision(_Input):
    weights: Slug = Field(description="Quantization scheme of the weights (a catalog slug).", examples=["fp8"])
    kv_cache: Slug = Field(description="Quantization scheme of the KV cache (a catalog slug).", examples=["fp8"])


class PlanPin(_Input):
    """Decisions fixed by the request; each member omitted is searched (planner/pins.py)."""

    gpu: Slug | None = Field(default=None, description="GPU type; must be one the plan may use (allowed and priced).")
    tp: int | None = Field(
        default=None, ge=1, le=1024, description="Tensor-parallel degree; one of the searched degrees (1, 2, 4, 8)."
    )
    pp: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Pipeline-parallel degree, one of 1, 2, 4, 8 (any other value is a 422): 1 rules pipeline stages out; "
        "a larger pp is searched even where one node holds the model.",
    )
    ep: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Expert-parallel degree of an MoE model: 1 keeps the experts tensor-split; a larger ep (equal to tp "
        "when tp is pinned, dividing the model's experts, without pipeline stages; otherwise a 422) plans only the "
        "data-parallel-attention replicas of ep GPUs whose MoE layers run an all-to-all.",
    )
    replicas: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Replica count; when that many cannot meet the SLOs within the limits the plan is a 422 naming constraints.pin.replicas.",
    )
    batch_limit: int | None = Field(default=None, ge=1, le=65_536, description="Batch limit (vLLM max_num_seqs).")
    chunk_tokens: int | None = Field(
        default=None,
        ge=2,
        le=10_000_000,
        description="Chunked-prefill budget (vLLM max_num_batched_tokens); null pins no chunking, omitted searches it.",
    )
    precision: PlanPrecision | None = Field(default=None, description="Weights and KV-cache precision; must be an allowed pair.")
    engine: Literal[ENGINES] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="Serving engine the plan is priced on (its per (GPU, engine) efficiency profile, docs/engines.md); the "
        "same as `engine` naming one engine. With a request `engine` it narrows it to the engines it matches, every "
        "release generation of its engine (`vllm` matches `vllm@0.11`); matching none is a 422.",
    )
    draft_tokens: int | None = Field(
        default=None,
        ge=1,
        le=5,
        description="Draft tokens per step when the plan speculates (constraints.speculative auto or on); omitted, the "
        "search offers 2 and 5 (5: EAGLE's and SGLang's default chain depth).",
    )
    acceptance_rate: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="The draft head's per-token acceptance rate α as measured on this traffic (e.g. from vLLM's "
        "spec_decode acceptance counters), used instead of the method's default; plan.speculative.acceptance_source "
        "then says it was given.",
    )
    draft_model: Slug | None = Field(
        default=None,
        description="A catalog model to draft with instead of a draft head (same vocabulary as the model, fewer "
        "parameters): each verify step adds its k forward passes on the same GPUs, and its weights and KV cache come "
        "out of the replica's memory (docs/speculative-decoding.md). Needs constraints.speculative auto or on; without "
        "acceptance_rate the α of the published (target, draft) pair nearest in size ratio (Leviathan et al. 2023, "
        "temperature 1) is assumed and plan.speculative.acceptance_source says so: give the measured one where you can.",
        examples=["llama-3.1-8b"],
    )

    @field_validator("pp")
    @classmethod
    def _pp_modelled(cls, pp: int | None) -> int | None:
        if pp is not None and pp not in PP_DEGREES:
            raise ValueError(
                f"a pinned pp must be one of the pipeline degrees the planner models ({', '.join(map(str, PP_DEGREES))}), got {pp}"
            )
        return pp

    @model_validator(mode="after")
    def _ep_is_one_or_tp(self) -> Self:
        if self.ep is not None and self.ep > 1 and self.tp is not None and self.ep != self.tp:
            raise ValueError(f"ep ({self.ep}) must be 1 or equal tp ({self.tp})")
        if self.ep is not None and self.ep > 1 and self.pp is not None and self.pp > 1:
            raise ValueError(f"ep ({self.ep}) above 1 is planned without pipeline stages, got pp {self.pp}")
        return self

    @model_validator(mode="after")
    def _chunk_above_batch(self) -> Self:
        if self.chunk_tokens is not None and self.batch_limit is not None and self.chunk_tokens <= self.batch_limit:
            raise ValueError(f"chunk_tokens ({self.chunk_tokens}) must exceed batch_limit ({self.batch_limit})")
        return self

    @model_serializer(mode="wrap")
    def _set_members_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Only the members the request set: an omitted chunk_tokens (searched) must not come back as
        null (no chunking) when a stored request is planned again."""
        data = handler(self)
        return {key: value for key, value in data.items() if key in self.model_fields_set}

    def to_pin(self) -> Pin:
        return Pin(
            gpu=self.gpu,
            tp=self.tp,
            pp=self.pp,
            ep=self.ep,
            replicas=self.replicas,
            batch_limit=self.batch_limit,
            chunk_tokens=self.chunk_tokens,
            chunk_pinned="chunk_tokens" in self.model_fields_set,
            precision=None if self.precision is None else (self.precision.weights, self.precision.kv_cache),
            engine=self.engine,
            draft_tokens=self.draft_tokens,
            acceptance_rate=self.acceptance_rate,
            draft_model=self.draft_model,
        )


class PlanConstraintsSpec(_Input):
    """What the plan may use. Omitted members do not constrain."""

    gpus: list[Slug] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="GPU types allowed (catalog slugs); default every GPU in the catalog. An empty list is refused.",
    )
    precisions: list[PlanPrecision] | None = Field(
        default=None,
        min_length=1,
        max_length=50,
        description="Weight/KV-cache precision pairs allowed; default bf16/bf16 and fp8/fp8.",
    )
    max_gpus: int | None = Field(default=None, ge=1, le=1_000_000, description="Most GPUs in the plan.")
    budget_usd_per_hour: float | None = Field(
        default=None, gt=0, le=1e9, allow_inf_nan=False, description="Most on-demand cost per hour."
    )
    min_replicas: int = Field(default=1, ge=0, le=100_000, description="Fewest replicas.")
    n_plus_one: bool = Field(default=False, description="Demand still covered within the SLOs with any one replica lost.")
    mixed_fleet: bool = Field(
        default=False, description="Allow several configurations splitting the traffic in proportion to capacity."
    )
    inventory: dict[Slug, Annotated[int, Field(ge=0, le=1_000_000)]] = Field(
        default_factory=dict, description="Most GPUs available per GPU type (types not listed are unlimited)."
    )
    min_confidence: Literal[GRADES] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="Leave out GPUs whose calibration is graded below this (low < medium < high; GET /v1/gpus/{slug} "
        "shows each grade and its evidence); the alternatives say which were left out.",
    )

    pin: PlanPin | None = Field(
        default=None,
        description="Fix any decision (gpu, tp, pp, replicas, batch_limit, chunk_tokens, precision, engine); the rest is "
        "searched. Pins that contradict each other or the other constraints are a 422 naming the member.",
    )
    unit: Literal["gpu", "instance"] = Field(
        default="gpu",
        description="`gpu`: GPUs bought one by one at the provider's per-GPU price. `instance`: replicas packed into whole "
        "instances of the provider's instance types (GET /v1/instance-types), never straddling two, costed per instance-hour; "
        "the plan reports `plan.instances`. GPUs without an instance type at the provider are left out; `prices` overrides "
        "do not apply (422); max_gpus and inventory count the GPUs the replicas use, not the stranded ones.",
    )

    speculative: Literal["auto", "off", "on"] = Field(
        default="auto",
        description="Speculative decoding as a candidate of the search (a draft head: EAGLE, or MTP where the model ships "
        "it, at draft lengths 2 and 5 or pin.draft_tokens; docs/speculative-decoding.md). `off`: never. `auto`: every "
        "configuration is offered with and without speculation and the cheapest plan wins (speculation buys fewer replicas "
        "where TPOT binds at low batch); where the cheapest does not speculate, its speculating variant with the lowest "
        "TPOT below its own that meets every SLO is deployed at the same replicas and cost, verified by the simulator. "
        "`on`: only speculating configurations (a 422 where none serves). `plan.speculative` says what was chosen and "
        "`justification.speculative` what was tried, the crossover batches and the cost without speculation. Offered only "
        "with a draft head published for the model (the deploy table's draft_heads; MTP ships in the model). The default "
        "is `auto`. A batch job does not speculate (auto plans it as before; on is a 422).",
    )
    topology: Literal["aggregated", "disaggregated", "any"] = Field(
        default="any",
        description="`aggregated`: every replica prefills and decodes (today's plans). `disaggregated`: a prefill pool and a "
        "decode pool joined by a KV-cache transfer, each with its own GPU, precision, tp, replicas and limits "
        "(docs/disaggregation.md); the pools honour max_gpus, budget_usd_per_hour, min_replicas (each pool), n_plus_one (a "
        "priced spare in each pool), inventory (both pools draw on it), mixed_fleet (allowed, nothing to mix: each pool is "
        "one configuration) and the gpu, precision, tp (both pools) and batch_limit (the decode pool) pins; unit instance, "
        "speculative on, pinned replicas, chunk_tokens or draft and workload.prefix_reuse are a 422. `any`: both are planned "
        "and the cheaper wins; the plan's `disaggregation` section says by how much and keeps the other as the alternative; "
        "where the pools cannot honour the request the aggregated plan is answered and the alternative says why. A batch job "
        "or a classes request with `any` is planned as with `aggregated`. Default `any` (the optimizer decides the topology); "
        "send `aggregated` for one pool of replicas that prefill and decode.",
    )

    @model_validator(mode="after")
    def _draft_model_speculates(self) -> Self:
        if self.pin is not None and self.pin.draft_model is not None and self.speculative == "off":
            raise ValueError("pin.draft_model needs constraints.speculative auto or on (off never speculates)")
        return self

    @model_validator(mode="after")
    def _pools_take_the_basic_constraints(self) -> Self:
        """Explicit separate pools refuse what they cannot honour (planner/plan_disagg.py's pool_refusals: instances,
        speculation on, a pinned replica count, chunk budget or draft); `any` plans the aggregated arm alone then
        (api/disagg_plans.py) and says why in its `disaggregation` section."""
        if self.topology != "disaggregated":
            return self
        if refusals := pool_refusals(self.to_constraints()):
            raise ValueError(f"topology disaggregated does not take {'; '.join(refusals)}")
        return self

    def to_constraints(self) -> PlanConstraints:
        return PlanConstraints(
            max_gpus=self.max_gpus,
            budget_usd_per_hour=self.budget_usd_per_hour,
            min_replicas=self.min_replicas,
            n_plus_one=self.n_plus_one,
            mixed_fleet=self.mixed_fleet,
            inventory=dict(self.inventory),
            min_confidence=self.min_confidence,
            pin=None if self.pin is None else self.pin.to_pin(),
            unit=self.unit,
            speculative=self.speculative,
        )


#: A request's engine: one, a list to choose from (1 to 3, no repeats needed), or "any"; an engine may name its
#: release generation ("vllm@0.11"; "trt-llm@all": the profile pooled over releases), docs/engines.md.
EngineName = Literal["vllm", "sglang", "trt-llm"]
EngineAtGeneration = Annotated[str, Field(pattern=ENGINE_SPEC_PATTERN, examples=["vllm@0.11"])]
#: One engine, optionally naming its release generation: what evaluate, simulate, capacity, what-if and fleet plans take.
OneEngineSpec = EngineName | EngineAtGeneration
EngineChoiceSpec = (
    Literal["any", "vllm", "sglang", "trt-llm"]
    | EngineAtGeneration
    | Annotated[list[EngineName | EngineAtGeneration], Field(min_length=1, max_length=3)]
    | None
)


class PlanRequest(_Input):
    """Plan the cheapest deployment of `model` that serves `workload` within `slo`."""

    model: Slug = Field(description="Model to serve (a catalog slug).", examples=["llama-3.1-8b"])
    workload: PlanWorkload = Field(
        description="Interactive traffic (default; `kind` may be omitted) or a batch job (`kind: batch`: requests or "
        "total_tokens, deadline_h; planned for throughput with no latency SLO)."
    )
    slo: PlanSlo | None = Field(
        default=None,
        validate_default=True,
        description="Latency targets; required for an interactive workload, unused by a batch job.",
    )
    constraints: PlanConstraintsSpec = Field(default_factory=PlanConstraintsSpec)
    efficiency_profile: Slug = Field(
        default="calibrated",
        description="Efficiencies to plan with: `calibrated` (each GPU's catalog calibration), `ideal` (pure roofline) "
        "or a stored profile name (POST /v1/calibrations).",
    )
    verify: bool = Field(default=True, description="Run the chosen plan through the simulator and add capacity until it agrees.")
    provider: Slug | None = Field(
        default=None,
        description="Whose prices to plan with (GET /v1/prices lists them); default the service's default provider "
        "(HEADROOM_DEFAULT_PRICE_PROVIDER). GPUs this provider does not price are left out, never priced from another.",
        examples=["runpod"],
    )
    prices: dict[Slug, PriceOverride] = Field(
        default_factory=dict, description="Per GPU slug, USD per GPU-hour replacing the provider's prices for this plan."
    )
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=r"^[^/\x00-\x1f]+$",
        description="Deployment this plan is for: the plan becomes its current plan (GET /v1/deployments/{name}). No `/` or control characters.",
    )
    engine: EngineChoiceSpec = Field(
        default=None,
        exclude_if=lambda value: value is None,  # stored requests from before the field read the same
        description="Serving engine(s) to price the plan on: one engine, a list to choose from, or `any` (vllm, sglang, "
        "trt-llm); an engine may name its release generation (`vllm@0.11`; `trt-llm@all`: pooled over releases; one no "
        "profile of the engine has is a 422 listing `known_generations`), else its newest generation with a profile of "
        "its own is priced. Each allowed engine is planned with its per (GPU, "
        "engine, generation) efficiency profile and low-precision factors "
        "(docs/engines.md; a pair without data falls back, and `engine.profile` says so; trt-llm only on NVIDIA GPUs); the "
        "cheapest wins, and `justification.alternatives` gets the best plan on each other engine (kind `engine`). Omitted: "
        "the engine-agnostic per-GPU calibration, as before (or constraints.pin.engine when pinned).",
    )
    store: bool = Field(
        default=True,
        exclude=True,  # a request's switch, not part of the request stored with a plan
        description="False for a dry run: the plan is answered (200, no Location) but nothing is written: no stored plan, "
        "no deployment change, no Idempotency-Key record. Its `id` is fresh and never stored (GET answers 404). "
        "Any key may dry-run (a reader key, or none unless HEADROOM_REQUIRE_AUTH=1); storing needs role planner.",
    )

    @field_validator("slo")
    @classmethod
    def _slo_for_interactive(cls, slo: PlanSlo | None, info: ValidationInfo) -> PlanSlo | None:
        """Required for interactive traffic (the same 422 as before batch jobs existed); a batch job has none."""
        workload = info.data.get("workload")
        if slo is None and workload is not None and not isinstance(workload, BatchWorkloadSpec):
            raise PydanticCustomError("missing", "Field required")
        return slo

    @model_validator(mode="after")
    def _positive_rate(self) -> Self:
        if isinstance(self.workload, BatchWorkloadSpec):
            if self.workload.deadline_h is None and self.constraints.max_gpus is None:
                raise ValueError("a batch job needs workload.deadline_h, constraints.max_gpus or both")
            if self.name is not None:
                raise ValueError("a batch job is not a deployment: leave out name (re-planning with hysteresis is for traffic)")
            limits = self.constraints
            unused = [
                name
                for name, given in (
                    ("budget_usd_per_hour", limits.budget_usd_per_hour is not None),
                    ("min_replicas", limits.min_replicas > 1),
                    ("n_plus_one", limits.n_plus_one),
                    ("mixed_fleet", limits.mixed_fleet),
                    ("inventory", bool(limits.inventory)),
                    ("topology", limits.topology == "disaggregated"),
                    ("pin.draft_model", limits.pin is not None and limits.pin.draft_model is not None),
                )
                if given
            ]
            if limits.speculative == "on":
                raise ValueError(
                    "a batch job does not speculate yet: its sizing (throughput at the batch memory holds, "
                    "planner/batch_jobs.py) has no speculative step model; leave out constraints.speculative or set it to off"
                )
            if unused:  # refused rather than ignored: a job plan honours gpus, precisions, max_gpus and min_confidence
                # (topology `any` plans the job as before: separate pools are not a batch job's shape)
                raise ValueError(f"a batch job does not take constraints.{', constraints.'.join(unused)}")
            return self
        if not self.workload.arrival_rate_rps > 0:
            raise ValueError("workload.arrival_rate_rps must be > 0 to plan capacity for it")
        if self.workload.prefix_reuse is not None and self.constraints.topology == "disaggregated":
            raise ValueError(POOLS_REFUSE_PREFIX_REUSE)
        return self

    def traffic(self) -> Workload:
        """The interactive workload; TypeError for a batch job (its callers branch on the kind first)."""
        if isinstance(self.workload, BatchWorkloadSpec):
            raise TypeError("a batch job has no traffic workload")
        return self.workload.to_workload()

    def targets(self) -> Slo:
        """The SLOs of an interactive plan (the validator requires them); TypeError for a batch job."""
        if self.slo is None:
            raise TypeError("a batch job has no SLO")
        return self.slo.to_slo()
