"""Prefix plans at their own replica count, and the cost floor that spares a refuted trial's re-plans.

Under prefix-aware routing each replica sees 1/R of the distinct prefixes, so the hit rate a cache
finds depends on the replicas the plan deploys. The trials are first planned at the replica count of
the plan without a cache; a trial whose plan needs fewer replicas finds fewer prefixes than that, so
it is planned again, with the same fraction of its own replicas' working set and the hits they find,
before its cost bounds the next trial.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from planner.optimizer import PlanConstraints
from planner.plan_prefix import _cost_floor, deployed_routing, finds_as_many, reduced_prompts
from planner.planning import PlanningRequest, plan_capacity, search_space, stage_plan
from planner.prefix_cache import PrefixHits, prefix_hits
from tests.planner.test_plan_prefix import REUSE, SLO
from tests.planner.test_planning import CHAT, GRID, INPUTS


def _hits(*classes: tuple[float, int]) -> PrefixHits:
    return PrefixHits(routing="prefix_aware", cache_tokens=1024, hit_rate=0.0, cached_tokens_per_request=0.0, classes=classes)


def test_finds_as_many_compares_each_class_of_cached_tokens():
    """A plan planned with 30 % of requests finding 512 tokens and 20 % finding 1,024 is conservative for
    a replica count that finds 30 %/25 %, not for one that finds 35 %/15 % (the 1,024-token class falls),
    nor for one that lost a class; classes of equal tokens add up (10 % + 20 % of 512 tokens is 30 %)."""
    planned = _hits((0.3, 512), (0.2, 1024))
    assert finds_as_many(_hits((0.3, 512), (0.25, 1024)), planned)
    assert finds_as_many(planned, planned)
    assert not finds_as_many(_hits((0.35, 512), (0.15, 1024)), planned)
    assert not finds_as_many(_hits((0.3, 512)), planned)
    assert finds_as_many(_hits((0.1, 512), (0.2, 512), (0.2, 1024)), planned)


def test_prefix_aware_hits_never_fall_as_replicas_are_added():
    """Prefix-aware routing shards the prefixes: more replicas, a smaller share each, so each class finds
    its prefix no less often (the order the re-plan relies on when it plans at the fewer replicas a plan needs)."""
    for cache in (2_048, 16_000, 64_000):
        previous = prefix_hits(REUSE, cache, "prefix_aware", 1)
        for replicas in range(2, 12):
            hits = prefix_hits(REUSE, cache, "prefix_aware", replicas)
            assert finds_as_many(hits, previous)
            previous = hits


@pytest.mark.parametrize("rate", [40.0, 80.0, 120.0])
def test_the_deployed_cache_finds_the_hits_it_was_planned_with(rate: float):
    """The deployed trial's recorded hit rate (the mixture it was planned on) is no more than what its own
    replica count finds: before this check the trials were planned at the plan without a cache's replicas,
    more than a cheaper cached plan deploys, and so assumed more hits than prefix-aware routing gives it."""
    request = PlanningRequest(
        workload=replace(CHAT.at_rate(rate), prefix_reuse=REUSE),
        slo=SLO,
        constraints=PlanConstraints(speculative="off"),
        verify=False,
        **GRID,
    )
    plan = plan_capacity(request, INPUTS)
    section = plan.justification.prefix_caching
    if plan.prefix_caching is None:
        pytest.skip("no cache pays at this rate")  # pragma: no cover - the rates below all pick one
    chosen = next(t for t in section.trials if t.cache_tokens == plan.prefix_caching.cache_tokens)
    own = prefix_hits(REUSE, chosen.cache_tokens, "prefix_aware", plan.row.replicas)
    assert chosen.replicas == plan.row.replicas
    assert chosen.hit_rate <= own.hit_rate + 1e-12
    assert plan.prefix_caching.hit_rate == pytest.approx(own.hit_rate)


@pytest.mark.parametrize("min_replicas", [1, 2, 3, 5, 8])
def test_the_cost_floor_is_below_every_re_plan_of_a_trial(min_replicas: int):
    """The floor that lets a refuted trial's re-plan with more replicas go unsearched never exceeds the
    plan the search finds on the same space at that replica floor: it is the closed-form bound the
    search starts from."""
    hits = prefix_hits(REUSE, 16_000, "prefix_aware", 4)
    workload = replace(CHAT.at_rate(40.0), prompt_tokens=reduced_prompts(CHAT.prompt_tokens, hits.classes))
    request = PlanningRequest(
        workload=workload,
        slo=SLO,
        constraints=PlanConstraints(speculative="off", min_replicas=min_replicas),
        verify=False,
        explain=False,
        advise=False,
        prefix_cache_tokens=hits.cache_tokens,
        **GRID,
    )
    space = search_space(request, INPUTS)
    floor = _cost_floor(request, INPUTS, space)
    staged = stage_plan(request, INPUTS, space=space)
    assert 0 < floor <= staged.cost_usd_per_hour
    assert staged.total_replicas >= min_replicas
    assert math.isnan(_cost_floor(replace(request, constraints=replace(request.constraints, mixed_fleet=True)), INPUTS, space))


def test_the_bench_names_plans_that_decide_differently_not_those_that_explain_differently():
    """bench.plan_latency --prefix-compare also lists the plans whose decision differs (cost, rows, cache
    and hit rate, verdict): a plan whose justification alone changed (a re-plan's counters) is not among them."""
    from bench.plan_latency import decision, prefix_decisions

    row = {"gpu": "l40s", "tp": 1, "weights_precision": "fp8", "batch_limit": 1024, "chunk_tokens": None, "replicas": 1}
    plan = {"cost_usd_per_hour": 1.4, "rows": [row], "prefix_caching": {"cache_tokens": 25_728, "hit_rate": 0.78}}
    explained = {**plan, "justification": {"candidates": {"queueing_predictions": 99}}}
    bigger = {**plan, "prefix_caching": {"cache_tokens": 51_456, "hit_rate": 0.85}}
    before = {"plans": {"00-verify": plan, "01-verify": plan, "02-verify": plan}}
    after = {"plans": {"00-verify": explained, "01-verify": bigger, "02-verify": {"refused": "InfeasiblePlanError"}}}
    assert prefix_decisions(before, after) == ["01-verify", "02-verify"]
    assert decision(plan)[2] == (25_728, 0.78) and decision({"refused": "X"}) == ("refused", "X")


def test_a_trial_deploying_one_replica_routes_at_random():
    """Routing is decided at the plan without a cache's replica count (3 at 20 req/s: prefix-aware), but a
    cached plan of one replica has nothing to route: the plan and its trial's record say random, at the one
    replica's hit rate (the same under either routing: one replica sees every prefix); trials with no plan
    keep the routing they were planned under, and a plan of several replicas keeps prefix-aware routing."""
    request = PlanningRequest(
        workload=replace(CHAT.at_rate(20.0), prefix_reuse=REUSE),
        slo=SLO,
        constraints=PlanConstraints(speculative="off"),
        verify=False,
        **GRID,
    )
    without = plan_capacity(replace(request, workload=replace(request.workload, prefix_reuse=None)), INPUTS)
    assert without.replicas > 1
    plan = plan_capacity(request, INPUTS)
    trials = plan.justification.prefix_caching.trials
    assert plan.row.replicas == 1 and plan.prefix_caching is not None
    assert plan.prefix_caching.routing == "random"
    assert [t.routing for t in trials if t.replicas == 1] == ["random"]
    assert {t.routing for t in trials if t.replicas is None} == {"prefix_aware"}
    cache = plan.prefix_caching.cache_tokens
    one = prefix_hits(REUSE, cache, "random", 1).hit_rate
    assert (
        plan.prefix_caching.hit_rate == pytest.approx(one) == pytest.approx(prefix_hits(REUSE, cache, "prefix_aware", 1).hit_rate)
    )
    assert deployed_routing("prefix_aware", 2) == "prefix_aware"
    assert deployed_routing("prefix_aware", 1) == deployed_routing("random", 1) == "random"
    assert deployed_routing("as_measured", 1) == "as_measured"
