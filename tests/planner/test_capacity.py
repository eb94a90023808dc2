"""planner/capacity.py: the capacity of given hardware is r = ⌊gpus / tp⌋ replicas × the planner's
own μ for the winning configuration, and it moves the way anyone would check by eye."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.capacity import (
    CapacityInputs,
    CapacityRequest,
    capacity_options,
    max_capacity,
)
from planner.errors import InfeasiblePlanError
from planner.plan_predict import per_replica_arrival_cv
from planner.plan_search import Planner
from planner.rate_search import MU_RELATIVE_TOLERANCE
from planner.workload import Slo
from tests.planner.test_planning import BF16_PAIR, CHAT, FP8_PAIR, H100, LLAMA_8B, SLO

INPUTS = CapacityInputs(model=LLAMA_8B, gpu=H100, precisions=(BF16_PAIR, FP8_PAIR))
#: A small grid keeps each case to a few root-finds.
GRID = {"tp_degrees": (1, 2, 4), "batch_limits": (16, 64), "chunk_budgets": (None, 2048)}


def capacity(gpus: int, slo: Slo = SLO, **pins: object) -> float:
    return max_capacity(CapacityRequest(workload=CHAT, slo=slo, gpus=gpus, **GRID, **pins), INPUTS).max_arrival_rate_rps  # type: ignore[arg-type]


def test_capacity_is_replicas_times_the_planners_mu_of_the_best_configuration() -> None:
    """Poisson arrivals (c = 1) split at random stay Poisson, so each replica's μ is the plan's μ
    for that configuration and Λ = r · μ. Brute force over every configuration: Λ is the largest."""
    request = CapacityRequest(workload=CHAT, slo=SLO, gpus=6, **GRID)  # type: ignore[arg-type]
    result = max_capacity(request, INPUTS)
    planner = Planner(capacity_options(request, INPUTS), CHAT)
    totals = {}
    for option in planner.options:
        mu = planner.mu(option, SLO)
        if not isinstance(mu, tuple):
            totals[option.id] = (6 // option.group.tp) * mu
    c = result.configuration
    assert c.replicas == 6 // c.tp and c.gpus_used == c.replicas * c.tp
    assert result.max_arrival_rate_rps == pytest.approx(c.replicas * result.max_rps_per_replica)
    # μ is narrowed as the plan narrows it: from below, to MU_RELATIVE_TOLERANCE of the root-find's μ
    best = max(totals.values())
    assert best * (1 - MU_RELATIVE_TOLERANCE) * (1 - 1e-9) <= result.max_arrival_rate_rps <= best * (1 + 1e-9)
    assert result.output_tokens_per_s == pytest.approx(result.max_arrival_rate_rps * CHAT.output_tokens.mean)
    assert result.cost_usd_per_hour == pytest.approx(c.gpus_used * 4.0)  # H100 priced at 4 USD/GPU-h in the fixture


def test_n_replicas_hold_n_times_one() -> None:
    """With tp pinned to 1 and Poisson arrivals, 8 GPUs are 8 copies of 1 GPU: Λ(8) = 8 · Λ(1)."""
    assert capacity(8, tp=1) == pytest.approx(8 * capacity(1, tp=1))


def test_a_busiest_replica_share_bounds_the_deployment() -> None:
    """Prefix-aware routing of popular prefixes gives the busiest replica more than 1/r of the traffic: the
    deployment then holds μ / share, not r · μ. Four 1-GPU replicas whose busiest takes half the traffic
    hold 2μ = Λ(2), not Λ(4) (Poisson: the same μ)."""
    assert capacity(4, tp=1, busiest_share=0.5) == pytest.approx(2 * capacity(1, tp=1))
    assert capacity(4, tp=1, busiest_share=0.5) < capacity(4, tp=1)


def test_more_gpus_never_lower_capacity() -> None:
    rates = [capacity(g) for g in (1, 2, 3, 4, 5, 8)]
    assert rates == sorted(rates)


def test_a_looser_slo_never_lowers_capacity() -> None:
    tight, loose = capacity(4, Slo(ttft_s=0.5, tpot_s=0.03)), capacity(4, Slo(ttft_s=1.0, tpot_s=0.06))
    assert loose >= tight


def test_pins_are_respected() -> None:
    result = max_capacity(
        CapacityRequest(workload=CHAT, slo=SLO, gpus=8, tp=2, batch_limit=32, chunk_tokens=1024),
        replace(INPUTS, precisions=(BF16_PAIR,)),
    )
    c = result.configuration
    assert (c.tp, c.replicas, c.batch_limit, c.chunk_tokens, c.weights_precision) == (2, 4, 32, 1024, "bf16")


def test_burstier_arrivals_are_split_before_each_replica_queues() -> None:
    """A random split of c = 2 over r = 4 replicas: c_r² = 4/4 + 3/4, c_r = √1.75 ≈ 1.323."""
    bursty = replace(CHAT, arrival_cv=2.0)
    result = max_capacity(
        CapacityRequest(workload=bursty, slo=SLO, gpus=4, tp=1, **{k: v for k, v in GRID.items() if k != "tp_degrees"}), INPUTS
    )  # type: ignore[arg-type]
    assert result.per_replica_arrival_cv == pytest.approx(per_replica_arrival_cv(2.0, 4)) == pytest.approx(1.75**0.5)
    assert result.max_arrival_rate_rps <= capacity(4, tp=1)  # burstier never holds more


def test_an_slo_below_the_unloaded_latency_is_infeasible() -> None:
    with pytest.raises(InfeasiblePlanError) as raised:
        capacity(16, Slo(tpot_s=1e-5))
    assert raised.value.extensions["constraint"] == "tpot"


def test_verification_steps_down_until_the_simulator_agrees() -> None:
    result = max_capacity(CapacityRequest(workload=CHAT, slo=SLO, gpus=2, verify=True, **GRID), INPUTS)  # type: ignore[arg-type]
    steps = result.verification
    assert steps is not None and steps[-1].meets_slo and not any(s.meets_slo for s in steps[:-1])
    assert steps[0].arrival_rate_rps == pytest.approx(result.analytic_arrival_rate_rps)
    assert result.max_arrival_rate_rps == steps[-1].arrival_rate_rps
