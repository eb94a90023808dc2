"""`POST /v1/simulate`: one configuration, serving shape and workload run through the
discrete-event simulator of continuous batching. operationId: simulate_configuration."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from fastapi import APIRouter

from api.deps import CatalogDep, ReaderDep, SettingsDep
from api.evaluation import (
    Configuration,
    check_simulation_size,
    prefix_setup,
    replica_share,
    resolve_configuration,
    simulate_prefix_deployment,
)
from api.observability import Deadline, DeadlineDep, MetricsDep, MetricsRegistry
from api.problems import problem_responses
from api.schemas.performance import SimulateRequest
from api.schemas.performance_read import prefix_cache_simulated, simulate_response
from api.schemas.performance_response import SimulateResponse
from planner.memory import check_fit, kv_capacity_tokens
from planner.performance import build_step_model
from planner.queueing import saturation_rps
from planner.simulator import simulate
from planner.step_model import StepModel
from planner.workload import Serving

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

    With `workload.prefix_reuse` (and `prefix_cache`: the cache size and routing, each defaulting to a
    plan's) the simulator runs replica 0 of the deployment — the busiest under prefix-aware routing —
    with its own LRU over 16-token blocks, at its share of the arrivals, on the KV left beside the
    cache (planner/simulator_prefix.py, as a plan's verification runs it); every figure is that
    replica's, and `prefix_cache` gives its measured hit rate beside the one a plan assumes.

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
    if workload.prefix_reuse is not None:
        return _simulate_prefix(body, config, step_model, capacity, deadline, metrics)
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


def _simulate_prefix(
    body: SimulateRequest,
    config: Configuration,
    step_model: StepModel,
    capacity: int,
    deadline: Deadline,
    metrics: MetricsRegistry,
) -> SimulateResponse:
    """Replica 0 with its prefix cache (api/evaluation.py `simulate_prefix_deployment`)."""
    workload, serving = body.workload.to_workload(), body.serving.to_serving()
    cache = body.prefix_cache
    setup = prefix_setup(
        workload,
        replicas=serving.replicas,
        kv_capacity_tokens=capacity,
        cache_tokens=None if cache is None else cache.cache_tokens,
        routing=None if cache is None else cache.routing,
    )
    with metrics.simulation_timer():
        simulation = deadline.run(
            simulate_prefix_deployment,
            step_model,
            workload,
            serving,
            setup,
            requests=body.requests,
            seed=body.seed,
            warmup_fraction=body.warmup_fraction,
            checkpoint=deadline.checkpoint,  # a simulation the 503 abandoned stops within a few ms
        )
    one = Serving(replicas=1, batch_limit=serving.batch_limit, chunk_tokens=serving.chunk_tokens)
    return simulate_response(
        config,
        simulation.result,
        kv_capacity_tokens=capacity,
        seed=body.seed,
        saturation_rps=saturation_rps(step_model, setup.workload, one, kv_capacity_tokens=setup.kv_capacity_tokens),
        arrival_rate_rps_per_replica=simulation.rate_rps,
        prefix_cache=prefix_cache_simulated(setup, simulation, share=replica_share(setup, serving.replicas)),
    )
