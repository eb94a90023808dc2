"""The disaggregated search's closed-form bounds: true lower bounds, and pruning by them changes no answer."""

from __future__ import annotations

import dataclasses
import math

import pytest

from planner import plan_disagg, plan_disagg_candidates
from planner.disagg import (
    SCALE_OUT_LINKS,
    DecodePool,
    decode_occupancy,
    decode_saturated,
    decode_step_s,
    decode_tpot_lower_bound_s,
    kv_transfer_s,
    prefill_s,
)
from planner.errors import InfeasiblePlanError, UnstableLoadError
from planner.plan_disagg import (
    TTFT_SPLITS,
    decode_candidate,
    decode_replicas_lower_bound,
    disaggregated_cost_lower_bound,
    plan_disaggregated,
    prefill_candidate,
    prefill_replicas_lower_bound,
)
from planner.specs import Precision
from planner.workload import FixedLength, LognormalLength, Slo, Workload
from tests.planner.performance_specs import A100_SXM, FP8_PRECISION, FP16, H100_SXM, LLAMA_2_70B, MIXTRAL_8X7B

H100 = dataclasses.replace(H100_SXM, price_usd_per_hour_on_demand=4.0)
A100 = dataclasses.replace(A100_SXM, price_usd_per_hour_on_demand=2.0)
FP16_ALL = Precision(weights=FP16, kv_cache=FP16)
LINK = SCALE_OUT_LINKS["connectx7_400g"]


def workload(rate: float, prompt: float = 2048, output: float = 256) -> Workload:
    return Workload(
        arrival_rate_rps=rate,
        prompt_tokens=LognormalLength(mean_tokens=prompt, p99_tokens=4 * prompt),
        output_tokens=LognormalLength(mean_tokens=output, p99_tokens=4 * output),
    )


#: (model, workload, SLO): TTFT-bound, TPOT-bound, long prompts, a MoE, a high rate, a p95 target (all small enough
#: for one node), and two large ones whose pools cross the scale-out network (test_some_cases_share_a_node).
CASES = [
    (LLAMA_2_70B, workload(10.0), Slo(ttft_s=2.0, tpot_s=0.05)),
    (LLAMA_2_70B, workload(4.0), Slo(ttft_s=10.0, tpot_s=0.025)),
    (LLAMA_2_70B, workload(2.0, prompt=6000, output=300), Slo(ttft_s=3.0, tpot_s=0.08)),
    (MIXTRAL_8X7B, workload(20.0, prompt=1000), Slo(ttft_s=1.0, tpot_s=0.04)),
    (MIXTRAL_8X7B, workload(60.0, prompt=1000), Slo(ttft_s=1.5, tpot_s=0.06, percentile=95.0)),
    (LLAMA_2_70B, workload(40.0), Slo(ttft_s=2.0, tpot_s=0.05)),
    (MIXTRAL_8X7B, workload(150.0, prompt=1000), Slo(ttft_s=1.0, tpot_s=0.04)),
]


def _kwargs(model, work, slo):  # type: ignore[no-untyped-def]
    return {
        "gpus": [H100, A100],
        "model": model,
        "precisions": [FP16_ALL, FP8_PRECISION],
        "tps": [1, 2, 4, 8],
        "workload": work,
        "slo": slo,
        "link": LINK,
    }


def _plan(kwargs, *, prune: bool, verify: bool, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(plan_disagg_candidates, "PRUNE", prune)
    try:
        return plan_disaggregated(**kwargs, verify=verify)
    except InfeasiblePlanError:
        return None


@pytest.mark.parametrize(("model", "work", "slo"), CASES)
def test_pruning_returns_the_same_pools_and_cost(model, work, slo, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The search with the closed-form replica bounds and without them: the same pools, split, binding and cost."""
    kwargs = _kwargs(model, work, slo)
    pruned = _plan(kwargs, prune=True, verify=False, monkeypatch=monkeypatch)
    full = _plan(kwargs, prune=False, verify=False, monkeypatch=monkeypatch)
    assert (pruned is None) == (full is None)
    if pruned is not None and full is not None:
        assert (pruned.prefill, pruned.decode, pruned.ttft_prefill_fraction) == (
            full.prefill,
            full.decode,
            full.ttft_prefill_fraction,
        )
        assert pruned.cost_usd_per_hour == full.cost_usd_per_hour
        assert (pruned.link, pruned.node_gpus) == (full.link, full.node_gpus)


def test_pruning_keeps_the_verified_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the simulator's verification on, the same plan, the same simulated p99s and the same added replicas."""
    kwargs = _kwargs(*CASES[0])
    pruned = _plan(kwargs, prune=True, verify=True, monkeypatch=monkeypatch)
    full = _plan(kwargs, prune=False, verify=True, monkeypatch=monkeypatch)
    assert pruned is not None and full is not None
    assert pruned == full


@pytest.mark.parametrize(("model", "work", "slo"), CASES)
def test_the_cost_bound_is_at_most_the_cheapest_plan(model, work, slo, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Each case's bound is finite, positive and at most the search's cost (unpruned, so the check is independent)."""
    kwargs = _kwargs(model, work, slo)
    bound = disaggregated_cost_lower_bound(**kwargs)
    full = _plan(kwargs, prune=False, verify=False, monkeypatch=monkeypatch)
    if full is None:
        return  # an infeasible case bounds nothing (every case above is feasible: the next assertion would catch a change)
    assert 0 < bound.usd_per_hour <= full.cost_usd_per_hour
    assert bound.prefill_usd_per_hour <= full.prefill.cost_usd_per_hour
    assert bound.decode_usd_per_hour <= full.decode.cost_usd_per_hour


def test_every_case_has_a_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound test above means something only where a plan exists."""
    assert all(_plan(_kwargs(*case), prune=True, verify=False, monkeypatch=monkeypatch) is not None for case in CASES)


@pytest.mark.parametrize(("model", "work", "slo"), CASES)
def test_the_replica_bounds_hold_for_every_setting_split_limit_and_link(model, work, slo) -> None:  # type: ignore[no-untyped-def]
    """Per setting: the prefill bound is at most the replicas `prefill_candidate` answers at every split, the decode
    bound at most those `decode_candidate` answers at every split, batch limit and link count; a None bound
    means no split answers any candidate."""
    kwargs = _kwargs(model, work, slo)
    q = slo.percentile / 100.0
    assert slo.ttft_s is not None
    settings = plan_disagg_candidates.pool_settings(kwargs["gpus"], model, kwargs["precisions"], kwargs["tps"])
    checked = 0
    for s in settings:
        c_min = prefill_replicas_lower_bound(s, work, slo, q)
        for f in TTFT_SPLITS:
            cand = prefill_candidate(s, work, f * slo.ttft_s, q)
            assert cand is None or (c_min is not None and c_min <= cand.replicas)
        r_min = decode_replicas_lower_bound(s, work, slo, LINK, q)
        by_memory = math.floor(s.kv_capacity_tokens / (work.prompt_tokens.mean + work.output_tokens.mean))
        for links in (1, 2, 4, 8):
            if links > s.tp:
                continue
            kv = s.kv_bytes_per_token
            transfer = (
                kv_transfer_s(prompt_tokens=work.prompt_tokens.mean, kv_bytes_per_token=kv, link=LINK, gpus=links),
                kv_transfer_s(prompt_tokens=work.prompt_tokens.quantile(q), kv_bytes_per_token=kv, link=LINK, gpus=links),
            )
            for limit in plan_disagg_candidates.decode_limits(by_memory) if by_memory >= 1 else []:
                for f in TTFT_SPLITS:
                    cand = decode_candidate(s, limit, work, slo, (1 - f) * slo.ttft_s, transfer, q)
                    if cand is not None:
                        checked += 1
                        assert r_min is not None and r_min <= cand.replicas
    assert checked > 0


@pytest.mark.parametrize(("model", "work", "slo"), CASES)
@pytest.mark.parametrize("limit", [8, 64, 256])
def test_the_tpot_bound_is_at_most_the_occupancy_tpot(model, work, slo, limit) -> None:  # type: ignore[no-untyped-def]
    """For r = 1..64 replicas of an H100 tp4 decode pool: the closed-form TPOT bound is at most decode_occupancy's
    TPOT_q, and `decode_saturated` is true exactly where decode_occupancy raises."""
    setting = next(s for s in plan_disagg_candidates.pool_settings([H100], model, [FP16_ALL], [4]))
    pool_of = DecodePool(
        step_model=setting.step_model, replicas=1, batch_limit=limit, kv_capacity_tokens=setting.kv_capacity_tokens, tp=4
    )
    q = slo.percentile / 100.0
    transfer = kv_transfer_s(
        prompt_tokens=work.prompt_tokens.mean, kv_bytes_per_token=setting.kv_bytes_per_token, link=LINK, gpus=4
    )
    context = work.prompt_tokens.mean + work.output_tokens.mean / 2.0
    hold_min = transfer + (work.output_tokens.mean - 1.0) * decode_step_s(setting.step_model, 1.0, context)
    stable = 0
    for r in range(1, 65):
        pool = dataclasses.replace(pool_of, replicas=r)
        try:
            occ = decode_occupancy(pool, work, transfer, q)
        except UnstableLoadError:
            assert decode_saturated(pool_of, work, transfer, replicas=r)
            continue
        stable += 1
        assert not decode_saturated(pool_of, work, transfer, replicas=r)
        assert decode_tpot_lower_bound_s(pool_of, work, hold_min, q, replicas=r) <= occ.step_q_s
    assert stable > 0


def test_the_prefill_bound_by_hand() -> None:
    """Fixed 2,048-token prompts at 10 req/s on an H100 tp2: E[S] = S(2048), so the bound is ⌊10·S⌋ + 1 replicas,
    None once the TTFT is shorter than S / 0.95 (the largest split cannot hold one prefill)."""
    setting = next(s for s in plan_disagg_candidates.pool_settings([H100], LLAMA_2_70B, [FP16_ALL], [2]))
    work = Workload(arrival_rate_rps=10.0, prompt_tokens=FixedLength(tokens=2048), output_tokens=FixedLength(tokens=256))
    service = prefill_s(setting.step_model, 2048.0)
    assert prefill_replicas_lower_bound(setting, work, Slo(ttft_s=2.0), 0.99) == math.floor(10.0 * service) + 1
    assert prefill_replicas_lower_bound(setting, work, Slo(ttft_s=service / 0.95 * 0.999), 0.99) is None


def test_some_cases_share_a_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """The equality test above covers the in-node search (and its pruning) as well as the MILP across nodes."""
    plans = [_plan(_kwargs(*case), prune=True, verify=False, monkeypatch=monkeypatch) for case in CASES]
    assert any(p is not None and p.node_gpus is not None for p in plans)
    assert any(p is not None and p.node_gpus is None for p in plans)


def test_pruning_skips_searches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The equality tests above compare something: with PRUNE the search sizes fewer decode candidates and solves
    fewer occupancy fixed points than without it, on the first case."""
    calls = {"best_decode": 0, "occupancy": 0}
    best_decode, occupancy = plan_disagg.best_decode_candidate, plan_disagg_candidates.decode_occupancy

    def counted_best_decode(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["best_decode"] += 1
        return best_decode(*args, **kwargs)

    def counted_occupancy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["occupancy"] += 1
        return occupancy(*args, **kwargs)

    monkeypatch.setattr(plan_disagg, "best_decode_candidate", counted_best_decode)
    monkeypatch.setattr(plan_disagg_candidates, "decode_occupancy", counted_occupancy)
    counts = {}
    for prune in (True, False):
        calls.update(best_decode=0, occupancy=0)
        _plan(_kwargs(*CASES[0]), prune=prune, verify=False, monkeypatch=monkeypatch)
        counts[prune] = dict(calls)
    assert counts[True]["best_decode"] < counts[False]["best_decode"]
    assert counts[True]["occupancy"] < counts[False]["occupancy"]
