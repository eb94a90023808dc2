"""planner/class_diff.py: class plans diffed pool by pool (matched by name) and class by class, and
the adoption rule: any change of arrangement or pools is adopted, the same pools only when their
cost moved by at least the hysteresis threshold."""

from __future__ import annotations

import dataclasses
import math

import pytest

from planner.class_diff import (
    ClassesContext,
    ClassFigures,
    ClassPlanShape,
    ClassPoolShape,
    class_change_reasons,
    class_plan_diff,
    decide_classes,
)
from planner.diff import CatalogState, Hysteresis, ShapeRow
from planner.errors import PlannerInputError
from planner.traffic_classes import TrafficClass
from planner.workload import FixedLength, Slo


def pool(name: str, classes: tuple[str, ...], replicas: int, gpu: str = "h100-sxm", tp: int = 1) -> ClassPoolShape:
    row = ShapeRow(
        gpu=gpu, tp=tp, replicas=replicas, weights_precision="bf16", kv_precision="bf16", batch_limit=64, chunk_tokens=None
    )
    return ClassPoolShape(name=name, classes=classes, scheduling="fcfs", row=row)


def figures(name: str, pool: str, rate: float, ttft_s: float) -> ClassFigures:
    return ClassFigures(
        name=name,
        pool=pool,
        arrival_rate_rps=rate,
        percentile=99.0,
        ttft_s=ttft_s,
        tpot_s=0.02,
        e2e_s=5.0,
        meets_target=True,
        shed_fraction=0.0,
    )


SEGREGATED = ClassPlanShape(
    arrangement="segregated",
    pools=(pool("chat", ("chat",), 3), pool("summarise", ("summarise",), 2)),
    classes=(figures("chat", "chat", 60, 0.3), figures("summarise", "summarise", 20, 2.0)),
    cost_usd_per_hour=5 * 4.0,  # 5 H100 at $4/GPU-h
)


def test_pools_and_classes_are_matched_by_name() -> None:
    grown = dataclasses.replace(
        SEGREGATED,
        pools=(pool("chat", ("chat",), 4), SEGREGATED.pools[1]),
        classes=(figures("chat", "chat", 80, 0.35), SEGREGATED.classes[1]),
        cost_usd_per_hour=6 * 4.0,
    )
    diff = class_plan_diff(SEGREGATED, grown, before_now_usd_per_hour=20.0)
    assert [(p.pool, p.status) for p in diff.pools] == [("chat", "changed"), ("summarise", "same")]
    assert diff.pools[0].summary() == "chat: replicas 3 → 4"
    assert [(k.name, k.status) for k in diff.classes] == [("chat", "changed"), ("summarise", "same")]
    assert (diff.classes[0].arrival_rate_rps.before, diff.classes[0].arrival_rate_rps.after) == (60, 80)
    assert diff.gpus_added == {"h100-sxm": 1} and diff.gpus_removed == {}
    assert diff.cost_usd_per_hour.change == pytest.approx(4.0)
    assert diff.cost_usd_per_month.change == pytest.approx(4.0 * 730)
    assert not diff.same_configuration
    decision = decide_classes(diff, Hysteresis(min_saving_fraction=0.9))  # a change of pools is adopted whatever the threshold
    assert decision.changed and "chat: replicas 3 → 4" in decision.reason


def test_another_arrangement_removes_and_adds_pools() -> None:
    shared = ClassPlanShape(
        arrangement="shared_fcfs",
        pools=(pool("shared", ("chat", "summarise"), 6),),
        classes=(figures("chat", "shared", 60, 0.3), figures("summarise", "shared", 20, 0.3)),
        cost_usd_per_hour=24.0,
    )
    diff = class_plan_diff(SEGREGATED, shared, before_now_usd_per_hour=20.0)
    assert [(p.pool, p.status) for p in diff.pools] == [("chat", "removed"), ("summarise", "removed"), ("shared", "added")]
    assert diff.classes[1].pool.before == "summarise" and diff.classes[1].pool.after == "shared"
    assert diff.pools_summary() == "arrangement segregated → shared_fcfs; chat: removed; summarise: removed; shared: added"
    assert decide_classes(diff, Hysteresis()).changed


def test_the_same_pools_are_adopted_only_when_the_cost_moved_beyond_the_threshold() -> None:
    same = dataclasses.replace(SEGREGATED, cost_usd_per_hour=20.0 * 1.04)  # the price rose 4 %
    diff = class_plan_diff(SEGREGATED, same, before_now_usd_per_hour=20.0 * 1.04)
    assert diff.same_configuration
    kept = decide_classes(diff, Hysteresis(min_saving_fraction=0.05))
    assert not kept.changed and kept.threshold_usd_per_hour == pytest.approx(1.0)  # 5 % of $20/h as planned
    assert kept.saving_usd_per_hour == pytest.approx(0.0)  # today the same pools cost the same either way
    assert decide_classes(diff, Hysteresis(min_saving_fraction=0.03)).changed  # $0.80/h ≥ 3 % of $20/h
    assert decide_classes(diff, Hysteresis(min_saving_fraction=0.0, min_saving_usd_per_hour=0.81)).changed is False
    identical = class_plan_diff(SEGREGATED, SEGREGATED, before_now_usd_per_hour=20.0)
    assert not decide_classes(identical, Hysteresis(min_saving_fraction=0.0)).changed  # no change at all is never adopted


def test_a_current_plan_that_cannot_be_priced_today_saves_against_its_cost_as_planned() -> None:
    cheaper = dataclasses.replace(SEGREGATED, pools=(pool("chat", ("chat",), 2), SEGREGATED.pools[1]), cost_usd_per_hour=16.0)
    decision = decide_classes(class_plan_diff(SEGREGATED, cheaper, before_now_usd_per_hour=math.nan), Hysteresis())
    assert decision.changed and decision.saving_usd_per_hour == pytest.approx(4.0)


def test_a_class_plan_shape_needs_a_pool() -> None:
    with pytest.raises(PlannerInputError):
        ClassPlanShape(arrangement="segregated", pools=(), classes=(), cost_usd_per_hour=0.0)


def test_reasons_name_each_class_and_the_catalog() -> None:
    chat = TrafficClass(
        name="chat",
        arrival_rate_rps=60,
        prompt_tokens=FixedLength(tokens=800),
        output_tokens=FixedLength(tokens=200),
        slo=Slo(ttft_s=0.5),
    )
    batch = TrafficClass(
        name="batch",
        arrival_rate_rps=5,
        prompt_tokens=FixedLength(tokens=800),
        output_tokens=FixedLength(tokens=200),
        deadline_h=6,
    )
    then = ClassesContext(classes=(chat,), catalog=CatalogState(catalog_version=1, prices_usd_per_gpu_hour={"h100-sxm": 4.0}))
    now = ClassesContext(
        classes=(dataclasses.replace(chat, arrival_rate_rps=90, slo=Slo(ttft_s=0.4)), batch),
        catalog=CatalogState(catalog_version=2, prices_usd_per_gpu_hour={"h100-sxm": 5.0}),
    )
    reasons = class_change_reasons(then, now, gpus_involved=["h100-sxm"])
    assert [r.kind for r in reasons] == ["traffic", "prices"]
    assert reasons[0].detail == (
        "chat arrival rate 60 → 90 rps (+50%); chat's lengths, target, priority or shedding changed; class batch added"
    )
    assert reasons[1].detail == "h100-sxm $4 → $5/GPU-h"
    assert class_change_reasons(then, then, gpus_involved=["h100-sxm"]) == ()
