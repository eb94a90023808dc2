"""plan_capacity end to end on a tiny two-GPU catalog: the cheapest plan against brute force over
the same candidates, re-evaluation by the forward model, monotone cost, infeasibility answers,
limits and verification.

Specs are the datasheet figures of tests/planner/performance_specs.py with arbitrary test prices
and a fixed, plausible efficiency (test inputs, not calibrations): what is checked is the
optimisation logic, so any positive numbers would do.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InfeasiblePlanError
from planner.memory import kv_capacity_tokens
from planner.optimizer import PlanConstraints
from planner.performance import build_step_model
from planner.plan_result import as_dict
from planner.planning import SATURATION_BINDS, PlanningInputs, PlanningRequest, plan_capacity
from planner.queueing import max_rps_at_slo, predict
from planner.specs import Efficiency, ModelSpec
from planner.workload import LognormalLength, Serving, Slo, Workload
from tests.planner.performance_specs import A100_SXM, BF16, FP8, H100_SXM, LLAMA_2_70B, Precision

EFFICIENCY = Efficiency(
    name="test", memory=0.8, compute=0.6, step_overhead_s=0.002, memory_reserve_fraction=0.1, source="test input"
)
H100 = replace(H100_SXM, price_usd_per_hour_on_demand=4.0, efficiency=EFFICIENCY)
A100 = replace(A100_SXM, price_usd_per_hour_on_demand=2.0, efficiency=EFFICIENCY)
# Llama 3.1 8B config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads, head dim 128, 8.03 B parameters.
LLAMA_8B = ModelSpec(
    slug="llama-3.1-8b",
    params_total=8.03e9,
    params_active=8.03e9,
    layers=32,
    hidden_size=4096,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=128256,
    max_context_tokens=131072,
)
BF16_PAIR = Precision(weights=BF16, kv_cache=BF16)
FP8_PAIR = Precision(weights=FP8, kv_cache=FP8)
INPUTS = PlanningInputs(model=LLAMA_8B, gpus=(H100, A100), precisions=(BF16_PAIR,), efficiency_profile="test")
CHAT = Workload(
    arrival_rate_rps=12.0,
    prompt_tokens=LognormalLength(mean_tokens=800, p99_tokens=3000),
    output_tokens=LognormalLength(mean_tokens=200, p99_tokens=700),
)
SLO = Slo(ttft_s=1.0, tpot_s=0.06)
GRID = {"tp_degrees": (1, 2), "batch_limits": (16, 64), "chunk_budgets": (None, 2048)}


def request(
    workload: Workload = CHAT, slo: Slo = SLO, constraints: PlanConstraints | None = None, *, verify: bool = False
) -> PlanningRequest:
    return PlanningRequest(workload=workload, slo=slo, constraints=constraints or PlanConstraints(), verify=verify, **GRID)


def brute_force_cost(workload: Workload, slo: Slo) -> float:
    """Every candidate of the grid priced with the queueing model's own μ: min over c of p_c·⌈λ/μ_c⌉."""
    best = math.inf
    for gpu in INPUTS.gpus:
        for tp in GRID["tp_degrees"]:
            sm = build_step_model(gpu, LLAMA_8B, BF16_PAIR, tp, EFFICIENCY)
            capacity = kv_capacity_tokens(gpu, LLAMA_8B, BF16_PAIR, tp, EFFICIENCY)
            for batch in GRID["batch_limits"]:
                for chunk in GRID["chunk_budgets"]:
                    try:
                        mu = max_rps_at_slo(
                            sm, workload, Serving(batch_limit=batch, chunk_tokens=chunk), slo, kv_capacity_tokens=capacity
                        )
                    except InfeasiblePlanError:
                        continue
                    best = min(best, tp * gpu.price_usd_per_hour_on_demand * math.ceil(workload.arrival_rate_rps / mu))
    return best


def test_the_plan_costs_what_brute_force_over_every_candidate_finds() -> None:
    result = plan_capacity(request(), INPUTS)
    assert result.cost_usd_per_hour == pytest.approx(brute_force_cost(CHAT, SLO))
    assert result.provenance is not None and result.provenance.status == "optimal"
    assert result.cost_usd_per_month == pytest.approx(result.cost_usd_per_hour * 730)


def test_the_plan_meets_its_slos_when_re_evaluated_by_the_forward_model() -> None:
    result = plan_capacity(request(), INPUTS)
    row = result.row
    gpu = {g.slug: g for g in INPUTS.gpus}[row.gpu]
    sm = build_step_model(gpu, LLAMA_8B, BF16_PAIR, row.tp, EFFICIENCY)
    capacity = kv_capacity_tokens(gpu, LLAMA_8B, BF16_PAIR, row.tp, EFFICIENCY)
    p = predict(
        sm,
        CHAT.at_rate(row.offered_rps / row.replicas),
        Serving(batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens),
        kv_capacity_tokens=capacity,
    )
    assert p.ttft is not None and p.tpot is not None
    assert p.ttft.p99_s <= SLO.ttft_s
    assert p.tpot.p99_s <= SLO.tpot_s
    assert 0 < result.target_rho < 1


@settings(max_examples=4, deadline=None)
@given(rate=st.floats(min_value=2.0, max_value=60.0), factor=st.floats(min_value=1.05, max_value=3.0))
def test_cost_never_falls_when_the_rate_rises(rate: float, factor: float) -> None:
    low = plan_capacity(request(CHAT.at_rate(rate)), INPUTS).cost_usd_per_hour
    high = plan_capacity(request(CHAT.at_rate(rate * factor)), INPUTS).cost_usd_per_hour
    assert high >= low


@settings(max_examples=4, deadline=None)
@given(tighten=st.floats(min_value=0.5, max_value=0.95))
def test_cost_never_falls_when_an_slo_tightens(tighten: float) -> None:
    loose = plan_capacity(request(), INPUTS).cost_usd_per_hour
    strict_slo = replace(SLO, ttft_s=SLO.ttft_s * tighten)
    try:
        strict = plan_capacity(request(slo=strict_slo), INPUTS).cost_usd_per_hour
    except InfeasiblePlanError:
        return  # no plan at all is "more expensive" than any plan
    assert strict >= loose


def test_a_tpot_below_every_decode_step_is_refused_with_the_smallest_relaxation() -> None:
    with pytest.raises(InfeasiblePlanError) as caught:
        plan_capacity(request(slo=Slo(tpot_s=0.001)), INPUTS)
    error = caught.value
    assert error.extensions["constraint"] == "tpot"
    assert error.extensions["smallest_feasible"] > 1.0  # ms: a decode step of an 8B model takes more than 1 ms
    assert "tpot_ms 1 is below" in error.detail


def test_a_model_no_gpu_can_hold_is_refused_as_memory() -> None:
    inputs = replace(INPUTS, model=replace(LLAMA_2_70B, max_context_tokens=4096))
    grid = request()
    narrow = replace(grid, tp_degrees=(1,), pp_degrees=(1,))
    with pytest.raises(InfeasiblePlanError) as caught:
        plan_capacity(narrow, inputs)
    assert caught.value.extensions["constraint"] == "memory"
    assert caught.value.extensions["needed_gb"] > caught.value.extensions["available_gb"]


def test_a_model_one_gpu_cannot_hold_plans_in_pipeline_stages() -> None:
    """The same 140 GB of weights with tp 1 only: a pipeline of 2 (or more) single-GPU stages holds them."""
    inputs = replace(INPUTS, model=replace(LLAMA_2_70B, max_context_tokens=4096))
    result = plan_capacity(replace(request(), tp_degrees=(1,)), inputs)
    assert all(row.tp == 1 and row.pp >= 2 for row in result.rows)
    assert result.gpus_total == sum(row.replicas * row.tp * row.pp for row in result.rows)


def test_a_gpu_limit_below_what_demand_needs_names_max_gpus_and_the_needed_count() -> None:
    unconstrained = plan_capacity(request(CHAT.at_rate(60.0)), INPUTS)
    assert unconstrained.gpus_total > 1
    with pytest.raises(InfeasiblePlanError) as caught:
        plan_capacity(request(CHAT.at_rate(60.0), constraints=PlanConstraints(max_gpus=1)), INPUTS)
    assert caught.value.extensions["constraint"] == "max_gpus"
    relaxation = caught.value.extensions["relaxations"][0]
    assert relaxation["constraint"] == "constraints.max_gpus" and relaxation["current"] == 1
    assert relaxation["value"] >= 2
    # the smallest GPU count that works, exactly: one fewer is refused, the count itself plans
    with pytest.raises(InfeasiblePlanError):
        plan_capacity(request(CHAT.at_rate(60.0), constraints=PlanConstraints(max_gpus=relaxation["value"] - 1)), INPUTS)
    assert (
        plan_capacity(request(CHAT.at_rate(60.0), constraints=PlanConstraints(max_gpus=relaxation["value"])), INPUTS).gpus_total
        <= relaxation["value"]
    )


def test_n_plus_one_and_min_replicas_add_replicas() -> None:
    base = plan_capacity(request(), INPUTS)
    spare = plan_capacity(request(constraints=PlanConstraints(n_plus_one=True)), INPUTS)
    floor = plan_capacity(request(constraints=PlanConstraints(min_replicas=base.replicas + 2)), INPUTS)
    assert spare.replicas >= base.replicas + 1 or spare.cost_usd_per_hour > base.cost_usd_per_hour
    assert floor.replicas >= base.replicas + 2


def test_inventory_moves_the_plan_to_another_gpu() -> None:
    base = plan_capacity(request(), INPUTS)
    other = plan_capacity(request(constraints=PlanConstraints(inventory={base.row.gpu: 0})), INPUTS)
    assert other.row.gpu != base.row.gpu
    assert other.cost_usd_per_hour >= base.cost_usd_per_hour


def test_the_justification_explains_binding_alternatives_and_sensitivity() -> None:
    result = plan_capacity(request(), INPUTS)
    j = as_dict(result.justification)
    slos = [b for b in j["binding"] if b["kind"] == "slo"]
    assert {b["constraint"] for b in slos} == {"slo_ttft", "slo_tpot"}
    assert all(b["relaxed_saving_usd_per_hour"] >= 0 for b in slos)
    assert sum(b["binding"] for b in j["binding"] if b["kind"] in ("slo", "capacity")) == 1
    assert [a["name"] for a in j["alternatives"] if a["kind"] == "gpu"] == [
        g.slug for g in INPUTS.gpus if g.slug != result.row.gpu
    ]
    costs = [t["cost_usd_per_hour"] for t in j["sensitivity"]["traffic"]]
    assert costs == sorted(costs) and costs[0] >= result.cost_usd_per_hour
    assert j["sensitivity"]["max_arrival_rate_rps_within_slo"] >= CHAT.arrival_rate_rps
    L, lam, W = (j["queueing"]["littles_law"][k] for k in ("occupancy", "arrival_rate_rps", "time_in_service_s"))
    assert L == pytest.approx(lam * W)


def test_fp8_is_chosen_when_a_strict_tpot_rules_out_16_bit_weights_at_tp_1() -> None:
    inputs = PlanningInputs(model=LLAMA_8B, gpus=(H100,), precisions=(BF16_PAIR, FP8_PAIR), efficiency_profile="test")
    bf16_only = replace(inputs, precisions=(BF16_PAIR,))
    strict = Slo(tpot_s=0.0075)  # bf16 batch-1 step ≈ 16 GB / 2.68 TB/s + 2 ms ≈ 8.0 ms; fp8 ≈ 5.0 ms
    one_gpu = replace(request(slo=strict), tp_degrees=(1,))
    with pytest.raises(InfeasiblePlanError):
        plan_capacity(one_gpu, bf16_only)
    result = plan_capacity(one_gpu, inputs)
    assert result.row.weights_precision == "fp8"
    assert any(
        a["kind"] == "precision" and a["name"] == "bf16/bf16" and a["cost_usd_per_hour"] is None
        for a in as_dict(result.justification)["alternatives"]
    )


def test_verification_simulates_the_plan_and_agrees_it_meets_the_slos() -> None:
    result = plan_capacity(replace(request(), verify=True, verify_requests=2000), INPUTS)
    v = as_dict(result.verification)
    assert v is not None and v["meets_slo"]
    assert v["requests_simulated"] == 2000
    assert v["simulated"]["ttft_s"]["at_percentile"] <= SLO.ttft_s
    assert v["simulated"]["tpot_s"]["at_percentile"] <= SLO.tpot_s


def test_a_mixed_fleet_never_costs_more_than_the_best_single_configuration() -> None:
    single = plan_capacity(request(CHAT.at_rate(40.0)), INPUTS)
    mixed = plan_capacity(request(CHAT.at_rate(40.0), constraints=PlanConstraints(mixed_fleet=True)), INPUTS)
    assert mixed.cost_usd_per_hour <= single.cost_usd_per_hour + 1e-9
    assert sum(row.offered_rps for row in mixed.rows) == pytest.approx(40.0)
    assert all(row.offered_rps / row.replicas <= row.max_rps_at_slo * (1 + 1e-9) for row in mixed.rows)


@settings(max_examples=4, deadline=None)
@given(
    rate=st.floats(min_value=1.0, max_value=80.0),
    ttft=st.floats(min_value=0.4, max_value=3.0),
    tpot=st.floats(min_value=0.03, max_value=0.12),
)
def test_every_plan_meets_its_slos_under_the_forward_model(rate: float, ttft: float, tpot: float) -> None:
    slo = Slo(ttft_s=ttft, tpot_s=tpot)
    try:
        result = plan_capacity(request(CHAT.at_rate(rate), slo), INPUTS)
    except InfeasiblePlanError:
        return
    for row in result.rows:
        gpu = {g.slug: g for g in INPUTS.gpus}[row.gpu]
        sm = build_step_model(gpu, LLAMA_8B, BF16_PAIR, row.tp, EFFICIENCY)
        capacity = kv_capacity_tokens(gpu, LLAMA_8B, BF16_PAIR, row.tp, EFFICIENCY)
        p = predict(
            sm,
            CHAT.at_rate(row.offered_rps / row.replicas),
            Serving(batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens),
            kv_capacity_tokens=capacity,
        )
        assert not p.unstable
        assert p.ttft is not None and p.ttft.p99_s <= ttft
        assert p.tpot is not None and p.tpot.p99_s <= tpot


@pytest.mark.parametrize("slo", [SLO, Slo(tpot_s=0.2), Slo(e2e_s=60.0)], ids=["ttft-tpot", "tpot-only", "e2e-only"])
def test_capacity_binds_exactly_when_every_slo_holds_at_99_percent_of_saturation(slo: Slo) -> None:
    """The binding label is a fact about the model, not about how μ was narrowed: capacity binds iff a
    direct prediction at SATURATION_BINDS × saturation meets every target, and then no SLO binds."""
    result = plan_capacity(request(slo=slo), INPUTS)
    row = result.row
    gpu = {g.slug: g for g in INPUTS.gpus}[row.gpu]
    sm = build_step_model(gpu, LLAMA_8B, BF16_PAIR, row.tp, EFFICIENCY)
    capacity = kv_capacity_tokens(gpu, LLAMA_8B, BF16_PAIR, row.tp, EFFICIENCY)
    serving = Serving(batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens)
    p = predict(
        sm, CHAT.at_rate(SATURATION_BINDS * row.saturation_rps), serving, kv_capacity_tokens=capacity, percentile=slo.percentile
    )
    holds = not p.unstable and all(
        (getattr(p, metric).at_percentile_s if getattr(p, metric) else 0.0) <= target
        for metric, target in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s))
        if target is not None
    )
    binding = {b.constraint: b.binding for b in result.justification.binding if b.kind in ("slo", "capacity")}
    assert binding["saturation" if holds else "concurrency"] is holds
    assert any(binding[f"slo_{m}"] for m in ("ttft", "tpot", "e2e") if f"slo_{m}" in binding) is not holds


def test_the_prediction_cache_shares_screened_predictions_and_answers_each_slo_alike_whatever_came_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A screened rate that is not proven missed is kept as the full prediction (no second one at
    that rate); a proven miss is remembered per SLO; and a screen's answer does not depend on what
    the cache already held (a full prediction at that rate, another SLO's bounds), since the bound it
    records moves the μ search's next probe and a warm process would plan the same request otherwise."""
    from planner import plan_predict, queueing

    cache = plan_predict._PredictionCache(maxsize=8)
    gpu = INPUTS.gpus[0]
    sm = build_step_model(gpu, LLAMA_8B, BF16_PAIR, 1, EFFICIENCY)
    capacity = kv_capacity_tokens(gpu, LLAMA_8B, BF16_PAIR, 1, EFFICIENCY)
    serving, mix = Serving(batch_limit=64), CHAT.at_rate(1.0)
    calls = {"predict": 0, "screen": 0}
    real_predict, real_screen = plan_predict.predict, plan_predict.screen

    def counting(name, fn):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(plan_predict, "predict", counting("predict", real_predict))
    monkeypatch.setattr(plan_predict, "screen", counting("screen", real_screen))
    rate = 0.5 * queueing.saturation_rps(sm, mix, serving, kv_capacity_tokens=capacity)
    loose = Slo(ttft_s=1e3, tpot_s=1e3)
    screened = cache.screened(sm, mix, serving, capacity, rate, loose)
    assert isinstance(screened, queueing.Prediction)
    assert cache.prediction(sm, mix, serving, capacity, rate, loose.percentile) is screened
    assert calls == {"predict": 0, "screen": 1}
    tight = Slo(tpot_s=screened.tpot.p50_s)
    cache.cache_clear()
    miss = cache.screened(sm, mix, serving, capacity, rate, tight)
    assert isinstance(miss, queueing.PercentileBounds)
    assert cache.screened(sm, mix, serving, capacity, rate, tight) is miss
    assert calls == {"predict": 0, "screen": 2}
    looser = Slo(tpot_s=tight.tpot_s * 1.1)  # proven missed by the tight bounds too, but screened on its own
    own = cache.screened(sm, mix, serving, capacity, rate, looser)
    assert calls == {"predict": 0, "screen": 3}
    assert isinstance(own, queueing.PercentileBounds) and own.prove_missed(looser)
    cache.prediction(sm, mix, serving, capacity, rate, tight.percentile)  # bounds hold no prediction: one is made
    assert calls == {"predict": 1, "screen": 3}
    assert cache.screened(sm, mix, serving, capacity, rate, tight) is miss  # the full prediction does not replace it
    # a cold cache that saw the full prediction first screens to the very same bound
    warm = plan_predict._PredictionCache(maxsize=8)
    warm.prediction(sm, mix, serving, capacity, rate, tight.percentile)
    again = warm.screened(sm, mix, serving, capacity, rate, tight)
    assert isinstance(again, queueing.PercentileBounds) and again.excess(tight) == miss.excess(tight)


class _Stop(Exception):
    pass


def test_a_checkpoint_that_raises_stops_the_search_and_the_advice() -> None:
    """The service passes its request deadline's checkpoint: once it raises, planning ends at the
    search's next step (and an impossible request's advice at its next re-plan), not at the end."""
    calls = 0

    def stop_after_five() -> None:
        nonlocal calls
        calls += 1
        if calls > 5:
            raise _Stop

    with pytest.raises(_Stop):
        plan_capacity(replace(request(), checkpoint=stop_after_five), INPUTS)
    assert calls == 6
    calls = 0
    with pytest.raises(_Stop):
        plan_capacity(replace(request(slo=Slo(tpot_s=0.001)), checkpoint=stop_after_five), INPUTS)
    assert calls == 6
    quiet = plan_capacity(replace(request(), checkpoint=lambda: None), INPUTS)  # a checkpoint that passes changes nothing
    assert quiet.cost_usd_per_hour == plan_capacity(request(), INPUTS).cost_usd_per_hour
