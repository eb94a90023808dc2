"""Prefix caching as a plan's decision (planner/plan_prefix.py) and its simulator (planner/simulator_prefix.py).

Llama 3.1 8B chat traffic (12 req/s, prompts of mean 800 / p99 3,000 tokens). With a 1,000-token
system prompt on half the requests and 100 documents of 1,500 tokens on 40 % (Zipf 1), a cache of
a quarter of the 149,792-token working set already finds ~83 % of the prefixes, removing ~60 % of
the prompt tokens from prefill: the plan no longer needs the H100 its TTFT asked for without a cache.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from planner.errors import InfeasiblePlanError
from planner.optimizer import PlanConstraints
from planner.performance import build_step_model
from planner.plan_prefix import measured_prompts, reduced_prompts
from planner.planning import PlanningRequest, plan_capacity
from planner.prefix_cache import PrefixReuse, prefix_hits
from planner.simulator_prefix import replica_stream, simulate_prefix_replica
from planner.specs import IDEAL
from planner.workload import FixedLength, LognormalLength, Serving, Slo, Workload
from tests.planner.performance_specs import FP16_PRECISION, H100_SXM, LLAMA_2_70B
from tests.planner.test_planning import CHAT, GRID, INPUTS

REUSE = PrefixReuse(
    system_prompt_tokens=1000,
    system_prompt_fraction=0.5,
    distinct_prefixes=100,
    prefix_tokens=1500,
    prefix_fraction=0.4,
    zipf_exponent=1.0,
)
SLO = Slo(ttft_s=1.0, tpot_s=0.06)


def _plan(workload: Workload, *, verify: bool = True):
    request = PlanningRequest(workload=workload, slo=SLO, constraints=PlanConstraints(speculative="off"), verify=verify, **GRID)
    return plan_capacity(request, INPUTS)


@pytest.fixture(scope="module")
def plans():
    return {"without": _plan(CHAT), "with": _plan(replace(CHAT, prefix_reuse=REUSE))}


def test_high_reuse_picks_a_cache_and_lowers_the_cost(plans):
    without, cached = plans["without"], plans["with"]
    assert without.prefix_caching is None and without.justification.prefix_caching is None
    choice = cached.prefix_caching
    assert choice is not None
    assert cached.cost_usd_per_hour < without.cost_usd_per_hour
    assert choice.cache_tokens > 0 and choice.cache_tokens % 16 == 0
    assert choice.routing == "random"  # one replica: nothing to route
    assert choice.hit_rate == pytest.approx(prefix_hits(REUSE, choice.cache_tokens, "random", 1).hit_rate)
    assert 0.5 < choice.prefill_tokens_saved_fraction < 0.8
    section = cached.justification.prefix_caching
    assert section.cost_usd_per_hour_without == without.cost_usd_per_hour
    assert section.cost_usd_per_hour_with == cached.cost_usd_per_hour
    assert section.ttft_s_without == without.predicted.ttft_s.at_percentile
    assert [t.cache_fraction for t in section.trials] == [0.25, 0.5, 1.0]
    assert section.working_set_tokens == 992 + 100 * 1488


def test_the_simulator_verifies_the_cached_plan(plans):
    """The plan's verification is the prefix simulation: it meets the SLOs and its LRU's hit rate is
    within 0.03 of the Che rate the plan assumed."""
    cached = plans["with"]
    assert cached.verification is not None and cached.verification.meets_slo
    section = cached.justification.prefix_caching
    assert section.simulated_hit_rate == pytest.approx(cached.prefix_caching.hit_rate, abs=0.03)


def test_without_reuse_the_plan_is_unchanged(plans):
    """`prefix_reuse` None is today's plan: the same rows, cost and prediction as a request that never had the field."""
    again = _plan(replace(CHAT, prefix_reuse=None))
    assert again.rows == plans["without"].rows
    assert again.predicted == plans["without"].predicted


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_a_cached_plan_also_speculates_when_the_constraint_offers_it(plans, mode):
    """The cache trials are offered the speculative candidates too: at 12 req/s the cached plan on one
    replica runs a small batch, so a draft head lowers its TPOT at the same cost (auto keeps it, on requires
    it); the simulator verifies the cache and the head together, its LRU's hit rate within 0.03 of Che's."""
    request = PlanningRequest(
        workload=replace(CHAT, prefix_reuse=REUSE), slo=SLO, constraints=PlanConstraints(speculative=mode), verify=True, **GRID
    )
    both = plan_capacity(request, INPUTS)
    cached = plans["with"]
    assert both.prefix_caching is not None and both.prefix_caching.cache_tokens > 0
    assert both.speculative is not None and both.row.draft.startswith("/")
    assert both.cost_usd_per_hour <= cached.cost_usd_per_hour
    assert both.predicted.tpot_s.at_percentile < cached.predicted.tpot_s.at_percentile
    assert both.verification is not None and both.verification.meets_slo
    section = both.justification.prefix_caching
    assert section.simulated_hit_rate == pytest.approx(both.prefix_caching.hit_rate, abs=0.03)


def test_reduced_prompts_mixture_by_hand():
    """Fixed 2,000-token prompts; 30 % find 992 tokens, 20 % 1,488: mean prefilled
    = 0.5·2,000 + 0.3·1,008 + 0.2·512 = 1,000 + 302.4 + 102.4 = 1,404.8. A measured h = 0.6 prefills 800."""
    mix = reduced_prompts(FixedLength(tokens=2000), ((0.3, 992), (0.2, 1488)))
    assert mix.mean == pytest.approx(1404.8)
    assert measured_prompts(FixedLength(tokens=2000), 0.6).mean == pytest.approx(800.0)
    # a prefix longer than the prompt caches whole blocks short of its last token: 99 → 96 of 100
    assert reduced_prompts(FixedLength(tokens=100), ((1.0, 992),)).mean == pytest.approx(4.0)


def test_prefix_aware_stream_gives_replica_zero_its_share():
    """R = 4, prefix-aware: replica 0 gets the system prompt's and the no-prefix requests' quarter plus the
    prefixes ranked 1, 5, 9, …; random: a quarter of everything."""
    reuse = PrefixReuse(
        system_prompt_tokens=512, system_prompt_fraction=0.2, distinct_prefixes=8, prefix_tokens=64, prefix_fraction=0.6
    )
    q = reuse.popularity()
    aware = replica_stream(reuse, "prefix_aware", 4)
    assert aware.share == pytest.approx(0.2 / 4 + 0.2 / 4 + 0.6 * (q[0] + q[4]))
    assert random_share(reuse) == pytest.approx(0.25)


def random_share(reuse: PrefixReuse) -> float:
    return replica_stream(reuse, "random", 4).share


def test_simulated_cache_lowers_ttft_on_a_long_shared_prompt():
    """Llama 2 70B on 4 H100s, 3,000-token prompts of which 2,000 are one system prompt on every request:
    with the prefix cached (125 whole blocks) every request prefills 1,000 tokens instead of 3,000, so the simulated p50 TTFT
    falls by more than half; the LRU finds it on every request after the first."""
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL)
    workload = Workload(
        arrival_rate_rps=2.0,
        prompt_tokens=FixedLength(tokens=3000),
        output_tokens=LognormalLength(mean_tokens=100, p99_tokens=300),
    )
    reuse = PrefixReuse(system_prompt_tokens=2000, system_prompt_fraction=1.0)
    serving = Serving(batch_limit=64, chunk_tokens=4096)
    runs = {
        cache: simulate_prefix_replica(
            sm,
            workload,
            serving,
            kv_capacity_tokens=300_000,
            reuse=reuse,
            cache_tokens=cache,
            routing="random",
            replicas=1,
            requests=2000,
        )
        for cache in (0, 2000)
    }
    assert runs[0].hit_rate == 0.0 and runs[0].prefill_tokens_saved_fraction == 0.0
    assert runs[2000].hit_rate == pytest.approx(1.0)
    assert runs[2000].prefill_tokens_saved_fraction == pytest.approx(2000 / 3000)
    assert runs[2000].result.ttft_s.p50 < 0.5 * runs[0].result.ttft_s.p50
    assert np.isfinite(runs[2000].result.e2e_s.p99)


def test_several_replicas_route_by_prefix():
    """At 80 req/s the plan without a cache needs several replicas, so the trials route by prefix: each
    replica's working set is the system prompt plus a 1/R share of the documents, and the chosen hit rate is
    the Che rate at the plan's own replica count (planned without the simulator, to stay quick)."""
    cached = _plan(replace(CHAT.at_rate(80.0), prefix_reuse=REUSE), verify=False)
    section = cached.justification.prefix_caching
    assert {t.routing for t in section.trials} == {"prefix_aware"}
    choice = cached.prefix_caching
    assert choice.routing == "prefix_aware"
    assert cached.cost_usd_per_hour < section.cost_usd_per_hour_without
    assert choice.hit_rate == pytest.approx(prefix_hits(REUSE, choice.cache_tokens, "prefix_aware", cached.row.replicas).hit_rate)
    # a per-replica working set smaller than random routing's whole one
    assert section.working_set_tokens < REUSE.working_set_tokens("random", 1)


def _planned_in_full(request: PlanningRequest, inputs, *, space=None, refine=True) -> object:
    """planning.stage_plan with every trial's cost bound lifted: each cache size planned to its own optimum."""
    from planner.planning import stage_plan

    return stage_plan(replace(request, below_usd_per_hour=float("inf")), inputs, space=space, refine=refine)


def _prefix_plan(workload: Workload, *, verify: bool, full: bool):
    from planner import planning
    from planner.plan_prefix import prefix_plan

    request = PlanningRequest(workload=workload, slo=SLO, constraints=PlanConstraints(speculative="off"), verify=verify, **GRID)
    return prefix_plan(request, INPUTS, _planned_in_full if full else planning.stage_plan)


def _same_answer(bounded, full) -> None:
    assert bounded.rows == full.rows
    assert bounded.cost_usd_per_hour == full.cost_usd_per_hour
    assert bounded.prefix_caching == full.prefix_caching
    assert bounded.predicted == full.predicted
    assert bounded.justification.prefix_caching.reason == full.justification.prefix_caching.reason


@pytest.mark.parametrize(("rate", "verify"), [(12.0, False), (12.0, True), (80.0, False)])
def test_bounded_trials_give_the_plan_of_trials_planned_in_full(rate: float, verify: bool):
    """Each trial counts only plans cheaper than the cheapest so far (the plan without a cache, then
    an earlier trial's): the deployed plan, its cost, cache and prediction are those of planning
    every cache size in full. A trial's record has a cost only when it undercut every one before it
    (a later, larger cache is chosen only when strictly cheaper); None says no plan was cheaper."""
    workload = replace(CHAT.at_rate(rate), prefix_reuse=REUSE)
    bounded = _prefix_plan(workload, verify=verify, full=False)
    _same_answer(bounded, _prefix_plan(workload, verify=verify, full=True))
    section = bounded.justification.prefix_caching
    cheapest = section.cost_usd_per_hour_without
    for record in section.trials:
        if record.cost_usd_per_hour is not None and not verify:
            assert record.cost_usd_per_hour < cheapest
            cheapest = record.cost_usd_per_hour
    assert bounded.prefix_caching is not None and bounded.cost_usd_per_hour < section.cost_usd_per_hour_without


def test_a_refuted_candidate_brings_the_cut_trials_back(monkeypatch: pytest.MonkeyPatch):
    """The simulator refutes the cheapest candidate (here forced, on its first simulation): the next
    candidate may be a trial an earlier one cut short, so those are planned in full first, and the
    answer is the one planning every trial in full gives under the same refutation."""
    from planner import plan_prefix
    from planner.plan_prefix import _verified

    def refuting_first(*args, **kwargs):
        verification, hit = _verified(*args, **kwargs)
        calls.append(args[5].cache_fraction)  # the candidate's record
        if len(calls) == 1:
            verification = replace(verification, meets_slo=False, misses=("ttft",))
        return verification, hit

    workload = replace(CHAT, prefix_reuse=REUSE)
    answers = []
    for full in (False, True):
        calls: list[float] = []
        monkeypatch.setattr(plan_prefix, "_verified", refuting_first)
        answers.append((_prefix_plan(workload, verify=True, full=full), tuple(calls)))
    (bounded, bounded_calls), (in_full, full_calls) = answers
    _same_answer(bounded, in_full)
    assert bounded_calls == full_calls and len(bounded_calls) >= 2  # the same candidates simulated, in the same order
    # unrefuted, the caches larger than the first one with a plan are cut by it (they cost no less);
    # after the refutation they were planned in full and carry their cost. Which cache is the first
    # with a plan depends on the queueing model: before the queueing model change (TTFT step-mates,
    # occupancy dispersion) the 0.25 cache already gave the $2/h plan that undercuts the $4/h plan
    # without a cache; since, it has no plan cheaper than that one (planned in full too), the 0.5
    # cache gives the $2/h plan and cuts the 1.0
    unrefuted = _prefix_plan(workload, verify=False, full=False).justification.prefix_caching.trials
    first = next(i for i, t in enumerate(unrefuted) if t.cost_usd_per_hour is not None)
    assert first < len(unrefuted) - 1 and all(t.cost_usd_per_hour is None for t in unrefuted[first + 1 :])
    in_full_trials = in_full.justification.prefix_caching.trials
    assert all(t.cost_usd_per_hour is None for t in in_full_trials[:first])  # none cheaper than no cache: not a cut
    assert all(t.cost_usd_per_hour is not None for t in bounded.justification.prefix_caching.trials[first:])


def _untimed(result) -> dict:
    """A plan as a dict without its timings (plan and solve milliseconds, creation time, simulation wall time)."""
    from planner.plan_result import as_dict

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in {"plan_ms", "solve_ms", "created_at", "wall_time_s"}}
        if isinstance(value, list | tuple):
            return [strip(v) for v in value]
        return value

    return strip(as_dict(result))


@pytest.mark.parametrize("verify", [False, True])
def test_a_staged_plan_finishes_into_the_plan_planned_anew(verify: bool):
    """prefix_plan stages the plan without a cache (and every attempt): read before it is finished,
    its cost, replicas, verification moves and predicted TTFT are the finished plan's, and a staged
    unexplained attempt explained later is the plan its explained request gives planned anew —
    with speculation offered (auto), where the explained plan may swap in a same-cost draft head."""
    from planner.planning import _plan, finish_plan, stage_plan, staged_ttft_s

    request = PlanningRequest(workload=CHAT, slo=SLO, verify=verify, **GRID)
    staged = stage_plan(request, INPUTS)
    cost, replicas, adjustments, ttft = staged.cost_usd_per_hour, staged.replicas, staged.adjustments, staged_ttft_s(staged)
    finished = finish_plan(staged)
    anew = _plan(request, INPUTS)
    assert _untimed(finished) == _untimed(anew)
    assert cost == anew.cost_usd_per_hour and replicas == anew.row.replicas
    assert adjustments == (() if anew.verification is None else anew.verification.adjustments)
    assert ttft is not None and ttft == anew.predicted.ttft_s.at_percentile
    unexplained = replace(request, explain=False)
    staged = stage_plan(unexplained, INPUTS)
    assert finish_plan(staged).justification is None
    explained_later = finish_plan(replace(staged, request=replace(staged.request, explain=True)))
    assert _untimed(explained_later) == _untimed(anew)


def test_a_re_plan_on_its_trials_search_space_is_the_plan_planned_anew():
    """prefix_plan enumerates each trial's search space once and re-plans on it (more replicas after a
    refuted plan, a lifted cost bound): neither min_replicas nor the bound enters the space, so the plan
    staged on the trial's space is the plan planned anew, its cost bound and replica floor honoured."""
    from planner.planning import _plan, finish_plan, search_space, stage_plan

    trial = PlanningRequest(workload=CHAT, slo=SLO, prefix_cache_tokens=4096, **GRID)
    space = search_space(trial, INPUTS)
    first = finish_plan(stage_plan(trial, INPUTS, space=space))
    assert _untimed(first) == _untimed(_plan(trial, INPUTS))
    more = first.replicas + 2
    again = replace(trial, constraints=replace(trial.constraints, min_replicas=more), below_usd_per_hour=math.inf)
    replanned = finish_plan(stage_plan(again, INPUTS, space=space))
    assert replanned.replicas >= more
    assert _untimed(replanned) == _untimed(_plan(again, INPUTS))
    with pytest.raises(InfeasiblePlanError):  # the bound still counts on a shared space
        stage_plan(replace(trial, below_usd_per_hour=first.cost_usd_per_hour), INPUTS, space=space)


@pytest.mark.parametrize("cache_tokens", [0, 4096])
def test_an_unrefined_trial_refined_later_is_the_plan_staged_refined(cache_tokens: int):
    """prefix_plan stages its trials without narrowing the winner's μ (`refine=False`: only their cost and
    replicas decide which is deployed) and narrows it for the one deployed (`refined_stage`). The search's
    answer does not depend on μ's narrowing, so the unrefined stage has the refined one's cost and replicas,
    and once refined it finishes, explained, into the very plan staged refined — the same predictions in
    the same order, the MILP solved again on the narrowed μ. A plan staged refined is left as it is."""
    from planner.planning import finish_plan, refined_stage, search_space, stage_plan

    trial = PlanningRequest(
        workload=CHAT, slo=SLO, prefix_cache_tokens=cache_tokens, verify=False, explain=False, advise=False, **GRID
    )
    space = search_space(trial, INPUTS)
    refined = stage_plan(trial, INPUTS, space=space)
    unrefined = stage_plan(trial, INPUTS, space=space, refine=False)
    assert unrefined.unrefined is not None and refined.unrefined is None
    assert refined_stage(refined) is refined
    assert unrefined.cost_usd_per_hour == refined.cost_usd_per_hour and unrefined.replicas == refined.replicas
    predictions = unrefined.planner.predictions
    later = refined_stage(unrefined)
    assert later.planner.predictions > predictions  # μ narrowed only now
    assert later.planner.predictions == refined.planner.predictions
    explain = replace(trial, explain=True)
    assert _untimed(finish_plan(replace(later, request=explain))) == _untimed(finish_plan(replace(refined, request=explain)))


@pytest.mark.parametrize("rate", [12.0, 30.0])
def test_a_bounded_mixed_fleet_counts_only_fleets_strictly_below_the_bound(rate: float):
    """A prefix trial's mixed fleet under a cost bound no single configuration undercuts searches only the
    groups whose least fleet costs less than the bound: bounded at the plan's own cost it finds no fleet
    cheaper (none, or one the trial counts as none), and the groups it searched are among those the
    unbounded plan's filter keeps."""
    from planner.plan_search import Planner
    from planner.planning import PlanningInputs, _plan, search_space
    from tests.planner.test_planning import LLAMA_8B
    from tests.planner.test_planning_bounds import GPUS, PRECISIONS

    inputs = PlanningInputs(model=LLAMA_8B, gpus=GPUS, precisions=PRECISIONS, efficiency_profile="test")
    request = PlanningRequest(
        workload=CHAT.at_rate(rate), slo=SLO, constraints=PlanConstraints(mixed_fleet=True), verify=False, explain=False, **GRID
    )
    unbounded = _plan(request, inputs)
    cost = unbounded.cost_usd_per_hour
    try:
        bounded = _plan(replace(request, below_usd_per_hour=cost), inputs).cost_usd_per_hour
    except InfeasiblePlanError:
        bounded = math.inf
    assert bounded >= cost
    space = search_space(request, inputs)
    planner = Planner(space.options, request.workload)
    loose, _ = planner.best_per_group(SLO, ceiling_usd_per_hour=cost, arrival_rate_rps=rate)
    strict, _ = planner.best_per_group(SLO, ceiling_usd_per_hour=cost, arrival_rate_rps=rate, strictly_below=True)
    assert set(strict) <= set(loose)
    # here the plan is one replica of one group: its price is the bound, so the strict filter leaves its group out
    (row,) = unbounded.rows
    assert row.replicas == 1
    assert all((key[0], key[3]) != (row.gpu, row.tp) for key in strict)
    assert any((key[0], key[3]) == (row.gpu, row.tp) for key in loose)


def test_the_bench_comparison_ignores_timings_and_finds_any_other_difference():
    """bench.plan_latency --prefix-compare (the check that a speed change changes no plan): the timing
    fields are left out of a dump, any other field that differs names its plan."""
    from bench.plan_latency import _untimed, prefix_compare

    plan = {"cost": {"usd_per_hour": 2.8}, "plan_ms": 12.0, "justification": {"solve_ms": 3.0, "rows": [{"wall_time_s": 1}]}}
    slower = {**plan, "plan_ms": 99.0, "justification": {"solve_ms": 9.0, "rows": [{"wall_time_s": 5}]}}
    dearer = {**plan, "cost": {"usd_per_hour": 2.9}}
    assert _untimed(plan) == _untimed(slower) == {"cost": {"usd_per_hour": 2.8}, "justification": {"rows": [{}]}}
    before = {"plans": {"00-verify": _untimed(plan), "01-verify": _untimed(plan)}}
    after = {"plans": {"00-verify": _untimed(slower), "01-verify": _untimed(dearer)}}
    assert prefix_compare(before, after) == ["01-verify"]
    assert prefix_compare(before, {"plans": {"00-verify": _untimed(plan)}}) == ["01-verify"]
