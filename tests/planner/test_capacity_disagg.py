"""The capacity of G GPUs as separate prefill and decode pools (planner/capacity_disagg.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from scipy import optimize

from planner.capacity_disagg import RATE_TOLERANCE, max_capacity_disaggregated, pool_misses, verify_capacity
from planner.disagg import prefill_s
from planner.errors import InfeasiblePlanError, PlannerInputError, UnsupportedConfigurationError
from planner.pins import Pin
from planner.plan_disagg import TTFT_SPLITS, plan_disaggregated
from planner.plan_records import PlanConstraints
from planner.workload import FixedLength, Slo, Workload
from tests.planner.test_plan_disagg import FP16_ALL, H100, LINK, LLAMA_2_70B, SLO, workload


def capacity(  # type: ignore[no-untyped-def]
    gpus: int,
    load: Workload | None = None,
    slo: Slo = SLO,
    tps: tuple[int, ...] = (1, 2, 4, 8),
    constraints: PlanConstraints | None = None,
):
    return max_capacity_disaggregated(
        gpu=H100,
        gpus=gpus,
        model=LLAMA_2_70B,
        precisions=[FP16_ALL],
        tps=tps,
        workload=load if load is not None else workload(1.0),
        slo=slo,
        link=LINK,
        constraints=constraints,
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
    with pytest.raises(UnsupportedConfigurationError, match="pin.replicas"):  # plan_disagg's pool_refusals
        capacity(8, constraints=PlanConstraints(pin=Pin(replicas=2)))
    with pytest.raises(PlannerInputError, match="pinned tp 8 is not"):  # a tp-8 pool leaves the other none of 8 GPUs
        capacity(8, constraints=PlanConstraints(pin=Pin(tp=8)))


def test_n_plus_one_pools_hold_less_and_meet_their_shares_with_the_spares_lost() -> None:
    """With N+1 each pool carries a spare replica within the same 8 GPUs, so the capacity is lower; at it,
    the pools without their spares still meet their shares of the SLOs, and 10 % more misses."""
    plain = capacity(8)
    spared = capacity(8, constraints=PlanConstraints(n_plus_one=True))
    assert spared.max_arrival_rate_rps < plain.max_arrival_rate_rps
    assert spared.prefill.spare_replicas == spared.decode.spare_replicas == 1
    assert spared.prefill.gpus + spared.decode.gpus <= 8
    kv = spared.kv_bytes_per_token
    assert pool_misses(spared, workload(spared.max_arrival_rate_rps), SLO, link=LINK, kv_bytes_per_token=kv) == ()
    assert pool_misses(spared, workload(1.1 * spared.max_arrival_rate_rps), SLO, link=LINK, kv_bytes_per_token=kv) != ()


def test_min_replicas_floors_each_pool() -> None:
    plain = capacity(8)
    assert min(plain.prefill.replicas, plain.decode.replicas) < 2  # else the floor would not bind
    floored = capacity(8, constraints=PlanConstraints(min_replicas=2))
    assert floored.prefill.replicas >= 2 and floored.decode.replicas >= 2
    assert floored.prefill.gpus + floored.decode.gpus <= 8
    assert floored.max_arrival_rate_rps <= plain.max_arrival_rate_rps * (1.0 + RATE_TOLERANCE)


def test_an_e2e_target_is_sized_for_and_binds_the_decode_pool_when_tight() -> None:
    """An E2E target the pools meet without trying leaves Λ as it is; a tight one (13 s for a p99 output of 1,024
    tokens after a 2 s TTFT) lowers it, the decode pool binding, and the pools at Λ meet it."""
    plain = capacity(8)
    loose = capacity(8, slo=dataclasses.replace(SLO, e2e_s=2.0 * plain.prediction.e2e_s))
    assert loose.max_arrival_rate_rps == pytest.approx(plain.max_arrival_rate_rps)
    tight_slo = dataclasses.replace(SLO, e2e_s=13.0)
    assert plain.prediction.e2e_s > 13.0  # the pools sized without the target miss it
    tight = capacity(8, slo=tight_slo)
    assert tight.max_arrival_rate_rps < plain.max_arrival_rate_rps
    assert tight.prediction.e2e_s <= 13.0
    assert tight.binding == "decode"
    kv = tight.kv_bytes_per_token
    assert pool_misses(tight, workload(1.1 * tight.max_arrival_rate_rps), tight_slo, link=LINK, kv_bytes_per_token=kv) != ()


def test_pins_narrow_both_pools() -> None:
    by_tp = capacity(8, constraints=PlanConstraints(pin=Pin(tp=2)))
    assert by_tp.prefill.tp == by_tp.decode.tp == 2
    by_batch = capacity(8, constraints=PlanConstraints(pin=Pin(batch_limit=16)))
    assert by_batch.decode.batch_limit == 16
    assert by_batch.max_arrival_rate_rps <= capacity(8).max_arrival_rate_rps * (1.0 + RATE_TOLERANCE)


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
