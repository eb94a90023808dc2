"""`POST /v1/simulate`: one configuration, serving shape and workload run through the
discrete-event simulator of continuous batching. operationId: simulate_configuration."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from fastapi import APIRouter

from api.deps import CatalogDep, ReaderDep, SettingsDep
from api.evaluation import check_simulation_size, resolve_configuration
from api.observability import DeadlineDep, MetricsDep
from api.problems import problem_responses
from api.schemas.performance import SimulateRequest, SimulateResponse, simulate_response
from planner.memory import check_fit, kv_capacity_tokens
from planner.performance import build_step_model
from planner.queueing import saturation_rps
from planner.simulator import simulate

router = APIRouter(tags=["performance"])


@router.post(
    "/simulate",
    response_model=SimulateResponse,
    name="simulate_configuration",
    summary="Simulate a deployment under a workload: latency percentiles with confidence intervals",
    responses=problem_responses(401, 404, 422),
)
def simulate_configuration(
    body: SimulateRequest,
    catalog: CatalogDep,
    settings: SettingsDep,
    _reader: ReaderDep,
    deadline: DeadlineDep,
    metrics: MetricsDep,
) -> SimulateResponse:
    """Runs `requests` arrivals of `workload` through `serving` (router, replicas, continuous
    batching with FCFS admission and KV reservation, optional chunked prefill), each step timed by
    the configuration's step model, and reports p50/p90/p99 of TTFT, TPOT, E2E and queue wait over
    the requests after the warm-up, with a 95 % batch-means confidence interval for each p99, plus
    occupancy, utilisation, throughput, Little's law, the request count and the wall time.
    Deterministic for a given `seed`. An overloaded deployment is an answer: `unstable: true` with
    null percentiles.

    Errors: more than the service's `max_simulated_requests`, or a chunk budget so tight that the
    prefill steps would outrun the request timeout → 422 `simulation-too-large` naming the limit;
    unknown slug → 404; a model that does not fit or a request longer than the KV cache → 422."""
    workload, serving = body.workload.to_workload(), body.serving.to_serving()
    check_simulation_size(
        workload,
        serving,
        requests=body.requests,
        max_requests=settings.max_simulated_requests,
        time_budget_s=settings.request_timeout_s,
    )
    config = resolve_configuration(
        catalog,
        gpu=body.gpu,
        model=body.model,
        weights=body.precision.weights,
        kv_cache=body.precision.kv_cache,
        tp=body.tp,
        efficiency_profile=body.efficiency_profile,
        overrides=body.override_values(),
        engine=body.engine,
    )
    efficiency = config.efficiency.efficiency
    step_model = build_step_model(config.gpu, config.model, config.precision, config.tp, efficiency)
    check_fit(config.gpu, config.model, config.precision, config.tp, efficiency, candidate_precisions=config.candidate_precisions)
    capacity = kv_capacity_tokens(config.gpu, config.model, config.precision, config.tp, efficiency)
    with metrics.simulation_timer():
        result = deadline.run(
            simulate,
            step_model,
            workload,
            serving,
            kv_capacity_tokens=capacity,
            requests=body.requests,
            seed=body.seed,
            warmup_fraction=body.warmup_fraction,
            checkpoint=deadline.checkpoint,  # a simulation the 503 abandoned stops within a few ms
        )
    return simulate_response(
        config,
        result,
        kv_capacity_tokens=capacity,
        seed=body.seed,
        saturation_rps=saturation_rps(step_model, workload, serving, kv_capacity_tokens=capacity),
        arrival_rate_rps_per_replica=workload.arrival_rate_rps / serving.replicas,
    )
