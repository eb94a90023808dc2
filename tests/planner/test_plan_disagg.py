"""The disaggregated optimizer's choice: pool GPUs, sizes, the TTFT split, verification."""

from __future__ import annotations

import dataclasses

import pytest

from planner.disagg import SCALE_OUT_LINKS
from planner.errors import InfeasiblePlanError
from planner.plan_disagg import plan_disaggregated
from planner.specs import Precision
from planner.workload import LognormalLength, Slo, Workload
from tests.planner.performance_specs import A100_SXM, FP16, H100_SXM, LLAMA_2_70B

#: Prices for the test only: H100 $4/GPU-h, A100 $2/GPU-h. Per dollar the H100 has more FLOP/s
#: (989/4 = 247 vs 312/2 = 156 TFLOP/s per $/h) and the A100 more bandwidth (2.04/2 = 1.02 vs
#: 3.35/4 = 0.84 TB/s per $/h): prefill is compute-bound and decode bandwidth-bound.
H100 = dataclasses.replace(H100_SXM, price_usd_per_hour_on_demand=4.0)
A100 = dataclasses.replace(A100_SXM, price_usd_per_hour_on_demand=2.0)
FP16_ALL = Precision(weights=FP16, kv_cache=FP16)
LINK = SCALE_OUT_LINKS["connectx7_400g"]
SLO = Slo(ttft_s=2.0, tpot_s=0.05)


def workload(rate: float) -> Workload:
    return Workload(
        arrival_rate_rps=rate,
        prompt_tokens=LognormalLength(mean_tokens=2048, p99_tokens=8192),
        output_tokens=LognormalLength(mean_tokens=256, p99_tokens=1024),
    )


def plan(gpus: list, rate: float = 10.0, slo: Slo = SLO):  # type: ignore[no-untyped-def, type-arg]
    return plan_disaggregated(
        gpus=gpus, model=LLAMA_2_70B, precisions=[FP16_ALL], tps=[2, 4, 8], workload=workload(rate), slo=slo, link=LINK
    )


def test_heterogeneous_pools_put_prefill_on_flops_and_decode_on_bandwidth() -> None:
    """With both GPUs offered the optimizer prefills on H100s and decodes on A100s, and that mix costs
    less than the best all-H100 and the best all-A100 deployment (each planned the same way)."""
    mixed = plan([H100, A100])
    assert (mixed.prefill.gpu, mixed.decode.gpu) == ("h100-sxm", "a100-80gb-sxm")
    assert mixed.cost_usd_per_hour < plan([H100]).cost_usd_per_hour
    assert mixed.cost_usd_per_hour < plan([A100]).cost_usd_per_hour
    assert mixed.cost_usd_per_hour == pytest.approx(mixed.prefill.cost_usd_per_hour + mixed.decode.cost_usd_per_hour)


def test_the_plan_meets_its_slo_predicted_and_simulated() -> None:
    """The analytic p99s are within the targets and the simulation (every plan is verified) agrees."""
    p = plan([H100, A100])
    assert p.prediction.ttft_s <= SLO.ttft_s
    assert p.prediction.tpot_s <= SLO.tpot_s
    assert p.simulated_s is not None
    ttft, tpot, _ = p.simulated_s
    assert ttft <= SLO.ttft_s and tpot <= SLO.tpot_s
    assert 0.5 <= p.ttft_prefill_fraction < 1.0


def test_more_load_never_costs_less() -> None:
    """Doubling the rate from 5 to 10 to 20 req/s: the cheapest plan's cost never falls."""
    costs = [plan([H100, A100], rate).cost_usd_per_hour for rate in (5.0, 10.0, 20.0)]
    assert costs == sorted(costs)
    assert costs[-1] > costs[0]


def test_a_ttft_below_one_p99_prefill_is_infeasible() -> None:
    """An 8,192-token prompt on 8 H100s is 8,192 × 140 GFLOP / 7.9 PFLOP/s ≈ 0.145 s of linear FLOPs
    alone; a 0.1 s TTFT cannot be met by any pool."""
    with pytest.raises(InfeasiblePlanError):
        plan([H100, A100], slo=Slo(ttft_s=0.1, tpot_s=0.05))
