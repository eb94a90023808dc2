"""Counter-examples the invariant suite (tests/planner/test_plan_invariants.py) found, one plain test
each, with the exact request and what it shows (docs/plan-invariants.md lists them).

A test the planner fails today is a strict xfail naming the issue: it turns red the moment the fix
lands, so the mark is removed with the fix.
"""

from __future__ import annotations

from dataclasses import replace

from planner.errors import InfeasiblePlanError
from planner.memory import kv_capacity_tokens
from planner.performance import build_step_model
from planner.planning import PlanResult
from planner.queueing import predict
from planner.simulator import simulate
from planner.workload import Serving
from tests.planner.test_plan_invariants import (
    EIGHT_B_E2E_MIXED,
    GPUS,
    MODELS,
    PRECISIONS,
    SEVENTY_B_MIXED,
    SEVENTY_B_TPOT,
    SEVENTY_B_TPOT_BUDGET_6,
    SEVENTY_B_TWO_CULPRITS,
    THIRTEEN_B_MIXED,
    Case,
    at_most,
    check_relaxations,
    cost_of,
    describe,
    plan,
    plan_failures,
    relaxations_of,
    sensitivity_failures,
)


def test_allowing_one_more_precision_never_makes_a_verified_mixed_fleet_infeasible() -> None:
    """Allowing fp8/fp8 as well can only add plans: the $288/h plan without it is still available."""
    without = plan(SEVENTY_B_MIXED)
    assert isinstance(without, PlanResult), describe(without)
    with_fp8 = plan(replace(SEVENTY_B_MIXED, precisions=(*SEVENTY_B_MIXED.precisions, "fp8/fp8")))
    assert at_most(cost_of(without), cost_of(with_fp8)), f"{describe(without)} became {describe(with_fp8)}"


def test_sensitivity_never_prices_more_traffic_below_the_verified_plan() -> None:
    """Verification took the plan from 6 to 9 replicas of h100-sxm/tp2/fp8/fp8/b64/c2048 (simulated e2e
    missed); 1.1× the traffic on the same configuration needs at least those 9, not 8."""
    result = plan(EIGHT_B_E2E_MIXED)
    assert isinstance(result, PlanResult), describe(result)
    assert not list(sensitivity_failures(result))


def test_the_verified_e2e_mixed_fleet_is_otherwise_consistent() -> None:
    """The same plan passes every other check: its cost is Σ price × GPUs and no alternative is cheaper."""
    result = plan(EIGHT_B_E2E_MIXED)
    assert isinstance(result, PlanResult), describe(result)
    others = [f for f in plan_failures(EIGHT_B_E2E_MIXED, result) if "traffic" not in f]
    assert not others


def test_removing_a_budget_never_raises_the_cost() -> None:
    budgeted = plan(replace(SEVENTY_B_TPOT, budget_usd_per_hour=18.0))
    unlimited = plan(SEVENTY_B_TPOT)
    assert at_most(cost_of(budgeted), cost_of(unlimited)), f"{describe(budgeted)} became {describe(unlimited)}"


def test_a_budget_limited_plan_meets_its_slo_under_the_forward_model() -> None:
    result = plan(replace(SEVENTY_B_TPOT, budget_usd_per_hour=18.0))
    if not isinstance(result, PlanResult):
        return  # refusing the request is a correct answer
    row = result.row
    gpu, model, precision = GPUS[row.gpu], MODELS[SEVENTY_B_TPOT.model], PRECISIONS[f"{row.weights_precision}/{row.kv_precision}"]
    prediction = predict(
        build_step_model(gpu, model, precision, row.tp, gpu.efficiency),
        SEVENTY_B_TPOT.workload().at_rate(row.offered_rps / row.replicas),
        Serving(batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens),
        kv_capacity_tokens=kv_capacity_tokens(gpu, model, precision, row.tp, gpu.efficiency),
    )
    assert not prediction.unstable and prediction.tpot is not None
    assert prediction.tpot.at_percentile_s <= SEVENTY_B_TPOT.tpot_ms / 1e3


def test_a_budget_relaxation_is_minimal_within_five_percent() -> None:
    case = SEVENTY_B_TPOT_BUDGET_6
    error = plan(case, advise=True)
    assert isinstance(error, InfeasiblePlanError), describe(error)
    failures = list(check_relaxations(case, error))
    assert not failures, "\n".join(failures)


def test_a_422_with_an_slo_and_a_limit_to_relax_says_what_to_relax_together() -> None:
    error = plan(SEVENTY_B_TWO_CULPRITS, advise=True)
    assert isinstance(error, InfeasiblePlanError), describe(error)
    relaxations, _ = relaxations_of(error)
    assert relaxations, error.extensions
    failures = list(check_relaxations(SEVENTY_B_TWO_CULPRITS, error))
    assert not failures, "\n".join(failures)


def test_the_two_culprits_request_plans_once_both_are_relaxed() -> None:
    """What the advice should have found: the TPOT above its floor and min_replicas within max_gpus."""
    assert isinstance(plan(replace(SEVENTY_B_TWO_CULPRITS, tpot_ms=30, min_replicas=1)), PlanResult)


def test_a_looser_ttft_never_makes_a_verified_mixed_fleet_infeasible() -> None:
    """The $16.20/h plan verified at TTFT 150 ms meets 157.5 ms too, so the looser request has a plan."""
    strict = plan(THIRTEEN_B_MIXED)
    assert isinstance(strict, PlanResult), describe(strict)
    loose = plan(replace(THIRTEEN_B_MIXED, ttft_ms=157.5))
    assert at_most(cost_of(strict), cost_of(loose)), f"{describe(strict)} became {describe(loose)}"


#: Hypothesis's stored counter-example to invariant 5 (test_plan_invariants.py): a verified mixed fleet
#: of four rows, each filled by the MILP to ~98 % of its μ (b64/c2048; the test's grid stops at 64).
EIGHT_B_MIXED_TTFT = Case(
    model="llama-3.1-8b",
    gpus=("a100-80gb-sxm", "l40s", "mi300x"),
    precisions=("bf16/bf16",),
    rate_rps=26.75,
    prompt=(741, 1111),
    output=(308, 616),
    arrival_cv=1.0,
    ttft_ms=336,
    tpot_ms=100,
    e2e_s=10,
    max_gpus=None,
    budget_usd_per_hour=None,
    min_replicas=1,
    n_plus_one=False,
    mixed_fleet=True,
    inventory=(("mi300x", 3),),
    verify=True,
    other_gpus=(),
    other_precisions=(),
)


def test_the_mixed_fleet_invariant_5_flagged_meets_ttft_over_long_simulations() -> None:
    """Invariant 5 flags the tp2 rows (simulated p99 TTFT 0.47 and 0.43 s, whole 95 % CI above 0.336 s
    at 4,000 requests, seed 7,919). Measured 2026-12-02: at 9.7 and 11.7 req/s on 64 slots the batch
    is full for ~1.3 % of arrivals, and rare bursts that fill it last longer than the simulator's
    batch means, so a 4,000-request run's p99 is bimodal across seeds (0.10-0.67 s; 10-13 % of 30
    seeds have the whole CI above the target) while 40,000-request runs read 0.13-0.21 s. The plan
    meets its SLO: this holds the long-run reading, the evidence that the invariant's CI (not the
    planner) is what misfires here."""
    result = plan(EIGHT_B_MIXED_TTFT)
    assert isinstance(result, PlanResult), describe(result)
    model, workload, slo = MODELS[EIGHT_B_MIXED_TTFT.model], EIGHT_B_MIXED_TTFT.workload(), EIGHT_B_MIXED_TTFT.slo()
    assert slo.ttft_s is not None
    for row in result.rows:
        gpu, precision = GPUS[row.gpu], PRECISIONS[f"{row.weights_precision}/{row.kv_precision}"]
        run = simulate(
            build_step_model(gpu, model, precision, row.tp, gpu.efficiency),
            workload.at_rate(row.offered_rps / row.replicas),
            Serving(batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens),
            kv_capacity_tokens=kv_capacity_tokens(gpu, model, precision, row.tp, gpu.efficiency),
            requests=40_000,
            seed=101,
        )
        assert run.stable, row
        assert run.ttft_s.p99 <= slo.ttft_s, f"{row.gpu} tp{row.tp}: long-run p99 TTFT {run.ttft_s.p99:.3f} s"
