"""The what-if service (POST /v1/what-if): the cheapest plan at each point of a sweep over arrival
rates (and optionally SLO values or GPU types). The shape is every planning endpoint's: resolve the
specs from the catalog once (api/inputs.py), run the pure planner at every point under the
request's deadline, build the response. Nothing is stored: a sweep is a question, not a plan of
record. A long sweep runs as an operation instead: its points are units a task worker computes one
by one (`sweep_unit`, api/tasks.py), and the response is assembled from them (`operation_result`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Any, cast

from fastapi.exceptions import RequestValidationError

from api.batch_jobs import batch_plan_request, batch_sweep_points
from api.classes_plans import classes_base_request
from api.csv_export import prefix_columns, speculative_columns
from api.disagg_plans import topology_plan
from api.errors import RequestTimeoutError
from api.inputs import engine_inputs, engine_read, one_engine, planning_inputs
from api.observability import Deadline, MetricsRegistry
from api.operations import OperationQueue
from api.problems import problem_type_for
from api.rounding import rounded
from api.schemas.classes import ClassesPlanRequest
from api.schemas.plan_response import EngineRead, plan_response
from api.schemas.plans import PlanConstraintsSpec, PlanRequest
from api.schemas.what_if import (
    MAX_WHAT_IF_POINTS,
    WHAT_IF_CSV_COLUMNS,
    WhatIfPoint,
    WhatIfRequest,
    WhatIfResponse,
    too_many_points,
)
from api.schemas.workload import BatchWorkloadSpec, WorkloadSpec
from api.settings import Settings
from catalog.operations import StoredOperation
from catalog.prices import Pricing
from catalog.repository import Catalog
from planner.class_diff import ClassPlanShape, ClassPoolShape, class_plan_diff
from planner.diff import PlanShape, ShapeRow, pool_changes_summary
from planner.errors import HeadroomError
from planner.plan_classes import ClassesPlan, plan_classes
from planner.planning import PlanningInputs, PlanningRequest, PlanResult, plan_capacity
from planner.units import HOURS_PER_MONTH
from planner.workload import Slo

MS_PER_S = 1e3

#: What one point costs to plan, in process on this repository's 2-core machine: the mean of a
#: 20-point sweep of llama-3.1-70b over every GPU type of the reference catalog (verify false with
#: caches cold, then verify true), on a machine loaded about 3.5 (two engineers sharing it)
#: (`python -m bench.operations --per-point`, docs/operations.md). A sweep's estimate is its points
#: times this; past HEADROOM_ASYNC_THRESHOLD_S it runs as an operation. Narrower sweeps (one GPU
#: type, a small model) plan faster, so the estimate errs towards answering 202.
POINT_COST_S = {False: 0.40, True: 0.81}

METHOD = (
    "Each point is a full POST /v1/plans search (plan_capacity: candidates, branch and bound, MILP) at that point's "
    "rate, SLOs and GPU types; queueing-model predictions, {verified}. The planner's per-configuration caches (saturation "
    "rates, per-replica predictions) carry over between points, so later points are faster."
)

CLASSES_METHOD = (
    "Each point is a POST /v1/plans class plan (planner/plan_classes.py: shared FCFS, shared priority, segregated and, "
    "with day profiles, deferred arrangements compared) of the classes at that mix; queueing-model predictions, {verified}."
)


def _point(
    index: int,
    rate: float,
    slo: Slo,
    gpu: str | None,
    result: PlanResult | None,
    error: HeadroomError | None,
    plan_ms: float,
    verified: bool,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        **dict.fromkeys(WHAT_IF_CSV_COLUMNS), "currency": "USD",
        "point": index, "arrival_rate_rps": rate, "slo_percentile": slo.percentile,
        "slo_ttft_ms": None if slo.ttft_s is None else slo.ttft_s * MS_PER_S,
        "slo_tpot_ms": None if slo.tpot_s is None else slo.tpot_s * MS_PER_S,
        "slo_e2e_s": slo.e2e_s, "gpu_allowed": gpu, "feasible": result is not None, "plan_ms": plan_ms,
        "verified": verified and result is not None,
    }  # fmt: skip
    if result is None:
        kind = problem_type_for(error) if error is not None else None
        constraint = error.extensions.get("constraint") if isinstance(error, HeadroomError) else None
        return {**row, "infeasible_problem": kind.uri if kind else None,
                "infeasible_constraint": None if constraint is None else str(constraint),
                "infeasible_reason": error.detail if isinstance(error, HeadroomError) else None}  # fmt: skip
    main = result.row
    row["topology"] = "aggregated"
    predicted = result.predicted
    if predicted is None:
        raise ValueError("a what-if point needs the planner's predictions (PlanningRequest.explain)")
    return {
        **row,
        "gpu": main.gpu, "tp": main.tp, "replicas": result.replicas, "gpus_total": result.gpus_total,
        "weights_precision": main.weights_precision, "kv_cache_precision": main.kv_precision,
        "batch_limit": main.batch_limit, "chunk_tokens": main.chunk_tokens, "target_rho": result.target_rho,
        "fleet_rows": len(result.rows),
        "cost_usd_per_hour": result.cost_usd_per_hour,
        "cost_usd_per_month": result.cost_usd_per_hour * HOURS_PER_MONTH,  # $/h × 730 h
        "cost_usd_per_million_output_tokens": result.cost_usd_per_million_output_tokens,
        "ttft_p99_ms": _ms(predicted.ttft_s.p99), "tpot_p99_ms": _ms(predicted.tpot_s.p99),
        "e2e_p99_s": predicted.e2e_s.p99,
        "infeasible_problem": None, "infeasible_constraint": None, "infeasible_reason": None,
    }  # fmt: skip


def _pool_columns(response: dict[str, Any]) -> dict[str, Any]:
    """The point's topology and, for a disaggregated plan, each pool's columns (GPU, tp, replicas,
    precision, limit, ρ, binding, cost) from the plan response and its disaggregation section."""
    plan = response["plan"]
    columns: dict[str, Any] = {"topology": plan.get("topology", "aggregated")}
    if columns["topology"] != "disaggregated":
        return columns
    why = {p["role"]: p for p in (response.get("disaggregation") or {}).get("pools") or []}
    for pool in plan["pools"]:
        role = pool["role"]
        columns.update({
            f"{role}_gpu": pool["gpu"], f"{role}_tp": pool["tp"], f"{role}_replicas": pool["replicas"],
            f"{role}_precision": f"{pool['precision']['weights']}/{pool['precision']['kv_cache']}",
            f"{role}_rho": why.get(role, {}).get("rho"), f"{role}_binding": why.get(role, {}).get("binding"),
            f"{role}_cost_usd_per_hour": why.get(role, {}).get("cost_usd_per_hour"),
        })  # fmt: skip
        if role == "prefill":
            columns["prefill_chunk_tokens"] = pool["chunk_tokens"]
        else:
            columns["decode_batch_limit"] = pool["batch_limit"]
    return columns


def _response_point(row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """A feasible point from a plan response (constraints.topology `disaggregated` or `any`): the
    `plan` block's figures (a disaggregated plan's are its decode pool's, replicas and GPUs over both
    pools), its cost, its predicted p99s (a disaggregated plan's from its disaggregation section),
    and the pool columns."""
    plan, cost = response["plan"], response["cost"]
    section = response.get("disaggregation") or {}
    predicted = response.get("predicted")
    if predicted is not None:
        p99 = (predicted["ttft_ms"]["p99"], predicted["tpot_ms"]["p99"], predicted["e2e_s"]["p99"])
    else:
        p99 = (section.get("predicted_ttft_ms"), section.get("predicted_tpot_ms"), section.get("predicted_e2e_s"))
    disaggregated = plan.get("topology") == "disaggregated"
    verified = section.get("simulated_ttft_ms") is not None if disaggregated else response.get("verification") is not None
    return {
        **row,
        "gpu": plan["gpu"], "tp": plan["tp"], "replicas": plan["replicas"], "gpus_total": plan["gpus_total"],
        "weights_precision": plan["precision"]["weights"], "kv_cache_precision": plan["precision"]["kv_cache"],
        "batch_limit": plan["batch_limit"], "chunk_tokens": plan["chunk_tokens"], "target_rho": plan["target_rho"],
        "fleet_rows": len(plan["pools"]) if disaggregated else len(plan.get("fleet") or [plan]),
        "cost_usd_per_hour": cost["usd_per_hour"], "cost_usd_per_month": cost["usd_per_month"],
        "cost_usd_per_million_output_tokens": cost["usd_per_million_output_tokens"],
        "ttft_p99_ms": p99[0], "tpot_p99_ms": p99[1], "e2e_p99_s": p99[2],
        "verified": row["verified"] and verified,
        "infeasible_problem": None, "infeasible_constraint": None, "infeasible_reason": None,
        **_pool_columns(response),
    }  # fmt: skip


def _lever_columns(body: WhatIfRequest, result: PlanResult | None, answer: dict[str, Any] | None) -> dict[str, Any]:
    """The point's plan's speculative decoding and prefix cache, as the plan CSV's columns (empty without a plan or
    without the lever); the drafting catalog model is the request's pin.draft_model, as for a stored plan."""
    if result is not None:
        speculative = None if result.speculative is None else asdict(result.speculative)
        prefix = None if result.prefix_caching is None else asdict(result.prefix_caching)
    elif answer is not None:
        speculative, prefix = answer["plan"].get("speculative"), answer["plan"].get("prefix_caching")
    else:
        return {}
    pin = body.constraints.pin
    drafting = speculative is not None and speculative["method"] == "draft_model"
    draft_model = pin.draft_model if drafting and pin is not None else None
    return {**speculative_columns(speculative, draft_model), **prefix_columns(prefix)}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * MS_PER_S


def _inputs_for_gpus(
    body: WhatIfRequest, catalog: Catalog, default_provider: str
) -> tuple[PlanningInputs, Pricing, EngineRead | None]:
    """The planner's specs for the sweep, via the plans route's gathering (same 404s): the sweep's
    GPU types when it has them, else those `constraints.gpus` allows; on the request's engine, with
    the answer's `engine` section (None without one)."""
    constraints = body.constraints
    if body.sweep.gpus is not None:
        constraints = constraints.model_copy(update={"gpus": list(body.sweep.gpus)})
    if body.classes is not None:  # a class mix: the classes request's gathering (it carries the same fields)
        inputs, pricing = planning_inputs(
            cast(PlanRequest, _classes_request(body, 0, constraints)), catalog, default_provider=default_provider
        )
        return inputs, pricing, None
    shape = body.workload
    assert shape is not None, "WhatIfRequest gives a workload or classes (_workload_or_classes)"
    if isinstance(shape, BatchWorkloadSpec):  # a job's deadlines or sizes are swept (api/batch_jobs.py)
        inputs, pricing = planning_inputs(batch_plan_request(body, constraints), catalog, default_provider=default_provider)
        return _priced(body, catalog, inputs, pricing)
    as_plan = PlanRequest(
        model=body.model,
        workload=WorkloadSpec(arrival_rate_rps=body.sweep.rates_rps()[0], prompt_tokens=shape.prompt_tokens,
                              output_tokens=shape.output_tokens, arrival_cv=shape.arrival_cv),
        slo=body.slo, constraints=constraints, efficiency_profile=body.efficiency_profile, verify=body.verify,
        provider=body.provider, prices=body.prices,
    )  # fmt: skip
    inputs, pricing = planning_inputs(as_plan, catalog, default_provider=default_provider)
    return _priced(body, catalog, inputs, pricing)


def _priced(
    body: WhatIfRequest, catalog: Catalog, inputs: PlanningInputs, pricing: Pricing
) -> tuple[PlanningInputs, Pricing, EngineRead | None]:
    """Every point planned on the request's engine (`engine` narrowed by pin.engine, api/inputs.py one_engine): its
    GPUs at their engine profiles, and the answer's `engine` section naming each GPU's profile and generation."""
    engine = one_engine(body.engine, None if body.constraints.pin is None else body.constraints.pin.engine)
    if engine is None:
        return inputs, pricing, None
    inputs, choices = engine_inputs(catalog, body.efficiency_profile, inputs, engine)
    return inputs, pricing, engine_read(engine, [choices[g.slug] for g in inputs.gpus])


def _classes_request(body: WhatIfRequest, index: int, constraints: PlanConstraintsSpec | None = None) -> ClassesPlanRequest:
    """The POST /v1/plans class request of mix `index` (0-based): a dry run, so nothing is stored."""
    return ClassesPlanRequest(
        model=body.model, classes=body.classes_at(index), constraints=constraints or body.constraints,
        efficiency_profile=body.efficiency_profile, verify=body.verify, provider=body.provider, prices=body.prices,
        store=False,
    )  # fmt: skip


#: An operation's `kind` for a sweep (api/tasks.py runs it).
OPERATION_KIND = "what-if"


#: What one class mix point costs to plan: the two-class plan's p50 wall time in docs/traffic-classes.md
#: ("Plan latency", `python -m bench.classes_latency --runs 9`, 2026-12-04, the worked example on the
#: loaded 2-core machine): 402 ms unverified, 1,233 ms verified.
CLASS_POINT_COST_S = {False: 0.40, True: 1.23}


def estimated_sweep_s(body: WhatIfRequest) -> float:
    """How long the sweep is expected to take in process: its points × POINT_COST_S (a class mix's
    × CLASS_POINT_COST_S)."""
    per_point = CLASS_POINT_COST_S if body.classes is not None else POINT_COST_S
    return body.sweep.point_count() * per_point[body.verify]


def runs_as_operation(body: WhatIfRequest, settings: Settings, *, asked: bool) -> bool:
    """Whether the sweep is answered 202 and run as an operation: when the client asks (`Prefer:
    respond-async`), or when it is estimated to take longer than HEADROOM_ASYNC_THRESHOLD_S; else
    it is answered at once, and a sweep too large for that is a 422 saying how to ask."""
    if asked:
        return True
    points = body.sweep.point_count()
    if points > MAX_WHAT_IF_POINTS:
        raise RequestValidationError(
            [{"type": "value_error", "loc": ("body", "sweep"), "input": None,
              "msg": f"Value error, {too_many_points(points, MAX_WHAT_IF_POINTS, batch=isinstance(body.workload, BatchWorkloadSpec))}"}]
        )  # fmt: skip
    return estimated_sweep_s(body) > settings.async_threshold_s


def start_operation(body: WhatIfRequest, catalog: Catalog, settings: Settings, tasks: OperationQueue) -> StoredOperation:
    """Check the sweep's model, GPU types and profile now (404 as the synchronous route answers),
    then store it as a queued operation whose units the task workers compute."""
    _inputs_for_gpus(body, catalog, settings.default_price_provider)
    return tasks.submit(kind=OPERATION_KIND, request=operation_request(body, settings), units_total=sweep_unit_count(body))


def operation_request(body: WhatIfRequest, settings: Settings) -> dict[str, Any]:
    """What an operation stores to run the sweep later, anywhere: the body and the price provider
    the service would have used for it now."""
    return {"body": body.model_dump(mode="json"), "default_provider": settings.default_price_provider}


def operation_inputs(
    request: dict[str, Any], catalog: Catalog
) -> tuple[WhatIfRequest, PlanningInputs, Pricing, EngineRead | None]:
    """The stored sweep's body, the specs its points are planned with and its `engine` section (read once per worker
    and operation)."""
    body = WhatIfRequest.model_validate(request["body"])
    return (body, *_inputs_for_gpus(body, catalog, request["default_provider"]))


def operation_result(
    body: WhatIfRequest,
    inputs: PlanningInputs,
    pricing: Pricing,
    units: list[list[dict[str, Any]]],
    *,
    sweep_ms: float,
    engine: EngineRead | None = None,
) -> dict[str, Any]:
    """The WhatIfResponse of a sweep whose units task workers computed: the same as the synchronous
    route's but for `sweep_ms` (the operation's run time) and each point's own timings."""
    points = [point for unit in units for point in unit]
    answer = sweep_response(
        body, points, catalog_version=inputs.catalog_version, provider=pricing.provider, notes=list(pricing.notes),
        sweep_ms=sweep_ms, engine=engine,
    )  # fmt: skip
    return answer.model_dump(mode="json")


def sweep_unit_count(body: WhatIfRequest) -> int:
    """How many independent units the sweep's work splits into: one per point for traffic; one for
    a batch job's sweep (api/batch_jobs.py plans its points together)."""
    return 1 if isinstance(body.workload, BatchWorkloadSpec) else body.sweep.point_count()


def _axes(body: WhatIfRequest) -> list[tuple[str | None, Slo, float]]:
    """Every traffic point's (GPU type, SLO, rate): GPU types × SLO values × rates, rates fastest. (A
    class mix's points are GPU types × mixes, `_mix_axes`.)"""
    assert body.slo is not None, "WhatIfRequest requires an SLO for a traffic workload (_slo_for_traffic)"
    slos = [body.slo.to_slo()] if body.sweep.slo is None else [
        body.slo.model_copy(update={body.sweep.slo.metric: value}).to_slo() for value in body.sweep.slo.values
    ]  # fmt: skip
    gpu_axis: list[str | None] = list(body.sweep.gpus) if body.sweep.gpus is not None else [None]
    return [(gpu, slo, rate) for gpu in gpu_axis for slo in slos for rate in body.sweep.rates_rps()]


def sweep_points(
    body: WhatIfRequest, inputs: PlanningInputs, pricing: Pricing, *, solver_time_limit_s: float, deadline: Deadline
) -> list[dict[str, Any]]:
    """Each point's cheapest plan (or why none), GPU types × SLO values × rates, rates fastest. Pure
    planner work on specs already read, so the request's deadline can abandon it (api.observability)."""
    points: list[dict[str, Any]] = []
    for index in range(sweep_unit_count(body)):
        points += sweep_unit(body, inputs, pricing, index, solver_time_limit_s=solver_time_limit_s, deadline=deadline)
    return points


def sweep_unit(
    body: WhatIfRequest,
    inputs: PlanningInputs,
    pricing: Pricing,
    index: int,
    *,
    solver_time_limit_s: float,
    deadline: Deadline,
) -> list[dict[str, Any]]:
    """The points of unit `index` (sweep_unit_count): the one traffic point at that index, or a
    batch job's whole sweep. What a task worker computes (api/tasks.py)."""
    if isinstance(body.workload, BatchWorkloadSpec):  # a job's deadlines or sizes (api/batch_jobs.py)
        return batch_sweep_points(body, inputs, pricing, deadline=deadline)
    return [sweep_point(body, inputs, pricing, index, solver_time_limit_s=solver_time_limit_s, deadline=deadline)]


def sweep_point(
    body: WhatIfRequest,
    inputs: PlanningInputs,
    pricing: Pricing,
    index: int,
    *,
    solver_time_limit_s: float,
    deadline: Deadline,
) -> dict[str, Any]:
    """The cheapest plan (or why none) at traffic point `index` (0-based, in `_axes` order)."""
    workload = body.workload
    if body.classes is not None:
        return _mix_point(body, inputs, pricing, index, solver_time_limit_s=solver_time_limit_s, deadline=deadline)
    if workload is None or isinstance(workload, BatchWorkloadSpec):
        raise TypeError("a batch job's sweep has no traffic points: sweep_unit plans it whole")
    gpu, slo, rate = _axes(body)[index]
    if deadline.remaining_s() <= 0:
        raise RequestTimeoutError(timeout_s=deadline.timeout_s)  # stops an abandoned sweep between points
    point_inputs = inputs if gpu is None else replace(inputs, gpus=tuple(g for g in inputs.gpus if g.slug == gpu))
    point_started = time.perf_counter()
    # a point without a plan says why (its constraint and reason); the relaxation search a
    # single 422 runs (re-planning, seconds) is left to POST /v1/plans, so a sweep stays bounded
    request = PlanningRequest(
        workload=workload.to_workload(rate),
        slo=slo,
        constraints=body.constraints.to_constraints(),
        verify=body.verify,
        solver_time_limit_s=deadline.solver_time_limit_s(solver_time_limit_s),  # the one policy (api.settings)
        advise=False,
        checkpoint=deadline.checkpoint,
    )
    result: PlanResult | None = None
    error: HeadroomError | None = None
    answer: dict[str, Any] | None = None
    try:
        if body.constraints.topology == "aggregated":
            result = plan_capacity(request, point_inputs)
        else:  # separate pools (or the cheaper of the two): the plans route's own dispatch (api/disagg_plans.py)
            answer = _topology_answer(body, request, point_inputs, pricing, rate)
    except HeadroomError as exc:
        if problem_type_for(exc).status != 422:
            raise  # a solver that gave up is the service's failure, not an answer about this point
        error = exc
    plan_ms = (time.perf_counter() - point_started) * MS_PER_S
    point = _point(index + 1, rate, slo, gpu, result, error, plan_ms, body.verify)
    point["solve_ms"] = None
    if answer is not None:
        point = {**_response_point({**point, "feasible": True}, answer), "solve_ms": None}
    if result is not None:
        # provenance is None only on plans asked for without explanation; this request explains (the default)
        assert result.provenance is not None, "an explained plan carries its provenance"
        point["solve_ms"] = result.provenance.solve_ms
    point.update(_lever_columns(body, result, answer))
    point["provider"] = pricing.provider
    chosen = pricing.prices.get(point["gpu"]) if point["gpu"] is not None else None
    point["price_usd_per_gpu_hour"] = None if chosen is None else chosen.on_demand_usd_per_hour
    return point


def _mix_axes(body: WhatIfRequest) -> list[tuple[str | None, int]]:
    """Every class mix point's (GPU type, mix index): GPU types × mixes, mixes fastest."""
    gpu_axis: list[str | None] = list(body.sweep.gpus) if body.sweep.gpus is not None else [None]
    return [(gpu, mix) for gpu in gpu_axis for mix in range(body.sweep.mix_points())]


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.2f}/h"


def _mix_point(
    body: WhatIfRequest,
    inputs: PlanningInputs,
    pricing: Pricing,
    index: int,
    *,
    solver_time_limit_s: float,
    deadline: Deadline,
) -> dict[str, Any]:
    """The cheapest arrangement (or why none) at class mix point `index` (0-based, in `_mix_axes` order):
    plan_classes on the classes at that mix, as POST /v1/plans with those classes plans them."""
    gpu, mix = _mix_axes(body)[index]
    if deadline.remaining_s() <= 0:
        raise RequestTimeoutError(timeout_s=deadline.timeout_s)  # stops an abandoned sweep between points
    point_inputs = inputs if gpu is None else replace(inputs, gpus=tuple(g for g in inputs.gpus if g.slug == gpu))
    request = _classes_request(body, mix)
    base = classes_base_request(
        request, solver_time_limit_s=deadline.solver_time_limit_s(solver_time_limit_s), checkpoint=deadline.checkpoint
    )
    rates = {k.name: k.arrival_rate_rps for k in request.classes}
    started = time.perf_counter()
    plan: ClassesPlan | None = None
    error: HeadroomError | None = None
    try:
        plan = plan_classes([k.to_class() for k in request.classes], point_inputs, base)
    except HeadroomError as exc:
        if problem_type_for(exc).status != 422:
            raise  # a solver that gave up is the service's failure, not an answer about this point
        error = exc
    plan_ms = (time.perf_counter() - started) * MS_PER_S
    row: dict[str, Any] = {
        **dict.fromkeys(WHAT_IF_CSV_COLUMNS), "currency": "USD", "point": index + 1,
        "arrival_rate_rps": sum(rates.values()), "gpu_allowed": gpu, "feasible": plan is not None, "plan_ms": plan_ms,
        "verified": body.verify and plan is not None, "provider": pricing.provider, "solve_ms": None,
    }  # fmt: skip
    if plan is None:
        kind = problem_type_for(error) if error is not None else None
        constraint = error.extensions.get("constraint") if error is not None else None
        return {**row, "infeasible_problem": kind.uri if kind else None,
                "infeasible_constraint": None if constraint is None else str(constraint),
                "infeasible_reason": error.detail if error is not None else None}  # fmt: skip
    largest = max(plan.pools, key=lambda p: (p.replicas * p.tp, p.cost_usd_per_hour))  # as the plan list shows a class plan
    cost = sum(p.cost_usd_per_hour for p in plan.pools)
    chosen = pricing.prices.get(largest.gpu)
    classes = [
        {"name": k.name, "arrival_rate_rps": rates[k.name], "pool": k.arrangement_pool, "percentile": k.percentile,
         "ttft_ms": k.ttft_s * MS_PER_S, "tpot_ms": k.tpot_s * MS_PER_S, "e2e_s": k.e2e_s,
         "meets_target": k.meets_target, "shed_fraction": k.shed_fraction}
        for k in plan.classes
    ]  # fmt: skip
    return {
        **row,
        "gpu": largest.gpu, "tp": largest.tp, "replicas": sum(p.replicas for p in plan.pools),
        "gpus_total": sum(p.replicas * p.tp for p in plan.pools), "fleet_rows": len(plan.pools),
        "weights_precision": largest.weights_precision, "kv_cache_precision": largest.kv_precision,
        "cost_usd_per_hour": cost, "cost_usd_per_month": cost * HOURS_PER_MONTH,  # $/h × 730 h
        "price_usd_per_gpu_hour": None if chosen is None else chosen.on_demand_usd_per_hour,
        "arrangement": plan.chosen,
        "arrangements_compared": "; ".join(f"{c.name} {_money(c.cost_usd_per_hour)}" for c in plan.compared),
        "class_figures": "; ".join(
            f"{k['name']} {k['arrival_rate_rps']:g} req/s on {k['pool']}: p{k['percentile']:g} TTFT {k['ttft_ms']:.4g} ms, "
            f"TPOT {k['tpot_ms']:.4g} ms, E2E {k['e2e_s']:.4g} s" + ("" if k["meets_target"] else " (misses its target)")
            for k in classes
        ),
        "classes": classes,
        # not a column: each pool as deployed, for the change from the point before (`_with_pool_changes`)
        MIX_POOLS: {"arrangement": plan.chosen, "pools": [
            {"name": p.name, "classes": list(p.classes), "scheduling": p.scheduling, "gpu": p.gpu, "tp": p.tp,
             "replicas": p.replicas, "weights_precision": p.weights_precision, "kv_precision": p.kv_precision,
             "batch_limit": p.batch_limit, "chunk_tokens": p.chunk_tokens}
            for p in plan.pools
        ]},
    }  # fmt: skip


#: A class mix point's key for its arrangement and pools as deployed (not a WhatIfPoint field: dropped from the answer).
MIX_POOLS = "mix_pools"


def _mix_shape(point: dict[str, Any]) -> ClassPlanShape:
    """A feasible class mix point's arrangement and pools, for planner/class_diff.py's pool diff."""
    mix = point[MIX_POOLS]
    pools = tuple(
        ClassPoolShape(
            name=p["name"],
            classes=tuple(p["classes"]),
            scheduling="priority" if p["scheduling"] == "priority" else "fcfs",
            row=ShapeRow(gpu=p["gpu"], tp=p["tp"], replicas=p["replicas"], weights_precision=p["weights_precision"],
                         kv_precision=p["kv_precision"], batch_limit=p["batch_limit"], chunk_tokens=p["chunk_tokens"]),
        )
        for p in mix["pools"]
    )  # fmt: skip
    return ClassPlanShape(arrangement=mix["arrangement"], pools=pools, classes=(), cost_usd_per_hour=point["cost_usd_per_hour"])


def _topology_answer(
    body: WhatIfRequest, request: PlanningRequest, inputs: PlanningInputs, pricing: Pricing, rate: float
) -> dict[str, Any]:
    """The plan response POST /v1/plans gives at this point for constraints.topology `disaggregated` or `any`."""
    shape = body.workload
    if shape is None or isinstance(shape, BatchWorkloadSpec):  # refused by WhatIfRequest: a job's sweep is aggregated
        raise TypeError("a batch job's sweep plans aggregated replicas")
    as_plan = PlanRequest(
        model=body.model,
        workload=WorkloadSpec(arrival_rate_rps=rate, prompt_tokens=shape.prompt_tokens,
                              output_tokens=shape.output_tokens, arrival_cv=shape.arrival_cv,
                              prefix_reuse=shape.prefix_reuse),  # `any` plans the pools only without it
        slo=body.slo, constraints=body.constraints, efficiency_profile=body.efficiency_profile, verify=body.verify,
        provider=body.provider, prices=body.prices, store=False,
    )  # fmt: skip

    def aggregated() -> dict[str, Any]:
        return plan_response(
            "what-if",
            None,
            plan_capacity(request, inputs),
            "",
            prices=[price.read() for price in pricing.prices.values()],
            price_notes=pricing.notes,
            calibration_grades={g.slug: g.calibration_grade for g in inputs.gpus},
        )

    return topology_plan(
        as_plan,
        request,
        inputs,
        pricing,
        plan_id="what-if",
        created_at="",
        run=lambda fn, *args: fn(*args),
        aggregated=aggregated,
    )


def _shape(point: dict[str, Any]) -> PlanShape:
    """A feasible point's pools, for the change from the point before."""
    if point["topology"] == "disaggregated":
        rows = tuple(
            ShapeRow(
                role=role,
                gpu=point[f"{role}_gpu"],
                tp=point[f"{role}_tp"],
                replicas=point[f"{role}_replicas"],
                weights_precision=point[f"{role}_precision"].split("/")[0],
                kv_precision=point[f"{role}_precision"].split("/")[1],
                batch_limit=point["decode_batch_limit"] if role == "decode" else None,
                chunk_tokens=point["prefill_chunk_tokens"] if role == "prefill" else None,
            )
            for role in ("prefill", "decode")
        )
        return PlanShape(rows=rows, cost_usd_per_hour=point["cost_usd_per_hour"], topology="disaggregated")
    row = ShapeRow(
        gpu=point["gpu"],
        tp=point["tp"],
        replicas=point["replicas"],
        weights_precision=point["weights_precision"],
        kv_precision=point["kv_cache_precision"],
        batch_limit=point["batch_limit"],
        chunk_tokens=point["chunk_tokens"],
    )
    return PlanShape(rows=(row,), cost_usd_per_hour=point["cost_usd_per_hour"])


def _with_pool_changes(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each point with what changed in its pools from the point before (both feasible traffic points)."""
    out = []
    for before, point in zip([None, *points[:-1]], points, strict=True):
        changes = None
        if before is not None and before["feasible"] and point["feasible"] and point.get("topology") and before.get("topology"):
            changes = pool_changes_summary(_shape(before), _shape(point))
        elif before is not None and before.get(MIX_POOLS) and point.get(MIX_POOLS):  # two class mix points with plans
            diff = class_plan_diff(_mix_shape(before), _mix_shape(point), before_now_usd_per_hour=before["cost_usd_per_hour"])
            changes = "same pools" if diff.same_configuration else diff.pools_summary()
        out.append({**point, "pool_changes": changes})
    return out


def what_if_sweep(
    body: WhatIfRequest, catalog: Catalog, settings: Settings, deadline: Deadline, metrics: MetricsRegistry
) -> WhatIfResponse:
    """The sweep's points, served rounded (api/rounding.py)."""
    started = time.perf_counter()
    inputs, pricing, engine = _inputs_for_gpus(body, catalog, settings.default_price_provider)
    points = deadline.run(
        sweep_points, body, inputs, pricing, solver_time_limit_s=settings.solver_time_limit_s, deadline=deadline
    )
    metrics.record_plan_computed(sum(1 for p in points if p["feasible"]))
    for point in points:
        if point["solve_ms"] is not None:
            metrics.record_solver_time(point["solve_ms"] / MS_PER_S)
    return sweep_response(
        body, points, catalog_version=inputs.catalog_version, provider=pricing.provider, notes=list(pricing.notes),
        sweep_ms=(time.perf_counter() - started) * MS_PER_S, engine=engine,
    )  # fmt: skip


def sweep_response(
    body: WhatIfRequest,
    points: list[dict[str, Any]],
    *,
    catalog_version: int,
    provider: str,
    notes: list[str],
    sweep_ms: float,
    engine: EngineRead | None = None,
) -> WhatIfResponse:
    """The response to the sweep from its points (computed here or stored by task workers), served
    rounded (api/rounding.py); each point says what changed in its pools from the one before."""
    points = _with_pool_changes(points)
    answer = WhatIfResponse(
        model=body.model, efficiency_profile=body.efficiency_profile, catalog_version=catalog_version,
        provider=provider, notes=notes, hours_per_month=HOURS_PER_MONTH, verify=body.verify,
        method=(CLASSES_METHOD if body.classes is not None else METHOD).format(
            verified="each plan verified in the simulator" if body.verify else "not verified in the simulator"
        ),
        points_total=len(points), points_feasible=sum(1 for p in points if p["feasible"]),
        sweep_ms=sweep_ms, engine=engine,
        points=[WhatIfPoint.model_validate({k: v for k, v in p.items() if k != "solve_ms"}) for p in points],
    )  # fmt: skip
    return WhatIfResponse.model_validate(rounded(answer.model_dump(mode="json")))  # served rounded (api/rounding.py)
