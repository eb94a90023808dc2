"""The bounds the planner prunes with are bounds: the closed-form saturation bound of
planner/candidates.py never falls below the queueing model's own saturation rate (dense and MoE,
chunked and not, every length family), a probe at `_largest_beating` replicas is exactly the last
count that still beats the incumbent, and the mixed-fleet group filter keeps the cheapest fleet.

Specs are the datasheet figures of tests/planner/performance_specs.py with arbitrary test prices
and efficiencies (test inputs, not calibrations): any positive numbers exercise the inequalities.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.candidates import enumerate_all_options, enumerate_groups, enumerate_options, speculative_groups
from planner.optimizer import PlanConstraints
from planner.plan_search import _beats, _largest_beating
from planner.planning import PlanningInputs
from planner.queueing import saturation_rps
from planner.specs import Efficiency, Precision
from planner.workload import (
    FixedLength,
    HistogramLength,
    LognormalLength,
    Serving,
    Slo,
    Workload,
)
from tests.planner.performance_specs import (
    A100_SXM,
    BF16,
    FP8,
    H100_SXM,
    LLAMA_2_70B,
    MI300X,
    MIXTRAL_8X7B,
)
from tests.planner.test_planning import LLAMA_8B

EFFICIENCY = Efficiency(
    name="test", memory=0.8, compute=0.6, step_overhead_s=0.002, memory_reserve_fraction=0.1, source="test input"
)
GPUS = tuple(
    replace(g, price_usd_per_hour_on_demand=price, efficiency=EFFICIENCY)
    for g, price in ((H100_SXM, 4.0), (A100_SXM, 2.0), (MI300X, 3.0))
)
PRECISIONS = (Precision(weights=BF16, kv_cache=BF16), Precision(weights=FP8, kv_cache=FP8))

lengths = st.one_of(
    st.builds(
        lambda mean, tail: LognormalLength(mean_tokens=mean, p99_tokens=mean * tail), st.integers(16, 8000), st.floats(1.2, 6.0)
    ),
    st.builds(FixedLength, tokens=st.integers(1, 6000)),
    st.builds(
        lambda a, b, w: HistogramLength(tokens=(a, a + b), weights=(w, 1.0 - w)),
        st.integers(1, 3000),
        st.integers(1, 6000),
        st.floats(0.05, 0.95),
    ),
)


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from((LLAMA_8B, LLAMA_2_70B, MIXTRAL_8X7B)),
    prompt=lengths,
    output=lengths,
    overlap=st.floats(0.0, 1.0),
    overhead_s=st.floats(0.0, 0.01),
)
def test_the_closed_form_saturation_bound_is_never_below_the_queueing_models(
    model, prompt, output, overlap: float, overhead_s: float
) -> None:
    workload = Workload(arrival_rate_rps=1.0, prompt_tokens=prompt, output_tokens=output)
    groups, _ = enumerate_groups(model=model, gpus=GPUS, precisions=PRECISIONS, workload=workload, slo=Slo(e2e_s=1e6))
    checked = 0
    for group in groups[::3]:
        sm = replace(group.step_model, memory_compute_overlap=overlap, step_overhead_s=overhead_s)
        group = replace(group, step_model=sm)
        for option in enumerate_options(group, workload)[::4]:
            exact = saturation_rps(
                sm,
                workload,
                Serving(batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens),
                kv_capacity_tokens=group.kv_capacity_tokens,
            )
            assert option.saturation_bound_rps >= exact, (option.id, option.saturation_bound_rps, exact)
            checked += 1
    assert checked > 0 or not groups


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from((LLAMA_8B, LLAMA_2_70B, MIXTRAL_8X7B)),
    prompt=lengths,
    output=lengths,
    k=st.sampled_from((1, 3, 5)),
    overlap=st.floats(0.0, 1.0),
)
def test_the_bound_holds_for_speculating_groups(model, prompt, output, k: int, overlap: float) -> None:
    """A speculating group's bound (verify steps of k + 1 tokens per decoder, (E[o] − 1)/E of them per
    request, the draft's passes) is never below the queueing model's speculative saturation either."""
    workload = Workload(arrival_rate_rps=1.0, prompt_tokens=prompt, output_tokens=output)
    groups, _ = enumerate_groups(model=model, gpus=GPUS, precisions=PRECISIONS, workload=workload, slo=Slo(e2e_s=1e6))
    plain = [replace(g, step_model=replace(g.step_model, memory_compute_overlap=overlap)) for g in groups[::3]]
    for group in speculative_groups(plain, model, workload, draft_tokens=(k,)):
        for option in enumerate_options(group, workload)[::3]:
            exact = saturation_rps(
                group.step_model,
                workload,
                Serving(batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens),
                kv_capacity_tokens=group.kv_capacity_tokens,
            )
            assert option.saturation_bound_rps >= exact, (option.id, option.saturation_bound_rps, exact)
            assert option.id.endswith(f"/eagle-k{k}")


def test_the_unchunked_bound_is_tight_when_prefill_dominates() -> None:
    """Long prompts, short outputs: the prefill each step carries dominates, which the decode-only
    bound c / (E[o]·t_step(c, c·E[p], c·E[p])) left out; the mean-prefill step is within a few %."""
    workload = Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=6000), output_tokens=FixedLength(tokens=50))
    groups, _ = enumerate_groups(model=LLAMA_8B, gpus=GPUS[:1], precisions=PRECISIONS[:1], workload=workload, slo=Slo(e2e_s=1e6))
    option = next(o for o in enumerate_options(groups[0], workload) if o.chunk_tokens is None and o.batch_limit == 64)
    exact = saturation_rps(
        option.group.step_model, workload, Serving(batch_limit=64), kv_capacity_tokens=option.group.kv_capacity_tokens
    )
    c = option.slots
    decode_only = c / (50 * option.group.step_model.step_s(c, c * 6000, c * 6000))
    assert exact <= option.saturation_bound_rps <= exact * 1.05
    assert decode_only > 5 * option.saturation_bound_rps


@settings(max_examples=60, deadline=None)
@given(
    price=st.floats(0.5, 20.0),
    tp=st.sampled_from((1, 2, 4, 8)),
    best_cost=st.floats(1.0, 200.0),
    best_gpus=st.integers(1, 64),
    min_replicas=st.integers(1, 5),
    n_plus_one=st.booleans(),
    smaller_id=st.booleans(),
)
def test_largest_beating_is_the_last_replica_count_that_beats_the_incumbent(
    price: float, tp: int, best_cost: float, best_gpus: int, min_replicas: int, n_plus_one: bool, smaller_id: bool
) -> None:
    workload = Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=500), output_tokens=FixedLength(tokens=100))
    gpu = replace(H100_SXM, price_usd_per_hour_on_demand=price / tp, efficiency=EFFICIENCY)
    groups, _ = enumerate_groups(
        model=LLAMA_8B, gpus=(gpu,), precisions=PRECISIONS[:1], workload=workload, slo=Slo(e2e_s=1e6), tp_degrees=(tp,)
    )
    option = enumerate_options(groups[0], workload)[0]
    best_id = option.id + ("~" if smaller_id else "")  # "~" sorts after every id character: this option's id is smaller
    constraints = PlanConstraints(min_replicas=min_replicas, n_plus_one=n_plus_one)
    n = _largest_beating(option, constraints, (best_cost, best_gpus, best_id))

    def beats(needed: int) -> bool:
        replicas = max(min_replicas, needed + (1 if n_plus_one else 0), 1)
        return _beats(replicas * option.group.price_usd_per_hour, replicas * tp, best_cost, best_gpus, option.id, best_id)

    if n >= 1:
        assert beats(n)
    assert not beats(n + 1)


@pytest.mark.parametrize("rate", [12.0, 30.0])
def test_the_mixed_fleet_group_filter_keeps_the_cheapest_fleet(rate: float) -> None:
    """Groups refused by their cost floor p_g + (λ − S_g)⁺·e could not lower the fleet's cost: the MILP
    over the filtered groups costs what it costs over every group."""
    from planner.optimizer import Candidate, solve_plan
    from planner.plan_search import Planner
    from tests.planner.test_planning import CHAT, GRID, SLO

    workload = CHAT.at_rate(rate)
    inputs = PlanningInputs(model=LLAMA_8B, gpus=GPUS, precisions=PRECISIONS, efficiency_profile="test")
    groups, _ = enumerate_groups(
        model=inputs.model,
        gpus=inputs.gpus,
        precisions=inputs.precisions,
        workload=workload,
        slo=SLO,
        tp_degrees=GRID["tp_degrees"],
    )
    options = [
        o
        for g in groups
        for o in enumerate_options(g, workload, batch_limits=GRID["batch_limits"], chunk_budgets=GRID["chunk_budgets"])
    ]
    planner = Planner(options, workload)
    ceiling = planner.search(SLO, rate, PlanConstraints()).best.cost_usd_per_hour

    def fleet_cost(pool: dict) -> float:
        candidates = [
            Candidate(
                id=o.id,
                gpu=o.group.gpu.slug,
                tp=o.group.tp,
                weights_precision=o.group.precision.weights.slug,
                kv_precision=o.group.precision.kv_cache.slug,
                batch_limit=o.batch_limit,
                chunk_tokens=o.chunk_tokens,
                gpus_per_replica=o.group.tp,
                cost_usd_per_hour=o.group.price_usd_per_hour,
                max_rps_at_slo=mu,
                saturation_rps=max(planner.saturation(o), mu),
            )
            for o, mu in pool.values()
        ]
        return solve_plan(candidates, rate, PlanConstraints(mixed_fleet=True)).cost_usd_per_hour

    everything, _ = planner.best_per_group(SLO)
    filtered, _ = planner.best_per_group(SLO, ceiling_usd_per_hour=ceiling, arrival_rate_rps=rate)
    assert set(filtered) <= set(everything)
    assert fleet_cost(filtered) == pytest.approx(fleet_cost(everything), rel=1e-9)


@pytest.mark.parametrize("rate", [5.0, 40.0])
def test_the_cheapest_plan_does_not_depend_on_the_order_candidates_are_searched(rate: float) -> None:
    """Ties in cost and GPUs go to the smallest candidate id, so enumerating the candidates in
    another order (another heap history, other probes) gives the same configuration."""
    from planner import plan_predict
    from planner.plan_search import Planner
    from tests.planner.test_planning import CHAT, SLO

    workload = CHAT.at_rate(rate)
    groups, _ = enumerate_groups(model=LLAMA_8B, gpus=GPUS, precisions=PRECISIONS, workload=workload, slo=SLO)
    options = [o for g in groups for o in enumerate_options(g, workload)]
    answers = set()
    for ordered in (options, options[::-1], sorted(options, key=lambda o: (o.batch_limit, o.chunk_tokens or 0, o.id))):
        for cache in (plan_predict.PREDICTIONS, plan_predict.cached_saturation_rps, plan_predict.cached_max_rps):
            cache.cache_clear()
        best = Planner(ordered, workload).search(SLO, rate, PlanConstraints()).best
        assert best is not None
        answers.add((best.option.id, best.replicas, best.cost_usd_per_hour))
    assert len(answers) == 1


@settings(max_examples=40, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=400.0),
    min_replicas=st.integers(1, 4),
    n_plus_one=st.booleans(),
    max_gpus=st.one_of(st.none(), st.integers(1, 64)),
    budget=st.one_of(st.none(), st.floats(min_value=1.0, max_value=200.0)),
    stock=st.one_of(st.none(), st.integers(0, 16)),
)
def test_the_initial_heap_is_what_pushing_each_option_gives(
    rate: float, min_replicas: int, n_plus_one: bool, max_gpus: int | None, budget: float | None, stock: int | None
) -> None:
    """The search queues every option at its closed-form bound in one vectorised pass: the same
    entries (cost, GPUs, id), the same refusals by family, as one `_push` per option."""
    from planner.plan_search import Planner, _Outcome
    from tests.planner.test_planning import CHAT, SLO

    workload = CHAT.at_rate(rate)
    constraints = PlanConstraints(
        min_replicas=min_replicas,
        n_plus_one=n_plus_one,
        max_gpus=max_gpus,
        budget_usd_per_hour=budget,
        inventory={} if stock is None else {"h100-sxm": stock},
    )
    groups, _ = enumerate_groups(model=LLAMA_8B, gpus=GPUS, precisions=PRECISIONS, workload=workload, slo=SLO)
    planner = Planner([o for g in groups for o in enumerate_options(g, workload)], workload)
    one_by_one, at_once = _Outcome(), _Outcome()
    pushed: list[tuple[float, int, str, int]] = []
    for option in planner.options:
        planner._push(pushed, option, option.saturation_bound_rps, 0, rate, constraints, one_by_one)
    heap = planner._initial_heap(rate, constraints, at_once)
    assert sorted(heap) == sorted(pushed)
    assert at_once.limit_drops == one_by_one.limit_drops and at_once.slo_drops == one_by_one.slo_drops
    assert all(type(cost) is float and type(gpus) is int for cost, gpus, _, _ in heap)


def test_every_option_id_is_its_candidate_id() -> None:
    """Ids are built from a per-group prefix: they must read exactly as `candidate_id` writes them."""
    from planner.optimizer import candidate_id
    from tests.planner.test_planning import CHAT, SLO

    groups, _ = enumerate_groups(model=LLAMA_8B, gpus=GPUS, precisions=PRECISIONS, workload=CHAT, slo=SLO)
    options = enumerate_all_options(groups, CHAT)
    assert options and len({o.id for o in options}) == len(options)
    for o in options:
        g = o.group
        assert o.id == candidate_id(
            gpu=g.gpu.slug,
            weights_precision=g.precision.weights.slug,
            kv_precision=g.precision.kv_cache.slug,
            tp=g.tp,
            batch_limit=o.batch_limit,
            chunk_tokens=o.chunk_tokens,
        )
