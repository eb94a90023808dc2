"""GET /v1/plans' items: a stored plan summarised from its stored request and response, so the list
needs no column beyond those the plan was stored with (and reads plans stored before it existed)."""

from __future__ import annotations

from typing import Any

from api.csv_export import prefix_columns, speculative_columns
from api.schemas.classes import is_classes_plan
from catalog.plans import StoredPlan
from planner.planning import HOURS_PER_MONTH


def _pool_shape(gpus: int, gpu: str, tp: int, replicas: int, role: str = "") -> str:
    """`8 × h100-sxm (tp 2, 4 replicas)`, with the pool's role after the GPU when it has one."""
    label = f"{gpu} {role}" if role else gpu
    return f"{gpus} × {label} (tp {tp}, {replicas} replica{'' if replicas == 1 else 's'})"


def plan_shape(decision: dict[str, Any]) -> str:
    """A plan's deployment in words: one aggregated shape, or a disaggregated plan's xPyD (x prefill and y decode
    replicas) and each pool (`1P2D: 2 × h100-sxm prefill (tp 2, 1 replica), 4 × a100-80gb-sxm decode (tp 2, 2
    replicas)`)."""
    pools = decision.get("pools") or []
    if decision.get("topology") != "disaggregated" or not pools:
        return _pool_shape(decision["gpus_total"], decision["gpu"], decision["tp"], decision["replicas"])
    by_role = {p["role"]: p for p in pools}
    prefill, decode = by_role["prefill"], by_role["decode"]
    xpyd = f"{prefill['replicas']}P{decode['replicas']}D"
    return f"{xpyd}: " + ", ".join(
        _pool_shape(p["tp"] * p["replicas"], p["gpu"], p["tp"], p["replicas"], p["role"]) for p in (prefill, decode)
    )


def lever_summary(request: dict[str, Any], decision: dict[str, Any]) -> dict[str, Any]:
    """The levers a plan pulled, as its list item's flat fields (the CSV's column names): the prefix cache
    (`plan.prefix_caching`) and the speculative decoding (`plan.speculative`); null where it pulls none and for
    plans stored before either existed."""
    prefix = prefix_columns(decision.get("prefix_caching"))
    speculative = decision.get("speculative")
    drafting = (speculative or {}).get("method") == "draft_model"
    pinned = ((request.get("constraints") or {}).get("pin") or {}).get("draft_model")  # as the plan's CSV reads it
    columns = speculative_columns(speculative, pinned if drafting else None)
    return {
        "prefix_cache_hit_rate": prefix["prefix_cache_hit_rate"],
        "prefix_cache_tokens": prefix["prefix_cache_tokens"],
        "prefix_cache_routing": prefix["prefix_cache_routing"],
        "speculative_method": columns["speculative_method"],
        "speculative_draft_tokens": columns["speculative_draft_tokens"],
        "speculative_draft_model": columns["speculative_draft_model"],
    }


def classes_summary(plan: StoredPlan) -> dict[str, Any]:
    """A class plan's PlanSummaryRead: its first pool's GPU, tp and precision (the interactive or shared
    pool), replicas and GPUs over all its pools, and the arrangement's cost."""
    pools = plan.response["pools"]
    first = pools[0]
    per_hour = plan.response["cost_usd_per_hour"]
    return {
        "id": plan.id,
        "name": plan.name,
        "created_at": plan.created_at,
        "catalog_version": plan.catalog_version,
        "model": plan.request["model"],
        "workload": "classes",
        "arrival_rate_rps": sum(k["arrival_rate_rps"] for k in plan.request["classes"]),
        "requests": None,
        "deadline_h": None,
        "gpu": first["gpu"],
        "tp": first["tp"],
        "replicas": sum(p["replicas"] for p in pools),
        "gpus_total": sum(p["tp"] * p["replicas"] for p in pools),
        "topology": "aggregated",
        "shape": "; ".join(_pool_shape(p["tp"] * p["replicas"], p["gpu"], p["tp"], p["replicas"]) for p in pools),
        "precision": f"{first['precision']['weights']}/{first['precision']['kv_cache']}",
        "cost_usd_per_hour": per_hour,
        "cost_usd_per_month": per_hour * HOURS_PER_MONTH,
        "job_cost_usd": None,
        **lever_summary({}, {}),  # a class plan's pools do not speculate or cache prefixes
    }


def plan_summary(plan: StoredPlan) -> dict[str, Any]:
    """The PlanSummaryRead of one stored plan. A request stored without `workload.kind` is
    interactive (the kind is not written back); a batch job's size is the response's `batch_job.requests`,
    which is also right for a job given as `total_tokens`."""
    if is_classes_plan(plan.response):
        return classes_summary(plan)
    decision = plan.response["plan"]
    cost = plan.response["cost"]
    batch = plan.response.get("batch_job")
    workload = plan.request["workload"]
    precision = decision["precision"]
    return {
        "id": plan.id,
        "name": plan.name,
        "created_at": plan.created_at,
        "catalog_version": plan.catalog_version,
        "model": plan.request["model"],
        "workload": "batch" if batch is not None else "interactive",
        "arrival_rate_rps": None if batch is not None else workload["arrival_rate_rps"],
        "requests": None if batch is None else batch["requests"],
        "deadline_h": None if batch is None else batch["deadline_h"],
        "gpu": decision["gpu"],
        "tp": decision["tp"],
        "replicas": decision["replicas"],
        "gpus_total": decision["gpus_total"],
        "topology": decision.get("topology", "aggregated"),  # plans stored before topologies are aggregated
        "shape": plan_shape(decision),
        "precision": f"{precision['weights']}/{precision['kv_cache']}",
        "cost_usd_per_hour": cost["usd_per_hour"],
        "cost_usd_per_month": cost["usd_per_month"],
        "job_cost_usd": None if batch is None else batch["cost_usd"],
        **lever_summary(plan.request, decision),
    }
