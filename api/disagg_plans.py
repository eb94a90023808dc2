"""POST /v1/plans with constraints.topology `disaggregated` or `any`: the pools, their justification, the other topology.

`disaggregated` answers planner/plan_disagg.py's cheapest pair of pools within the request's limits;
`any` also plans the aggregated deployment (the ordinary plan response) and answers the cheaper of
the two, the other kept as the `disaggregation.alternative` with its cost or why it has none. What
the pools cannot honour (`pools_not_planned`) is a 422 for `disaggregated` (api/schemas/plans.py);
for `any` the aggregated arm is planned alone and the alternative says "separate pools not planned".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from api.rounding import rounded
from api.schemas.plan_response import PlanResponse
from api.schemas.plan_result import ParallelSectionRead, provenance_read
from api.schemas.plans import PlanRequest
from catalog.prices import Pricing
from planner.disagg import DEFAULT_SCALE_OUT, KvLink, intra_node_link, kv_transfer_bytes, scale_out_link
from planner.errors import HeadroomError, InfeasiblePlanError, PlannerInputError
from planner.pipeline import parallel_summary
from planner.plan_disagg import (
    DisaggPlan,
    PoolCandidate,
    disaggregated_cost_lower_bound,
    plan_disaggregated,
    pool_parallel_sections,
    pool_refusals,
    verify_disaggregated,
)
from planner.plan_result import Provenance
from planner.planning import HOURS_PER_MONTH, PlanningInputs, PlanningRequest
from planner.specs import GpuSpec
from planner.units import MS_PER_S, SECONDS_PER_HOUR

#: The default scale-out network between nodes, for GPUs whose catalog row has none (migration 0013); a pair of
#: pools crosses the slower of its two GPUs' NICs (planner/disagg.py scale_out_link). Pools of one GPU type that fit
#: one node may sit there and use its scale-up link (NVLink, Infinity Fabric) instead: planner/plan_disagg.py decides.
LINK = DEFAULT_SCALE_OUT
INTERFERENCE = (
    "decode steps never carry a prefill: TPOT is the decode batch's own step, not stretched by prompts sharing "
    "the step (chunked prefill) or stalled behind them; prefill runs unbatched with decodes at the compute roofline"
)
#: `any` skips the pools' search when their cost lower bound reaches the aggregated cost (the same winner, no
#: saving figure); bench/topology_regimes.py turns it off, since its map prints every cell's saving.
SKIP_BOUNDED_SEARCH = True
SOLVER = "planner/plan_disagg.py: per-pool candidates at each TTFT split, MILP over one prefill and one decode candidate"


NOT_PLANNED = "separate pools not planned: "
SPARE = (
    "each pool carries one spare replica for constraints.n_plus_one (pools[].spare_replicas), priced in its cost; "
    "the predicted and simulated figures are with both pools' spares lost at once"
)


def stored_link(response: dict[str, Any], gpu: GpuSpec, decode_gpu: GpuSpec | None = None) -> KvLink:
    """The link a stored disaggregated plan's KV crosses, with today's catalog figures for `gpu` (its prefill pool's)
    and `decode_gpu` (its decode pool's; `gpu` when not given): the node's scale-up link when the plan put both pools
    in one node (its transfer.link names that link), else the slower of the two GPUs' scale-out NICs; a re-check
    then predicts the pools as they were planned."""
    transfer = (response.get("disaggregation") or {}).get("transfer") or {}
    node = intra_node_link(gpu)
    if str(transfer.get("link", "")).startswith(node.name):
        return node
    return scale_out_link(gpu, gpu if decode_gpu is None else decode_gpu, LINK)


def pools_not_planned(body: PlanRequest) -> list[str]:
    """What in `body` separate pools cannot honour, one `<field>: why` each (empty: the pools can be planned)."""
    reasons = pool_refusals(body.constraints.to_constraints())
    if getattr(body.workload, "prefix_reuse", None) is not None:
        reasons.append("workload.prefix_reuse: the pools' planner has no prefix cache")
    return reasons


def _pool(c: PoolCandidate) -> dict[str, Any]:
    return {
        "role": c.role,
        "gpu": c.gpu,
        "tp": c.tp,
        "pp": c.pp,
        "replicas": c.replicas,
        "batch_limit": c.batch_limit,
        "chunk_tokens": c.chunk_tokens,
        "precision": {"weights": c.weights, "kv_cache": c.kv_cache},
    }


def _section(
    plan: DisaggPlan | None,
    request: PlanningRequest,
    inputs: PlanningInputs,
    *,
    requested: str,
    chosen: str,
    why: str,
    saving: float | None,
    alternative: dict[str, Any] | None,
) -> dict[str, Any]:
    q = request.slo.percentile / 100.0
    section: dict[str, Any] = {
        "requested": requested,
        "chosen": chosen,
        "why": why,
        "saving_fraction": saving,
        "ttft_prefill_fraction": None,
        "pools": [],
        "transfer": None,
        "interference_removed": INTERFERENCE,
        "percentile": request.slo.percentile,
        "predicted_ttft_ms": None,
        "predicted_tpot_ms": None,
        "predicted_e2e_s": None,
        "simulated_ttft_ms": None,
        "simulated_tpot_ms": None,
        "simulated_e2e_s": None,
        "verify_added_replicas": 0,
        "alternative": alternative,
    }
    if plan is None:
        return section
    pred = plan.prediction
    p_q = request.workload.prompt_tokens.quantile(q)
    if plan.prefill.spare_replicas or plan.decode.spare_replicas:
        why = f"{why}; {SPARE}"
    parallel = pool_parallel_sections(
        plan, gpus=inputs.gpus, model=inputs.model, precisions=inputs.precisions, workload=request.workload
    )
    staged = [f"{c.role} pool {parallel_summary(s)}" for c, s in zip((plan.prefill, plan.decode), parallel, strict=True) if s]
    if staged:  # as an aggregated plan's justification.parallel, named in the explanation (pools[].parallel)
        why = f"{why}; in pipeline stages (pools[].parallel): " + "; ".join(staged)
    section["why"] = why
    section.update(
        ttft_prefill_fraction=plan.ttft_prefill_fraction,
        pools=[
            {
                "role": c.role,
                "rho": c.rho,
                "binding": c.binding,
                "cost_usd_per_hour": c.cost_usd_per_hour,
                "spare_replicas": c.spare_replicas,
                "parallel": None if s is None else ParallelSectionRead.model_validate(s).model_dump(mode="json"),
            }
            for c, s in zip((plan.prefill, plan.decode), parallel, strict=True)
        ],
        transfer={
            "link": f"{plan.link.name}: {plan.link_why}" if plan.link_why else plan.link.name,  # the link and why
            "link_source": (
                f"the default scale-out network (the catalog has none for {plan.prefill.gpu} or {plan.decode.gpu}): "
                f"{plan.link.source}"
                if plan.link == LINK
                else plan.link.source
            ),
            "bytes_per_s_per_gpu": plan.link.bytes_per_s_per_gpu,
            "links": min(plan.prefill.gpus_per_replica, plan.decode.gpus_per_replica),  # tp·pp GPUs hold a replica's KV
            "kv_bytes_per_token": plan.kv_bytes_per_token,
            "p99_prompt_bytes": kv_transfer_bytes(p_q, plan.kv_bytes_per_token),
            "p99_ms": pred.transfer_q_s * MS_PER_S,
            "mean_ms": pred.transfer_mean_s * MS_PER_S,
        },
        predicted_ttft_ms=pred.ttft_s * MS_PER_S,
        predicted_tpot_ms=pred.tpot_s * MS_PER_S,
        predicted_e2e_s=pred.e2e_s,
        verify_added_replicas=plan.verify_added_replicas,
    )
    if plan.simulated_s is not None:
        ttft, tpot, e2e = plan.simulated_s
        section.update(simulated_ttft_ms=ttft * MS_PER_S, simulated_tpot_ms=tpot * MS_PER_S, simulated_e2e_s=e2e)
    return section


def _disaggregated_body(
    plan: DisaggPlan,
    body: PlanRequest,
    request: PlanningRequest,
    inputs: PlanningInputs,
    pricing: Pricing,
    *,
    plan_id: str,
    created_at: str,
    plan_ms: float,
    section: dict[str, Any],
    engine: str | None = None,
) -> dict[str, Any]:
    p, d = plan.prefill, plan.decode
    per_hour = plan.cost_usd_per_hour
    output_per_hour = request.workload.arrival_rate_rps * request.workload.output_tokens.mean * SECONDS_PER_HOUR
    used = {p.gpu, d.gpu}
    provenance = Provenance(
        catalog_version=inputs.catalog_version,
        solver=SOLVER,
        status="optimal" if plan.simulated_s is not None else "optimal (unverified)",
        mip_gap=None,
        solve_ms=0.0,
        plan_ms=plan_ms,
        efficiency_profile=inputs.efficiency_profile,
        efficiencies={g.slug: g.efficiency for g in inputs.gpus if g.slug in used},
        created_at=created_at,
    )
    answer: dict[str, Any] = {
        "id": plan_id,
        "name": body.name,
        "plan": {
            "gpu": d.gpu,
            "tp": d.tp,
            "pp": d.pp,
            "replicas": p.replicas + d.replicas,
            "gpus_total": plan.gpus,
            "precision": {"weights": d.weights, "kv_cache": d.kv_cache},
            "batch_limit": d.batch_limit or 1,
            "chunk_tokens": None,
            "target_rho": max(p.rho, d.rho),
            "fleet": None,
            # the engine the pools were priced on (the request's `engine`), else the pinned one: the deploy target
            "engine": engine if engine is not None else None if body.constraints.pin is None else body.constraints.pin.engine,
            "topology": "disaggregated",
            "pools": [_pool(p), _pool(d)],
        },
        "cost": {
            "usd_per_hour": per_hour,
            "usd_per_month": per_hour * HOURS_PER_MONTH,
            "usd_per_million_output_tokens": per_hour / output_per_hour * 1e6,  # $/h ÷ tokens/h × 1e6
            "currency": "USD",
            "prices": [price.read() for slug, price in pricing.prices.items() if slug in used],
            "notes": list(pricing.notes),
        },
        "predicted": None,
        "justification": None,
        "verification": None,
        "provenance": provenance_read(provenance).model_dump(mode="json"),
        "calibration_grades": {g.slug: g.calibration_grade for g in inputs.gpus if g.slug in used},
        "warnings": [],
        "disaggregation": section,
    }
    read: dict[str, Any] = rounded(PlanResponse.model_validate(answer).model_dump(mode="json"))
    return read


@dataclass(frozen=True, slots=True)
class _Skipped:
    """`any` left the disaggregated search out: a lower bound on its cost already reaches the aggregated plan's."""

    why: str
    reason: str


def _aggregated_first(
    requested: str,
    request: PlanningRequest,
    inputs: PlanningInputs,
    *,
    run: Callable[..., Any],
    aggregated: Callable[[], dict[str, Any]],
) -> tuple[Callable[[], dict[str, Any]], _Skipped | None]:
    """For `any` with a TTFT target: the aggregated plan first (kept, so `aggregated()` answers it again, or its
    InfeasiblePlanError), then the pools' cost lower bound (planner/plan_disagg.py: each pool at ρ = 1, no
    queueing); when that bound is not below the aggregated cost, separate pools cannot win (`any` answers them
    only when strictly cheaper, and verification only adds replicas), so their search is skipped."""
    if requested != "any" or request.slo.ttft_s is None or not SKIP_BOUNDED_SEARCH:  # no TTFT target: the search refuses at once
        return aggregated, None
    try:
        agg = aggregated()
    except InfeasiblePlanError as error:
        failed = error

        def again() -> dict[str, Any]:
            raise failed

        return again, None
    agg_cost = float(agg["cost"]["usd_per_hour"])
    bound = run(
        lambda: disaggregated_cost_lower_bound(
            gpus=inputs.gpus,
            model=inputs.model,
            precisions=inputs.precisions,
            tps=request.tp_degrees,
            workload=request.workload,
            slo=request.slo,
            link=LINK,
            pp_degrees=request.pp_degrees,
        )
    ).usd_per_hour
    if bound < agg_cost:
        return lambda: agg, None
    at_least = "no setting can be one of the pools" if bound == float("inf") else f"they cost at least {bound:.2f} $/h"
    return lambda: agg, _Skipped(
        why=(
            f"one pool costs {agg_cost:.2f} $/h and separate prefill and decode pools cannot cost less ({at_least}: "
            "each pool at its fewest replicas, at utilisation 1 with no queueing), so they were not searched"
        ),
        reason=f"not searched: {at_least}, not less than the aggregated {agg_cost:.2f} $/h",
    )


def topology_plan(
    body: PlanRequest,
    request: PlanningRequest,
    inputs: PlanningInputs,
    pricing: Pricing,
    *,
    plan_id: str,
    created_at: str,
    run: Callable[..., Any],
    aggregated: Callable[[], dict[str, Any]],
    engine: str | None = None,
) -> dict[str, Any]:
    """The response for topology `disaggregated` or `any` (`aggregated()` builds the ordinary plan response;
    `engine`, the bare engine the inputs were priced on, is the disaggregated plan's `plan.engine`)."""
    requested = body.constraints.topology
    started = time.perf_counter()
    not_planned = pools_not_planned(body)
    skipped: _Skipped | None = None
    if not not_planned:
        aggregated, skipped = _aggregated_first(requested, request, inputs, run=run, aggregated=aggregated)
    disagg: DisaggPlan | None = None
    disagg_error: HeadroomError | None = None
    search = run if skipped is None else (lambda _: None)  # a skipped search answers no plan and no error
    if not_planned:  # `disaggregated` was refused by the request's validation; `any` plans the aggregated arm alone
        disagg_error = PlannerInputError(NOT_PLANNED + "; ".join(not_planned))
    else:
        try:
            disagg = search(
                lambda: plan_disaggregated(
                    gpus=inputs.gpus,
                    model=inputs.model,
                    precisions=inputs.precisions,
                    tps=request.tp_degrees,
                    workload=request.workload,
                    slo=request.slo,
                    link=LINK,
                    verify=request.verify and requested == "disaggregated",
                    seed=request.seed,
                    constraints=request.constraints,
                    pp_degrees=request.pp_degrees,
                )
            )
        except HeadroomError as error:  # e.g. no TTFT target to split, a bad pin, no pair within the limits
            if requested == "disaggregated":
                raise
            disagg_error = error  # `any` (the default): the pools' failure never blocks the aggregated answer
    plan_ms = (time.perf_counter() - started) * MS_PER_S
    if requested == "disaggregated":
        if disagg is None:
            raise InfeasiblePlanError("no disaggregated plan")  # unreachable: its error was raised above
        why = "constraints.topology is disaggregated: the cheapest prefill and decode pools meeting the SLOs"
        section = _section(
            disagg, request, inputs, requested=requested, chosen="disaggregated", why=why, saving=None, alternative=None
        )
        return _disaggregated_body(
            disagg,
            body,
            request,
            inputs,
            pricing,
            plan_id=plan_id,
            created_at=created_at,
            plan_ms=plan_ms,
            section=section,
            engine=engine,
        )
    agg: dict[str, Any] | None = None
    agg_error: InfeasiblePlanError | None = None
    try:
        agg = aggregated()
    except InfeasiblePlanError as error:
        agg_error = error
    if agg is None and disagg is None:
        raise agg_error or InfeasiblePlanError("no plan of either topology")
    agg_cost = None if agg is None else float(agg["cost"]["usd_per_hour"])
    if disagg is not None and request.verify and (agg_cost is None or disagg.cost_usd_per_hour < agg_cost):
        # only the winner is simulated; the replicas verification adds may hand the win back to aggregation
        try:
            disagg = run(lambda: verify_disaggregated(disagg, request.workload, request.slo, seed=request.seed))
        except InfeasiblePlanError as error:  # the replicas it needed break a limit, or it still misses
            if agg is None:
                raise
            disagg, disagg_error = None, error
        plan_ms = (time.perf_counter() - started) * MS_PER_S
    if disagg is not None and (agg_cost is None or disagg.cost_usd_per_hour < agg_cost):
        saving = None if agg_cost is None else 1.0 - disagg.cost_usd_per_hour / agg_cost
        why = (
            "no aggregated deployment meets the SLOs"
            if agg_cost is None
            else f"separate pools cost {disagg.cost_usd_per_hour:.2f} $/h against {agg_cost:.2f} $/h aggregated"
        )
        alternative = {
            "topology": "aggregated",
            "cost_usd_per_hour": agg_cost,
            "reason": str(agg_error.detail if agg_error is not None else f"costs {agg_cost:.2f} $/h, more than the pools"),
        }
        section = _section(
            disagg, request, inputs, requested="any", chosen="disaggregated", why=why, saving=saving, alternative=alternative
        )
        return _disaggregated_body(
            disagg,
            body,
            request,
            inputs,
            pricing,
            plan_id=plan_id,
            created_at=created_at,
            plan_ms=plan_ms,
            section=section,
            engine=engine,
        )
    if agg is None or agg_cost is None:  # unreachable: without an aggregated plan the disaggregated one was answered
        raise InfeasiblePlanError("no plan of either topology")
    saving = None if disagg is None else 1.0 - agg_cost / disagg.cost_usd_per_hour
    why = (
        "no disaggregated deployment meets the SLOs"
        if disagg is None
        else f"one pool costs {agg_cost:.2f} $/h against {disagg.cost_usd_per_hour:.2f} $/h for separate prefill and decode pools"
    )
    alternative = {
        "topology": "disaggregated",
        "cost_usd_per_hour": None if disagg is None else disagg.cost_usd_per_hour,
        "reason": str(disagg_error.detail if disagg_error is not None else "costs more than the aggregated plan"),
    }
    if skipped is not None:
        why, alternative["reason"] = skipped.why, skipped.reason
    agg["disaggregation"] = rounded(
        _section(disagg, request, inputs, requested="any", chosen="aggregated", why=why, saving=saving, alternative=alternative)
    )
    return agg
