"""Candidate tables for the fleet MILP: the pruned search keeps exactly what a brute force over
every option keeps after dominance, shapes are shared, demand does not enter, and an empty table
is a typed answer naming the workload."""

from __future__ import annotations

import dataclasses

import pytest

from planner.candidates import enumerate_groups, enumerate_options
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.fleet import undominated
from planner.fleet_candidates import (
    CandidateGrid,
    CandidateTables,
    candidate_table,
    gpu_candidate_table,
    merged_tables,
    no_candidates_error,
)
from planner.memory import kv_capacity_tokens
from planner.optimizer import Candidate
from planner.performance import build_step_model
from planner.queueing import max_rps_at_slo, predict, saturation_rps
from planner.rate_search import MU_RELATIVE_TOLERANCE
from planner.workload import FixedLength, LognormalLength, Serving, Slo, Workload
from tests.planner.performance_specs import A100_SXM, FP8_PRECISION, FP16_PRECISION, H100_SXM, LLAMA_2_70B

# Catalog on-demand prices (catalog/data/gpus.json); only their being positive matters here.
H100 = dataclasses.replace(H100_SXM, price_usd_per_hour_on_demand=6.155, price_usd_per_hour_reserved_1y=3.8777)
A100 = dataclasses.replace(A100_SXM, price_usd_per_hour_on_demand=2.7, price_usd_per_hour_reserved_1y=1.701)
MIX = Workload(
    arrival_rate_rps=1.0, prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=3000), output_tokens=FixedLength(tokens=200)
)
SLO = Slo(ttft_s=2.0, tpot_s=0.08, percentile=99)
GRID = CandidateGrid(tp_degrees=(1, 2, 4), batch_limits=(16, 64), chunk_budgets=(None,))


def brute_force() -> list[Candidate]:
    """μ for every enumerated option, then the fleet's dominance filter."""
    groups, _ = enumerate_groups(
        model=LLAMA_2_70B,
        gpus=(H100, A100),
        precisions=(FP16_PRECISION, FP8_PRECISION),
        workload=MIX,
        slo=SLO,
        tp_degrees=GRID.tp_degrees,
    )
    everything = []
    for group in groups:
        for option in enumerate_options(group, MIX, batch_limits=GRID.batch_limits, chunk_budgets=GRID.chunk_budgets):
            serving = Serving(batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
            try:
                mu = max_rps_at_slo(group.step_model, MIX, serving, SLO, kv_capacity_tokens=group.kv_capacity_tokens)
            except InfeasiblePlanError:
                continue
            saturation = saturation_rps(group.step_model, MIX, serving, kv_capacity_tokens=group.kv_capacity_tokens)
            everything.append(
                Candidate(
                    id=option.id,
                    gpu=group.gpu.slug,
                    tp=group.tp,
                    weights_precision=group.precision.weights.slug,
                    kv_precision=group.precision.kv_cache.slug,
                    batch_limit=option.batch_limit,
                    chunk_tokens=option.chunk_tokens,
                    gpus_per_replica=group.tp,
                    cost_usd_per_hour=group.price_usd_per_hour,
                    max_rps_at_slo=mu,
                    saturation_rps=max(saturation, mu),
                )
            )
    return everything


def meets_slo(candidate: Candidate) -> bool:
    """Re-evaluate one replica of `candidate` at its max_rps_at_slo with the queueing model."""
    gpu = {"h100-sxm": H100, "a100-80gb-sxm": A100}[candidate.gpu]
    precision = {"fp16": FP16_PRECISION, "fp8": FP8_PRECISION}[candidate.weights_precision]
    step_model = build_step_model(gpu, LLAMA_2_70B, precision, candidate.tp, gpu.efficiency)
    capacity = kv_capacity_tokens(gpu, LLAMA_2_70B, precision, candidate.tp, gpu.efficiency)
    serving = Serving(batch_limit=candidate.batch_limit, chunk_tokens=candidate.chunk_tokens)
    p = predict(
        step_model, MIX.at_rate(candidate.max_rps_at_slo), serving, kv_capacity_tokens=capacity, percentile=SLO.percentile
    )
    return not p.unstable and p.ttft.at_percentile_s <= SLO.ttft_s and p.tpot.at_percentile_s <= SLO.tpot_s


def test_the_pruned_search_keeps_what_brute_force_and_dominance_keep() -> None:
    """Every option's μ by the queueing model's own root-find (brentq to 1e-4), then
    `undominated`, keeps the same (GPU, tp) set as the search that skips options by the
    saturation bound, the exact saturation and one prediction at the rate to beat; each kept μ
    is the best of its (GPU, tp) within the search's 1 %, from below (a rate verified to meet)."""
    table = candidate_table(
        model=LLAMA_2_70B, gpus=(H100, A100), precisions=(FP16_PRECISION, FP8_PRECISION), workload=MIX, slo=SLO, grid=GRID
    )
    everything = brute_force()
    kept = undominated(everything)
    assert {(c.gpu, c.tp) for c in table.candidates} == {(c.gpu, c.tp) for c in kept}
    assert len(kept) >= 3, "the instance keeps several GPU types and tp degrees"
    for candidate in table.candidates:
        best = max(c.max_rps_at_slo for c in everything if (c.gpu, c.tp) == (candidate.gpu, candidate.tp))
        assert best * (1 - MU_RELATIVE_TOLERANCE) * 0.999 <= candidate.max_rps_at_slo <= best * (1 + 1e-3)
        assert candidate.max_rps_at_slo <= candidate.saturation_rps
        assert meets_slo(candidate), f"{candidate.id} misses its SLO at the rate the MILP would use"
    assert table.exhaustive
    assert table.mu_searches < len(everything), "the bounds skipped some μ searches"
    for candidate in everything:
        assert any(
            candidate.gpu == k.gpu
            and candidate.tp % k.tp == 0
            and candidate.tp // k.tp * k.max_rps_at_slo >= candidate.max_rps_at_slo * (1 - MU_RELATIVE_TOLERANCE) * 0.999
            for k in table.candidates
        ), candidate.id


def test_identical_shapes_share_one_table_and_demand_does_not_enter() -> None:
    tables = CandidateTables(
        gpus=(H100,),
        precisions=(FP8_PRECISION,),
        grid=CandidateGrid(tp_degrees=(1, 2), batch_limits=(64,), chunk_budgets=(None,)),
    )
    first = tables.table(LLAMA_2_70B, MIX, SLO)
    busier = tables.table(LLAMA_2_70B, MIX.at_rate(250.0), SLO)
    assert busier is first and tables.computed == 1
    assert first.candidates and all(c.gpu == "h100-sxm" for c in first.candidates)
    looser = tables.table(LLAMA_2_70B, MIX, dataclasses.replace(SLO, ttft_s=4.0))
    assert tables.computed == 2
    by_tp = {c.tp: c.max_rps_at_slo for c in first.candidates}
    for c in looser.candidates:
        assert c.max_rps_at_slo >= by_tp.get(c.tp, 0.0) * (1 - 1e-6), "a looser SLO never lowers μ"


def test_a_shape_no_configuration_serves_gives_an_error_naming_the_workload() -> None:
    impossible = Slo(tpot_s=1e-5)  # 0.01 ms: far below one decode step of a 70B model on any GPU
    table = candidate_table(
        model=LLAMA_2_70B,
        gpus=(H100,),
        precisions=(FP16_PRECISION,),
        workload=MIX,
        slo=impossible,
        grid=CandidateGrid(tp_degrees=(2, 4), batch_limits=(16,), chunk_budgets=(None,)),
    )
    assert table.candidates == ()
    assert table.predictions == 0, "the SLO floors refuse every group before any queueing"
    error = no_candidates_error("chat", table)
    assert error.extensions["workload"] == "chat"
    assert error.extensions["constraint"] == "tpot"
    assert "chat" in error.detail and error.extensions["refused_by"]["tpot"] == 2


def test_a_model_too_large_for_the_gpus_is_refused_by_memory() -> None:
    table = candidate_table(
        model=LLAMA_2_70B,
        gpus=(A100,),
        precisions=(FP16_PRECISION,),
        workload=MIX,
        slo=SLO,
        grid=CandidateGrid(tp_degrees=(1,), pp_degrees=(1,), batch_limits=(16,), chunk_budgets=(None,)),
    )
    assert table.candidates == ()
    assert no_candidates_error("big", table).extensions["constraint"] == "memory"


def test_a_model_no_gpu_holds_is_offered_in_pipeline_stages() -> None:
    """The same 70B FP16 (about 140 GB) at tp 1 with stages searched: single GPUs in a pipeline hold it, and each
    candidate records its pp and counts tp × pp GPUs a replica (what the MILP buys)."""
    table = candidate_table(
        model=LLAMA_2_70B,
        gpus=(A100,),
        precisions=(FP16_PRECISION,),
        workload=MIX,
        slo=SLO,
        grid=CandidateGrid(tp_degrees=(1,), batch_limits=(16,), chunk_budgets=(None,)),
    )
    assert table.candidates
    for candidate in table.candidates:
        assert candidate.tp == 1 and candidate.pp > 1 and candidate.ep == 1
        assert candidate.gpus_per_replica == candidate.pp
        assert f"/pp{candidate.pp}/" in candidate.id


@pytest.mark.parametrize("field", ["tp_degrees", "pp_degrees", "batch_limits"])
def test_grids_must_be_non_empty_whole_numbers(field: str) -> None:
    with pytest.raises(PlannerInputError):
        CandidateGrid(**{field: ()})
    with pytest.raises(PlannerInputError):
        CandidateGrid(**{field: (0,)})


def test_no_gpus_or_precisions_is_an_input_error() -> None:
    with pytest.raises(PlannerInputError):
        CandidateTables(gpus=(), precisions=(FP16_PRECISION,))
    with pytest.raises(PlannerInputError):
        CandidateTables(gpus=(H100,), precisions=())


def test_a_table_is_its_gpu_types_parts_merged_each_part_holding_only_its_own_gpu() -> None:
    """A candidate only dominates one of its own GPU type (same k, g'/g whole, k·μ' ≥ μ), so the
    H100 and A100 searches are independent: each part holds only its GPU type's candidates and
    drops, and the parts concatenated in order with their counts summed are the whole table — what
    a fleet-plan operation's task workers compute apart and its last unit gathers."""
    kwargs = {"model": LLAMA_2_70B, "precisions": (FP16_PRECISION, FP8_PRECISION), "workload": MIX, "slo": SLO, "grid": GRID}
    parts = [gpu_candidate_table(gpu=gpu, **kwargs) for gpu in (H100, A100)]  # type: ignore[arg-type]
    for part, slug in zip(parts, ("h100-sxm", "a100-80gb-sxm"), strict=True):
        assert part.candidates and {c.gpu for c in part.candidates} == {slug}
        assert {d.gpu for d in part.drops} <= {slug}
    whole = candidate_table(gpus=(H100, A100), **kwargs)  # type: ignore[arg-type]
    assert merged_tables(parts) == whole
    assert whole.predictions == parts[0].predictions + parts[1].predictions
    assert whole.candidates == parts[0].candidates + parts[1].candidates


@pytest.mark.parametrize(("pp", "ep", "gpus"), [(0, 1, 8), (2, 1, 8), (1, 2, 8)])
def test_a_candidate_refuses_a_layout_its_gpus_cannot_hold(pp: int, ep: int, gpus: int) -> None:
    """pp ≥ 1, tp × pp GPUs at least, ep 1 or tp (tp 8 here): pp 2 in 8 GPUs and ep 2 at tp 8 are refused."""
    with pytest.raises(PlannerInputError):
        Candidate(
            id="x", gpu="h100-sxm", tp=8, pp=pp, ep=ep, weights_precision="bf16", kv_precision="bf16", batch_limit=8,
            chunk_tokens=None, gpus_per_replica=gpus, cost_usd_per_hour=1.0, max_rps_at_slo=1.0, saturation_rps=1.0,
        )  # fmt: skip
    assert Candidate(
        id="x", gpu="h100-sxm", tp=8, pp=2, ep=8, weights_precision="bf16", kv_precision="bf16", batch_limit=8,
        chunk_tokens=None, gpus_per_replica=16, cost_usd_per_hour=1.0, max_rps_at_slo=1.0, saturation_rps=1.0,
    ).gpus_per_replica == 16  # fmt: skip
