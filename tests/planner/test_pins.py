"""Pinned decisions (planner/pins.py): a pinned plan has exactly the pinned values, pinning a free
plan's own choices gives that plan back, a pin can only cost more, and contradictions are refused
naming the member."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.optimizer import PlanConstraints
from planner.pins import Pin
from planner.planning import PlanResult, plan_capacity
from tests.planner.test_planning import CHAT, INPUTS, request


def _plan(pin: Pin | None = None, rate: float = CHAT.arrival_rate_rps, **limits: object) -> PlanResult:
    return plan_capacity(request(CHAT.at_rate(rate), constraints=PlanConstraints(pin=pin, **limits)), INPUTS)  # type: ignore[arg-type]


def _own_pin(result: PlanResult) -> Pin:
    row = result.row
    return Pin(
        gpu=row.gpu,
        tp=row.tp,
        replicas=result.replicas,
        batch_limit=row.batch_limit,
        chunk_tokens=row.chunk_tokens,
        chunk_pinned=True,
        precision=(row.weights_precision, row.kv_precision),
    )


@settings(max_examples=6, deadline=None)
@given(rate=st.floats(min_value=2.0, max_value=40.0))
def test_pinning_the_free_plans_own_choices_gives_the_same_plan(rate: float) -> None:
    free = _plan(rate=rate)
    pinned = _plan(_own_pin(free), rate=rate)
    assert pinned.rows == free.rows
    assert pinned.cost_usd_per_hour == free.cost_usd_per_hour


def test_a_pinned_plan_has_exactly_the_pinned_values() -> None:
    pin = Pin(gpu="a100-80gb-sxm", tp=2, batch_limit=16, chunk_tokens=None, chunk_pinned=True, replicas=4)
    result = _plan(pin)
    assert len(result.rows) == 1
    row = result.row
    assert (row.gpu, row.tp, row.batch_limit, row.chunk_tokens, result.replicas) == ("a100-80gb-sxm", 2, 16, None, 4)
    assert result.gpus_total == 8  # 4 replicas × tp 2
    assert result.cost_usd_per_hour == pytest.approx(4 * 2 * 2.0)  # replicas × tp × $2/GPU-h (the test A100's price)


@pytest.mark.parametrize("rate", [3.0, 12.0, 40.0])
def test_pinning_the_gpu_the_free_plan_did_not_choose_costs_at_least_as_much(rate: float) -> None:
    free = _plan(rate=rate)
    other = next(g.slug for g in INPUTS.gpus if g.slug != free.row.gpu)
    pinned = _plan(Pin(gpu=other), rate=rate)
    assert pinned.row.gpu == other
    assert pinned.cost_usd_per_hour >= free.cost_usd_per_hour


def test_more_replicas_than_needed_are_kept_and_paid_for() -> None:
    free = _plan()
    pinned = _plan(replace(_own_pin(free), replicas=free.replicas + 3))
    assert pinned.replicas == free.replicas + 3
    per_replica = free.cost_usd_per_hour / free.replicas
    assert pinned.cost_usd_per_hour == pytest.approx(per_replica * (free.replicas + 3))


def test_too_few_pinned_replicas_are_infeasible_naming_the_pin() -> None:
    with pytest.raises(InfeasiblePlanError) as caught:
        plan_capacity(request(CHAT.at_rate(60.0), constraints=PlanConstraints(pin=Pin(replicas=1))), INPUTS)
    extensions = caught.value.extensions
    assert "constraints.pin.replicas" in extensions["culprits"]
    relaxation = next(r for r in extensions["relaxations"] if r["constraint"] == "constraints.pin.replicas")
    assert relaxation["current"] == 1 and relaxation["value"] > 1


@pytest.mark.parametrize(
    ("pin", "limits", "member"),
    [
        (Pin(gpu="b200"), {}, "pin.gpu"),
        (Pin(tp=3), {}, "pin.tp"),
        (Pin(precision=("fp8", "fp8")), {}, "pin.precision"),
        (Pin(replicas=1), {"n_plus_one": True}, "pin.replicas"),
        (Pin(replicas=2), {"min_replicas": 3}, "pin.replicas"),
        (Pin(replicas=5, tp=2), {"max_gpus": 8}, "pin.replicas"),
    ],
)
def test_pins_outside_the_request_are_refused_naming_the_member(pin: Pin, limits: dict[str, object], member: str) -> None:
    with pytest.raises(PlannerInputError) as caught:
        _plan(pin, **limits)
    assert caught.value.extensions["constraint"] == member


@pytest.mark.parametrize(
    ("members", "member"),
    [
        ({"pp": 3}, "pin.pp"),
        ({"engine": "tgi"}, "pin.engine"),
        ({"batch_limit": 64, "chunk_tokens": 64}, "pin.chunk_tokens"),
        ({"replicas": 0}, "pin.replicas"),
        ({"ep": 0}, "pin.ep"),
        ({"tp": 8, "ep": 4}, "pin.ep"),
        ({"ep": 8, "pp": 2}, "pin.ep"),
    ],
)
def test_contradictory_or_unmodelled_pins_are_refused(members: dict[str, object], member: str) -> None:
    with pytest.raises(PlannerInputError) as caught:
        Pin(**members)  # type: ignore[arg-type]
    assert caught.value.extensions["constraint"] == member


def test_a_pinned_pp_plans_in_pipeline_stages_even_where_a_node_holds_the_model() -> None:
    """Pinning pp 2 forces two stages per replica: every row is tp × 2 GPUs, and (the fold reads each stage's
    weights once per micro-batch) the plan costs at least the free one."""
    free = _plan()
    pinned = _plan(Pin(pp=2))
    assert all(row.pp == 2 and row.gpus == row.replicas * row.tp * 2 for row in pinned.rows)
    assert pinned.cost_usd_per_hour >= free.cost_usd_per_hour


def test_pp_one_and_an_engine_are_accepted_and_change_nothing() -> None:
    free = _plan()
    pinned = _plan(Pin(pp=1, engine="sglang"))
    assert pinned.rows == free.rows
    assert not math.isnan(pinned.cost_usd_per_hour)


def test_a_pinned_ep_above_one_on_a_dense_model_is_refused() -> None:
    """The test model is dense: no expert-parallel replica exists to plan, so ep 2 names pin.ep (ep 1 plans as free)."""
    with pytest.raises(PlannerInputError) as caught:
        _plan(Pin(ep=2))
    assert caught.value.extensions["constraint"] == "pin.ep"
    assert _plan(Pin(ep=1)).rows == _plan().rows
