"""The capacity of given hardware: the largest request rate `gpus` GPUs of one type sustain within
the SLOs, the configuration that reaches it, what binds, and (on request) the simulator's word.

A configuration is (tp, precision, batch limit, chunk budget) from planner/candidates.py's
enumeration, run as r = ⌊gpus / tp⌋ replicas behind a random split. Each replica sees the
offered stream thinned with probability 1/r, so its inter-arrival CV is c_r² = c²/r + (r − 1)/r
(`planner.plan_predict.per_replica_arrival_cv`, the split the plan's verification simulates), and its
largest rate meeting every SLO, μ_c, is the planner's own root-find on that per-replica stream
(`Planner.mu`, planner/queueing.py `max_rps_at_slo`). The capacity of the configuration is

    Λ_c = r · μ_c                                  (r replicas, each at its largest rate)

With whole instances (`CapacityRequest.instance`, n instances of g GPUs, NVLink domain d) a replica
never straddles two: r = n · ⌊g / tp⌋ for tp ≤ d (tp > d is not considered), and a pinned replica
count R takes r = R where the hardware holds that many (the rest idle). The answer is the
configuration with the largest Λ_c (ties: fewer GPUs used, then the smaller
tp). μ_c ≤ exact saturation ≤ the closed-form saturation bound of planner/candidates.py, so
r × either bound is an upper bound on Λ_c: configurations are taken in order of their bound and
the search stops when the next bound cannot beat the best capacity found — the root-find, the
expensive step, runs only for configurations that could win.

With `workload.prefix_reuse` the capacity is sought with planner/plan_prefix.py's machinery
(`prefix_capacity`). A measured hit rate h is taken as given: every prompt prefills (1 − h) of its
tokens, the rest counted as cached context (`HistogramLength.cached`); no cache memory is set aside
and the routing is "as_measured". Shared prefixes are tried, for each tp the hardware runs (r
replicas), at ¼, ½ and all of the per-replica working set (`CACHE_FRACTIONS`), under random routing
(every replica sees every prefix) and, when r > 1, prefix-aware routing (each replica a shard of the
prefixes; the deployment's capacity is then the busiest replica's μ over its share of the traffic,
`CapacityRequest.busiest_share`, which Zipf popularity makes more than 1/r). Each trial's Che hit
probabilities give the cached-prefill mixture (`reduced_prompts`) and each replica's KV capacity
loses the cache's tokens (planner/planning.py `with_prefix_cache`). The capacity is the largest of
the trials and of the capacity without a cache; the answer states the hit rate, cache tokens and
routing assumed (`CapacityResult.prefix_caching`). Verification simulates the busiest replica with
its own LRU (planner/simulator_prefix.py), as a plan's is.

With multi-turn sessions (`PrefixReuse.sessions`) the hit rate depends on the rate sought, so a trial
(tp, routing, cache fraction) is built at a rate λ (the cache a fraction of the working set at λ, the
session model's hits at λ) and g(λ) is the hardware's capacity under it. λ is sustainable when
g(λ) ≥ λ; g falls as λ rises, so the answer is the fixed point λ* = g(λ*) in [capacity without a
cache, g(that)], narrowed from below by geometric bisection to MU_RELATIVE_TOLERANCE (μ's own 1 %),
reported at λ* with the hits at λ* (`_session_capacity`).

Speculative decoding (`CapacityRequest.speculative` auto or on) adds each group's speculating variants
as a plan's search does (planner/candidates.py `speculative_groups`): the model's search draft head, or
a catalog model drafting for it (`CapacityInputs.draft_model`, at the request's given α).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from typing import Any, Literal

from planner.candidates import (
    BATCH_LIMITS,
    CHUNK_BUDGETS,
    TP_DEGREES,
    Drop,
    Option,
    enumerate_all_options,
    enumerate_groups,
    speculative_groups,
)
from planner.capacity_curve import CurvePoint, binding_metric, capacity_mu, latency_curve, where
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.pipeline import PP_DEGREES
from planner.plan_predict import option_serving, per_replica_arrival_cv, verify_replica_share
from planner.plan_prefix import (
    CACHE_FRACTIONS,
    measured_prompts,
    prefix_simulation_report,
    prompt_saved_fraction,
    reduced_prompts,
)
from planner.plan_result import PrefixCaching, SpeculativeChoice
from planner.plan_search import Planner
from planner.plan_speculative import speculative_choice
from planner.planning import (
    MAX_VERIFY_ADJUSTMENTS,
    VERIFY_CAPACITY_STEP,
    VERIFY_REQUESTS,
    infeasible_from_drops,
    with_prefix_cache,
)
from planner.prefix_cache import BLOCK_TOKENS, PrefixReuse, Routing, prefix_hits
from planner.rate_search import MU_RELATIVE_TOLERANCE
from planner.simulator_prefix import replica_stream, simulate_prefix_replica
from planner.specs import GpuSpec, InstanceTypeSpec, ModelSpec, Precision
from planner.speculative import SEARCH_DRAFT_TOKENS
from planner.workload import Slo, Workload

#: Capacities within this relative distance are a tie (μ itself is bracketed to 1 %, planner/rate_search.py).
_TIE = 1e-9


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityInputs:
    """What the API gathered from the catalog: the model, the one GPU type and the precisions allowed."""

    model: ModelSpec
    gpu: GpuSpec
    precisions: tuple[Precision, ...]
    #: Draft methods with a published head for the model (planner/planning.py `PlanningInputs.draft_methods`).
    draft_methods: frozenset[str] | None = None
    #: A catalog model drafting instead of a head (constraints.pin.draft_model; needs `CapacityRequest.acceptance_rate`).
    draft_model: ModelSpec | None = None

    def __post_init__(self) -> None:
        if not self.precisions:
            raise PlannerInputError("no precisions to size capacity with: allow at least one", constraint="precisions")


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityRequest:
    """The hardware, the workload's shape (its rate is what is sought and is ignored), the SLOs and the pins."""

    workload: Workload
    slo: Slo
    gpus: int
    tp: int | None = None
    #: pinned pipeline stages (planner/pipeline.py PP_DEGREES); None searches them where no node holds the model
    pp: int | None = None
    batch_limit: int | None = None
    chunk_tokens: int | None = None
    #: whether `chunk_tokens` is pinned (None pinned = no chunking; not pinned = searched)
    chunk_pinned: bool = False
    #: a pinned replica count (at most what the hardware holds at the tp chosen)
    replicas: int | None = None
    #: whole instances: `gpus` = instances × instance.gpus, and no replica straddles two
    instance: InstanceTypeSpec | None = None
    verify: bool = False
    verify_requests: int = VERIFY_REQUESTS
    seed: int = 0
    tp_degrees: tuple[int, ...] = TP_DEGREES
    batch_limits: tuple[int, ...] = BATCH_LIMITS
    chunk_budgets: tuple[int | None, ...] = CHUNK_BUDGETS
    #: Speculative decoding as in a plan (planner/plan_speculative.py): off, auto (every configuration
    #: with and without the model's search draft head; the largest capacity wins) or on (only with it).
    speculative: Literal["auto", "off", "on"] = "off"
    #: a pinned draft length (replaces planner/speculative.py SEARCH_DRAFT_TOKENS)
    draft_tokens: int | None = None
    #: a given per-token acceptance rate (replaces the method's default α)
    acceptance_rate: float | None = None
    #: KV tokens each replica gives its prefix cache (set by `prefix_capacity` for one trial)
    prefix_cache_tokens: int = 0
    #: The busiest replica's share of the traffic when it exceeds 1/r (prefix-aware routing of Zipf-popular
    #: prefixes, planner/simulator_prefix.py `replica_stream`): the deployment's capacity is then μ / share
    busiest_share: float | None = None

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise PlannerInputError(f"gpus must be >= 1, got {self.gpus}", constraint="gpus")
        if self.instance is not None and self.gpus % self.instance.gpus:
            raise PlannerInputError(
                f"gpus ({self.gpus}) must be whole {self.instance.name} instances of {self.instance.gpus} GPUs", constraint="gpus"
            )
        if self.replicas is not None and self.replicas < 1:
            raise PlannerInputError(f"replicas must be >= 1, got {self.replicas}", constraint="pin.replicas")
        if self.chunk_tokens is not None:
            object.__setattr__(self, "chunk_pinned", True)
        if self.tp is not None and not 1 <= self.tp <= self.gpus:
            raise PlannerInputError(f"tp {self.tp} needs 1 to {self.gpus} GPUs (the hardware given)", constraint="tp")
        if self.pp is not None and self.pp not in PP_DEGREES:
            raise PlannerInputError(
                f"a pinned pp must be one of the pipeline degrees the planner models ({', '.join(map(str, PP_DEGREES))}), got {self.pp}",
                constraint="pin.pp",
                field="constraints.pin.pp",
            )
        if self.pp is not None and self.pp > 1 and self.workload.prefix_reuse is not None:
            raise PlannerInputError(
                "pipeline stages with a prefix cache: the cache trials size replicas of tp GPUs (pin pp 1)",
                constraint="pin.pp",
                field="constraints.pin.pp",
            )
        if self.pp is not None and self.pp > 1 and self.instance is not None:
            raise PlannerInputError(
                "pipeline stages with whole instances: a replica over several instances is not priced (pin pp 1 or give gpus)",
                constraint="pin.pp",
                field="constraints.pin.pp",
            )
        if self.batch_limit is not None and self.batch_limit < 1:
            raise PlannerInputError(f"batch_limit must be >= 1, got {self.batch_limit}", constraint="batch_limit")
        if self.chunk_tokens is not None and self.batch_limit is not None and self.chunk_tokens <= self.batch_limit:
            raise PlannerInputError(
                f"chunk_tokens ({self.chunk_tokens}) must exceed batch_limit ({self.batch_limit})", constraint="chunk_tokens"
            )
        if self.verify_requests < 100:
            raise PlannerInputError(f"verify_requests must be >= 100, got {self.verify_requests}")

    def rate_multiplier(self, tp: int) -> float:
        """The deployment's rate per unit of one replica's: r under an even split, 1 / the busiest share otherwise."""
        return float(self.replicas_for(tp)) if self.busiest_share is None else 1.0 / self.busiest_share

    def replicas_for(self, tp: int) -> int:
        """Replicas of tp GPUs (a pipeline's tp × pp) the hardware runs: ⌊gpus / tp⌋, or n · ⌊g / tp⌋ on n whole instances
        (0 when tp exceeds an instance's NVLink domain); a pinned count when the hardware holds it, else 0."""
        if self.instance is not None:
            held = self.gpus // self.instance.gpus * self.instance.replicas_per_instance(tp)
        else:
            held = self.gpus // tp
        if self.replicas is not None:
            return self.replicas if self.replicas <= held else 0
        return held


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityConfiguration:
    gpu: str
    tp: int
    replicas: int
    gpus_used: int
    weights_precision: str
    kv_precision: str
    batch_limit: int
    chunk_tokens: int | None
    instance_type: str | None = None
    instances: int | None = None
    gpus_per_instance: int | None = None
    pp: int = 1  # pipeline stages: a replica is tp × pp GPUs


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyStep:
    """One simulation: the whole deployment's rate, one replica simulated at its share, and the verdict."""

    arrival_rate_rps: float
    per_replica_rate_rps: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    stable: bool
    misses: tuple[str, ...]
    meets_slo: bool
    requests_simulated: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityResult:
    """The largest sustainable rate and everything that explains it; SI units, the unit in each name."""

    max_arrival_rate_rps: float  # whole deployment; the simulator's agreed rate when verified
    analytic_arrival_rate_rps: float  # replicas × μ from the queueing model
    output_tokens_per_s: float  # max_arrival_rate_rps × E[output tokens]
    configuration: CapacityConfiguration
    max_rps_per_replica: float  # μ
    saturation_rps_per_replica: float
    utilisation: float  # μ / saturation
    binding: str  # "ttft", "tpot", "e2e" or "saturation"
    per_replica_arrival_cv: float
    curve: tuple[CurvePoint, ...]
    cost_usd_per_hour: float | None  # gpus_used × the GPU's on-demand price; None when unpriced
    verification: tuple[VerifyStep, ...] | None
    configurations_evaluated: int
    configurations_considered: int
    #: The speculative decoding the configuration runs (`CapacityRequest.speculative`); None without.
    speculative: SpeculativeChoice | None = None
    #: With `workload.prefix_reuse`: the hit rate, cache tokens per replica and routing the capacity assumes.
    prefix_caching: PrefixCaching | None = None
    #: With `workload.prefix_reuse`: the capacity of the same hardware without a cache (None: none meets the SLOs).
    max_arrival_rate_rps_without_cache: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class _PrefixTrial:
    """One prefix-cache assumption a capacity search runs under: the reuse, the cache and routing, and the
    workload with its whole prompts (the simulator draws the hits itself)."""

    reuse: PrefixReuse
    cache_tokens: int
    routing: Routing
    workload: Workload


@dataclass(slots=True)
class _Best:
    option: Option | None = None
    replicas: int = 0
    mu_rps: float = 0.0
    total_rps: float = 0.0


def _beats(total: float, gpus_used: int, tp: int, option_id: str, best: _Best) -> bool:
    """More capacity; on a tie fewer GPUs used, then the smaller tp, then the smaller id (order-free)."""
    if best.option is None or total > best.total_rps * (1 + _TIE):
        return True
    if total < best.total_rps * (1 - _TIE):
        return False
    best_key = (best.replicas * best.option.group.gpus_per_replica, best.option.group.gpus_per_replica, best.option.id)
    return (gpus_used, tp, option_id) < best_key


def _priced(gpu: GpuSpec) -> GpuSpec:
    """Capacity needs no price, but the enumeration drops an unpriced GPU: give it a unit price,
    which only orders nothing here (every configuration runs on the same GPU type)."""
    return gpu if gpu.price_usd_per_hour_on_demand > 0 else replace(gpu, price_usd_per_hour_on_demand=1.0)


def max_capacity(request: CapacityRequest, inputs: CapacityInputs) -> CapacityResult:
    """The largest rate `request.gpus` GPUs of `inputs.gpu` sustain within `request.slo` (module docstring).

    Raises InfeasiblePlanError, naming the culprit, when no configuration meets the SLOs even
    unloaded (or holds the model); PlannerInputError on malformed input."""
    if request.workload.prefix_reuse is not None:
        return prefix_capacity(request, inputs)
    return _max_capacity(request, inputs, None)


def prefix_capacity(request: CapacityRequest, inputs: CapacityInputs) -> CapacityResult:
    """The capacity with `workload.prefix_reuse` (module docstring): the largest over the cache trials and no cache."""
    reuse = request.workload.prefix_reuse
    assert reuse is not None
    prompt = request.workload.prompt_tokens
    plain = replace(request, workload=replace(request.workload, prefix_reuse=None))
    unverified = replace(plain, verify=False)
    try:
        without: CapacityResult | None = _max_capacity(unverified, inputs, None)
    except InfeasiblePlanError as error:
        without, refusal = None, error
    if reuse.sessions is not None:
        if without is None:
            raise refusal
        return _session_capacity(request, inputs, plain, without)
    trials: list[tuple[CapacityRequest, _PrefixTrial, PrefixCaching]] = []
    if reuse.measured:
        assert reuse.hit_rate is not None
        mix = measured_prompts(prompt, reuse.hit_rate)
        chosen = PrefixCaching(
            hit_rate=reuse.hit_rate,
            cache_tokens=0,
            routing="as_measured",
            prefill_tokens_saved_fraction=prompt_saved_fraction(prompt, mix),
        )
        trial = _PrefixTrial(reuse=reuse, cache_tokens=0, routing="random", workload=plain.workload)
        trials.append((replace(unverified, workload=replace(plain.workload, prompt_tokens=mix)), trial, chosen))
    else:
        candidates = (request.tp,) if request.tp is not None else request.tp_degrees
        for tp in (t for t in candidates if t <= request.gpus and request.replicas_for(t) >= 1):
            replicas = request.replicas_for(tp)
            routings: tuple[Routing, ...] = (
                ("random", "prefix_aware") if replicas > 1 and reuse.distinct_prefixes > 1 else ("random",)
            )
            for routing in routings:
                working_set = reuse.working_set_tokens(routing, replicas)
                share = replica_stream(reuse, routing, replicas).share  # the busiest replica's (replica 0's) share
                for fraction in CACHE_FRACTIONS:
                    cache = int(fraction * working_set) // BLOCK_TOKENS * BLOCK_TOKENS  # whole 16-token blocks
                    hits = prefix_hits(reuse, cache, routing, replicas)
                    mix = reduced_prompts(prompt, hits.classes)
                    chosen = PrefixCaching(
                        hit_rate=hits.hit_rate,
                        cache_tokens=hits.cache_tokens,
                        routing=routing,
                        prefill_tokens_saved_fraction=prompt_saved_fraction(prompt, mix),
                    )
                    trial = _PrefixTrial(reuse=reuse, cache_tokens=hits.cache_tokens, routing=routing, workload=plain.workload)
                    trial_request = replace(
                        unverified,
                        tp=tp,
                        workload=replace(plain.workload, prompt_tokens=mix),
                        prefix_cache_tokens=hits.cache_tokens,
                        busiest_share=share if routing == "prefix_aware" else None,
                    )
                    trials.append((trial_request, trial, chosen))
    best: tuple[CapacityResult, CapacityRequest, _PrefixTrial, PrefixCaching] | None = None
    for trial_request, trial, chosen in trials:
        try:
            found = _max_capacity(trial_request, inputs, trial)
        except InfeasiblePlanError:
            continue  # e.g. the cache leaves too little KV for the p99 request at this tp
        if best is None or found.analytic_arrival_rate_rps > best[0].analytic_arrival_rate_rps * (1 + _TIE):
            best = (found, trial_request, trial, chosen)
    rate_without = None if without is None else without.analytic_arrival_rate_rps
    if best is None or (rate_without is not None and best[0].analytic_arrival_rate_rps <= rate_without * (1 + _TIE)):
        if without is None:
            raise refusal
        none = PrefixCaching(hit_rate=0.0, cache_tokens=0, routing="random", prefill_tokens_saved_fraction=0.0)
        result = _max_capacity(plain, inputs, None) if request.verify else without
        return replace(result, prefix_caching=none, max_arrival_rate_rps_without_cache=rate_without)
    _found, trial_request, trial, chosen = best
    result = _max_capacity(replace(trial_request, verify=request.verify), inputs, trial) if request.verify else _found
    return replace(result, prefix_caching=chosen, max_arrival_rate_rps_without_cache=rate_without)


#: At most this many capacity searches narrow one session trial's self-consistent rate (module docstring).
MAX_SESSION_STEPS = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class _SessionTrial:
    """One (tp, routing, cache fraction) of the session cache, built at one request rate."""

    request: CapacityRequest
    trial: _PrefixTrial
    chosen: PrefixCaching


def _session_capacity(
    request: CapacityRequest, inputs: CapacityInputs, plain: CapacityRequest, without: CapacityResult
) -> CapacityResult:
    """The capacity with multi-turn sessions, whose hit rate falls as the rate rises (more sessions share each
    cache): per (tp, routing, cache fraction) the largest rate λ at which the hardware, with the hits the session
    model gives at λ itself, holds at least λ (module docstring); the largest over the trials and no cache."""
    reuse = request.workload.prefix_reuse
    assert reuse is not None and reuse.sessions is not None
    unverified = replace(plain, verify=False)
    floor = without.analytic_arrival_rate_rps
    best: tuple[float, CapacityResult, _SessionTrial] | None = None
    candidates = (request.tp,) if request.tp is not None else request.tp_degrees
    for tp in (t for t in candidates if t <= request.gpus and request.replicas_for(t) >= 1):
        replicas = request.replicas_for(tp)
        # session-sticky routing only: random routing gives every replica the same sessions per second and the same
        # working set (`working_set_tokens` does not depend on it) but a hit only with probability 1/r, so at every
        # rate and cache it holds no more (planner/prefix_cache.py `session_keep_probability`)
        routing: Routing = "prefix_aware" if replicas > 1 else "random"
        for fraction in CACHE_FRACTIONS:
            beat = floor if best is None else best[0]
            found = _session_fixed_point(unverified, inputs, reuse, tp, replicas, routing, fraction, floor, beat)
            if found is not None and found[0] > beat * (1 + _TIE):
                best = found
    if best is None or best[0] <= floor * (1 + _TIE):
        none = PrefixCaching(hit_rate=0.0, cache_tokens=0, routing="random", prefill_tokens_saved_fraction=0.0)
        result = _max_capacity(plain, inputs, None) if request.verify else without
        return replace(result, prefix_caching=none, max_arrival_rate_rps_without_cache=floor)
    rate, found_result, trial = best
    result = _at_rate(found_result, rate, request.workload)
    if request.verify:  # the simulator draws the sessions at each rate it simulates: its own fixed point
        verified = _max_capacity(replace(trial.request, verify=True), inputs, trial.trial)
        assert verified.verification is not None
        result = replace(
            result,
            max_arrival_rate_rps=min(rate, verified.max_arrival_rate_rps),
            output_tokens_per_s=min(rate, verified.max_arrival_rate_rps) * request.workload.output_tokens.mean,
            verification=verified.verification,
        )
    return replace(result, prefix_caching=trial.chosen, max_arrival_rate_rps_without_cache=floor)


def _session_fixed_point(
    unverified: CapacityRequest,
    inputs: CapacityInputs,
    reuse: PrefixReuse,
    tp: int,
    replicas: int,
    routing: Routing,
    fraction: float,
    floor_rps: float,
    beat_rps: float,
) -> tuple[float, CapacityResult, _SessionTrial] | None:
    """The largest rate λ (to MU_RELATIVE_TOLERANCE) with g(λ) ≥ λ, g(λ) the capacity of the trial built at λ;
    None when not even the capacity without a cache holds (g(floor) < floor), or when g(floor), which bounds λ*,
    does not beat `beat_rps` (the best trial so far). g falls as λ rises (fewer hits, a
    larger cache out of the KV), so λ* = g(λ*) lies in [floor, g(floor)]: narrowed by geometric bisection, each
    success also lowering the upper end to g(mid) (λ* ≤ g(mid) when λ* ≥ mid)."""
    prompt = unverified.workload.prompt_tokens

    def build(rate_rps: float) -> _SessionTrial:
        working_set = reuse.working_set_tokens(routing, replicas, arrival_rate_rps=rate_rps)
        cache = int(fraction * working_set) // BLOCK_TOKENS * BLOCK_TOKENS
        hits = prefix_hits(reuse, cache, routing, replicas, arrival_rate_rps=rate_rps)
        mix = reduced_prompts(prompt, hits.classes)
        chosen = PrefixCaching(
            hit_rate=hits.hit_rate,
            cache_tokens=hits.cache_tokens,
            routing=routing,
            prefill_tokens_saved_fraction=prompt_saved_fraction(prompt, mix),
        )
        trial = _PrefixTrial(reuse=reuse, cache_tokens=hits.cache_tokens, routing=routing, workload=unverified.workload)
        request = replace(
            unverified, tp=tp, workload=replace(unverified.workload, prompt_tokens=mix), prefix_cache_tokens=hits.cache_tokens
        )
        return _SessionTrial(request=request, trial=trial, chosen=chosen)

    def capacity_at(rate_rps: float) -> tuple[float, CapacityResult | None, _SessionTrial]:
        trial = build(rate_rps)
        try:
            found = _max_capacity(trial.request, inputs, trial.trial)
        except InfeasiblePlanError:
            return 0.0, None, trial  # e.g. the cache leaves too little KV for the p99 request
        return found.analytic_arrival_rate_rps, found, trial

    held, result, trial = capacity_at(floor_rps)
    if result is None or held < floor_rps or held <= beat_rps * (1 + _TIE):
        return None
    low, low_result, low_trial = floor_rps, result, trial
    high = held
    for _ in range(MAX_SESSION_STEPS):
        if high <= low * (1 + MU_RELATIVE_TOLERANCE):
            break
        mid = math.sqrt(low * high)
        held, result, trial = capacity_at(mid)
        if result is not None and held >= mid:
            low, low_result, low_trial = mid, result, trial
            high = min(high, held)
        else:
            high = mid
    return low, low_result, low_trial


def _at_rate(result: CapacityResult, rate_rps: float, workload: Workload) -> CapacityResult:
    """`result` (a configuration's capacity g ≥ `rate_rps`) answered at `rate_rps`: the rate, μ and utilisation scaled
    down to it, the curve cut at the new μ."""
    scale = rate_rps / result.analytic_arrival_rate_rps
    mu = result.max_rps_per_replica * scale
    return replace(
        result,
        max_arrival_rate_rps=rate_rps,
        analytic_arrival_rate_rps=rate_rps,
        output_tokens_per_s=rate_rps * workload.output_tokens.mean,
        max_rps_per_replica=mu,
        utilisation=mu / result.saturation_rps_per_replica,
        curve=tuple(p for p in result.curve if p.arrival_rate_rps <= mu * (1 + _TIE)),
    )


def _max_capacity(request: CapacityRequest, inputs: CapacityInputs, prefix: _PrefixTrial | None) -> CapacityResult:
    """The search of `max_capacity`; `prefix`: the cache trial it runs under (its simulator with an LRU)."""
    workload, slo = request.workload.at_rate(1.0), request.slo
    options, drops = _options(request, inputs)
    if not options:
        raise infeasible_from_drops(drops, slo, ())

    # one planner per replica size (tp, or tp × pp): the per-replica arrival CV depends on r = ⌊gpus / size⌋
    planners: dict[int, Planner] = {}
    for size in sorted({o.group.gpus_per_replica for o in options}):
        replicas = request.replicas_for(size)
        per_replica = replace(workload, arrival_cv=per_replica_arrival_cv(workload.arrival_cv, replicas))
        planners[size] = Planner([o for o in options if o.group.gpus_per_replica == size], per_replica)

    # stage 0: r × closed-form bound; stage 1: r × exact saturation; stage 2: r × μ (final)
    heap: list[tuple[float, int, str]] = [
        (-request.rate_multiplier(o.group.gpus_per_replica) * o.saturation_bound_rps, 0, o.id) for o in options
    ]
    heapq.heapify(heap)
    by_id = {o.id: o for o in options}
    best = _Best()
    never: list[tuple[str, float, str]] = []
    evaluated = 0
    while heap:
        negative_bound, stage, option_id = heapq.heappop(heap)
        bound = -negative_bound
        if best.option is not None and bound < best.total_rps * (1 - _TIE):
            break  # nothing left can beat (or tie) the best
        option = by_id[option_id]
        tp, replicas = option.group.gpus_per_replica, request.replicas_for(option.group.gpus_per_replica)
        multiplier = request.rate_multiplier(tp)
        planner = planners[tp]
        if stage == 0:
            heapq.heappush(heap, (-multiplier * planner.saturation(option), 1, option_id))
            continue
        if stage == 1:
            evaluated += 1
            mu = capacity_mu(planner, option, slo)
            if isinstance(mu, tuple):
                metric, _reason, predicted = mu
                if metric in ("ttft", "tpot", "e2e") and predicted is not None:
                    never.append((metric, predicted, where(option)))
                continue
            heapq.heappush(heap, (-multiplier * mu, 2, option_id))
            continue
        total = bound
        if _beats(total, replicas * tp, tp, option_id, best):
            best = _Best(option=option, replicas=replicas, mu_rps=total / multiplier, total_rps=total)
    if best.option is None:
        raise infeasible_from_drops(drops, slo, never)
    return _result(
        request, inputs, best.option, best, planners[best.option.group.gpus_per_replica], evaluated, len(options), prefix
    )


def _step(report: dict[str, Any], rate_rps: float) -> VerifyStep:
    simulated = report["simulated"]
    return VerifyStep(
        arrival_rate_rps=rate_rps,
        per_replica_rate_rps=report["per_replica_rate_rps"],
        ttft_s=simulated["ttft_s"]["at_percentile"],
        tpot_s=simulated["tpot_s"]["at_percentile"],
        e2e_s=simulated["e2e_s"]["at_percentile"],
        stable=bool(simulated["stable"]),
        misses=tuple(report["misses"]),
        meets_slo=bool(report["meets_slo"]),
        requests_simulated=int(report["requests_simulated"]),
    )


def _prefix_verify(
    option: Option, trial: _PrefixTrial, rate_rps: float, replicas: int, slo: Slo, requests: int, seed: int
) -> dict[str, Any]:
    """The busiest replica simulated with its own LRU prefix cache (planner/simulator_prefix.py), reported as `verify_replica_share`'s."""
    workload = replace(
        trial.workload,
        arrival_rate_rps=rate_rps,
        arrival_cv=per_replica_arrival_cv(trial.workload.arrival_cv, replicas),
        prefix_reuse=None,
    )
    simulation = simulate_prefix_replica(
        option.group.step_model,
        workload,
        option_serving(option),
        kv_capacity_tokens=option.group.kv_capacity_tokens,
        reuse=trial.reuse,
        cache_tokens=trial.cache_tokens,
        routing=trial.routing,
        replicas=replicas,
        requests=requests,
        seed=seed,
    )
    return prefix_simulation_report(simulation, slo, option.group.gpu.slug, replicas)


def _verified(
    request: CapacityRequest, option: Option, replicas: int, rate_rps: float, prefix: _PrefixTrial | None = None
) -> tuple[VerifyStep, ...]:
    """Simulate at the analytic rate; on a miss lower it by the step the plan's verification adds
    capacity with (÷ 1.10), at most MAX_VERIFY_ADJUSTMENTS times. Raises when the simulator never agrees."""
    steps: list[VerifyStep] = []
    for adjustment in range(MAX_VERIFY_ADJUSTMENTS + 1):
        rate = rate_rps / VERIFY_CAPACITY_STEP**adjustment
        report = (
            verify_replica_share(option, request.workload, rate, replicas, request.slo, request.verify_requests, request.seed)
            if prefix is None
            else _prefix_verify(option, prefix, rate, replicas, request.slo, request.verify_requests, request.seed)
        )
        steps.append(_step(report, rate))
        if report["meets_slo"]:
            return tuple(steps)
    last = steps[-1]
    raise InfeasiblePlanError(
        f"the simulator finds the SLOs missed ({', '.join(last.misses)}) on {where(option)} × {replicas} even at "
        f"{last.arrival_rate_rps:.4g} req/s, {len(steps) - 1} steps of 10 % below the queueing model's "
        f"{rate_rps:.4g} req/s",
        constraint="verification",
        tried_rates_rps=[s.arrival_rate_rps for s in steps],
    )


def _result(
    request: CapacityRequest,
    inputs: CapacityInputs,
    option: Option,
    best: _Best,
    planner: Planner,
    evaluated: int,
    considered: int,
    prefix: _PrefixTrial | None = None,
) -> CapacityResult:
    g, replicas, mu = option.group, best.replicas, best.mu_rps
    saturation = planner.saturation(option)
    steps = _verified(request, option, replicas, best.total_rps, prefix) if request.verify else None
    rate = steps[-1].arrival_rate_rps if steps else best.total_rps
    gpus_used = replicas * g.gpus_per_replica
    price = inputs.gpu.price_usd_per_hour_on_demand
    instance = request.instance
    instances = None if instance is None else request.gpus // instance.gpus
    return CapacityResult(
        max_arrival_rate_rps=rate,
        analytic_arrival_rate_rps=best.total_rps,
        output_tokens_per_s=rate * request.workload.output_tokens.mean,  # requests/s × mean output tokens per request
        configuration=CapacityConfiguration(
            gpu=g.gpu.slug,
            tp=g.tp,
            pp=g.pp,
            replicas=replicas,
            gpus_used=gpus_used,
            weights_precision=g.precision.weights.slug,
            kv_precision=g.precision.kv_cache.slug,
            batch_limit=option.batch_limit,
            chunk_tokens=option.chunk_tokens,
            instance_type=None if instance is None else instance.name,
            instances=instances,
            gpus_per_instance=None if instance is None else instance.gpus,
        ),
        max_rps_per_replica=mu,
        saturation_rps_per_replica=saturation,
        utilisation=mu / saturation,
        binding=binding_metric(planner, option, request.slo, mu, saturation),
        per_replica_arrival_cv=planner.mix.arrival_cv,
        curve=latency_curve(planner, option, request.slo, mu, saturation),
        cost_usd_per_hour=_cost(instance, instances, gpus_used, price),
        verification=steps,
        configurations_evaluated=evaluated,
        configurations_considered=considered,
        speculative=speculative_choice(option, request.workload),
    )


def _cost(instance: InstanceTypeSpec | None, instances: int | None, gpus_used: int, price: float) -> float | None:
    """Whole instances × their price; else GPUs used × on-demand $/GPU-h; None when unpriced."""
    if instance is not None and instances is not None:
        return instances * instance.usd_per_hour
    return gpus_used * price if price > 0 else None


def _options(request: CapacityRequest, inputs: CapacityInputs) -> tuple[list[Option], list[Drop]]:
    """Every configuration of the one GPU type within the pins (tp up to `gpus`, each tp the hardware
    runs at least one replica of), and what was dropped."""
    workload = request.workload.at_rate(1.0)
    candidates = (request.tp,) if request.tp is not None else request.tp_degrees
    tp_degrees = tuple(t for t in candidates if t <= request.gpus and request.replicas_for(t) >= 1)
    if not tp_degrees:
        raise PlannerInputError(
            "no tensor-parallel degree fits the hardware"
            + (f" at {request.replicas} replicas" if request.replicas is not None else "")
            + (f": a replica must sit in one {request.instance.name} NVLink domain" if request.instance is not None else ""),
            constraint="pin.replicas" if request.replicas is not None else "tp",
        )
    # pipeline stages where no node holds the model (or pinned): GPU mode only, a replica never spans instances
    # (and not under a prefix-cache trial, whose replica counts are taken per tp)
    staged = request.instance is None and request.workload.prefix_reuse is None
    pp_degrees = (1,) if not staged else PP_DEGREES if request.pp is None else (request.pp,)
    groups, drops = enumerate_groups(
        model=inputs.model,
        gpus=(_priced(inputs.gpu),),
        precisions=inputs.precisions,
        workload=workload,
        slo=request.slo,
        tp_degrees=tp_degrees,
        pp_degrees=pp_degrees,
    )
    groups = [g for g in groups if request.replicas_for(g.gpus_per_replica) >= 1]  # a pipeline wider than the hardware
    if request.prefix_cache_tokens:
        groups, short = with_prefix_cache(groups, workload, request.prefix_cache_tokens)
        drops = [*drops, *short]
    if request.speculative != "off":
        lengths = SEARCH_DRAFT_TOKENS if request.draft_tokens is None else (request.draft_tokens,)
        variants = speculative_groups(
            groups,
            inputs.model,
            workload,
            draft_tokens=lengths,
            published=inputs.draft_methods,
            acceptance_rate=request.acceptance_rate,
            draft_model=inputs.draft_model,
        )
        if request.speculative == "on" and groups and not variants:
            draft = (
                f"draft model {inputs.draft_model.slug} leaves no KV cache for one average request beside it"
                if inputs.draft_model is not None
                else "no published head for the model, no vocabulary to cost its LM head, or no KV cache left beside it"
            )
            raise InfeasiblePlanError(
                f"speculative is 'on' but no draft can be offered for {inputs.model.slug} on this hardware ({draft}); "
                "set it to 'auto' or 'off'",
                constraint="speculative",
            )
        groups = variants if request.speculative == "on" else [*groups, *variants]
    batch_limits = (request.batch_limit,) if request.batch_limit is not None else request.batch_limits
    chunk_budgets = (request.chunk_tokens,) if request.chunk_pinned else request.chunk_budgets
    return enumerate_all_options(groups, workload, batch_limits=batch_limits, chunk_budgets=chunk_budgets), drops


def capacity_options(request: CapacityRequest, inputs: CapacityInputs) -> list[Option]:
    """Every configuration `max_capacity` considers."""
    return _options(request, inputs)[0]
