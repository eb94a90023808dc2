"""The capacity service behind `POST /v1/capacity` (and its chart): the request's hardware and
specs resolved from the catalog, the pure search (planner/capacity.py), the answer built. Read-only:
nothing is stored."""

from __future__ import annotations

from dataclasses import replace

from api.deploy import published_draft_methods
from api.disagg_plans import LINK
from api.inputs import engine_gpu, engine_read, instance_types, one_engine, priced
from api.schemas.capacity import (
    CapacityAlternative,
    CapacityCost,
    CapacityDisaggregation,
    CapacityPoolRead,
    CapacityPoolsVerifyStep,
    CapacityPrecision,
    CapacityRequest,
    CapacityResponse,
    capacity_response,
)
from api.schemas.plan_response import EngineRead
from api.schemas.plans import DEFAULT_PRECISIONS, PlanPin
from catalog.errors import NotFoundError
from catalog.repository import Catalog
from planner import capacity
from planner.candidates import TP_DEGREES
from planner.capacity_disagg import DisaggCapacity, max_capacity_disaggregated, verify_capacity
from planner.errors import HeadroomError, InfeasiblePlanError, PlannerInputError, UnsupportedConfigurationError
from planner.plan_disagg import PoolCandidate, pool_refusals
from planner.plan_records import PlanConstraints
from planner.plan_refusals import POOLS_REFUSE_PREFIX_REUSE
from planner.specs import GpuSpec, InstanceTypeSpec, ModelSpec
from planner.speculative import check_draft_model
from planner.units import MS_PER_S


def _instance_type(body: CapacityRequest, catalog: Catalog, provider: str) -> InstanceTypeSpec | None:
    """The instance type the hardware is given in (None when given as GPUs): 404 when `provider`
    sells no instance of that name; 422 when `gpu` or constraints.pin.gpu names another GPU."""
    if body.instance_type is None:
        return None
    found = [t for t in instance_types(catalog, provider) if t.name == body.instance_type]
    if not found:
        raise NotFoundError(
            f"provider {provider!r} sells no instance type {body.instance_type!r} (GET /v1/instance-types lists them)",
            kind="instance_type",
            name=body.instance_type,
            provider=provider,
        )
    instance = found[0]
    pinned = body.pinned().gpu
    for field, named in (("gpu", body.gpu), ("constraints.pin.gpu", pinned)):
        if named is not None and named != instance.gpu:
            raise PlannerInputError(
                f"{field} {named!r} is not the GPU of {instance.name} ({instance.gpu})", constraint=field, field=field
            )
    return instance


def _inputs(
    body: CapacityRequest, catalog: Catalog, default_provider: str
) -> tuple[capacity.CapacityInputs, CapacityCost, EngineRead | None]:
    """The model, the GPU at the requested efficiencies (at its engine profile with `engine` or pin.engine) with its
    price (when priced), the precisions; and the answer's `engine` section. Unknown slugs and an unknown provider are
    404; an unpriced GPU only leaves the cost null."""
    model = catalog.model_spec(body.model)
    provider = body.provider or default_provider
    instance = _instance_type(body, catalog, provider)
    pin = body.pinned()
    slug = instance.gpu if instance is not None else body.gpu
    assert slug is not None, "CapacityRequest requires gpu unless instance_type names it (its _consistent_pins validator)"
    if pin.gpu is not None and pin.gpu != slug:
        raise PlannerInputError(
            f"constraints.pin.gpu {pin.gpu!r} is not the request's gpu {slug!r}",
            constraint="pin.gpu",
            field="constraints.pin.gpu",
        )
    (gpu,) = catalog.gpu_specs(body.efficiency_profile, slugs=[slug])
    engine = one_engine(body.engine, pin.engine)
    section = None
    if engine is not None:  # the GPU at its engine profile (docs/engines.md)
        gpu, choice = engine_gpu(catalog, gpu, engine, body.efficiency_profile)
        section = engine_read(engine, [choice])
    if instance is not None:  # costed per instance-hour: the per-GPU list is not consulted
        cost = CapacityCost(usd_per_hour=None, price_usd_per_gpu_hour=instance.usd_per_hour / instance.gpus, provider=provider)
        return _capacity_inputs(body, catalog, model, gpu, pin), cost, section
    try:
        pricing = priced(catalog, [gpu], provider)
    except PlannerInputError as unpriced:
        cost = CapacityCost(usd_per_hour=None, price_usd_per_gpu_hour=None, provider=provider, notes=[unpriced.detail])
    else:
        gpu = pricing.specs[0]
        cost = CapacityCost(
            usd_per_hour=None,
            price_usd_per_gpu_hour=gpu.price_usd_per_hour_on_demand,
            provider=provider,
            notes=list(pricing.notes),
        )
    return _capacity_inputs(body, catalog, model, gpu, pin), cost, section


def _capacity_inputs(
    body: CapacityRequest, catalog: Catalog, model: ModelSpec, gpu: GpuSpec, pin: PlanPin
) -> capacity.CapacityInputs:
    precision = pin.precision
    pairs = DEFAULT_PRECISIONS if precision is None else ((precision.weights, precision.kv_cache),)
    precisions = catalog.precisions(pairs, skip_unknown=precision is None)
    return capacity.CapacityInputs(
        model=model,
        gpu=gpu,
        precisions=precisions,
        draft_methods=published_draft_methods(model.slug),
        draft_model=_draft_model(pin, catalog, model),
    )


def _draft_model(pin: PlanPin, catalog: Catalog, model: ModelSpec) -> ModelSpec | None:
    """The catalog model constraints.pin.draft_model names (404 when unknown), checked to draft for `model` (422):
    as POST /v1/plans takes it (api/inputs.py)."""
    if pin.draft_model is None:
        return None
    draft = catalog.model_spec(pin.draft_model)
    check_draft_model(model, draft)
    return draft


def _pool_constraints(body: CapacityRequest) -> PlanConstraints:
    """The request's pins and speculation as plan_disaggregated takes them (planner/plan_disagg.py honours the gpu,
    precision, tp, batch_limit, pp and engine pins and refuses the rest, `pool_refusals`); whole instances are the
    `instance` unit, which the pools refuse (they are bought by the GPU)."""
    return PlanConstraints(
        pin=body.pinned().to_pin(),  # the pools refuse pp > 1 (planner/plan_disagg.py pool_refusals)
        unit="gpu" if body.instances is None else "instance",
        speculative=body.constraints.speculative,
        n_plus_one=body.constraints.n_plus_one,
    )


def _pool_read(c: PoolCandidate) -> CapacityPoolRead:
    return CapacityPoolRead(
        role="prefill" if c.role == "prefill" else "decode",
        gpu=c.gpu,
        tp=c.tp,
        replicas=c.replicas,
        gpus=c.gpus,
        batch_limit=c.batch_limit,
        chunk_tokens=c.chunk_tokens,
        precision=CapacityPrecision(weights=c.weights, kv_cache=c.kv_cache),
        rho=c.rho,
        binding=c.binding,
        spare_replicas=c.spare_replicas,
    )


def _section(
    found: DisaggCapacity | None,
    *,
    requested: str,
    chosen: str,
    why: str,
    gain: float | None,
    alternative: CapacityAlternative | None,
) -> CapacityDisaggregation:
    if found is None:
        return CapacityDisaggregation(
            requested=requested,  # type: ignore[arg-type]
            chosen=chosen,  # type: ignore[arg-type]
            why=why,
            gain_fraction=gain,
            max_arrival_rate_rps=None,
            unsustained_arrival_rate_rps=None,
            pools=[],
            prefill_gpus=None,
            decode_gpus=None,
            gpus_idle=None,
            ratio=None,
            binding=None,
            ttft_prefill_fraction=None,
            predicted_ttft_ms=None,
            predicted_tpot_ms=None,
            predicted_e2e_s=None,
            link=None,
            plans_evaluated=0,
            alternative=alternative,
            analytic_arrival_rate_rps=None,
            verification=None,
        )
    pred = found.prediction
    return CapacityDisaggregation(
        requested=requested,  # type: ignore[arg-type]
        chosen=chosen,  # type: ignore[arg-type]
        why=why,
        gain_fraction=gain,
        max_arrival_rate_rps=found.agreed_rate_rps,
        analytic_arrival_rate_rps=found.max_arrival_rate_rps,
        verification=None
        if found.verification is None
        else [
            CapacityPoolsVerifyStep(
                arrival_rate_rps=step.arrival_rate_rps,
                ttft_ms=step.ttft_s * MS_PER_S,
                tpot_ms=step.tpot_s * MS_PER_S,
                e2e_s=step.e2e_s,
                misses=list(step.misses),
                meets_slo=step.meets_slo,
                requests_simulated=step.requests_simulated,
            )
            for step in found.verification
        ],
        unsustained_arrival_rate_rps=found.unsustained_rate_rps,
        pools=[_pool_read(found.prefill), _pool_read(found.decode)],
        prefill_gpus=found.prefill_gpus,
        decode_gpus=found.decode_gpus,
        gpus_idle=found.gpus_idle,
        ratio=f"{found.prefill.replicas}P{found.decode.replicas}D",
        binding=found.binding,  # type: ignore[arg-type]
        ttft_prefill_fraction=found.ttft_prefill_fraction,
        predicted_ttft_ms=pred.ttft_s * MS_PER_S,
        predicted_tpot_ms=pred.tpot_s * MS_PER_S,
        predicted_e2e_s=pred.e2e_s,
        link=found.link.name,
        plans_evaluated=found.plans_evaluated,
        alternative=alternative,
    )


def _pools_response(
    found: DisaggCapacity,
    body: CapacityRequest,
    cost: CapacityCost,
    section: CapacityDisaggregation,
    engine: EngineRead | None,
) -> CapacityResponse:
    rate = found.agreed_rate_rps
    price = cost.price_usd_per_gpu_hour
    used = found.prefill_gpus + found.decode_gpus
    cost.usd_per_hour = None if price is None else used * price  # both pools' GPUs × $/GPU-h
    return CapacityResponse(
        max_arrival_rate_rps=rate,
        analytic_arrival_rate_rps=found.max_arrival_rate_rps,
        output_tokens_per_s=rate * body.workload.to_workload(1.0).output_tokens.mean,  # req/s × mean output tokens
        configuration=None,
        max_rps_per_replica=None,
        saturation_rps_per_replica=None,
        utilisation=None,
        binding=None,
        per_replica_arrival_cv=None,
        curve=[],
        cost=cost,
        verification=None,
        configurations_evaluated=found.plans_evaluated,
        configurations_considered=found.plans_evaluated,
        topology="disaggregated",
        disaggregation=section,
        engine=engine,
    )


def _pools_capacity(body: CapacityRequest, inputs: capacity.CapacityInputs) -> DisaggCapacity:
    constraints = _pool_constraints(body)
    if body.workload.prefix_reuse is not None:  # refused rather than ignored
        raise UnsupportedConfigurationError(POOLS_REFUSE_PREFIX_REUSE)
    if refusals := pool_refusals(constraints):
        raise UnsupportedConfigurationError("separate prefill and decode pools do not take " + "; ".join(refusals))
    assert body.gpus is not None, "instances are the unit `instance`, refused by pool_refusals"
    found = max_capacity_disaggregated(
        gpu=inputs.gpu,
        gpus=body.gpus,
        model=inputs.model,
        precisions=inputs.precisions,
        tps=TP_DEGREES,
        workload=body.workload.to_workload(1.0),
        slo=body.slo.to_slo(),
        link=LINK,
        constraints=constraints,
    )
    if not body.verify:
        return found
    steps = verify_capacity(found, body.workload.to_workload(1.0), body.slo.to_slo())
    return replace(found, verification=steps)


def estimate_capacity(body: CapacityRequest, catalog: Catalog, default_provider: str) -> CapacityResponse:
    """The largest sustainable rate of the request's hardware within its SLOs, with its configuration,
    what binds, the ρ–latency curve and the cost (the route's docstring says what each part means).
    With constraints.topology `disaggregated` the separate pools' capacity; with `any` the larger of both."""
    topology = body.constraints.topology
    if topology == "aggregated":
        return _aggregated(body, catalog, default_provider)
    inputs, cost, engine = _inputs(body, catalog, default_provider)
    if topology == "disaggregated":
        found = _pools_capacity(body, inputs)
        why = "constraints.topology is disaggregated: the largest rate a prefill and a decode pool on these GPUs sustain"
        section = _section(found, requested=topology, chosen="disaggregated", why=why, gain=None, alternative=None)
        return _pools_response(found, body, cost, section, engine)
    pools: DisaggCapacity | None = None
    pools_error: HeadroomError | None = None
    try:
        pools = _pools_capacity(body, inputs)
    except (InfeasiblePlanError, PlannerInputError, UnsupportedConfigurationError) as error:
        pools_error = error  # e.g. no TTFT target to split, one GPU, or a pin the pools refuse (pool_refusals)
    aggregated: CapacityResponse | None = None
    aggregated_error: HeadroomError | None = None
    try:
        aggregated = _aggregated(body, catalog, default_provider)
    except (InfeasiblePlanError, UnsupportedConfigurationError) as error:  # e.g. N+1, which only the pools take
        aggregated_error = error
    if aggregated is None and pools is None:
        raise aggregated_error or InfeasiblePlanError("no capacity of either topology")
    one = None if aggregated is None else aggregated.max_arrival_rate_rps
    if pools is not None and (one is None or pools.agreed_rate_rps > one):
        gain = None if one is None else pools.agreed_rate_rps / one - 1.0
        why = (
            "no aggregated configuration meets the SLOs on these GPUs"
            if one is None
            else f"separate pools sustain {pools.agreed_rate_rps:.4g} req/s against {one:.4g} req/s aggregated"
        )
        alternative = CapacityAlternative(
            topology="aggregated",
            max_arrival_rate_rps=one,
            reason=str(aggregated_error.detail) if aggregated_error is not None else f"sustains {one:.4g} req/s, less",
        )
        section = _section(pools, requested="any", chosen="disaggregated", why=why, gain=gain, alternative=alternative)
        return _pools_response(pools, body, cost, section, engine)
    assert aggregated is not None and one is not None, "without an aggregated answer the pools were answered"
    two = None if pools is None else pools.agreed_rate_rps
    why = (
        "no prefill and decode pools meet the SLOs on these GPUs"
        if two is None
        else f"one pool of replicas sustains {one:.4g} req/s against {two:.4g} req/s for separate prefill and decode pools"
    )
    alternative = CapacityAlternative(
        topology="disaggregated",
        max_arrival_rate_rps=two,
        reason=str(pools_error.detail) if pools_error is not None else f"sustains {two:.4g} req/s, no more",
    )
    gain = None if two is None else one / two - 1.0
    aggregated.disaggregation = _section(pools, requested="any", chosen="aggregated", why=why, gain=gain, alternative=alternative)
    return aggregated


def _aggregated(body: CapacityRequest, catalog: Catalog, default_provider: str) -> CapacityResponse:
    if body.constraints.n_plus_one:
        raise UnsupportedConfigurationError(
            "constraints.n_plus_one: the aggregated capacity does not keep a spare replica yet; separate pools take it "
            "(constraints.topology disaggregated or any)"
        )
    inputs, cost, engine = _inputs(body, catalog, default_provider)
    provider = body.provider or default_provider
    instance = _instance_type(body, catalog, provider)
    pin = body.pinned().to_pin()
    if body.instances is None:
        assert body.gpus is not None, "CapacityRequest gives exactly one of gpus and instances (its _consistent_pins validator)"
        gpus = body.gpus
    else:
        assert instance is not None, "instances come with instance_type, which _instance_type resolved or refused"
        gpus = body.instances * instance.gpus
    result = capacity.max_capacity(
        capacity.CapacityRequest(
            workload=body.workload.to_workload(1.0),
            slo=body.slo.to_slo(),
            gpus=gpus,
            tp=pin.tp,
            pp=pin.pp,
            batch_limit=pin.batch_limit,
            chunk_tokens=pin.chunk_tokens,
            chunk_pinned=pin.chunk_pinned,
            replicas=pin.replicas,
            instance=instance,
            verify=body.verify,
            speculative=body.constraints.speculative,
            draft_tokens=pin.draft_tokens,
            acceptance_rate=pin.acceptance_rate,
        ),
        inputs,
    )
    cost.usd_per_hour = result.cost_usd_per_hour
    return capacity_response(result, cost, engine=engine)
