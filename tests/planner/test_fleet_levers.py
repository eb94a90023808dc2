"""Levers in the fleet's candidate tables (planner/fleet_levers.py): speculative variants and prefix
cache variants join the plain candidates, carry what they deploy, and never make a fleet dearer."""

from __future__ import annotations

import dataclasses

import pytest

from planner.fleet_candidates import CandidateGrid, CandidateTable, candidate_table
from planner.fleet_levers import prefix_variants
from planner.fleet_solve import solve_fleet
from planner.fleet_spec import FleetSpec, FleetWorkload, GpuPrice
from planner.prefix_cache import PrefixReuse, prefix_hits
from planner.workload import FixedLength, LognormalLength, Slo, Workload
from tests.planner.performance_specs import FP16_PRECISION, H100_SXM, LLAMA_2_70B

# Catalog on-demand and 1-year reserved prices (catalog/data/gpus.json); only their ratio matters here.
H100 = dataclasses.replace(H100_SXM, price_usd_per_hour_on_demand=6.155, price_usd_per_hour_reserved_1y=3.8777)
PRICES = {"h100-sxm": GpuPrice(on_demand_usd_per_hour=6.155, reserved_usd_per_hour=3.8777)}
MIX = Workload(
    arrival_rate_rps=1.0, prompt_tokens=LognormalLength(mean_tokens=3000, p99_tokens=6000), output_tokens=FixedLength(tokens=200)
)
SLO = Slo(ttft_s=2.0, tpot_s=0.08, percentile=99)
GRID = CandidateGrid(tp_degrees=(2, 4), batch_limits=(16, 64), chunk_budgets=(None,))
SYSTEM_PROMPT = PrefixReuse(system_prompt_tokens=2000, system_prompt_fraction=0.9)
DEMAND = (3.0, 12.0, 7.0)


def table(workload: Workload = MIX, **kwargs: object) -> CandidateTable:
    return candidate_table(
        model=LLAMA_2_70B, gpus=(H100,), precisions=(FP16_PRECISION,), workload=workload, slo=SLO, grid=GRID, **kwargs
    )  # type: ignore[arg-type]


def fleet_cost(t: CandidateTable) -> float:
    spec = FleetSpec(workloads=(FleetWorkload(name="w", candidates=t.candidates, demand_rps=DEMAND),), prices=PRICES)
    return solve_fleet(spec).cost.total_usd


def test_speculative_auto_offers_drafts_and_costs_no_more_than_off() -> None:
    off, auto = table(), table(speculative="auto")
    assert not off.levers
    drafted = [c for c in auto.candidates if c.id in auto.levers]
    assert drafted, "a TPOT-bound 70B workload should find a speculating candidate worth keeping"
    for c in drafted:
        choice = auto.levers[c.id].speculative
        assert choice is not None and c.id.endswith(f"/{choice.method}-k{choice.draft_tokens}")
        assert choice.tokens_per_step > 1.0
    assert fleet_cost(auto) <= fleet_cost(off) + 1e-9


def test_speculative_on_offers_only_drafts() -> None:
    on = table(speculative="on")
    assert on.candidates and all(on.levers[c.id].speculative is not None for c in on.candidates)


def test_prefix_reuse_costs_no_more_and_reports_the_che_hit_rate() -> None:
    plain, cached = table(), table(dataclasses.replace(MIX, prefix_reuse=SYSTEM_PROMPT))
    with_cache = [c for c in cached.candidates if c.id in cached.levers]
    assert with_cache
    for c in with_cache:
        caching = cached.levers[c.id].prefix_caching
        assert caching is not None and caching.routing == "random"
        expected = prefix_hits(SYSTEM_PROMPT, caching.cache_tokens, "random", 1)
        assert caching.hit_rate == pytest.approx(expected.hit_rate)
        assert c.id.endswith(f"+pc{caching.cache_tokens}")
        assert 0.0 < caching.prefill_tokens_saved_fraction < 1.0
    assert fleet_cost(cached) < fleet_cost(plain)


def test_measured_hit_rate_is_planned_as_given() -> None:
    cached = table(dataclasses.replace(MIX, prefix_reuse=PrefixReuse(hit_rate=0.5)))
    levers = [cached.levers[c.id].prefix_caching for c in cached.candidates if c.id in cached.levers]
    assert levers and all(
        p is not None and p.hit_rate == 0.5 and p.routing == "as_measured" and p.cache_tokens == 0 for p in levers
    )


def test_variants_keep_the_plain_mix_first_and_drop_the_reuse() -> None:
    variants = prefix_variants(dataclasses.replace(MIX, prefix_reuse=SYSTEM_PROMPT))
    assert variants[0].suffix == "" and variants[0].mix.prefix_reuse is None
    assert all(v.mix.prefix_reuse is None and v.cache_tokens % 16 == 0 for v in variants)
    hitting = [v for v in variants[1:] if v.prefix_caching is not None and v.prefix_caching.hit_rate > 0]
    assert hitting and all(v.mix.prompt_tokens.mean < MIX.prompt_tokens.mean for v in hitting)


def test_a_pinned_draft_model_is_the_only_draft_offered() -> None:
    """With DraftPin(Llama 2 7B, α 0.7) and speculative on, every candidate drafts with the 7B model at α 0.7,
    E = (1 − 0.7^(k+1))/0.3 (a fleet workload's draft_model, as a plan's constraints.pin.draft_model)."""
    from planner.fleet_levers import DraftPin
    from tests.planner.test_speculative import LLAMA_2_7B

    drafted = table(speculative="on", draft=DraftPin(draft_model=LLAMA_2_7B, acceptance_rate=0.7))
    assert drafted.candidates
    for c in drafted.candidates:
        choice = drafted.levers[c.id].speculative
        assert choice is not None and choice.method == "draft_model" and choice.acceptance_rate == 0.7
        assert choice.tokens_per_step == pytest.approx((1 - 0.7 ** (choice.draft_tokens + 1)) / 0.3)
    heads = table(speculative="on")
    assert {heads.levers[c.id].speculative.method for c in heads.candidates} != {"draft_model"}  # type: ignore[union-attr]


def test_a_draft_pin_the_table_cannot_use_is_refused() -> None:
    from planner.errors import PlannerInputError
    from planner.fleet_levers import DraftPin
    from tests.planner.test_speculative import LLAMA_2_7B

    with pytest.raises(PlannerInputError, match="auto or on"):
        table(speculative="off", draft=DraftPin(draft_model=LLAMA_2_7B))
    with pytest.raises(PlannerInputError, match="tokenizer"):
        table(speculative="auto", draft=DraftPin(draft_model=dataclasses.replace(LLAMA_2_7B, vocab_size=32_768)))
    with pytest.raises(PlannerInputError, match="acceptance_rate"):
        DraftPin(acceptance_rate=1.0)
