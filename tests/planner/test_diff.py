"""planner/diff.py: the forward model on a stored configuration, the plan diff, the reasons for a
change and the hysteresis decision.

Specs are the test inputs of tests/planner/test_planning.py (datasheet figures, test prices, a
fixed plausible efficiency); what is checked is the logic, so any positive numbers would do.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.diff import (
    Check,
    DeployedRow,
    Hysteresis,
    PlanningContext,
    PlanShape,
    RowCheck,
    ShapeRow,
    change_reasons,
    check_plan,
    decide,
    plan_diff,
    pool_changes_summary,
    pool_diff,
    unavailable,
)
from planner.errors import PlannerInputError
from planner.planning import plan_capacity
from planner.units import HOURS_PER_MONTH
from planner.workload import Slo
from tests.planner.test_planning import A100, BF16_PAIR, CHAT, H100, INPUTS, LLAMA_8B, SLO, request


def deployed(result, gpus=(H100, A100)) -> tuple[DeployedRow, ...]:
    by_slug = {g.slug: g for g in gpus}
    total = sum(r.offered_rps for r in result.rows)
    return tuple(
        DeployedRow(
            gpu=by_slug[r.gpu],
            precision=BF16_PAIR,
            tp=r.tp,
            replicas=r.replicas,
            batch_limit=r.batch_limit,
            chunk_tokens=r.chunk_tokens,
            traffic_share=r.offered_rps / total,
        )
        for r in result.rows
    )


@pytest.fixture(scope="module")
def planned():
    return plan_capacity(request(), INPUTS)


def test_a_plan_rechecked_at_its_own_workload_holds_and_costs_what_it_cost(planned) -> None:
    """The forward model is the planner's own replica decision (one replica at λ/r), so the plan it
    chose meets every SLO when re-evaluated on the same specs and workload."""
    check = check_plan(deployed(planned), LLAMA_8B, CHAT, SLO)
    assert check.meets_slo
    assert check.cost_usd_per_hour == pytest.approx(planned.cost_usd_per_hour)
    row = check.rows[0]
    assert row.per_replica_rate_rps == pytest.approx(CHAT.arrival_rate_rps / planned.replicas)
    assert row.predicted_s["ttft"] <= SLO.ttft_s and row.predicted_s["tpot"] <= SLO.tpot_s
    assert "≤" in check.summary


def test_the_same_replicas_at_a_much_higher_rate_miss(planned) -> None:
    """λ beyond r × saturation: the replica queue is unstable, every target counts as missed."""
    rows = deployed(planned)
    saturation = max(r.saturation_rps for r in planned.rows)
    check = check_plan(rows, LLAMA_8B, CHAT.at_rate(planned.replicas * saturation * 1.5), SLO)
    assert not check.meets_slo
    assert check.rows[0].unstable and check.rows[0].predicted_s == {}
    assert "overloaded" in check.summary


def test_a_tighter_slo_can_fail_the_same_configuration(planned) -> None:
    check = check_plan(deployed(planned), LLAMA_8B, CHAT, Slo(ttft_s=1.0, tpot_s=0.001))
    assert not check.meets_slo and check.rows[0].misses == ("tpot",)
    assert "TPOT" in check.summary and "> 1 ms target" in check.summary


def test_a_configuration_that_no_longer_fits_is_reported_not_raised() -> None:
    tiny = replace(H100, memory_bytes=10e9)  # 10 GB: the 16 GB of bf16 weights do not fit
    row = DeployedRow(gpu=tiny, precision=BF16_PAIR, tp=1, replicas=2, batch_limit=64, chunk_tokens=None)
    check = check_plan((row,), LLAMA_8B, CHAT, SLO)
    assert not check.meets_slo
    assert check.rows[0].problem is not None and "fits" in check.rows[0].problem


def shape(gpu: str, replicas: int, *, tp: int = 1, batch: int = 64, price: float = 4.0, precision: str = "bf16") -> PlanShape:
    return PlanShape(
        rows=(
            ShapeRow(
                gpu=gpu,
                tp=tp,
                replicas=replicas,
                weights_precision=precision,
                kv_precision=precision,
                batch_limit=batch,
                chunk_tokens=None,
            ),
        ),
        cost_usd_per_hour=replicas * tp * price,
    )


def pools(prefill_gpu: str, prefill_replicas: int, decode_replicas: int) -> PlanShape:
    """A disaggregated shape: tp-2 prefill pool (8,192-token budget), tp-2 decode pool (batch 128), fp8, $4 per GPU-hour."""
    rows = (
        ShapeRow(role="prefill", gpu=prefill_gpu, tp=2, replicas=prefill_replicas, weights_precision="fp8",
                 kv_precision="fp8", batch_limit=None, chunk_tokens=8192),
        ShapeRow(role="decode", gpu="h100-sxm", tp=2, replicas=decode_replicas, weights_precision="fp8",
                 kv_precision="fp8", batch_limit=128, chunk_tokens=None),
    )  # fmt: skip
    return PlanShape(rows=rows, cost_usd_per_hour=2 * (prefill_replicas + decode_replicas) * 4.0, topology="disaggregated")


def test_pools_are_diffed_by_role() -> None:
    """Aggregated → disaggregated: the mixed pool removed, the prefill and decode pools added; then a prefill pool
    growing from 3 to 5 replicas and changing GPU, the decode pool the same."""
    switch = plan_diff(shape("h100-sxm", 4, tp=2), pools("h100-sxm", 3, 1), before_now_usd_per_hour=32.0)
    assert (switch.topology.before, switch.topology.after) == ("aggregated", "disaggregated")
    assert [(c.pool, c.status) for c in switch.pools] == [("mixed", "removed"), ("prefill", "added"), ("decode", "added")]
    assert switch.pools[0].replicas.before == 4 and switch.pools[0].replicas.after is None
    assert switch.gpu.after == "h100-sxm" and switch.batch_limit.after == 128  # the plan block names the decode pool
    assert not switch.same_configuration
    grown = pool_diff(pools("h100-sxm", 3, 1).rows, pools("h200", 5, 1).rows)
    assert [(c.pool, c.status) for c in grown] == [("prefill", "changed"), ("decode", "same")]
    assert grown[0].summary() == "prefill: gpu h100-sxm → h200, replicas 3 → 5"
    assert (grown[0].gpus.before, grown[0].gpus.after) == (6, 10)
    assert pool_changes_summary(pools("h100-sxm", 3, 1), pools("h100-sxm", 3, 1)) == "same pools"
    assert pool_changes_summary(pools("h100-sxm", 3, 1), shape("h100-sxm", 4, tp=2)) == (
        "topology disaggregated → aggregated; prefill: removed; decode: removed; mixed: added"
    )


def test_diff_counts_gpus_added_and_removed_and_costs_per_month() -> None:
    """3 × H100 ($4) → 2 × tp-2 A100 ($2): 3 H100 removed, 4 A100 added; $12/h → $8/h, −$4/h = −$2,920/month."""
    diff = plan_diff(shape("h100-sxm", 3), shape("a100", 2, tp=2, price=2.0), before_now_usd_per_hour=12.0)
    assert diff.gpus_removed == {"h100-sxm": 3} and diff.gpus_added == {"a100": 4}
    assert (diff.gpu.before, diff.gpu.after, diff.gpu.changed) == ("h100-sxm", "a100", True)
    assert (diff.tp.before, diff.tp.after) == (1, 2)
    assert diff.replicas.changed and not diff.batch_limit.changed
    assert diff.cost_usd_per_hour.change == pytest.approx(-4.0)
    assert diff.cost_usd_per_month.change == pytest.approx(-4.0 * HOURS_PER_MONTH)
    assert not diff.same_configuration


def test_the_cost_change_is_against_todays_price_of_the_current_plan() -> None:
    """Planned at $12/h; the H100 price rose so it costs $15/h today; the new plan at $13/h saves $2/h."""
    diff = plan_diff(shape("h100-sxm", 3), shape("h100-sxm", 2, price=6.5), before_now_usd_per_hour=15.0)
    assert diff.cost_usd_per_hour.before == pytest.approx(12.0)
    assert diff.cost_usd_per_hour.change == pytest.approx(-2.0)
    assert diff.gpus_removed == {"h100-sxm": 1} and diff.gpus_added == {}


def context(**changes: object) -> PlanningContext:
    base = PlanningContext(
        workload=CHAT,
        slo=SLO,
        constraints={"gpus": ["h100-sxm"]},
        catalog_version=3,
        prices_usd_per_gpu_hour={"h100-sxm": 4.0, "a100": 2.0},
        efficiencies={"h100-sxm": H100.efficiency},
        model_slug="llama-3.1-8b",
    )
    return replace(base, **changes)


def kinds(then: PlanningContext, now: PlanningContext, gpus: tuple[str, ...] = ("h100-sxm",)) -> list[str]:
    return [r.kind for r in change_reasons(then, now, gpus_involved=gpus)]


def test_reasons_classify_traffic_slo_prices_and_catalog() -> None:
    then = context()
    assert kinds(then, context()) == []
    assert kinds(then, context(workload=CHAT.at_rate(24.0))) == ["traffic"]
    assert kinds(then, context(slo=Slo(ttft_s=0.5, tpot_s=0.06))) == ["slo"]
    assert kinds(then, context(constraints={"gpus": ["a100"]})) == ["constraints"]
    # a price edit moves the catalog version too; the price explains it
    assert kinds(then, context(catalog_version=4, prices_usd_per_gpu_hour={"h100-sxm": 5.0, "a100": 2.0})) == ["prices"]
    # a price change of a GPU the plans do not involve is not a reason of theirs
    assert kinds(then, context(catalog_version=4, prices_usd_per_gpu_hour={"h100-sxm": 4.0, "a100": 9.0})) == ["catalog"]
    tuned = replace(H100.efficiency, compute=0.5)
    assert kinds(then, context(catalog_version=4, efficiencies={"h100-sxm": tuned})) == ["catalog"]
    several = kinds(
        then,
        context(
            workload=CHAT.at_rate(20.0),
            slo=Slo(ttft_s=0.8, tpot_s=0.06),
            catalog_version=5,
            prices_usd_per_gpu_hour={"h100-sxm": 3.0, "a100": 2.0},
        ),
    )
    assert several == ["traffic", "slo", "prices"]


def test_reason_details_say_what_moved() -> None:
    reasons = change_reasons(
        context(),
        context(workload=CHAT.at_rate(18.0), catalog_version=4, prices_usd_per_gpu_hour={"h100-sxm": 5.0}),
        gpus_involved=("h100-sxm",),
    )
    details = {r.kind: r.detail for r in reasons}
    assert details["traffic"] == "arrival rate 12 → 18 rps (+50%)"
    assert details["prices"] == "h100-sxm $4 → $5/GPU-h"


def passing(rate: float, summary: str = "p99 TTFT 100 ms ≤ 1000 ms") -> Check:
    row = RowCheck(
        gpu="h100-sxm",
        per_replica_rate_rps=rate,
        meets_slo=True,
        unstable=False,
        utilisation=0.5,
        predicted_s={"ttft": 0.1},
        misses=(),
    )
    return Check(arrival_rate_rps=rate, meets_slo=True, rows=(row,), cost_usd_per_hour=12.0, summary=summary)


def failing(rate: float) -> Check:
    row = RowCheck(
        gpu="h100-sxm",
        per_replica_rate_rps=rate,
        meets_slo=False,
        unstable=False,
        utilisation=0.9,
        predicted_s={"ttft": 2.0},
        misses=("ttft",),
    )
    return Check(
        arrival_rate_rps=rate, meets_slo=False, rows=(row,), cost_usd_per_hour=12.0, summary="p99 TTFT 2000 ms > 1000 ms target"
    )


CHEAPER = plan_diff(shape("h100-sxm", 3), shape("h100-sxm", 2, price=5.8), before_now_usd_per_hour=12.0)  # saves $0.40/h
MUCH_CHEAPER = plan_diff(shape("h100-sxm", 3), shape("h100-sxm", 2), before_now_usd_per_hour=12.0)  # saves $4/h
DEARER = plan_diff(shape("h100-sxm", 3), shape("h100-sxm", 4), before_now_usd_per_hour=12.0)


def test_hysteresis_keeps_a_plan_that_holds_with_margin_when_the_saving_is_small() -> None:
    """Saving $0.40/h against max($1.00/h, 5 % × $12/h = $0.60/h) = $1.00/h: keep."""
    h = Hysteresis(headroom_margin=0.1, min_saving_fraction=0.05, min_saving_usd_per_hour=1.0)
    decision = decide(at_rate=passing(10.0), with_margin=passing(11.0), diff=CHEAPER, hysteresis=h)
    assert not decision.changed
    assert decision.saving_usd_per_hour == pytest.approx(0.4)
    assert decision.threshold_usd_per_hour == pytest.approx(1.0)
    assert "1.1× the new rate" in decision.reason and "save only $0.40/h (< $1.00/h)" in decision.reason


def test_hysteresis_changes_when_the_saving_reaches_the_threshold() -> None:
    h = Hysteresis(headroom_margin=0.1, min_saving_fraction=0.05, min_saving_usd_per_hour=1.0)
    decision = decide(at_rate=passing(10.0), with_margin=passing(11.0), diff=MUCH_CHEAPER, hysteresis=h)
    assert decision.changed and "saves $4.00/h" in decision.reason


def test_a_plan_missing_the_slo_is_always_replaced_whatever_the_thresholds() -> None:
    h = Hysteresis(headroom_margin=0.0, min_saving_fraction=1.0, min_saving_usd_per_hour=1e6)
    decision = decide(at_rate=failing(10.0), with_margin=failing(10.0), diff=DEARER, hysteresis=h)
    assert decision.changed and "no longer meets the SLOs" in decision.reason


def test_a_plan_without_the_margin_is_replaced() -> None:
    h = Hysteresis(headroom_margin=0.25)
    decision = decide(at_rate=passing(10.0), with_margin=failing(12.5), diff=DEARER, hysteresis=h)
    assert decision.changed and "not at 1.25× it" in decision.reason


def test_a_dearer_new_plan_does_not_replace_one_that_holds() -> None:
    decision = decide(at_rate=passing(10.0), with_margin=passing(11.0), diff=DEARER, hysteresis=Hysteresis())
    assert not decision.changed and "would not be cheaper" in decision.reason


def test_the_same_configuration_is_no_change() -> None:
    same = plan_diff(shape("h100-sxm", 3), shape("h100-sxm", 3), before_now_usd_per_hour=12.0)
    assert same.same_configuration
    assert not decide(at_rate=failing(10.0), with_margin=failing(11.0), diff=same, hysteresis=Hysteresis()).changed


def test_a_plan_that_cannot_be_evaluated_is_replaced() -> None:
    gone = unavailable(10.0, "h100-sxm left the catalog")
    diff = plan_diff(shape("h100-sxm", 3), shape("a100", 3, price=2.0), before_now_usd_per_hour=math.nan)
    decision = decide(at_rate=gone, with_margin=gone, diff=diff, hysteresis=Hysteresis())
    assert decision.changed and "left the catalog" in decision.reason


@pytest.mark.parametrize(
    "settings",
    [{"headroom_margin": -0.1}, {"min_saving_fraction": 1.5}, {"min_saving_usd_per_hour": -1.0}, {"headroom_margin": math.nan}],
)
def test_hysteresis_settings_are_validated(settings: dict[str, float]) -> None:
    with pytest.raises(PlannerInputError):
        Hysteresis(**settings)


@settings(max_examples=8, deadline=None)
@given(rate=st.floats(min_value=0.5, max_value=60.0), ttft_s=st.sampled_from([0.5, 1.0, 2.0]))
def test_every_plan_holds_when_rechecked_against_its_own_request(rate: float, ttft_s: float) -> None:
    """Whatever the rate and TTFT target, the plan the planner chose meets its SLO under the forward
    model used for re-plans."""
    slo = Slo(ttft_s=ttft_s, tpot_s=0.06)
    result = plan_capacity(request(CHAT.at_rate(rate), slo), INPUTS)
    assert check_plan(deployed(result), LLAMA_8B, CHAT.at_rate(rate), slo).meets_slo
