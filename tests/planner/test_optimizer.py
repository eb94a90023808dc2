"""The single-workload plan MILP on hand-solved cases, its error messages and its validation."""

from __future__ import annotations

import pytest

from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.milp import CBC, HIGHS, constraint_name
from planner.optimizer import Candidate, PlanConstraints, candidate_id, solve_plan


def candidate(gpu: str, *, cost: float, rps: float, tp: int = 1, saturation: float | None = None, batch: int = 64) -> Candidate:
    return Candidate(
        id=candidate_id(gpu=gpu, weights_precision="fp8", kv_precision="fp8", tp=tp, batch_limit=batch, chunk_tokens=None),
        gpu=gpu,
        tp=tp,
        weights_precision="fp8",
        kv_precision="fp8",
        batch_limit=batch,
        chunk_tokens=None,
        gpus_per_replica=tp,
        cost_usd_per_hour=cost,
        max_rps_at_slo=rps,
        saturation_rps=saturation if saturation is not None else rps * 1.25,
    )


#: A fast expensive GPU and a slow cheap one (illustrative numbers, not catalog data).
FAST = candidate("h100-sxm", cost=4.0, rps=10.0)
SLOW = candidate("a100-80gb", cost=2.5, rps=5.0)


def test_candidate_id_is_readable_and_stable() -> None:
    assert candidate_id(gpu="h100-sxm", weights_precision="fp8", kv_precision="fp8", tp=2, batch_limit=64, chunk_tokens=2048) == (
        "h100-sxm/fp8/fp8/tp2/b64/c2048"
    )
    assert FAST.id == "h100-sxm/fp8/fp8/tp1/b64/nochunk"
    assert constraint_name("gpu_inventory", "h100-sxm", "h14") == "gpu_inventory__h100_sxm__h14"


def test_single_configuration_picks_the_cheapest_covering_candidate() -> None:
    """λ = 23 req/s. FAST: ⌈23/10⌉ = 3 replicas × $4 = $12/h. SLOW: ⌈23/5⌉ = 5 × $2.5 = $12.5/h.

    So 3 × FAST at $12/h; capacity 30 req/s; target ρ = 23 / (3 × 12.5) = 0.6133.
    """
    plan = solve_plan([FAST, SLOW], 23.0)
    assert plan.replicas == {FAST.id: 3}
    assert plan.cost_usd_per_hour == pytest.approx(12.0)
    assert plan.objective_usd_per_hour == pytest.approx(12.0)
    assert plan.gpus_total == 3
    assert plan.capacity_rps == pytest.approx(30.0)
    assert plan.target_rho == pytest.approx(23.0 / 37.5)
    assert plan.rows[0].offered_rps == pytest.approx(23.0)
    assert plan.solver.status == "optimal"
    assert plan.solver.name in (HIGHS, CBC)
    assert plan.solver.solve_s > 0
    assert plan.model_size.candidates == 2
    demand = next(s for s in plan.constraints if s.family == "meet_demand")
    assert demand.slack == pytest.approx(7.0)
    assert demand.binding  # 7 req/s of slack < one FAST replica (10 req/s): no replica can go


def test_mixed_fleet_is_cheaper_than_any_single_configuration() -> None:
    """Mixed: 2 × FAST (20 req/s) + 1 × SLOW (5 req/s) = 25 ≥ 23 for $8 + $2.5 = $10.5/h < $12/h.

    Traffic splits in proportion to capacity: FAST rows take 23 × 20/25 = 18.4 req/s.
    """
    plan = solve_plan([FAST, SLOW], 23.0, PlanConstraints(mixed_fleet=True))
    assert plan.replicas == {FAST.id: 2, SLOW.id: 1}
    assert plan.cost_usd_per_hour == pytest.approx(10.5)
    fast_row = next(row for row in plan.rows if row.candidate == FAST)
    assert fast_row.offered_rps == pytest.approx(18.4)
    assert fast_row.target_rho == pytest.approx(18.4 / 2 / 12.5)


def test_n_plus_one_adds_a_replica() -> None:
    """One candidate, λ = 23: without N+1 ⌈23/10⌉ = 3; with N+1 (r − 1)·10 ≥ 23 ⇒ r = 4."""
    assert solve_plan([FAST], 23.0).replicas == {FAST.id: 3}
    plan = solve_plan([FAST], 23.0, PlanConstraints(n_plus_one=True))
    assert plan.replicas == {FAST.id: 4}
    n_plus_one = next(s for s in plan.constraints if s.family == "n_plus_one")
    assert n_plus_one.value == pytest.approx(30.0)
    assert n_plus_one.slack == pytest.approx(7.0)


def test_n_plus_one_in_a_mixed_fleet_loses_the_largest_replica() -> None:
    """Mixed, N+1, λ = 23: Σ r·μ − max chosen μ ≥ 23.

    3 FAST + 1 SLOW: 35 − 10 = 25 ≥ 23 for $14.5; 6 SLOW: 30 − 5 = 25 for $15; 4 FAST: $16;
    2 FAST + 3 SLOW: 35 − 10 = 25 for $15.5. Cheapest is $14.5.
    """
    plan = solve_plan([FAST, SLOW], 23.0, PlanConstraints(mixed_fleet=True, n_plus_one=True))
    assert plan.replicas == {FAST.id: 3, SLOW.id: 1}
    assert plan.cost_usd_per_hour == pytest.approx(14.5)


def test_inventory_forces_another_gpu_type() -> None:
    """Only 2 H100s: 2 × 10 = 20 < 23, so the single configuration moves to 5 × SLOW = $12.5/h."""
    plan = solve_plan([FAST, SLOW], 23.0, PlanConstraints(inventory={"h100-sxm": 2}))
    assert plan.replicas == {SLOW.id: 5}
    assert plan.cost_usd_per_hour == pytest.approx(12.5)
    inventory = next(s for s in plan.constraints if s.family == "gpu_inventory")
    assert inventory.name == "gpu_inventory__h100_sxm"
    assert inventory.value == 0
    assert not inventory.binding  # the chosen configuration does not run on H100s


def test_max_gpus_binding_is_reported() -> None:
    plan = solve_plan([FAST, SLOW], 23.0, PlanConstraints(max_gpus=3))
    assert plan.replicas == {FAST.id: 3}
    (max_gpus,) = (s for s in plan.constraints if s.family == "max_gpus")
    assert max_gpus.slack == 0
    assert max_gpus in plan.binding


def test_ties_in_cost_go_to_fewer_gpus() -> None:
    """Same $4/h and 10 req/s per replica, but one needs 2 GPUs: the 1-GPU one wins either way round."""
    one_gpu = candidate("l40s", cost=4.0, rps=10.0)
    two_gpus = candidate("a10g", cost=4.0, rps=10.0, tp=2)
    for order in ([one_gpu, two_gpus], [two_gpus, one_gpu]):
        plan = solve_plan(order, 15.0)
        assert plan.replicas == {one_gpu.id: 2}
        assert plan.gpus_total == 2


def test_budget_infeasible_names_the_cheapest_feasible_cost() -> None:
    """Cheapest single configuration at 23 req/s is $12/h; a $10/h budget cannot hold it."""
    with pytest.raises(InfeasiblePlanError) as caught:
        solve_plan([FAST, SLOW], 23.0, PlanConstraints(budget_usd_per_hour=10.0))
    error = caught.value
    assert error.extensions["constraint"] == "budget"
    assert error.extensions["relaxation"]["needed"] == pytest.approx(12.0)
    assert "$12.00/h" in error.detail and "$10.00/h" in error.detail


def test_max_gpus_infeasible_names_the_gpus_needed() -> None:
    """Fewest GPUs at 23 req/s: 3 × FAST (1 GPU each). max_gpus = 2 ⇒ raise to 3."""
    with pytest.raises(InfeasiblePlanError) as caught:
        solve_plan([FAST, SLOW], 23.0, PlanConstraints(max_gpus=2))
    assert caught.value.extensions["constraint"] == "max_gpus"
    assert "needs 3 GPUs but max_gpus is 2: raise max_gpus to 3" in caught.value.detail


def test_inventory_infeasible_names_the_shortfall() -> None:
    """1 H100 and 2 A100s: 3 H100s (2 short) beat 5 A100s (3 short)."""
    with pytest.raises(InfeasiblePlanError) as caught:
        solve_plan([FAST, SLOW], 23.0, PlanConstraints(inventory={"h100-sxm": 1, "a100-80gb": 2}))
    relaxation = caught.value.extensions["relaxation"]
    assert caught.value.extensions["constraint"] == "gpu_inventory"
    assert relaxation["gpus_short"] == {"h100-sxm": 2}
    assert relaxation["raise_inventory_to"] == {"h100-sxm": 3}


def test_min_replicas_infeasible_says_how_many_fit() -> None:
    """max_gpus 4 and min_replicas 6: at most 4 one-GPU replicas fit; max_gpus alone would need 6."""
    with pytest.raises(InfeasiblePlanError) as caught:
        solve_plan([FAST], 23.0, PlanConstraints(max_gpus=4, min_replicas=6))
    relaxations = {r["constraint"]: r for r in caught.value.extensions["relaxations"]}
    assert relaxations["max_gpus"]["needed"] == 6
    assert relaxations["min_replicas"]["needed"] == 4


def test_no_candidates_is_an_infeasible_plan() -> None:
    with pytest.raises(InfeasiblePlanError) as caught:
        solve_plan([], 10.0)
    assert caught.value.extensions["constraint"] == "candidates"


def test_cbc_agrees_with_highs() -> None:
    constraints = PlanConstraints(mixed_fleet=True, n_plus_one=True)
    highs = solve_plan([FAST, SLOW], 23.0, constraints, solver_name=HIGHS)
    cbc = solve_plan([FAST, SLOW], 23.0, constraints, solver_name=CBC)
    assert cbc.solver.name == CBC
    assert cbc.cost_usd_per_hour == pytest.approx(highs.cost_usd_per_hour)


def test_inputs_are_not_mutated() -> None:
    candidates = [FAST, SLOW]
    inventory = {"h100-sxm": 2}
    constraints = PlanConstraints(inventory=inventory)
    solve_plan(candidates, 23.0, constraints)
    assert candidates == [FAST, SLOW]
    inventory["h100-sxm"] = 0
    assert constraints.inventory == {"h100-sxm": 2}


@pytest.mark.parametrize(
    "field, value",
    [("max_rps_at_slo", float("inf")), ("max_rps_at_slo", 0.0), ("cost_usd_per_hour", float("nan")), ("saturation_rps", 1.0)],
)
def test_non_finite_or_inconsistent_candidates_are_rejected(field: str, value: float) -> None:
    fields = {
        "id": "x",
        "gpu": "x",
        "tp": 1,
        "weights_precision": "fp16",
        "kv_precision": "fp16",
        "batch_limit": 8,
        "chunk_tokens": None,
        "gpus_per_replica": 1,
        "cost_usd_per_hour": 1.0,
        "max_rps_at_slo": 2.0,
        "saturation_rps": 3.0,
    }
    fields[field] = value
    with pytest.raises(PlannerInputError):
        Candidate(**fields)


def test_bad_requests_are_input_errors() -> None:
    with pytest.raises(PlannerInputError):
        solve_plan([FAST], 0.0)
    with pytest.raises(PlannerInputError):
        solve_plan([FAST, FAST], 1.0)
    with pytest.raises(PlannerInputError):
        PlanConstraints(inventory={"h100-sxm": -1})
    with pytest.raises(PlannerInputError):
        solve_plan([FAST], 1.0, time_limit_s=0.0)
