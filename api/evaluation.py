"""From a request naming catalog rows to the planner's inputs, and latency predictions that fall
back to the simulator where the analytic model is known to be off.

`resolve_configuration` reads the GPU, model, precision and efficiency a request names (404 for
an unknown slug or profile) and applies the request's efficiency overrides; `predict_latency`
runs the analytic queueing model and, where it flags its own answer as outside the region the
fidelity study validated, the discrete-event simulator instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from api.inputs import engine_gpu, engine_read
from api.schemas.plan_response import EngineRead
from catalog.repository import Catalog
from planner.errors import SimulationLimitError, UnsupportedConfigurationError
from planner.plan_predict import per_replica_arrival_cv
from planner.plan_prefix import measured_prompts, prompt_saved_fraction, reduced_prompts
from planner.prefix_cache import BLOCK_TOKENS, PrefixReuse, Routing, prefix_hits
from planner.queueing import Prediction, RhoPoint, predict, rho_curve
from planner.simulator import SimulationResult, simulate
from planner.simulator_prefix import PrefixSimulation, replica_stream, simulate_prefix_replica
from planner.specs import Efficiency, GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel
from planner.workload import Serving, Workload

#: Requests the simulator runs when it stands in for the analytic model: the simulator's own
#: benchmark size, whose p99 confidence intervals are a few per cent wide.
FALLBACK_SIMULATED_REQUESTS = 20_000
#: One-at-a-time simulator steps per second, measured on the 2-core development machine under
#: load (prefill-carrying steps cannot be jumped; 116k–165k steps/s over chunked and unchunked
#: 70B runs), rounded down: it turns the service's request timeout into a step budget.
SIMULATED_PREFILL_STEPS_PER_S = 100_000
#: Catalog page size when listing quantization schemes for precision suggestions.
_PAGE = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class EfficiencyChoice:
    """A named efficiency profile with the request's overrides applied; `overridden` names them."""

    efficiency: Efficiency
    overridden: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Configuration:
    """One replica shape as the planner takes it, plus the alternatives a does-not-fit error may suggest."""

    gpu: GpuSpec
    model: ModelSpec
    precision: Precision
    tp: int
    efficiency: EfficiencyChoice
    candidate_precisions: tuple[Precision, ...]
    catalog_version: int
    #: The answer's `engine` section (api/inputs.py engine_read) when the request named an engine.
    engine: EngineRead | None = None


#: Override field → Efficiency field and the factor from the API's unit to SI.
OVERRIDE_FIELDS: dict[str, tuple[str, float]] = {
    "memory_efficiency": ("memory", 1.0),
    "compute_efficiency": ("compute", 1.0),
    "step_overhead_ms": ("step_overhead_s", 1e-3),
    "memory_reserve_fraction": ("memory_reserve_fraction", 1.0),
    "include_comm": ("include_comm", 1.0),
    "memory_compute_overlap": ("memory_compute_overlap", 1.0),
}


def apply_overrides(efficiency: Efficiency, overrides: dict[str, float | bool]) -> EfficiencyChoice:
    """`efficiency` with each given override (API units: ms for the overhead) replacing its value."""
    changes: dict[str, Any] = {}
    for name, value in overrides.items():
        field, to_si = OVERRIDE_FIELDS[name]
        changes[field] = value if isinstance(value, bool) else value * to_si
    if not changes:
        return EfficiencyChoice(efficiency=efficiency, overridden=())
    names = tuple(sorted(overrides))
    return EfficiencyChoice(
        efficiency=dataclasses.replace(
            efficiency, source=f"{efficiency.source}; overridden by the request: {', '.join(names)}", **changes
        ),
        overridden=names,
    )


def _quantization_slugs(catalog: Catalog) -> Iterator[dict[str, object]]:
    offset = 0
    while True:
        page = catalog.list_quantizations(limit=_PAGE, offset=offset)
        yield from page.items
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return


def candidate_precisions(catalog: Catalog, requested_kv_cache: str) -> tuple[Precision, ...]:
    """Every (weights, KV cache) pair the catalog allows, the requested KV format first within each
    weights scheme, so a suggestion changes as little as it can."""
    schemes = {str(record["slug"]): record for record in _quantization_slugs(catalog)}
    pairs: list[Precision] = []
    for slug, record in schemes.items():
        listed = cast("list[str] | None", record.get("kv_cache_dtypes"))
        allowed = [str(kv) for kv in listed or schemes]
        ordered = sorted((kv for kv in allowed if kv in schemes), key=lambda kv: kv != requested_kv_cache)
        pairs.extend(catalog.precision(slug, kv) for kv in ordered)
    return tuple(pairs)


def resolve_configuration(
    catalog: Catalog,
    *,
    gpu: str,
    model: str,
    weights: str,
    kv_cache: str,
    tp: int,
    efficiency_profile: str,
    overrides: dict[str, float | bool],
    engine: str | None = None,
) -> Configuration:
    """The specs a request names; raises the catalog's NotFoundError for an unknown slug or profile
    and UnsupportedConfigurationError for a KV format the weights scheme does not allow. With an
    `engine` and the calibrated profile, the GPU's efficiency is its profile under that engine
    (planner/engines.py; PlannerInputError for an engine that does not run on the GPU)."""
    gpu_spec = catalog.gpu_spec(gpu, efficiency_profile)
    engine_section = None
    if engine is not None:
        gpu_spec, choice = engine_gpu(catalog, gpu_spec, engine, efficiency_profile)
        engine_section = engine_read(engine, [choice])
    return Configuration(
        gpu=gpu_spec,
        model=catalog.model_spec(model),
        precision=catalog.precision(weights, kv_cache),
        tp=tp,
        efficiency=apply_overrides(gpu_spec.efficiency, overrides),
        candidate_precisions=candidate_precisions(catalog, kv_cache),
        catalog_version=catalog.catalog_version(),
        engine=engine_section,
    )


def check_simulation_size(
    workload: Workload, serving: Serving, *, requests: int, max_requests: int, time_budget_s: float
) -> None:
    """Refuse (SimulationLimitError → 422) a simulation larger than the service allows: more than
    `max_requests` arrivals, or more prefill-carrying steps than `time_budget_s` covers.

    Decode-only stretches are jumped over, but every step that prefills runs on its own. A prompt
    of p tokens takes at most ⌈p / (chunk_tokens − batch_limit)⌉ steps (the budget left when a full
    batch of decodes takes its share), one step without chunking; requests × that at the mean
    prompt is the estimate held against `time_budget_s` × `SIMULATED_PREFILL_STEPS_PER_S`.
    """
    if requests > max_requests:
        raise SimulationLimitError(
            f"{requests:,} requests exceed this service's limit of {max_requests:,} simulated requests per call "
            "(HEADROOM_MAX_SIMULATED_REQUESTS): ask for fewer",
            requests=requests,
            max_simulated_requests=max_requests,
        )
    per_step = None if serving.chunk_tokens is None else serving.chunk_tokens - serving.batch_limit
    steps_per_request = 1 if per_step is None else math.ceil(workload.prompt_tokens.mean / per_step)
    estimated = requests * steps_per_request  # requests × prefill steps each
    budget = int(time_budget_s * SIMULATED_PREFILL_STEPS_PER_S)
    if estimated > budget:
        # without chunking a prompt prefills in one step: there is no budget to print (None has no `:,`)
        chunking = (
            "whole-prompt prefill" if serving.chunk_tokens is None else f"a chunk budget of {serving.chunk_tokens:,} tokens"
        )
        raise SimulationLimitError(
            f"{requests:,} requests of {workload.prompt_tokens.mean:,.0f} prompt tokens through {chunking} "
            f"with up to {serving.batch_limit} decodes per step could take "
            f"{estimated:,} prefill steps, more than the {budget:,} this service simulates per call "
            f"(HEADROOM_REQUEST_TIMEOUT_S = {time_budget_s:g} s): simulate fewer requests"
            f"{'' if serving.chunk_tokens is None else ' or raise chunk_tokens'}",
            requests=requests,
            estimated_prefill_steps=estimated,
            max_prefill_steps=budget,
        )


Method = Literal["analytic", "simulated"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyEstimate:
    """The analytic prediction, and — where it flagged itself unreliable — the simulation that replaced
    its percentiles (`method` says which one the percentiles come from)."""

    method: Method
    prediction: Prediction
    simulation: SimulationResult | None
    curve: tuple[RhoPoint, ...]
    #: The simulation is one replica's (replica 0 of a deployment with a prefix cache), not the deployment's.
    one_replica: bool = False


def predict_latency(
    step_model: StepModel,
    workload: Workload,
    serving: Serving,
    *,
    kv_capacity_tokens: int,
    max_simulated_requests: int,
    time_budget_s: float,
    seed: int = 0,
    prefix: PrefixSetup | None = None,
) -> LatencyEstimate:
    """Analytic p50/p90/p99 at the workload's rate, or simulated ones where the analytic model is
    outside its validated region (`Prediction.reliable` False): a prediction known to be off is
    never returned as if it were good. Unstable load (ρ ≥ 1) is an answer from the analytic model.
    A fallback simulation is held to the same bounds as POST /v1/simulate (`check_simulation_size`).
    With `prefix` the queueing model plans its prompt mixture on the KV left beside the cache (as a
    plan's search does) and a fallback simulation is replica 0's with its LRU (`simulate_prefix_deployment`)."""
    modelled, capacity = (workload, kv_capacity_tokens) if prefix is None else (prefix.workload, prefix.kv_capacity_tokens)
    prediction = predict(step_model, modelled, serving, kv_capacity_tokens=capacity, curve=True)
    curve = (
        prediction.queueing.rho_curve
        if prediction.queueing is not None
        else rho_curve(step_model, modelled, serving, kv_capacity_tokens=capacity)
    )
    if prediction.unstable or prediction.reliable:
        return LatencyEstimate(method="analytic", prediction=prediction, simulation=None, curve=curve)
    requests = min(FALLBACK_SIMULATED_REQUESTS, max_simulated_requests)
    check_simulation_size(workload, serving, requests=requests, max_requests=max_simulated_requests, time_budget_s=time_budget_s)
    if prefix is not None:
        replica = simulate_prefix_deployment(
            step_model, workload, serving, prefix, requests=requests, seed=seed, warmup_fraction=0.1
        )
        return LatencyEstimate(
            method="simulated", prediction=prediction, simulation=replica.result, curve=curve, one_replica=True
        )
    simulation = simulate(step_model, workload, serving, kv_capacity_tokens=kv_capacity_tokens, requests=requests, seed=seed)
    return LatencyEstimate(method="simulated", prediction=prediction, simulation=simulation, curve=curve)


# --- prefix caching (workload.prefix_reuse) --------------------------------------------------------

CacheRouting = Literal["random", "prefix_aware", "as_measured"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedPrefill:
    """One class of requests' prefill at the evaluated prompt length: the fraction of requests that find
    `cached_tokens` in the cache and the step that prefills the rest (`StepModel.cached_prefill_s`)."""

    requests_fraction: float
    cached_tokens: int
    prompt_tokens: int
    time_s: float
    uncached_time_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixSetup:
    """A deployment's prefix cache as planner/plan_prefix.py plans one: the routing, the KV tokens each
    replica gives the cache, the Che hit rate and the prompt mixture the replicas prefill."""

    reuse: PrefixReuse
    routing: CacheRouting
    cache_tokens: int
    working_set_tokens: int
    #: KV tokens left to each replica's sequences (its capacity less the cache).
    kv_capacity_tokens: int
    hit_rate: float
    prefill_tokens_saved_fraction: float
    #: Of the requests: (fraction, cached tokens) — the rest find nothing (a measured rate: every request).
    classes: tuple[tuple[float, int], ...]
    #: The workload with the prompt lengths prefilled (each value carrying its cached tokens), no reuse left on it.
    workload: Workload

    def cached_prefills(self, step_model: StepModel, prompt_tokens: int) -> tuple[CachedPrefill, ...]:
        """The prefill of a `prompt_tokens` prompt for each class: its cached tokens capped at
        ⌊(p − 1)/16⌋·16 (the last token is always prefilled), against the same prefill uncached."""
        room = max(prompt_tokens - 1, 0) // BLOCK_TOKENS * BLOCK_TOKENS
        uncached = step_model.cached_prefill_s(prompt_tokens, 0)
        rows = []
        for fraction, tokens in self.classes:
            if self.routing == "as_measured":  # every prompt finds the measured share of its tokens
                cached = prompt_tokens - max(1, round(prompt_tokens * (1.0 - self.hit_rate)))
            else:
                cached = min(tokens, room)
            rows.append(
                CachedPrefill(
                    requests_fraction=fraction,
                    cached_tokens=cached,
                    prompt_tokens=prompt_tokens,
                    time_s=step_model.cached_prefill_s(prompt_tokens, cached),
                    uncached_time_s=uncached,
                )
            )
        return tuple(rows)


def prefix_setup(
    workload: Workload,
    *,
    replicas: int,
    kv_capacity_tokens: int,
    cache_tokens: int | None,
    routing: Routing | None,
) -> PrefixSetup:
    """The cache a deployment of `replicas` runs for `workload.prefix_reuse`. Routing: the request's, else
    the plan's default (prefix-aware when more than one replica shares more than one prefix, else random);
    cache: the request's tokens, else the whole per-replica working set (the largest size a plan tries).
    A measured hit rate is taken as given: no cache memory set aside, routing `as_measured`.
    Raises UnsupportedConfigurationError when the cache leaves too little KV for the p99 request."""
    reuse = workload.prefix_reuse
    assert reuse is not None
    prompt = workload.prompt_tokens
    if reuse.measured:
        assert reuse.hit_rate is not None
        mix = measured_prompts(prompt, reuse.hit_rate)
        return PrefixSetup(
            reuse=reuse,
            routing="as_measured",
            cache_tokens=0,
            working_set_tokens=0,
            kv_capacity_tokens=kv_capacity_tokens,
            hit_rate=reuse.hit_rate,
            prefill_tokens_saved_fraction=prompt_saved_fraction(prompt, mix),
            classes=((1.0, 0),),
            workload=replace(workload, prompt_tokens=mix, prefix_reuse=None),
        )
    chosen: Routing = routing or ("prefix_aware" if replicas > 1 and reuse.distinct_prefixes > 1 else "random")
    working_set = reuse.working_set_tokens(chosen, replicas)
    cache = working_set if cache_tokens is None else cache_tokens
    left = kv_capacity_tokens - cache
    need = prompt.quantile(0.99) + workload.output_tokens.quantile(0.99)
    if left < need:
        raise UnsupportedConfigurationError(
            f"a prefix cache of {cache:,} tokens leaves {left:,} of the replica's {kv_capacity_tokens:,} KV tokens to its "
            f"sequences, fewer than the p99 request's {need:,.0f}: give prefix_cache.cache_tokens a smaller value",
            constraint="kv_cache",
            cache_tokens=cache,
            kv_capacity_tokens=kv_capacity_tokens,
        )
    hits = prefix_hits(reuse, cache, chosen, replicas)
    mix = reduced_prompts(prompt, hits.classes)
    return PrefixSetup(
        reuse=reuse,
        routing=chosen,
        cache_tokens=cache,
        working_set_tokens=working_set,
        kv_capacity_tokens=left,
        hit_rate=hits.hit_rate,
        prefill_tokens_saved_fraction=prompt_saved_fraction(prompt, mix),
        classes=hits.classes,
        workload=replace(workload, prompt_tokens=mix, prefix_reuse=None),
    )


def simulate_prefix_deployment(
    step_model: StepModel,
    workload: Workload,
    serving: Serving,
    setup: PrefixSetup,
    *,
    requests: int,
    seed: int,
    warmup_fraction: float,
    checkpoint: Callable[[], None] | None = None,
) -> PrefixSimulation:
    """Replica 0 of the deployment (the busiest under prefix-aware routing) with its own LRU, as a plan's
    verification simulates it (planner/plan_prefix.py `_verified`): the deployment's workload, the
    arrival CV a random split leaves each replica, the KV left beside the cache."""
    per_replica_cv = per_replica_arrival_cv(workload.arrival_cv, serving.replicas)
    return simulate_prefix_replica(
        step_model,
        replace(workload, arrival_cv=per_replica_cv, prefix_reuse=None),
        serving,
        kv_capacity_tokens=setup.kv_capacity_tokens,
        reuse=setup.reuse,
        cache_tokens=setup.cache_tokens,
        routing="prefix_aware" if setup.routing == "prefix_aware" else "random",
        replicas=serving.replicas,
        requests=requests,
        seed=seed,
        warmup_fraction=warmup_fraction,
        checkpoint=checkpoint,
    )


def replica_share(setup: PrefixSetup, replicas: int) -> float:
    """The share of the deployment's arrivals replica 0 (the one simulated) receives."""
    if setup.routing == "as_measured":
        return 1.0 / replicas
    return replica_stream(setup.reuse, "prefix_aware" if setup.routing == "prefix_aware" else "random", replicas).share
