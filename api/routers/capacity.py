"""`POST /v1/capacity` (estimate_capacity): how much traffic given hardware holds within the SLOs
(issue 15 §1). Read-only: any key that may read may ask, and nothing is stored."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from fastapi import APIRouter

from api.deps import CatalogDep, ReaderDep, SettingsDep
from api.problems import problem_responses
from api.schemas.capacity import (
    CapacityCost,
    CapacityRequest,
    CapacityResponse,
    capacity_response,
)
from api.schemas.plans import DEFAULT_PRECISIONS
from catalog.prices import Prices
from catalog.repository import Catalog
from planner import capacity
from planner.errors import PlannerInputError

router = APIRouter(tags=["capacity"])


def _inputs(body: CapacityRequest, catalog: Catalog, default_provider: str) -> tuple[capacity.CapacityInputs, CapacityCost]:
    """The model, the GPU at the requested efficiencies with its price (when priced), the precisions.
    Unknown slugs and an unknown provider are 404; an unpriced GPU only leaves the cost null."""
    model = catalog.model_spec(body.model)
    (gpu,) = catalog.gpu_specs(body.efficiency_profile, slugs=[body.gpu])
    provider = body.provider or default_provider
    try:
        pricing = Prices(catalog.session).price_specs([gpu], provider)
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
    pairs = DEFAULT_PRECISIONS if body.precision is None else ((body.precision.weights, body.precision.kv_cache),)
    precisions = catalog.precisions(pairs, skip_unknown=body.precision is None)
    return capacity.CapacityInputs(model=model, gpu=gpu, precisions=precisions), cost


@router.post(
    "/capacity",
    response_model=CapacityResponse,
    name="estimate_capacity",
    summary="The largest request rate given GPUs sustain within the SLOs",
    responses=problem_responses(401, 404, 422),
)
def estimate_capacity(body: CapacityRequest, catalog: CatalogDep, settings: SettingsDep, _reader: ReaderDep) -> CapacityResponse:
    """Searches tp (up to `gpus`), precision, batch limit and chunked-prefill budget of `gpus` GPUs
    of type `gpu` (within the pins) for the configuration whose replicas (gpus // tp, random split)
    sustain the highest total request rate with every SLO met at `slo.percentile` by the queueing
    model: `max_arrival_rate_rps`, output tokens/s, the configuration, what binds, the per-replica
    ρ–latency curve up to it and the hardware's on-demand cost when priced. With `verify`, one
    replica is simulated at its share and the rate lowered by 10 % steps until the simulator agrees
    (each step reported). Nothing is stored; a reader key suffices. 404 for an unknown model, GPU,
    quantization, efficiency profile or provider; 422 `infeasible-plan` when no configuration meets
    the SLOs even unloaded, naming the culprit."""
    inputs, cost = _inputs(body, catalog, settings.default_price_provider)
    result = capacity.max_capacity(
        capacity.CapacityRequest(
            workload=body.workload.to_workload(1.0),
            slo=body.slo.to_slo(),
            gpus=body.gpus,
            tp=body.tp,
            batch_limit=body.batch_limit,
            chunk_tokens=body.chunk_tokens,
            verify=body.verify,
        ),
        inputs,
    )
    cost.usd_per_hour = result.cost_usd_per_hour
    return capacity_response(result, cost)
