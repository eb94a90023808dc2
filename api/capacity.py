"""The capacity service behind `POST /v1/capacity` (and its chart): the request's hardware and
specs resolved from the catalog, the pure search (planner/capacity.py), the answer built. Read-only:
nothing is stored."""

from __future__ import annotations

from api.deploy import published_draft_methods
from api.inputs import instance_types, priced
from api.schemas.capacity import CapacityCost, CapacityRequest, CapacityResponse, capacity_response
from api.schemas.plans import DEFAULT_PRECISIONS, PlanPin
from catalog.errors import NotFoundError
from catalog.repository import Catalog
from planner import capacity
from planner.errors import PlannerInputError
from planner.specs import GpuSpec, InstanceTypeSpec, ModelSpec


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


def _inputs(body: CapacityRequest, catalog: Catalog, default_provider: str) -> tuple[capacity.CapacityInputs, CapacityCost]:
    """The model, the GPU at the requested efficiencies with its price (when priced), the precisions.
    Unknown slugs and an unknown provider are 404; an unpriced GPU only leaves the cost null."""
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
    if instance is not None:  # costed per instance-hour: the per-GPU list is not consulted
        cost = CapacityCost(usd_per_hour=None, price_usd_per_gpu_hour=instance.usd_per_hour / instance.gpus, provider=provider)
        return _capacity_inputs(body, catalog, model, gpu, pin), cost
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
    return _capacity_inputs(body, catalog, model, gpu, pin), cost


def _capacity_inputs(
    body: CapacityRequest, catalog: Catalog, model: ModelSpec, gpu: GpuSpec, pin: PlanPin
) -> capacity.CapacityInputs:
    precision = pin.precision
    pairs = DEFAULT_PRECISIONS if precision is None else ((precision.weights, precision.kv_cache),)
    precisions = catalog.precisions(pairs, skip_unknown=precision is None)
    return capacity.CapacityInputs(model=model, gpu=gpu, precisions=precisions, draft_methods=published_draft_methods(model.slug))


def estimate_capacity(body: CapacityRequest, catalog: Catalog, default_provider: str) -> CapacityResponse:
    """The largest sustainable rate of the request's hardware within its SLOs, with its configuration,
    what binds, the ρ–latency curve and the cost (the route's docstring says what each part means)."""
    inputs, cost = _inputs(body, catalog, default_provider)
    provider = body.provider or default_provider
    instance = _instance_type(body, catalog, provider)
    pin = body.pinned().to_pin()  # PlannerInputError (422) for pp other than 1
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
    return capacity_response(result, cost, engine=pin.engine)
