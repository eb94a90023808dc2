"""The forward model on plans whose replicas span pipeline stages or run expert-parallel (planner/diff_check.py):
each row or pool is rebuilt at its own tp, pp and ep, so a plan rechecked on the specs and workload it was made
with predicts what the planner predicted and costs what it cost; rebuilt at tp alone it would not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.diff import DeployedPool, DeployedRow, PlanShape, ShapeRow, check_plan, check_pools, plan_diff, pool_diff
from planner.optimizer import PlanConstraints
from planner.pipeline import PP_DEGREES
from planner.plan_disagg import plan_disaggregated
from planner.planning import PlanningInputs, PlanningRequest, PlanResult, plan_capacity
from planner.specs import GpuSpec, Precision
from tests.planner.performance_specs import FP16_PRECISION, MIXTRAL_8X7B
from tests.planner.test_expert_parallel import H100 as H100_EP
from tests.planner.test_expert_parallel import LONG, LONG_SLO
from tests.planner.test_pipeline_search import H100, LLAMA_405B, PAIR, SLO, WORKLOAD
from tests.planner.test_plan_disagg_pipeline import LINK


def _rows(result: PlanResult, gpu: GpuSpec, precision: Precision) -> tuple[DeployedRow, ...]:
    """The plan's rows as deployed, at their own layouts."""
    total = sum(r.offered_rps for r in result.rows)
    return tuple(
        DeployedRow(
            gpu=gpu,
            precision=precision,
            tp=r.tp,
            pp=r.pp,
            ep=r.ep,
            replicas=r.replicas,
            batch_limit=r.batch_limit,
            chunk_tokens=r.chunk_tokens,
            traffic_share=r.offered_rps / total,
        )
        for r in result.rows
    )


@pytest.fixture(scope="module")
def pipeline_plan() -> PlanResult:
    inputs = PlanningInputs(model=LLAMA_405B, gpus=(H100,), precisions=(PAIR,), efficiency_profile="test")
    return plan_capacity(PlanningRequest(workload=WORKLOAD, slo=SLO, constraints=PlanConstraints(), verify=False), inputs)


def test_a_405b_pipeline_plan_rechecks_as_planned_at_16_gpus_a_replica(pipeline_plan: PlanResult) -> None:
    """tp 8 × pp 2 at 8 req/s (tests/planner/test_pipeline_search.py): replicas × 16 GPUs × $4/GPU-h, every SLO met;
    each row's ρ is the plan's target ρ (offered / replicas / saturation of the pipeline's folded step model)."""
    rows = _rows(pipeline_plan, H100, PAIR)
    assert {(r.tp, r.pp) for r in rows} == {(8, 2)}
    check = check_plan(rows, LLAMA_405B, WORKLOAD, SLO)
    assert check.meets_slo, check.summary
    replicas = sum(r.replicas for r in rows)
    assert check.cost_usd_per_hour == pytest.approx(replicas * 16 * 4.0) == pytest.approx(pipeline_plan.cost_usd_per_hour)
    for planned, checked in zip(pipeline_plan.rows, check.rows, strict=True):
        assert checked.utilisation == pytest.approx(planned.target_rho, rel=1e-6)


def test_the_same_rows_at_one_stage_do_not_hold_the_weights(pipeline_plan: PlanResult) -> None:
    """At pp 1 a replica is 8 GPUs: 8 × 80 GB × 0.9 = 576 GB against 810 GB of BF16 weights. The recheck reports the
    configuration as a problem, as it did for every stored pipeline plan before rows carried their stages."""
    staged = _rows(pipeline_plan, H100, PAIR)
    flat = tuple(replace(r, pp=1) for r in staged)
    check = check_plan(flat, LLAMA_405B, WORKLOAD, SLO)
    assert not check.meets_slo
    assert check.rows[0].problem is not None and "no longer fits on 8 × h100-sxm" in check.rows[0].problem
    assert check.cost_usd_per_hour == pytest.approx(check_plan(staged, LLAMA_405B, WORKLOAD, SLO).cost_usd_per_hour / 2)


def test_an_ep_plan_rechecks_at_its_expert_parallel_step() -> None:
    """Mixtral ep 8 for 4,000-token prompts at 60 req/s (tests/planner/test_expert_parallel.py: 2 replicas, $64/h): the
    recheck's ρ is the plan's; the same replicas rebuilt tensor-split (ep 1) run the 2,048-token chunks slower (11.3
    against 7.6 ms), so their ρ is higher: the ep row is predicted on the ep step, not tp's."""
    inputs = PlanningInputs(model=MIXTRAL_8X7B, gpus=(H100_EP,), precisions=(FP16_PRECISION,), efficiency_profile="test")
    grid = {"tp_degrees": (8,), "batch_limits": (64, 256), "chunk_budgets": (2048,)}
    result = plan_capacity(
        PlanningRequest(workload=LONG, slo=LONG_SLO, constraints=PlanConstraints(), verify=False, **grid), inputs
    )
    [planned] = result.rows
    [row] = _rows(result, H100_EP, FP16_PRECISION)
    assert (row.tp, row.ep, row.replicas) == (8, 8, 2)
    check = check_plan((row,), MIXTRAL_8X7B, LONG, LONG_SLO)
    assert check.meets_slo, check.summary
    assert check.cost_usd_per_hour == pytest.approx(2 * 8 * 4.0)
    [checked] = check.rows
    assert checked.utilisation == pytest.approx(planned.target_rho, rel=1e-6)
    [tensor_split] = check_plan((replace(row, ep=1),), MIXTRAL_8X7B, LONG, LONG_SLO).rows
    assert tensor_split.utilisation is not None and checked.utilisation is not None
    assert tensor_split.utilisation > 1.2 * checked.utilisation


def test_405b_pools_recheck_as_the_disaggregated_plan_predicted() -> None:
    """Both pools 16-GPU pipelines (tests/planner/test_plan_disagg_pipeline.py): rebuilt at their tp × pp, a prefill
    replica being pp servers of a lone prompt, the KV over min(16, 16) links, the recheck's TTFT, TPOT and each
    pool's ρ are the plan's prediction exactly, at (prefill + decode replicas) × 16 GPUs × $4/GPU-h."""
    plan = plan_disaggregated(
        gpus=[H100], model=LLAMA_405B, precisions=[PAIR], tps=[1, 2, 4, 8], workload=WORKLOAD, slo=SLO, link=LINK,
        pp_degrees=PP_DEGREES, verify=False,
    )  # fmt: skip
    assert plan.prefill.spare_replicas == plan.decode.spare_replicas == 0
    prefill, decode = (
        DeployedPool(
            role=role, gpu=H100, precision=PAIR, tp=c.tp, pp=c.pp, replicas=c.replicas, batch_limit=c.batch_limit
        )
        for role, c in (("prefill", plan.prefill), ("decode", plan.decode))
    )  # fmt: skip
    assert prefill.gpus_per_replica == decode.gpus_per_replica == 16
    check = check_pools(prefill, decode, LLAMA_405B, WORKLOAD, SLO, link=plan.link)
    assert check.meets_slo, check.summary
    assert check.cost_usd_per_hour == pytest.approx(16 * 4.0 * (plan.prefill.replicas + plan.decode.replicas))
    assert check.cost_usd_per_hour == pytest.approx(plan.cost_usd_per_hour)
    rows = {r.role: r for r in check.rows}
    assert rows["decode"].predicted_s["ttft"] == pytest.approx(plan.prediction.ttft_s, rel=1e-9)
    assert rows["decode"].predicted_s["tpot"] == pytest.approx(plan.prediction.tpot_s, rel=1e-9)
    assert rows["prefill"].utilisation == pytest.approx(plan.prediction.prefill.rho, rel=1e-9)
    assert rows["decode"].utilisation == pytest.approx(plan.prediction.decode.rho, rel=1e-9)


def _shape(*, tp: int, pp: int, ep: int, replicas: int) -> PlanShape:
    row = ShapeRow(
        gpu="h100-sxm", tp=tp, pp=pp, ep=ep, replicas=replicas, weights_precision="bf16", kv_precision="bf16",
        batch_limit=64, chunk_tokens=2048,
    )  # fmt: skip
    return PlanShape(rows=(row,), cost_usd_per_hour=row.gpus * 4.0)


def test_the_diff_counts_tp_x_pp_gpus_and_tells_ep_apart() -> None:
    """3 replicas of tp 8 × pp 2 are 48 GPUs; moving to 6 of tp 8 (pp 1) keeps 48 GPUs but changes the pool's pp;
    ep 8 against ep 1 on the same 8 GPUs is another deployment (the engine runs an all-to-all), not the same one."""
    staged, flat = _shape(tp=8, pp=2, ep=1, replicas=3), _shape(tp=8, pp=1, ep=1, replicas=6)
    diff = plan_diff(staged, flat, before_now_usd_per_hour=staged.cost_usd_per_hour)
    assert (diff.gpus_total.before, diff.gpus_total.after) == (48, 48) and diff.gpus_added == diff.gpus_removed == {}
    assert (diff.pp.before, diff.pp.after) == (2, 1) and not diff.same_configuration
    [pool] = pool_diff(staged.rows, flat.rows)
    assert pool.status == "changed" and "pp 2 → 1" in pool.summary() and (pool.gpus.before, pool.gpus.after) == (48, 48)

    ep, tensor_split = _shape(tp=8, pp=1, ep=8, replicas=2), _shape(tp=8, pp=1, ep=1, replicas=2)
    diff = plan_diff(ep, tensor_split, before_now_usd_per_hour=ep.cost_usd_per_hour)
    assert not diff.same_configuration and diff.ep.changed
    [pool] = pool_diff(ep.rows, tensor_split.rows)
    assert pool.summary() == "mixed: ep 8 → 1"
