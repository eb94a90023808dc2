"""Plans in whole instances (planner/packing.py, `PlanConstraints.unit` "instance"): replicas never
straddle instances, the cost is instances × the instance price in the search and the MILP alike,
and the plan reports its instances. Vectors by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from planner.errors import PlannerInputError
from planner.optimizer import Candidate, PlanConstraints, solve_plan
from planner.packing import cover, instance_uses, offers_for
from planner.planning import PlanResult, plan_capacity
from planner.specs import InstanceTypeSpec
from tests.planner.test_planning import CHAT, INPUTS, request

# $40/h for 8 GPUs in one NVLink domain ($5 per GPU-hour), $6/h for one GPU alone
EIGHT = InstanceTypeSpec(provider="test", name="big.8x", gpu="h100-sxm", gpus=8, nvlink_domain=8, usd_per_hour=40.0)
ONE = InstanceTypeSpec(provider="test", name="small.1x", gpu="h100-sxm", gpus=1, nvlink_domain=1, usd_per_hour=6.0)


def test_tp2_five_replicas_take_two_eight_gpu_instances_and_strand_six() -> None:
    offers = offers_for("h100-sxm", 2, (EIGHT, ONE))
    assert [o.instance.name for o in offers] == ["big.8x"]  # tp 2 does not fit one GPU
    assert offers[0].replicas_per_instance == 4  # ⌊8 / 2⌋
    (use,) = instance_uses(5, offers)
    assert (use.count, use.gpus_used, use.stranded_gpus, use.usd_per_hour) == (2, 10, 6, 80.0)  # ⌈5/4⌉ = 2; 16 − 10 = 6


@pytest.mark.parametrize(
    ("replicas", "big", "small", "cost"),
    [
        (1, 0, 1, 6.0),  # one 1-GPU instance: $6 < $40
        (7, 1, 0, 40.0),  # seven 1-GPU instances cost $42 > $40
        (9, 1, 1, 46.0),  # 8 + 1
        (14, 1, 6, 76.0),  # 8 + 6 × 1 = $76 < two 8-GPU instances at $80
        (15, 2, 0, 80.0),  # 8 + 7 × 1 = $82 > $80
        (16, 2, 0, 80.0),
    ],
)
def test_tp1_replicas_mix_instance_sizes_at_the_least_cost(replicas: int, big: int, small: int, cost: float) -> None:
    offers = offers_for("h100-sxm", 1, (EIGHT, ONE))
    total, counts = cover(replicas, offers)
    by_name = dict(zip((o.instance.name for o in offers), counts, strict=True))
    assert (by_name["big.8x"], by_name["small.1x"], total) == (big, small, cost)


def test_an_offer_another_dominates_is_left_out() -> None:
    pricier = replace(EIGHT, name="pricey.8x", usd_per_hour=50.0)
    assert [o.instance.name for o in offers_for("h100-sxm", 1, (EIGHT, pricier))] == ["big.8x"]


def test_the_milp_prices_whole_instances() -> None:
    """A: tp 2 at 10 req/s, 4 per 8-GPU instance; B: tp 1 at 4 req/s, 8 per 8-GPU instance or 1 per
    1-GPU instance. At 45 req/s A needs 5 replicas = 2 instances = $80; B needs 12 replicas = one
    8-GPU + four 1-GPU instances = $64 (two 8-GPU would be $80). B wins at $64."""
    a_offers, b_offers = offers_for("h100-sxm", 2, (EIGHT, ONE)), offers_for("h100-sxm", 1, (EIGHT, ONE))
    common = {"gpu": "h100-sxm", "weights_precision": "fp8", "kv_precision": "fp8", "batch_limit": 64, "chunk_tokens": None}
    a = Candidate(id="a", tp=2, gpus_per_replica=2, cost_usd_per_hour=10.0, max_rps_at_slo=10.0, saturation_rps=12.0,
                  instance_offers=a_offers, **common)  # fmt: skip
    b = Candidate(id="b", tp=1, gpus_per_replica=1, cost_usd_per_hour=5.0, max_rps_at_slo=4.0, saturation_rps=5.0,
                  instance_offers=b_offers, **common)  # fmt: skip
    solution = solve_plan([a, b], 45.0)
    (row,) = solution.rows
    assert (row.candidate.id, row.replicas, row.cost_usd_per_hour) == ("b", 12, 64.0)
    assert solution.cost_usd_per_hour == pytest.approx(64.0)
    budget = solve_plan([a, b], 45.0, PlanConstraints(budget_usd_per_hour=64.0))
    assert budget.cost_usd_per_hour == pytest.approx(64.0)  # the budget reads the instance cost, not 12 × $5


def _instance_plan(*types: InstanceTypeSpec, **limits: object) -> PlanResult:
    inputs = replace(INPUTS, instance_types=types)
    return plan_capacity(request(constraints=PlanConstraints(unit="instance", **limits)), inputs)  # type: ignore[arg-type]


def test_a_plan_in_instances_costs_whole_instances_and_reports_them() -> None:
    result = _instance_plan(EIGHT)  # only H100 instances: the A100 has no instance type
    row = result.row
    assert row.gpu == "h100-sxm"
    per_instance = 8 // row.tp
    count = math.ceil(row.replicas / per_instance)
    (use,) = result.instances
    assert (use.instance_type, use.count, use.gpus_per_instance) == ("big.8x", count, 8)
    assert use.gpus_used == row.replicas * row.tp
    assert use.stranded_gpus == count * 8 - row.replicas * row.tp
    assert result.cost_usd_per_hour == pytest.approx(count * 40.0)
    a100 = [d for d in result.justification.alternatives if d.name == "a100-80gb-sxm"]
    assert a100 and a100[0].cost_usd_per_hour is None and "no instance type" in a100[0].reason


def test_instance_mode_without_instance_types_is_refused_naming_unit() -> None:
    with pytest.raises(PlannerInputError) as caught:
        _instance_plan()
    assert caught.value.extensions["constraint"] == "unit"


def test_gpu_mode_is_unchanged_by_instance_types() -> None:
    plain = plan_capacity(request(), INPUTS)
    with_types = plan_capacity(request(), replace(INPUTS, instance_types=(EIGHT, ONE)))
    assert with_types.rows == plain.rows and with_types.instances == ()


def test_a_mixed_fleet_in_instances_reports_each_rows_instances() -> None:
    """At 60 req/s (measured: one 1-GPU H100 instance and six A100 replicas in one 8-GPU A100
    instance) every row is whole instances of its own GPU, and the plan's cost is their sum."""
    a100 = InstanceTypeSpec(provider="test", name="a100.8x", gpu="a100-80gb-sxm", gpus=8, nvlink_domain=8, usd_per_hour=14.0)
    inputs = replace(INPUTS, instance_types=(EIGHT, ONE, a100))
    result = plan_capacity(request(CHAT.at_rate(60.0), constraints=PlanConstraints(unit="instance", mixed_fleet=True)), inputs)
    assert len(result.rows) >= 1
    for row in result.rows:
        assert row.instances and {u.instance_type for u in row.instances} <= {"big.8x", "small.1x", "a100.8x"}
        assert row.cost_usd_per_hour == pytest.approx(sum(u.usd_per_hour for u in row.instances))
        assert sum(u.gpus_used for u in row.instances) == row.replicas * row.tp
        for use in row.instances:
            assert use.stranded_gpus == use.count * use.gpus_per_instance - use.gpus_used >= 0
    assert result.instances == tuple(u for row in result.rows for u in row.instances)
    assert result.cost_usd_per_hour == pytest.approx(sum(u.usd_per_hour for u in result.instances))
