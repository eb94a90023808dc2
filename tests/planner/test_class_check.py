"""planner/class_check.py, the forward model of a class plan: pools that plan_classes chose, judged
at the classes they were planned for, give the plan's own figures (the same queueing model), and
the simulators' p99s; at more load they miss and say which class; a priority pool's simulated waits
are the plan's own verification's (a shedding pool's at its stored admission limit); a verified
deferred plan's interactive classes are its day run's, its background classes are not re-run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.class_check import ClassCheck, ClassPlanCheck, DeployedClassPool, check_class_plan
from planner.class_diff import ClassPlanShape, ClassPoolShape, class_plan_diff, decide_classes
from planner.diff import Hysteresis, ShapeRow
from planner.plan_classes import ClassesPlan, PoolPlan, plan_classes
from planner.plan_classes_base import ClassFigures, _Context
from planner.plan_classes_priority import _shared_priority
from tests.planner.test_plan_classes import BASE, CHAT_CLASS, INPUTS, OFFICE_DAY, SUMMARISE, _over_the_cap

CLASSES = [CHAT_CLASS, SUMMARISE]


def deployed(pools: tuple[PoolPlan, ...], figures: tuple[ClassFigures, ...] = ()) -> list[DeployedClassPool]:
    """The pools as api/classes_replan.py `deployed_pools` reads them back: with each class's admission limit."""
    limits = {f.name: f.admission_limit for f in figures if f.admission_limit is not None}
    return [
        DeployedClassPool(
            name=p.name, classes=p.classes, scheduling=p.scheduling, gpu=p.gpu, tp=p.tp, replicas=p.replicas,
            batch_limit=p.batch_limit, chunk_tokens=p.chunk_tokens, weights_precision=p.weights_precision,
            kv_precision=p.kv_precision, admission_limits={n: limits[n] for n in p.classes if n in limits},
        )
        for p in pools
    ]  # fmt: skip


@pytest.fixture(scope="module")
def plan() -> ClassesPlan:
    return plan_classes(CLASSES, INPUTS, BASE)


def test_a_plans_pools_at_its_own_classes_give_its_figures_and_the_simulators_p99s(plan: ClassesPlan) -> None:
    assert plan.chosen == "segregated"  # 4 H100s for chat, 3 for summarisation (docs/traffic-classes.md)
    check = check_class_plan(plan.chosen, deployed(plan.pools), CLASSES, INPUTS, simulated=True)
    assert check.meets_targets and check.simulated and check.summary == "every class meets its target"
    for planned, checked in zip(plan.classes, check.classes, strict=True):
        assert (checked.name, checked.pool, checked.percentile) == (planned.name, planned.arrangement_pool, 99.0)
        assert (checked.ttft_s, checked.tpot_s, checked.e2e_s) == pytest.approx((planned.ttft_s, planned.tpot_s, planned.e2e_s))
        assert checked.checked and checked.meets_target
        assert checked.simulated_ttft_p99_s is not None and checked.simulated_e2e_p99_s is not None
    chat = check.classes[0]
    assert chat.simulated_ttft_p99_s is not None and chat.simulated_ttft_p99_s <= 0.5  # chat's target, simulated
    by_pool = {p.name: p for p in plan.pools}
    assert chat.utilisation == pytest.approx(by_pool["chat"].utilisation, rel=1e-6)


def test_more_load_than_planned_misses_and_says_which_class(plan: ClassesPlan) -> None:
    """Chat's pool runs at ρ 0.75 for a 500 ms p99 TTFT: 10 % more traffic takes its p99 past it,
    and the summarisation pool (ρ 0.94) past saturation. At 1.1× chat's pool runs at ρ 0.83, past
    the utilisation it was planned at, where the analytic model (since the occupancy-dispersion and
    TTFT step-mates change, docs/queueing-fidelity.md) puts the p99 TTFT just under 500 ms while the
    step-level simulator, the reference the model is validated against, puts it above: the check
    is run simulated so that the miss is the simulator's, and its summary quotes the simulated p99."""
    check = check_class_plan(plan.chosen, deployed(plan.pools), CLASSES, INPUTS, load_factor=1.1, simulated=True)
    assert not check.meets_targets
    chat, summarise = check.classes
    assert chat.arrival_rate_rps == pytest.approx(66.0) and not chat.meets_target
    assert chat.simulated_ttft_p99_s is not None and chat.simulated_ttft_p99_s > 0.5
    assert chat.ttft_s > plan.classes[0].ttft_s  # the model's p99 grows with the load too
    assert not summarise.meets_target and summarise.problem is not None and "unstable" in summarise.problem
    assert check.summary.startswith("misses chat (p99 TTFT") and check.summary.endswith("at 1.1× the rates")
    assert "simulated p99 TTFT" in check.summary
    # and less load than planned still meets every target
    assert check_class_plan(plan.chosen, deployed(plan.pools), CLASSES, INPUTS, load_factor=0.8).meets_targets


def test_a_priority_pools_check_is_its_plans_figures_and_verification() -> None:
    """The loaded priority pool (batch limit 16: requests wait for a slot) of tests/planner/test_plan_classes.py:
    the model's figures are the search's, the simulated ones its verification's (same seed and length)."""
    base = replace(BASE, verify=True, batch_limits=(16,))
    candidate = _shared_priority(_Context(classes=CLASSES, inputs=INPUTS, base=base), verify=True)
    assert candidate.verification is not None
    check = check_class_plan("shared_priority", deployed(candidate.pools), CLASSES, INPUTS, simulated=True, seed=base.seed)
    assert check.meets_targets
    verified = {v.name: v for v in candidate.verification.classes}
    for planned, checked in zip(candidate.classes, check.classes, strict=True):
        assert (checked.ttft_s, checked.tpot_s, checked.e2e_s) == pytest.approx((planned.ttft_s, planned.tpot_s, planned.e2e_s))
        assert checked.simulated_ttft_p99_s == pytest.approx(verified[checked.name].ttft_simulated_s)
        assert checked.simulated_e2e_p99_s == pytest.approx(verified[checked.name].e2e_simulated_s)
        assert checked.simulated_tpot_p99_s == pytest.approx(verified[checked.name].tpot_simulated_s)


def test_a_shedding_pools_check_is_its_plans_figures_and_verification_at_its_admission_limit() -> None:
    """The shedding pool of tests/planner/test_plan_classes.py whose admission limit sits below the
    batch (3 % over the unshed pool's cap, summarisation 20 % sheddable): checked at its classes with
    the stored limit it gives the plan's refusals and figures, and its verification's simulated ones;
    checked at the free-slot limit (a plan stored without its limit) it refuses less than planned."""
    classes, _, _ = _over_the_cap(1.03, 0.2)
    base = replace(BASE, verify=True)
    candidate = _shared_priority(_Context(classes=classes, inputs=INPUTS, base=base), verify=True, shedding=True)
    assert candidate.verification is not None
    pools = deployed(candidate.pools, candidate.classes)
    assert pools[0].admission_limits and pools[0].admission_limits["summarise"] < pools[0].batch_limit
    check = check_class_plan("shared_priority_shedding", pools, classes, INPUTS, simulated=True, seed=base.seed)
    assert check.meets_targets
    verified = {v.name: v for v in candidate.verification.classes}
    for planned, checked in zip(candidate.classes, check.classes, strict=True):
        assert (checked.ttft_s, checked.tpot_s, checked.e2e_s) == pytest.approx((planned.ttft_s, planned.tpot_s, planned.e2e_s))
        assert checked.shed_fraction == pytest.approx(planned.shed_fraction)
        assert checked.simulated_ttft_p99_s == pytest.approx(verified[checked.name].ttft_simulated_s)
        assert checked.simulated_tpot_p99_s == pytest.approx(verified[checked.name].tpot_simulated_s)
        assert checked.simulated_e2e_p99_s == pytest.approx(verified[checked.name].e2e_simulated_s)
        assert checked.simulated_shed_fraction == pytest.approx(verified[checked.name].shed_fraction_simulated)
    summarise = next(k for k in check.classes if k.name == "summarise")
    assert 0.0 < summarise.shed_fraction <= 0.2
    unlimited = check_class_plan("shared_priority_shedding", deployed(candidate.pools), classes, INPUTS)
    assert next(k for k in unlimited.classes if k.name == "summarise").shed_fraction < summarise.shed_fraction


def test_a_deferred_plans_background_classes_are_not_re_run() -> None:
    chat = replace(CHAT_CLASS, demand_rps=OFFICE_DAY)
    summarise = replace(SUMMARISE, deadline_h=12.0)
    deferred = plan_classes([chat, summarise], INPUTS, BASE)
    assert deferred.chosen == "deferred"
    check = check_class_plan(deferred.chosen, deployed(deferred.pools), [chat, summarise], INPUTS)
    by_name = {k.name: k for k in check.classes}
    assert by_name["chat"].checked and by_name["chat"].meets_target and by_name["chat"].pool == "interactive"
    assert not by_name["summarise"].checked and "day schedule" in (by_name["summarise"].problem or "")
    assert check.meets_targets and "not checked: summarise" in check.summary


def test_a_deferred_plans_interactive_classes_are_its_day_runs_and_its_background_is_not_re_run() -> None:
    """A verified deferred plan checked with its day run's background work on the interactive pool
    (the stored verification.periods): each period simulated again gives the plan's own day run's
    figures, the worst of them reported; the background classes stay unchecked, and say why."""
    chat = replace(CHAT_CLASS, demand_rps=OFFICE_DAY)
    summarise = replace(SUMMARISE, deadline_h=12.0)
    deferred = plan_classes([chat, summarise], INPUTS, replace(BASE, verify=True))
    assert deferred.chosen == "deferred" and deferred.verification is not None
    periods = deferred.verification.periods
    in_pool = [p.background_in_pool_rps for p in periods]
    assert any(b > 0 for b in in_pool)  # the day run put background work on the interactive pool
    check = check_class_plan(deferred.chosen, deployed(deferred.pools), [chat, summarise], INPUTS, simulated=True,
                             background_in_pool_rps=in_pool)  # fmt: skip
    by_name = {k.name: k for k in check.classes}
    planned = [figures for p in periods for name, *figures in p.interactive if name == "chat"]
    assert planned  # the plan's day run simulated chat in its periods
    worst = tuple(max(f[i] for f in planned) for i in range(3))
    checked = by_name["chat"]
    assert (checked.simulated_ttft_p99_s, checked.simulated_tpot_p99_s, checked.simulated_e2e_p99_s) == pytest.approx(worst)
    assert checked.checked and checked.meets_target and checked.pool == "interactive"
    assert not by_name["summarise"].checked and "spare capacity" in (by_name["summarise"].problem or "")
    # without the day run's background, chat's simulated figures are its pool's alone at the peak rate
    alone = check_class_plan(deferred.chosen, deployed(deferred.pools), [chat, summarise], INPUTS, simulated=True)
    assert alone.classes[0].simulated_tpot_p99_s is not None and alone.classes[0].simulated_tpot_p99_s < worst[1]


def _shape(replicas: int, cost: float) -> ClassPlanShape:
    row = ShapeRow(gpu="h100-sxm", tp=1, replicas=replicas, weights_precision="bf16", kv_precision="bf16", batch_limit=64,
                   chunk_tokens=2048)  # fmt: skip
    pool = ClassPoolShape(name="chat", classes=("chat",), scheduling="fcfs", row=row)
    return ClassPlanShape(arrangement="segregated", pools=(pool,), classes=(), cost_usd_per_hour=cost)


def _check(load_factor: float, *, meets: bool, checked: bool = True) -> ClassPlanCheck:
    k = ClassCheck(name="chat", pool="chat", arrival_rate_rps=60 * load_factor, percentile=99.0, ttft_s=0.4, tpot_s=0.02,
                   e2e_s=5.0, shed_fraction=0.0, utilisation=0.7, meets_target=meets, checked=checked)  # fmt: skip
    return ClassPlanCheck(load_factor=load_factor, simulated=False, classes=(k,))


def test_the_class_adoption_rule_keeps_pools_that_hold_at_the_margin_and_adopts_the_rest() -> None:
    """Other pools ($16/h → $12/h, a saving of 25 %): kept under a 50 % threshold while the current
    pools hold at the margin; adopted when they miss at it, when the saving reaches the threshold, and
    when a class of the current plan could not be checked."""
    diff = class_plan_diff(_shape(4, 16.0), _shape(3, 12.0), before_now_usd_per_hour=16.0)
    strict = Hysteresis(headroom_margin=0.1, min_saving_fraction=0.5)
    holds = (_check(1.0, meets=True), _check(1.1, meets=True))
    kept = decide_classes(diff, strict, at_rate=holds[0], with_margin=holds[1])
    assert not kept.changed and "still meet every class's target at 1.1×" in kept.reason
    assert kept.saving_usd_per_hour == pytest.approx(4.0) and kept.threshold_usd_per_hour == pytest.approx(8.0)
    missed = decide_classes(diff, strict, at_rate=holds[0], with_margin=_check(1.1, meets=False))
    assert missed.changed and "but not at 1.1× them" in missed.reason
    assert decide_classes(diff, strict, at_rate=_check(1.0, meets=False), with_margin=holds[1]).changed
    cheap = decide_classes(diff, Hysteresis(min_saving_fraction=0.05), at_rate=holds[0], with_margin=holds[1])
    assert cheap.changed and "switching saves $4.00/h" in cheap.reason
    unchecked = (_check(1.0, meets=False, checked=False), _check(1.1, meets=False, checked=False))
    assert decide_classes(diff, strict, at_rate=unchecked[0], with_margin=unchecked[1]).changed
    assert decide_classes(diff, strict).changed  # no check at all: the change is adopted, as before the margin


def test_another_admission_limit_is_another_pool_for_the_adoption_rule() -> None:
    """The same shedding pool with summarisation's admission limit moved (12 → 16): not the same
    configuration, so the plan in force is kept only while its pools hold, and the diff names the limit."""
    row = ShapeRow(gpu="h100-sxm", tp=1, replicas=4, weights_precision="bf16", kv_precision="bf16", batch_limit=64,
                   chunk_tokens=2048)  # fmt: skip

    def shedding(limit: int) -> ClassPlanShape:
        pool = ClassPoolShape(name="shared", classes=("chat", "summarise"), scheduling="priority", row=row,
                              admission_limits=(("summarise", limit),))  # fmt: skip
        return ClassPlanShape(arrangement="shared_priority_shedding", pools=(pool,), classes=(), cost_usd_per_hour=16.0)

    diff = class_plan_diff(shedding(12), shedding(16), before_now_usd_per_hour=16.0)
    assert not diff.same_configuration and diff.pools[0].status == "changed"
    assert diff.pools_summary() == "shared: admission limit summarise 12 → summarise 16"
    assert class_plan_diff(shedding(12), shedding(12), before_now_usd_per_hour=16.0).same_configuration
    missed = decide_classes(diff, Hysteresis(), at_rate=_check(1.0, meets=True), with_margin=_check(1.1, meets=False))
    assert missed.changed
