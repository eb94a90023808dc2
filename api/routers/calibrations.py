"""`POST /v1/calibrations`: fit η_mem, η_compute and step overhead to measured points and store
the result as a named efficiency profile of the GPU. operationId: create_calibration."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from fastapi import APIRouter, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from api.deps import CatalogDep, PlannerKeyDep
from api.idempotency import IdempotencyDep
from api.problems import problem_responses
from api.schemas.calibration import CalibrationRead, CalibrationRequest, calibration_read, profile_record
from planner.calibration import FITTABLE_PARAMETERS, fit_efficiency

router = APIRouter(tags=["calibrations"])


@router.post(
    "/calibrations",
    status_code=status.HTTP_201_CREATED,
    response_model=CalibrationRead,
    name="create_calibration",
    summary="Fit and store an efficiency profile from measured points",
    responses=problem_responses(401, 403, 404, 422),
)
def create_calibration(
    body: CalibrationRequest, catalog: CatalogDep, idempotency: IdempotencyDep, _planner: PlannerKeyDep
) -> Response:
    """Least-squares fit (scipy.optimize.least_squares, 0 < η ≤ 1, overhead ≥ 0) of the named
    parameters to the relative errors of the step-time model's predictions:
    decode step / TPOT at batch B and context c = step_s(B, B·c, B·c); prefill / TTFT of p tokens =
    step_s(p, 0, p(p+1)/2); throughput = B·o / (prefill(B, p) + (o − 1)·decode(B, p + o/2)).
    Parameters not fitted keep the GPU's `calibrated` values, as do the memory reserve and
    communication. The profile is stored under `name` for this GPU (replacing one of that name)
    and can be named as `efficiency_profile` in evaluations and plans. 404 for an unknown GPU,
    model or quantization; 422 when the points are malformed or cannot determine what `fit` names.
    A retry with the same `Idempotency-Key` and body answers the first fit again."""
    if (replayed := idempotency.replay(body)) is not None:
        return replayed
    gpu = catalog.gpu_spec(body.gpu, "ideal")
    model = catalog.model_spec(body.model)
    precision = catalog.precision(body.precision.weights, body.precision.kv_cache)
    base = catalog.efficiency_profile("calibrated", body.gpu)
    fit = fit_efficiency(
        body.to_points(),
        gpu,
        model,
        precision,
        body.tp,
        fit=FITTABLE_PARAMETERS if body.fit is None else tuple(body.fit),
        base=base,
        strict=body.fit is not None,
        name=body.name,
    )
    stored = catalog.save_efficiency_profile(profile_record(body, fit))
    content = jsonable_encoder(calibration_read(body, fit, stored))
    return idempotency.respond(body, JSONResponse(content, status_code=status.HTTP_201_CREATED))
