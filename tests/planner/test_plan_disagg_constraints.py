"""Separate pools honour the request's limits: each one binds (changes the answer or makes it infeasible, naming it)."""

from __future__ import annotations

import dataclasses

import pytest

from planner.errors import InfeasiblePlanError, UnsupportedConfigurationError
from planner.pins import Pin
from planner.plan_disagg import DisaggPlan, plan_disaggregated, pool_refusals
from planner.plan_records import PlanConstraints
from planner.workload import Slo
from tests.planner.test_plan_disagg import A100, FP16_ALL, H100, LINK, LLAMA_2_70B, SLO, workload


def plan(constraints: PlanConstraints | None = None, slo: Slo = SLO, *, verify: bool = False) -> DisaggPlan:
    """The module test_plan_disagg's question (Llama-2-70B fp16, 10 req/s, TTFT 2 s, TPOT 50 ms, H100 and A100)."""
    return plan_disaggregated(
        gpus=[H100, A100],
        model=LLAMA_2_70B,
        precisions=[FP16_ALL],
        tps=[2, 4, 8],
        workload=workload(10.0),
        slo=slo,
        link=LINK,
        verify=verify,
        constraints=constraints,
    )


@pytest.fixture(scope="module")
def free() -> DisaggPlan:
    return plan()


def test_max_gpus_below_the_free_plan_is_infeasible_naming_it_with_the_gpus_that_plan(free: DisaggPlan) -> None:
    with pytest.raises(InfeasiblePlanError) as caught:
        plan(PlanConstraints(max_gpus=free.gpus - 1))
    ext = caught.value.extensions
    assert ext["constraint"] == "max_gpus"
    (relaxation,) = ext["relaxations"]
    assert (relaxation["constraint"], relaxation["value"]) == ("constraints.max_gpus", free.gpus)
    assert plan(PlanConstraints(max_gpus=free.gpus)).gpus <= free.gpus


def test_a_budget_below_the_cheapest_pools_is_infeasible_with_their_cost(free: DisaggPlan) -> None:
    cheapest = free.cost_usd_per_hour
    with pytest.raises(InfeasiblePlanError) as caught:
        plan(PlanConstraints(budget_usd_per_hour=cheapest - 1.0))
    ext = caught.value.extensions
    assert ext["constraint"] == "budget" and f"{cheapest:.2f} $/h" in caught.value.detail
    (relaxation,) = ext["relaxations"]
    assert relaxation["constraint"] == "constraints.budget_usd_per_hour"
    assert relaxation["value"] == pytest.approx(cheapest) and relaxation["cost_usd_per_hour"] == pytest.approx(cheapest)
    assert plan(PlanConstraints(budget_usd_per_hour=cheapest)).cost_usd_per_hour == pytest.approx(cheapest)


def test_min_replicas_floors_each_pool(free: DisaggPlan) -> None:
    floored = plan(PlanConstraints(min_replicas=2))
    assert min(free.prefill.replicas, free.decode.replicas) < 2  # the floor binds on this question
    assert floored.prefill.replicas >= 2 and floored.decode.replicas >= 2
    assert floored.cost_usd_per_hour > free.cost_usd_per_hour


def test_n_plus_one_prices_a_spare_in_each_pool_and_meets_the_slo_with_it_lost(free: DisaggPlan) -> None:
    spared = plan(PlanConstraints(n_plus_one=True))
    for pool in (spared.prefill, spared.decode):
        assert pool.spare_replicas == 1 and pool.serving_replicas == pool.replicas - 1 >= 1
        assert pool.cost_usd_per_hour == pytest.approx(pool.price_usd_per_gpu_hour * pool.tp * pool.replicas)
    # the prediction is of the serving replicas (one lost per pool), and it meets the SLO
    assert spared.prediction.ttft_s <= SLO.ttft_s and spared.prediction.tpot_s <= (SLO.tpot_s or 0.0)
    assert spared.cost_usd_per_hour > free.cost_usd_per_hour


def test_an_inventory_both_pools_draw_on_changes_the_answer() -> None:
    """With N+1 the free plan decodes on eight A100s; with four in stock the pools stay within four."""
    spared = plan(PlanConstraints(n_plus_one=True))
    a100_used = sum(p.gpus for p in (spared.prefill, spared.decode) if p.gpu == A100.slug)
    assert a100_used > 4
    stocked = plan(PlanConstraints(n_plus_one=True, inventory={A100.slug: 4}))
    assert sum(p.gpus for p in (stocked.prefill, stocked.decode) if p.gpu == A100.slug) <= 4
    assert stocked.cost_usd_per_hour >= spared.cost_usd_per_hour


def test_an_inventory_too_small_for_every_pair_names_the_stock_that_plans() -> None:
    with pytest.raises(InfeasiblePlanError) as caught:
        plan(PlanConstraints(inventory={A100.slug: 0, H100.slug: 1}))
    ext = caught.value.extensions
    assert ext["constraint"] == "gpu_inventory"
    assert any(r["constraint"] == f"constraints.inventory.{H100.slug}" and r["value"] > 1 for r in ext["relaxations"])


def test_pins_narrow_the_pools_where_they_mean_something(free: DisaggPlan) -> None:
    assert (free.prefill.tp, free.decode.tp) != (8, 8)
    tp8 = plan(PlanConstraints(pin=Pin(tp=8)))
    assert (tp8.prefill.tp, tp8.decode.tp) == (8, 8)
    assert free.decode.batch_limit != 32
    assert plan(PlanConstraints(pin=Pin(batch_limit=32))).decode.batch_limit == 32
    assert free.decode.gpu != H100.slug
    h100 = plan(PlanConstraints(pin=Pin(gpu=H100.slug)))
    assert (h100.prefill.gpu, h100.decode.gpu) == (H100.slug, H100.slug)


@pytest.mark.parametrize(
    ("constraints", "named"),
    [
        (PlanConstraints(pin=Pin(replicas=3)), "constraints.pin.replicas"),
        (PlanConstraints(pin=Pin(chunk_tokens=2048)), "constraints.pin.chunk_tokens"),
        (PlanConstraints(pin=Pin(draft_tokens=2)), "constraints.pin.draft_tokens"),
        (PlanConstraints(unit="instance"), "constraints.unit"),
        (PlanConstraints(speculative="on"), "constraints.speculative"),
    ],
)
def test_what_the_pools_cannot_honour_is_refused_not_ignored(constraints: PlanConstraints, named: str) -> None:
    assert any(reason.startswith(named) for reason in pool_refusals(constraints))
    with pytest.raises(UnsupportedConfigurationError, match=named):
        plan(constraints)


def test_what_the_pools_honour_is_not_refused() -> None:
    honoured = PlanConstraints(
        max_gpus=8,
        budget_usd_per_hour=10.0,
        min_replicas=2,
        n_plus_one=True,
        mixed_fleet=True,
        inventory={"h100-sxm": 8},
        pin=Pin(gpu="h100-sxm", tp=4, pp=1, batch_limit=64, precision=("fp16", "fp16"), engine="vllm"),
    )
    assert pool_refusals(honoured) == []


def test_an_e2e_target_sizes_the_decode_pool_and_the_simulator_agrees(free: DisaggPlan) -> None:
    """E2E_q ≈ TTFT target + (o_q − 1)·t_step(n̄). The free plan predicts ≈ 24 s (A100 decode); a 20 s target
    moves the decode pool to a faster one; predicted and simulated p99 E2E both meet it and agree within 15 %
    (docs/disaggregation.md's fidelity table has E2E within 7 %; the TTFT term alone is up to 30 % conservative)."""
    target = 20.0
    assert free.prediction.e2e_s > target
    slo = Slo(ttft_s=SLO.ttft_s, tpot_s=SLO.tpot_s, e2e_s=target)
    bound = plan(slo=slo, verify=True)
    assert bound.decode != free.decode
    assert bound.prediction.e2e_s <= target
    assert bound.simulated_s is not None
    simulated_e2e = bound.simulated_s[2]
    assert simulated_e2e <= target
    assert abs(bound.prediction.e2e_s / simulated_e2e - 1.0) <= 0.15


def test_an_e2e_target_below_one_unloaded_decode_is_infeasible() -> None:
    """A p99 output of 1,024 tokens at ≥ 5.2 ms a step (140 GB of fp16 weights over eight H100s' 26.8 TB/s) is
    ≥ 5.3 s of decode, more than the 3 s a 5 s E2E leaves after the 2 s TTFT target."""
    with pytest.raises(InfeasiblePlanError):
        plan(slo=Slo(ttft_s=2.0, tpot_s=0.05, e2e_s=5.0))


def test_min_confidence_keeps_low_graded_gpus_out_of_both_pools(free: DisaggPlan) -> None:
    """The free plan decodes on the A100; graded low (the test specs are ungraded) against an H100 graded medium,
    min_confidence medium leaves both pools on H100s, and with no GPU graded high nothing plans."""
    assert free.decode.gpu == A100.slug
    h100 = dataclasses.replace(H100, calibration_grade="medium")
    graded = plan_disaggregated(
        gpus=[h100, A100],
        model=LLAMA_2_70B,
        precisions=[FP16_ALL],
        tps=[2, 4, 8],
        workload=workload(10.0),
        slo=SLO,
        link=LINK,
        verify=False,
        constraints=PlanConstraints(min_confidence="medium"),
    )
    assert (graded.prefill.gpu, graded.decode.gpu) == (H100.slug, H100.slug)
    with pytest.raises(InfeasiblePlanError) as caught:
        plan(PlanConstraints(min_confidence="high"))
    assert caught.value.extensions["constraint"] == "min_confidence"


def test_replicas_verification_adds_past_a_limit_are_refused_naming_it(free: DisaggPlan) -> None:
    """The limits are checked again after the simulator adds replicas: one more decode replica than the free plan,
    at a max_gpus and a budget that fit the free plan exactly, breaks both."""
    from planner.plan_disagg import _check_added
    from planner.plan_disagg_choice import PoolChoice

    grown = PoolChoice(
        prefill=free.prefill, decode=free.decode.with_replicas(free.decode.replicas + 1), fraction=free.ttft_prefill_fraction
    )
    exact = PlanConstraints(max_gpus=free.gpus, budget_usd_per_hour=free.cost_usd_per_hour)
    with pytest.raises(InfeasiblePlanError) as caught:
        _check_added(grown, exact, added=1)
    assert caught.value.extensions["families"] == ["budget", "max_gpus"]
    _check_added(PoolChoice(prefill=free.prefill, decode=free.decode, fraction=free.ttft_prefill_fraction), exact, added=1)
