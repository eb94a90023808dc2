"""`POST /v1/capacity` (estimate_capacity): how much traffic given hardware holds within the SLOs.
Read-only: any key that may read may ask, and nothing is stored."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from fastapi import APIRouter

from api import capacity as service
from api.deps import CatalogDep, ReaderDep, SettingsDep
from api.problems import problem_responses
from api.schemas.capacity import CapacityRequest, CapacityResponse

router = APIRouter(tags=["capacity"])


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
    return service.estimate_capacity(body, catalog, settings.default_price_provider)
