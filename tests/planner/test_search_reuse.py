"""What one request's searches share (planner/plan_search.py `Planner`): a miss the queueing model
proved at a lower rate settles a later search's probe without predicting, and a simulated TPOT-only
miss is presumed for the group's settings that decode more per step — never for the others."""

from __future__ import annotations

from dataclasses import replace

from planner import plan_predict
from planner.candidates import Option, enumerate_all_options, enumerate_groups
from planner.optimizer import PlanConstraints
from planner.plan_search import Planner
from planner.workload import Slo, Workload
from tests.planner.test_planning import CHAT, INPUTS, LLAMA_8B, SLO


def _options(rate: float) -> tuple[Workload, list[Option]]:
    workload = CHAT.at_rate(rate)
    groups, _ = enumerate_groups(model=LLAMA_8B, gpus=INPUTS.gpus, precisions=INPUTS.precisions, workload=workload, slo=SLO)
    return workload, enumerate_all_options(groups, workload)


def _cold() -> None:
    for cache in (plan_predict.PREDICTIONS, plan_predict.cached_saturation_rps, plan_predict.cached_max_rps):
        cache.cache_clear()


def test_a_relaxed_slo_search_reuses_proven_misses_and_finds_what_a_fresh_search_finds() -> None:
    """TPOT 30 ms at 8 req/s: the relaxed (33 ms) search alone refutes 18 options with a prediction each
    (measured); after the strict search every one of them is settled by a miss it proved."""
    workload, options = _options(8.0)
    strict = Slo(ttft_s=0.5, tpot_s=0.03)
    relaxed = replace(strict, tpot_s=0.033)
    _cold()
    shared = Planner(options, workload)
    plan = shared.search(strict, 8.0, PlanConstraints()).best
    assert plan is not None
    before = shared.predictions
    again = shared.search(relaxed, 8.0, PlanConstraints(), below_usd_per_hour=plan.cost_usd_per_hour)
    reused = shared.predictions - before
    _cold()
    fresh = Planner(options, workload)
    alone = fresh.search(relaxed, 8.0, PlanConstraints(), below_usd_per_hour=plan.cost_usd_per_hour)
    assert (again.best and (again.best.option.id, again.best.replicas)) == (
        alone.best and (alone.best.option.id, alone.best.replicas)
    )
    assert reused < fresh.predictions  # the strict search's misses at lower rates settled some probes


def test_a_tpot_miss_is_presumed_only_for_settings_that_decode_more_per_step() -> None:
    workload, options = _options(20.0)
    planner = Planner(options, workload)
    group = options[0].group
    siblings = [o for o in options if o.group is group]
    missed = next(o for o in siblings if o.batch_limit == 64 and o.chunk_tokens == 2048)
    rate = planner.saturation(missed) * 0.5
    planner.record_simulated_miss(missed, SLO, rate, ("tpot",))
    for option in siblings:
        presumed = option.batch_limit >= 64 and (option.chunk_tokens is None or option.chunk_tokens >= 2048)
        facts = planner.facts.get((option.id, SLO))
        assert (facts is not None and facts.missed_rps <= rate) == presumed, option.id
    other = Planner(options, workload)
    other.record_simulated_miss(missed, SLO, rate, ("ttft",))  # a TTFT miss says nothing of the others
    assert {option_id for option_id, _ in other.facts} == {missed.id}
