"""The capacity of G GPUs as separate prefill and decode pools (planner/capacity_disagg.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from scipy import optimize

from planner.capacity_disagg import RATE_TOLERANCE, max_capacity_disaggregated, pool_misses, verify_capacity
from planner.disagg import prefill_s
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.plan_disagg import TTFT_SPLITS, plan_disaggregated
from planner.workload import FixedLength, Slo, Workload
from tests.planner.test_plan_disagg import FP16_ALL, H100, LINK, LLAMA_2_70B, SLO, workload


def capacity(gpus: int, load: Workload | None = None, slo: Slo = SLO, tps: tuple[int, ...] = (1, 2, 4, 8)):  # type: ignore[no-untyped-def]
    return max_capacity_disaggregated(
        gpu=H100,
        gpus=gpus,
        model=LLAMA_2_70B,
        precisions=[FP16_ALL],
        tps=tps,
        workload=load if load is not None else workload(1.0),
        slo=slo,
        link=LINK,
    )


def test_the_capacity_is_served_and_ten_percent_more_is_not() -> None:
    """At Λ the answer's pools meet their shares of the SLOs and the whole prediction meets the SLOs;
    at 1.1 Λ the same pools miss and no pair of pools within the 8 GPUs is planned."""
    found = capacity(8)
    rate = found.max_arrival_rate_rps
    assert found.prefill.gpus + found.decode.gpus + found.gpus_idle == 8
    assert pool_misses(found, workload(rate), SLO, link=LINK, kv_bytes_per_token=found.kv_bytes_per_token) == ()
    assert found.prediction.ttft_s <= SLO.ttft_s  # type: ignore[operator]
    assert found.prediction.tpot_s <= SLO.tpot_s  # type: ignore[operator]
    more = workload(1.1 * rate)
    assert pool_misses(found, more, SLO, link=LINK, kv_bytes_per_token=found.kv_bytes_per_token) != ()
    unit = dataclasses.replace(H100, price_usd_per_hour_on_demand=1.0)
    try:
        cheapest = plan_disaggregated(
            gpus=[unit], model=LLAMA_2_70B, precisions=[FP16_ALL], tps=[1, 2, 4], workload=more, slo=SLO, link=LINK, verify=False
        )
    except InfeasiblePlanError:
        return
    assert cheapest.gpus > 8
    assert found.binding in ("prefill", "decode", "both")
    assert found.unsustained_rate_rps / rate <= 1.0 + RATE_TOLERANCE + 1e-12


def test_one_prefill_replica_on_fixed_prompts_is_the_m_d_1_by_hand() -> None:
    """Two tp-2 replicas on 4 H100s, every prompt 2,048 tokens, a generous TPOT and short outputs, so
    the single prefill replica binds. Its queue is M/D/1: C = ρ, W = ρD/(2(1 − ρ)) and the p99 wait
    W/C · ln(C/0.01) = D/(2(1 − ρ)) · ln(100ρ); with the largest split f = 0.95 the capacity is ρ*/D
    where D/(2(1 − ρ*)) · ln(100ρ*) + D = 0.95 · TTFT (decode, 0.2 s for a 7 ms transfer, has room)."""
    load = Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=2048), output_tokens=FixedLength(tokens=32))
    slo = Slo(ttft_s=4.0, tpot_s=0.2)
    found = capacity(4, load, slo, tps=(2,))
    assert (found.prefill.replicas, found.prefill.tp, found.decode.replicas, found.decode.tp) == (1, 2, 1, 2)
    assert found.binding == "prefill"
    assert found.ttft_prefill_fraction == max(TTFT_SPLITS) == 0.95
    d = prefill_s(found.prefill.step_model, 2048.0)
    rho = optimize.brentq(lambda r: d / (2 * (1 - r)) * math.log(100 * r) + d - 0.95 * slo.ttft_s, 0.02, 1 - 1e-9)  # type: ignore[operator]
    by_hand = rho / d
    assert by_hand / (1.0 + RATE_TOLERANCE) <= found.max_arrival_rate_rps <= by_hand * (1.0 + 1e-9)


def test_more_gpus_never_hold_less() -> None:
    rates = [capacity(g).max_arrival_rate_rps for g in (4, 8, 16)]
    assert rates == sorted(rates) and rates[-1] > 2 * rates[0]


def test_refusals() -> None:
    with pytest.raises(PlannerInputError):
        capacity(1)
    with pytest.raises(InfeasiblePlanError):  # a p99 prompt's prefill alone is longer than 0.1 s
        capacity(8, slo=Slo(ttft_s=0.1, tpot_s=0.05))
    with pytest.raises(PlannerInputError):  # a disaggregated deployment splits a TTFT target
        capacity(8, slo=Slo(tpot_s=0.05))
    with pytest.raises(PlannerInputError):  # the pools are not sized for an E2E target
        capacity(8, slo=Slo(ttft_s=2.0, tpot_s=0.05, e2e_s=60.0))


def test_verification_steps_down_by_ten_percent_until_the_simulator_agrees() -> None:
    """On 16 H100s the pools' analytic TTFT is conservative where their prefill is lightly loaded
    (docs/disaggregation.md fidelity table): the simulator agrees at Λ or a few 10 % steps below it,
    and each step's verdict is its simulated p99s against the targets."""
    found = capacity(16)
    steps = verify_capacity(found, workload(1.0), SLO, requests=2000)
    assert steps[-1].meets_slo and not any(s.meets_slo for s in steps[:-1])
    for i, step in enumerate(steps):
        assert step.arrival_rate_rps == pytest.approx(found.max_arrival_rate_rps / 1.1**i)
        assert step.meets_slo == (step.ttft_s <= SLO.ttft_s and step.tpot_s <= SLO.tpot_s)  # type: ignore[operator]
