"""`POST /v1/evaluate`: the roofline, memory picture and step-time coefficients of one replica
configuration and, given a serving shape and a workload, its queueing latencies. operationId: evaluate_configuration."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from fastapi import APIRouter

from api.deps import CatalogDep, ReaderDep, SettingsDep
from api.evaluation import predict_latency, prefix_setup, resolve_configuration
from api.problems import problem_responses
from api.schemas.performance import EvaluateRequest
from api.schemas.performance_read import evaluate_response, prefix_cache_read
from api.schemas.performance_response import STEP_FORMULA, EvaluateResponse
from planner.performance import evaluate

router = APIRouter(tags=["performance"])


@router.post(
    "/evaluate",
    response_model=EvaluateResponse,
    name="evaluate_configuration",
    summary="Step times, memory and throughput of one configuration; latencies under a workload",
    responses=problem_responses(401, 404, 422),
    description=f"""\
Evaluates `tp` GPUs of type `gpu` holding one copy of `model` at `precision`, with the named
efficiency profile (and `overrides`): weights and KV-cache bytes, the largest batch whose KV cache
fits at `context_tokens`, a prefill of `prompt_tokens`, one decode row per batch size, the
throughput curve up to the memory limit and every coefficient of the step-time formula:

```
{STEP_FORMULA}
```

With `serving` and `workload` the response adds `predicted` (p50/p90/p99 TTFT, TPOT and E2E,
utilisation ρ, saturation rate) and `queueing` (λ per replica, service time, ρ, Little's law
L = λ·W, waiting probability, p99 wait, the formula, the ρ-vs-p99 curve). An unstable load
(ρ ≥ 1) is an answer: `unstable: true`, null percentiles, and the saturation rate. Where the
analytic model flags the operating point as outside its validated region, the discrete-event
simulator answers instead and `predicted.method` is `simulated`.

With `workload.prefix_reuse` (and `prefix_cache`: each replica's cache size and the routing, each
defaulting to a plan's) the prediction is the one a plan makes for that deployment: the prompt
tokens prefilled (a mixture over the Che hit probabilities, each value carrying its cached tokens)
on the KV left beside the cache, every replica at λ / replicas; `prefix_cache` gives the hit rate,
the KV given to the cache and, for each class of requests that finds a prefix, the cached prefill
step of `prompt_tokens` against the uncached one. A fallback simulation is replica 0's with its LRU.

Errors: unknown GPU, model, quantization or efficiency profile → 404; a model that does not fit →
422 `model-does-not-fit` with `shortfall_gb`, `smallest_fitting_tp` and `fitting_precisions`; a
combination the GPU or model cannot run (fp8 before Ada/Hopper, fp4 before Blackwell, tp not
dividing the heads, a context beyond the model's window) → 422 `unsupported-configuration`.""",
)
def evaluate_configuration(
    body: EvaluateRequest, catalog: CatalogDep, settings: SettingsDep, _reader: ReaderDep
) -> EvaluateResponse:
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
    evaluation = evaluate(
        config.gpu,
        config.model,
        config.precision,
        config.tp,
        config.efficiency.efficiency,
        context_tokens=body.context_tokens,
        batch_sizes=body.batch_sizes,
        prompt_tokens=body.context_tokens if body.prompt_tokens is None else body.prompt_tokens,
        candidate_precisions=config.candidate_precisions,
    )
    estimate = None
    cache_read = None
    if body.serving is not None and body.workload is not None:
        workload, serving = body.workload.to_workload(), body.serving.to_serving()
        setup = None
        if workload.prefix_reuse is not None:
            cache = body.prefix_cache
            setup = prefix_setup(
                workload,
                replicas=serving.replicas,
                kv_capacity_tokens=evaluation.kv_capacity_tokens,
                cache_tokens=None if cache is None else cache.cache_tokens,
                routing=None if cache is None else cache.routing,
            )
            cache_read = prefix_cache_read(setup, evaluation.step_model, evaluation.prefill.tokens)
        estimate = predict_latency(
            evaluation.step_model,
            workload,
            serving,
            kv_capacity_tokens=evaluation.kv_capacity_tokens,
            max_simulated_requests=settings.max_simulated_requests,
            time_budget_s=settings.request_timeout_s,
            prefix=setup,
        )
    return evaluate_response(
        config, evaluation, estimate, replicas=1 if body.serving is None else body.serving.replicas, prefix_cache=cache_read
    )
