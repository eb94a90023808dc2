"""Prefix caching as a plan's decision: how much KV memory to give the cache, and which routing.

With `workload.prefix_reuse` the plan is made first without a cache (today's plan, which also
gives the replica count R the routings are judged at). Then, for each cache size — ¼, ½ and all of
the per-replica working set (planner/prefix_cache.py) — under the routing that concentrates the
prefixes (prefix-aware when R > 1, else random), the plan is made again with:

* the prompt lengths the replicas prefill: a mixture over the Che hit probabilities — a request
  whose prefix is cached (probability h of its class) prefills p − c of its p tokens, c its
  prefix's whole blocks (at most ⌊(p − 1)/16⌋·16); the rest prefill all of p. The mixture is a
  histogram over 128 mid-quantiles of p (`MIXTURE_QUANTILES`);
* each replica's KV capacity less the cache's tokens (the cache holds the shared blocks, the
  sequences keep only their own).

A trial whose plan needs fewer replicas than it was planned at is planned again on the hits its own
replica count finds (prefix-aware routing shards the prefixes over the replicas the plan deploys, so
fewer replicas find fewer), before its cost bounds the next trial: every trial's record and plan rest on
no more hits than its own replicas find (`finds_as_many`; at most `MAX_HIT_ROUNDS` re-plans).

The mixture's values carry the tokens they found cached (`HistogramLength.cached`): the queueing
model prefills only the new tokens but counts the cached ones in every decode step's context and in
the prefill's attention and KV reads (planner/queueing_replica.py), as the simulator does
(planner/simulator_prefix.py); a sequence's own KV reservation is its new tokens and its output,
the cached blocks being the cache's.

Each trial counts only plans strictly cheaper than the cheapest so far — the plan without a cache,
then any earlier trial's (`PlanningRequest.below_usd_per_hour`: the search stops once no option's
lower bound undercuts it) — so a cache size that cannot win is not searched to the end, and its
record has no cost. The simulator verifies the cheapest trial on the busiest replica with its own
LRU; a trial it finds missing an SLO is planned again with ⌈R/8⌉ more replicas (at most
`MAX_REPLICA_STEPS` times) and passed over for the next cheapest once it costs no less than the
plan without a cache; before that next one, the trials an earlier trial cut short are planned in
full, so the candidates come in the order planning every trial in full gives. The attempts are
planned unexplained (the first is the trial's own plan) and staged (planning.stage_plan): the one
deployed is explained from its staged search rather than searched again. The plan without a cache is
staged too and explained only if it stands; a cache that wins reads its cost, replicas, verification
moves and predicted TTFT without building its justification (planning.staged_ttft_s). The cheapest verified trial is deployed if it costs less than the plan
without a cache, else that plan stands (`prefix_caching` null, the section says why).

A measured hit rate (`prefix_reuse.hit_rate`) is planned as given: every prompt prefills (1 − h) of
its tokens, no cache memory is set aside (the rate was measured with the engine's own cache, which
lives in its free KV blocks) and the routing is the one it was measured under ("as_measured").

Speculative decoding combines with the cache: every trial is offered the speculative candidates
`constraints.speculative` offers the plan without a cache (auto: with and without a draft head; on:
only with one), on the KV left beside the cache, and the simulator runs a speculating replica with
its prefix cache (planner/simulator_speculative.py honours the cached tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from planner.errors import HeadroomError, InfeasiblePlanError
from planner.plan_predict import simulation_report
from planner.plan_result import (
    Adjustment,
    PrefixCaching,
    PrefixCachingSection,
    PrefixCachingTrial,
    Verification,
)
from planner.plan_search import _COST_TOLERANCE, Planner
from planner.plan_verify import _verification_record
from planner.prefix_cache import BLOCK_TOKENS, PrefixHits, PrefixReuse, Routing, prefix_hits
from planner.queueing_sample import length_quantiles
from planner.simulator_prefix import PrefixSimulation, simulate_prefix_replica
from planner.workload import HistogramLength, LengthDistribution, Slo, Workload

if TYPE_CHECKING:
    from planner.planning import PlanningInputs, PlanningRequest, PlanResult, StagedPlan, _Space

#: Cache sizes tried, as fractions of the per-replica working set (none is the plan without a cache).
CACHE_FRACTIONS = (0.25, 0.5, 1.0)
#: Mid-quantiles of the prompt length the reduced-prompt mixture is built on: the top one is the
#: 99.6th percentile, so the mixture's p99 stays a quantile of the prompt's own tail.
MIXTURE_QUANTILES = 128
#: Plans of one cache size the simulator may send back for more replicas before the next cache size
#: is tried, each step adding ⌈R/8⌉ (at least one): a search granularity, four steps reach +46 % of R,
#: beyond which a cache rarely still undercuts the plan without one. Not a physical constant.
MAX_REPLICA_STEPS = 4
#: Re-plans of one cache size on the mixture at its plan's own replica count (prefix-aware routing finds
#: fewer prefixes on fewer replicas) before it is passed over: with hits that never fall as replicas are
#: added, one suffices (planned on fewer hits, a plan needs no fewer replicas). A search bound, not a
#: physical constant.
MAX_HIT_ROUNDS = 3
REPLICA_STEP_DIVISOR = 8


class Stage(Protocol):
    """planning.stage_plan (or a test's variant of it): a plan up to its verified rows, finished by
    planning.finish_plan; `space` the request's search space already enumerated (planning.search_space)."""

    def __call__(
        self, request: PlanningRequest, inputs: PlanningInputs, *, space: _Space | None = None, refine: bool = True
    ) -> StagedPlan: ...


def reduced_prompts(prompt: LengthDistribution, classes: tuple[tuple[float, int], ...]) -> HistogramLength:
    """The prompt tokens prefilled: with probability f (each class) p − min(c, ⌊(p − 1)/16⌋·16), else p;
    each value carrying the tokens it found cached (the rest of p: still read by every decode step)."""
    base = length_quantiles(prompt, (np.arange(MIXTURE_QUANTILES) + 0.5) / MIXTURE_QUANTILES)
    room = np.floor(np.maximum(base - 1.0, 0.0) / BLOCK_TOKENS) * BLOCK_TOKENS
    tokens = [base]
    found = [np.zeros(base.size)]
    weights = [np.full(base.size, 1.0 - sum(f for f, _ in classes))]
    for fraction, cached in classes:
        hit = np.minimum(float(cached), room)
        tokens.append(base - hit)
        found.append(hit)
        weights.append(np.full(base.size, fraction))
    return HistogramLength(
        tokens=tuple(int(t) for t in np.concatenate(tokens)),
        weights=tuple(float(w) for w in np.concatenate(weights)),
        cached=tuple(int(c) for c in np.concatenate(found)),
    )


def measured_prompts(prompt: LengthDistribution, hit_rate: float) -> HistogramLength:
    """Every prompt prefilling max(1, (1 − h)·p) tokens (a measured token hit rate h), the rest of p cached."""
    base = length_quantiles(prompt, (np.arange(MIXTURE_QUANTILES) + 0.5) / MIXTURE_QUANTILES)
    kept = np.maximum(1.0, np.rint(base * (1.0 - hit_rate)))
    return HistogramLength(
        tokens=tuple(int(t) for t in kept), weights=(1.0,) * kept.size, cached=tuple(int(c) for c in base - kept)
    )


def prompt_saved_fraction(prompt: LengthDistribution, reduced: HistogramLength) -> float:
    base = length_quantiles(prompt, (np.arange(MIXTURE_QUANTILES) + 0.5) / MIXTURE_QUANTILES)
    return 1.0 - reduced.mean / float(np.mean(base))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Trial:
    """One cache size planned: its record, the request it was planned with and the plan found (None: no
    plan cheaper than the bound it was planned under)."""

    #: Its place among the candidates (its search space's key).
    index: int
    record: PrefixCachingTrial
    request: PlanningRequest
    #: Staged, not finished (planning.finish_plan): only the attempt deployed is priced and explained.
    found: StagedPlan | None
    #: The search space it was planned on (its re-plans with more replicas search it again).
    space: _Space | None = None
    #: The routing its hits were planned under (its record's is the one its own plan deploys: `deployed_routing`).
    routing: str = "random"

    @property
    def cost(self) -> float:
        return math.inf if self.found is None else self.found.cost_usd_per_hour


def _ttft_at(result: PlanResult) -> float | None:
    return None if result.predicted is None else result.predicted.ttft_s.at_percentile


def prefix_plan(request: PlanningRequest, inputs: PlanningInputs, stage: Stage) -> PlanResult:
    """The plan for a workload with prefix reuse (see the module docstring); `stage` plans a trial up to its verified rows."""
    from planner.planning import finish_plan, refined_stage, search_space, staged_ttft_s

    reuse = request.workload.prefix_reuse
    assert reuse is not None
    plain = replace(request, workload=replace(request.workload, prefix_reuse=None))
    # the plan without a cache is staged: its cost, replicas and verification moves are all the trials
    # need, and it is explained only if it stands (a cache that wins needs only its predicted TTFT)
    without = stage(plain, inputs)
    replicas = without.replicas
    if reuse.measured:
        assert reuse.hit_rate is not None
        mix = measured_prompts(request.workload.prompt_tokens, reuse.hit_rate)
        hits = PrefixHits(routing="random", cache_tokens=0, hit_rate=reuse.hit_rate, cached_tokens_per_request=0.0, classes=())
        candidates = [(1.0, "as_measured", hits, mix)]
        working_set = 0
    else:
        concentrates = reuse.distinct_prefixes > 1 or reuse.sessions is not None  # sessions: session-sticky routing
        routing: Routing = "prefix_aware" if replicas > 1 and concentrates else "random"
        rate = request.workload.arrival_rate_rps  # the session model's hit rate depends on it
        working_set = reuse.working_set_tokens(routing, replicas, arrival_rate_rps=rate)
        candidates = []
        for fraction in CACHE_FRACTIONS:
            cache = int(fraction * working_set) // BLOCK_TOKENS * BLOCK_TOKENS
            hits = prefix_hits(reuse, cache, routing, replicas, arrival_rate_rps=rate)
            candidates.append((fraction, routing, hits, reduced_prompts(request.workload.prompt_tokens, hits.classes)))
    prompt = request.workload.prompt_tokens
    # each trial's search space, enumerated once: its re-plans (more replicas, or in full after an earlier
    # trial cut it short) change only min_replicas and the cost bound, which do not enter it
    spaces: dict[tuple[int, tuple[tuple[float, int], ...]], _Space] = {}

    def trial(index: int, below_usd_per_hour: float) -> _Trial:
        """Candidate `index` planned, counting only plans strictly cheaper than `below_usd_per_hour`, on
        the hits its plan's own replica count finds (`at_own_replicas`)."""
        fraction, routing_name, hits, mix = candidates[index]
        for rounds in range(MAX_HIT_ROUNDS + 1):
            trial_request = replace(
                request,
                workload=replace(request.workload, prompt_tokens=mix, prefix_reuse=None),
                prefix_cache_tokens=hits.cache_tokens,
                below_usd_per_hour=below_usd_per_hour,
                verify=False,
                explain=False,
                advise=False,
            )
            found: StagedPlan | None
            key = (index, hits.classes)
            try:
                if key not in spaces:
                    spaces[key] = search_space(trial_request, inputs)
                found = stage(trial_request, inputs, space=spaces[key], refine=False)
            except InfeasiblePlanError:
                found = None
            if found is not None and found.cost_usd_per_hour >= below_usd_per_hour:
                found = None  # a mixed fleet's MILP is not bounded: a fleet no cheaper counts as none
            fewer = None if found is None else at_own_replicas(hits, routing_name, found.replicas)
            if fewer is None:
                break
            if rounds == MAX_HIT_ROUNDS:
                found = None  # still planned on more hits than its replicas find: passed over
                break
            # its plan needs fewer replicas than it was planned at, which find fewer prefixes: planned again
            # with the same fraction of its own replicas' working set, at their hits
            assert found is not None
            hits = own_cache(fraction, routing_name, found.replicas)
            mix = reduced_prompts(prompt, hits.classes)
        record = PrefixCachingTrial(
            routing=routing_name if found is None else deployed_routing(routing_name, found.replicas),
            cache_fraction=fraction,
            cache_tokens=hits.cache_tokens,
            hit_rate=hits.hit_rate,
            prefill_tokens_saved_fraction=prompt_saved_fraction(prompt, mix),
            replicas=None if found is None else found.replicas,
            cost_usd_per_hour=None if found is None else found.cost_usd_per_hour,
        )
        return _Trial(index=index, record=record, request=trial_request, found=found, space=spaces.get(key), routing=routing_name)

    def own_cache(fraction: float, routing_name: str, replicas: int) -> PrefixHits:
        """The hits of a cache of `fraction` of the per-replica working set at `replicas` replicas."""
        routed: Routing = "prefix_aware" if routing_name == "prefix_aware" else "random"
        cache = int(fraction * reuse.working_set_tokens(routed, replicas, arrival_rate_rps=rate)) // BLOCK_TOKENS * BLOCK_TOKENS
        return prefix_hits(reuse, cache, routed, replicas, arrival_rate_rps=rate)

    def at_own_replicas(hits: PrefixHits, routing_name: str, replicas: int) -> PrefixHits | None:
        """The hits `replicas` replicas find when fewer than `hits` (None: at least as many, so the mixture
        planned was conservative for them). Prefix-aware routing shards the prefixes over the replicas the
        plan deploys, not over the plan without a cache's (sessions too: fewer replicas hold more sessions
        each); a measured hit rate is taken as given."""
        if reuse.measured:
            return None
        routed: Routing = "prefix_aware" if routing_name == "prefix_aware" else "random"
        own = prefix_hits(reuse, hits.cache_tokens, routed, replicas, arrival_rate_rps=rate)
        return None if finds_as_many(own, hits) else own

    # Each trial counts only plans cheaper than the cheapest so far (the plan without a cache, then any
    # trial's): a later, larger cache is chosen only when strictly cheaper, so the first candidate
    # tried below is the one planning every trial in full would give. A trial cut by an earlier
    # trial's cost is planned in full only if the simulator refutes the candidates before it.
    trials: list[_Trial] = []
    deferred: list[int] = []
    bound = without.cost_usd_per_hour
    for index in range(len(candidates)):
        planned = trial(index, bound)
        if planned.found is not None:
            bound = planned.found.cost_usd_per_hour
        elif bound < without.cost_usd_per_hour:
            deferred.append(index)
        trials.append(planned)

    def cheaper(indices: list[int]) -> list[int]:
        """The trials among `indices` with a plan cheaper than the plan without a cache, cheapest (then smallest cache) first."""
        return sorted(
            (i for i in indices if trials[i].found is not None), key=lambda i: (trials[i].cost, trials[i].record.cache_tokens)
        )

    queue = cheaper(list(range(len(trials))))
    reason = "no cache size lowers the cost of the plan without a cache"
    while queue:
        current = trials[queue.pop(0)]
        record, trial_request, space = current.record, current.request, current.space
        assert space is not None  # a trial with a plan was searched
        attempt, ready = trial_request, current.found  # the trial's own plan is the first attempt
        for _ in range(MAX_REPLICA_STEPS):
            floor = math.nan if ready is not None else _cost_floor(attempt, inputs, space)
            if floor == math.inf:  # every option breaks a limit at these replicas: the search would find no plan
                reason = f"the {record.cache_fraction:g} cache cannot add the replicas the simulator asks for within the limits"
                break
            if floor >= without.cost_usd_per_hour * (1 - _COST_TOLERANCE):  # the re-plan could not undercut: not searched
                reason = f"the {record.cache_fraction:g} cache needs as much as the plan without a cache once simulated"
                break
            try:
                staged = stage(attempt, inputs, space=space, refine=False) if ready is None else ready
            except InfeasiblePlanError:  # more replicas than a limit of the request allows
                reason = f"the {record.cache_fraction:g} cache cannot add the replicas the simulator asks for within the limits"
                break
            ready = None
            if staged.cost_usd_per_hour >= without.cost_usd_per_hour:
                reason = f"the {record.cache_fraction:g} cache needs as much as the plan without a cache once simulated"
                break
            # the routing the attempt deploys, at its own replica count (prefix-aware needs R > 1)
            record = replace(current.record, routing=deployed_routing(current.routing, staged.row.replicas))
            try:
                verification, simulated_hit = _verified(
                    staged, trial_request, request, inputs, reuse, record, without.adjustments
                )
            except HeadroomError as error:
                reason = f"the simulator cannot run the {record.cache_fraction:g} cache: {error}"
                break
            if verification is None or verification.meets_slo:
                # the attempts are staged unexplained; the one deployed is priced (and explained) once, from its
                # own search (the search does not depend on `explain`: the same plan as planned anew)
                explained = replace(staged.request, explain=request.explain)
                chosen_plan = finish_plan(replace(refined_stage(staged), request=explained))
                records = tuple(t.record for t in trials)
                return _chosen(
                    chosen_plan,
                    record,
                    reuse,
                    request,
                    working_set,
                    records,
                    (staged_ttft_s(without), without.cost_usd_per_hour),
                    verification,
                    simulated_hit,
                )
            reason = f"the simulator finds the {record.cache_fraction:g} cache missing {', '.join(verification.misses)}"
            # the simulator found a miss: planned again with more replicas (an eighth more, at least one)
            more = staged.total_replicas + max(1, math.ceil(staged.total_replicas / REPLICA_STEP_DIVISOR))
            constraints = replace(attempt.constraints, min_replicas=max(attempt.constraints.min_replicas, more))
            attempt = replace(attempt, constraints=constraints, below_usd_per_hour=math.inf)  # its cost is compared above
        if deferred:  # the next candidate may be a trial an earlier one cut short: those are planned in full first
            for index in deferred:
                trials[index] = trial(index, without.cost_usd_per_hour)
            queue = cheaper([*queue, *deferred])
            deferred = []
    records = tuple(t.record for t in trials)
    finished = finish_plan(without)
    section = PrefixCachingSection(
        model=_MODEL_NOTE,
        working_set_tokens=working_set,
        trials=records,
        chosen=None,
        reason=reason,
        ttft_s_without=_ttft_at(finished),
        ttft_s_with=None,
        cost_usd_per_hour_without=finished.cost_usd_per_hour,
        cost_usd_per_hour_with=None,
        simulated_hit_rate=None,
    )
    justification = None if finished.justification is None else replace(finished.justification, prefix_caching=section)
    return replace(finished, justification=justification)


def deployed_routing(planned: str, replicas: int) -> str:
    """The routing a trial's plan deploys: prefix-aware (or session-sticky) routing, decided at the plan
    without a cache's replica count, concentrates the prefixes over R > 1 replicas; a plan of one replica
    routes nothing, so it is random routing (one replica sees every prefix either way, the same hits)."""
    return "random" if planned == "prefix_aware" and replicas == 1 else planned


def finds_as_many(own: PrefixHits, planned: PrefixHits) -> bool:
    """Whether every class of `planned` finds its prefix at least as often in `own`: the prompts it
    prefills are then no longer than the plan assumed (each request only moves from prefilling all
    of its prompt to prefilling less)."""

    def by_tokens(hits: PrefixHits) -> dict[int, float]:
        fractions: dict[int, float] = {}
        for fraction, tokens in hits.classes:
            fractions[tokens] = fractions.get(tokens, 0.0) + fraction
        return fractions

    found = by_tokens(own)
    return all(found.get(tokens, 0.0) >= f * (1 - 1e-12) for tokens, f in by_tokens(planned).items())


def _cost_floor(attempt: PlanningRequest, inputs: PlanningInputs, space: _Space) -> float:
    """The least cost a re-plan of `attempt` on its trial's `space` could find (plan_search's closed-form
    bounds at its min_replicas, within its limits); nan for a mixed fleet, whose MILP may undercut every
    single configuration (its re-plans are searched)."""
    from planner.pins import apply_pins

    if attempt.constraints.mixed_fleet:
        return math.nan
    pinned, _ = apply_pins(attempt, inputs)  # as stage_plan plans it
    planner = Planner(space.options, pinned.workload)
    return planner.cost_floor_usd_per_hour(pinned.workload.arrival_rate_rps, pinned.constraints)


def _chosen(
    chosen_plan: PlanResult,
    record: PrefixCachingTrial,
    reuse: PrefixReuse,
    request: PlanningRequest,
    working_set: int,
    records: tuple[PrefixCachingTrial, ...],
    without: tuple[float | None, float],
    verification: Verification | None,
    simulated_hit: float | None,
) -> PlanResult:
    """The plan with its cache: the hit rate at the plan's own replica count (prefix-aware routing
    finds more the more replicas share the prefixes), the section with and without (`without`: the plan
    without a cache's predicted TTFT and cost)."""
    hit_rate, saved = record.hit_rate, record.prefill_tokens_saved_fraction
    if not reuse.measured:  # the plan's own replicas (the trials planned at the count they need: planner/plan_prefix.py)
        hits = prefix_hits(
            reuse,
            record.cache_tokens,
            "prefix_aware" if record.routing == "prefix_aware" else "random",
            chosen_plan.row.replicas,
            arrival_rate_rps=request.workload.arrival_rate_rps,
        )
        hit_rate = hits.hit_rate
        saved = prompt_saved_fraction(
            request.workload.prompt_tokens, reduced_prompts(request.workload.prompt_tokens, hits.classes)
        )
    chosen = PrefixCaching(
        hit_rate=hit_rate, cache_tokens=record.cache_tokens, routing=record.routing, prefill_tokens_saved_fraction=saved
    )
    section = PrefixCachingSection(
        model=_MODEL_NOTE,
        working_set_tokens=working_set,
        trials=records,
        chosen=chosen,
        reason=f"a cache of {record.cache_fraction:g} of the working set, {record.routing} routing: the cheapest verified plan",
        ttft_s_without=without[0],
        ttft_s_with=_ttft_at(chosen_plan),
        cost_usd_per_hour_without=without[1],
        cost_usd_per_hour_with=chosen_plan.cost_usd_per_hour,
        simulated_hit_rate=simulated_hit,
    )
    justification = None if chosen_plan.justification is None else replace(chosen_plan.justification, prefix_caching=section)
    return replace(chosen_plan, prefix_caching=chosen, verification=verification, justification=justification)


_MODEL_NOTE = (
    "Che characteristic-time approximation of an LRU over 16-token blocks (independent reference model); "
    "random routing: each replica sees every prefix; prefix-aware routing: each sees 1/R of them"
)


def _verified(
    chosen: StagedPlan,
    trial_request: PlanningRequest,
    request: PlanningRequest,
    inputs: PlanningInputs,
    reuse: PrefixReuse,
    record: PrefixCachingTrial,
    adjustments: tuple[Adjustment, ...],
) -> tuple[Verification | None, float | None]:
    """The simulator's record on the chosen plan's busiest replica with its LRU (None unless the request verifies).
    Raises HeadroomError when the simulation cannot run (a request larger than the KV left to sequences)."""
    if not request.verify:
        return None, None
    from planner.plan_predict import option_serving, per_replica_arrival_cv
    from planner.plan_rows import candidate_id_of
    from planner.planning import _search_space

    row = chosen.row
    space = chosen.space if chosen.space is not None else _search_space(trial_request, inputs)
    option = space.by_id[candidate_id_of(row)]
    workload = Workload(
        arrival_rate_rps=row.offered_rps,
        prompt_tokens=request.workload.prompt_tokens,
        output_tokens=request.workload.output_tokens,
        arrival_cv=per_replica_arrival_cv(request.workload.arrival_cv, row.replicas),
    )
    routing: Routing = "prefix_aware" if record.routing == "prefix_aware" else "random"
    simulation = simulate_prefix_replica(
        option.group.step_model,
        workload,
        option_serving(option),
        kv_capacity_tokens=option.group.kv_capacity_tokens,
        reuse=reuse,
        cache_tokens=record.cache_tokens,
        routing=routing,
        replicas=row.replicas,
        requests=request.verify_requests,
        seed=request.seed,
    )
    report = prefix_simulation_report(simulation, request.slo, row.gpu, row.replicas)
    return _verification_record(report, adjustments, request.seed), simulation.hit_rate


def prefix_simulation_report(simulation: PrefixSimulation, slo: Slo, gpu: str, replicas: int) -> dict[str, Any]:
    """The simulation as planner/plan_predict.py's `verify_replica_share` reports one (its record's input)."""
    result = simulation.result
    detail = result.detail
    warm = result.requests - result.measured_requests
    ttft, e2e = detail.ttft_s[warm:], detail.e2e_s[warm:]
    tpot = detail.tpot_s[warm:]
    tpot = tpot[~np.isnan(tpot)]
    report = simulation_report(result, ttft, tpot, e2e, slo, simulation.rate_rps)
    return {**report, "rows": [{"gpu": gpu, "replicas": replicas, "meets_slo": report["meets_slo"]}]}
