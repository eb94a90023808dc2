"""The deployment operations the routes call: create a deployment and plan it at once, adopt a
plan, re-plan with the hysteresis decision, re-check a stored plan against today's catalog.
Translates stored JSON and catalog records into planner values (planner/diff.py) and back; the
plans themselves come from the plan service (api/plan_service.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from api.disagg_plans import stored_link
from api.inputs import engine_gpus, priced
from api.plan_service import DEFAULT_SOLVER_TIME_LIMIT_S, Runner, create_plan, run_directly, template_of
from api.schemas.classes import is_classes_plan
from api.schemas.deployments import (
    DeploymentPut,
    HysteresisSpec,
    ReplanRequest,
    check_read,
    diff_read,
    reasons_read,
)
from api.schemas.plans import PlanRequest
from api.schemas.prices import price_overrides
from api.schemas.workload import BatchWorkloadSpec
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.deployments import Deployments, StoredDeployment
from catalog.errors import NotFoundError
from catalog.plans import Plans, StoredPlan
from catalog.repository import Catalog
from planner.diff import (
    Check,
    DeployedPool,
    DeployedPrefixCache,
    DeployedRow,
    DeployedSpeculation,
    Levers,
    PlanningContext,
    PlanShape,
    ShapeRow,
    change_reasons,
    check_plan,
    check_pools,
    decide,
    plan_diff,
    unavailable,
)
from planner.errors import PlannerInputError
from planner.specs import Efficiency, GpuSpec
from planner.units import HOURS_PER_MONTH


def put_deployment(
    name: str,
    body: DeploymentPut,
    catalog: Catalog,
    *,
    if_version: int | None,
    run: Runner = run_directly,
    solver_time_limit_s: float = DEFAULT_SOLVER_TIME_LIMIT_S,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
) -> tuple[dict[str, Any], bool]:
    """Create the deployment (and plan it at once) or replace its settings; (DeploymentRead JSON, created)."""
    request = body.plan_request(name)
    session = catalog.session  # the request's transaction: the deployment and its first plan commit together
    _, created = Deployments(session).save(
        name=name, request=template_of(request), hysteresis=body.hysteresis.model_dump(mode="json"), if_version=if_version
    )
    if created:
        content = create_plan(
            request, catalog, run=run, solver_time_limit_s=solver_time_limit_s, default_provider=default_provider
        )
        Deployments(session).adopt(name, content["id"])
    return deployment_read(Deployments(session), Plans(session), Deployments(session).get(name)), created


def deployment_read(deployments: Deployments, plans: Plans, deployment: StoredDeployment) -> dict[str, Any]:
    current = plans.get(deployment.current_plan_id).response if deployment.current_plan_id else None
    return {
        "name": deployment.name,
        "settings": deployment.request,
        "hysteresis": deployment.hysteresis,
        "current_plan_id": deployment.current_plan_id,
        "current_plan": current,
        "plans_total": deployments.history(deployment.name, limit=1).total,
        "version": deployment.version,
        "created_at": deployment.created_at,
        "updated_at": deployment.updated_at,
    }


def _main_pool(response: dict[str, Any]) -> dict[str, Any]:
    """A class plan's pool the summaries name: the one with the most GPUs (the first of equals)."""
    return max(response["pools"], key=_pool_gpus)


def _pool_gpus(pool: dict[str, Any]) -> int:
    """A stored pool's or row's GPUs: replicas × tp × pp (a plan stored before pools carried pp: 1)."""
    return int(pool["replicas"] * pool["tp"] * pool.get("pp", 1))


def _layout(record: dict[str, Any]) -> tuple[int, int]:
    """A stored row's or pool's (pp, ep), 1 each for a plan stored before they were reported."""
    return int(record.get("pp", 1)), int(record.get("ep", 1))


def _headline(response: dict[str, Any]) -> dict[str, Any]:
    """What a summary or a history row shows of a plan: a one-workload plan's `plan` block, or for a
    class plan its largest pool's configuration with replicas and GPUs summed over its pools."""
    if not is_classes_plan(response):
        decision = response["plan"]
        return {
            "gpu": decision["gpu"],
            "tp": decision["tp"],
            "replicas": decision["replicas"],
            "gpus_total": decision["gpus_total"],
            "precision": decision["precision"],
            "batch_limit": decision["batch_limit"],
            "topology": decision.get("topology", "aggregated"),
            "pools": decision.get("pools") or [],
            "arrangement": None,
            "cost_usd_per_hour": response["cost"]["usd_per_hour"],
            "cost_usd_per_month": response["cost"]["usd_per_month"],
            "cost_usd_per_million_output_tokens": response["cost"]["usd_per_million_output_tokens"],
        }
    main = _main_pool(response)
    return {
        "gpu": main["gpu"],
        "tp": main["tp"],
        "replicas": sum(p["replicas"] for p in response["pools"]),
        "gpus_total": sum(_pool_gpus(p) for p in response["pools"]),  # replicas × tp × pp per pool
        "precision": main["precision"],
        "batch_limit": main["batch_limit"],
        "topology": "aggregated",  # class plans arrange aggregated pools only
        "pools": [
            {
                "role": "mixed",
                "gpu": p["gpu"],
                "tp": p["tp"],
                "pp": _layout(p)[0],
                "ep": _layout(p)[1],
                "replicas": p["replicas"],
                "batch_limit": p["batch_limit"],
                "chunk_tokens": p["chunk_tokens"],
                "precision": p["precision"],
            }
            for p in response["pools"]
        ],
        "arrangement": response["arrangement"]["chosen"],
        "cost_usd_per_hour": response["cost_usd_per_hour"],
        "cost_usd_per_month": response["cost_usd_per_hour"] * HOURS_PER_MONTH,  # $/h × 730 h
        "cost_usd_per_million_output_tokens": None,  # a class plan reports no per-token cost
    }


def deployment_summary(plans: Plans, deployment: StoredDeployment) -> dict[str, Any]:
    plan = plans.get(deployment.current_plan_id).response if deployment.current_plan_id else None
    shown = (
        "gpu",
        "replicas",
        "gpus_total",
        "topology",
        "arrangement",
        "cost_usd_per_hour",
        "cost_usd_per_month",
        "cost_usd_per_million_output_tokens",
    )
    headline = _headline(plan) if plan else {}
    return {
        "name": deployment.name,
        "current_plan_id": deployment.current_plan_id,
        **{key: headline.get(key) for key in shown},
        "version": deployment.version,
        "updated_at": deployment.updated_at,
    }


def _arrival_rate_rps(request: dict[str, Any]) -> float:
    """The plan's arrival rate: a class plan's summed over its classes."""
    if "classes" in request:
        return float(sum(k["arrival_rate_rps"] for k in request["classes"]))
    return float(request["workload"]["arrival_rate_rps"])


def history_item(plan: StoredPlan, current_id: str | None) -> dict[str, Any]:
    headline = _headline(plan.response)
    precision = headline.pop("precision")
    return {
        "id": plan.id,
        "created_at": plan.created_at,
        "current": plan.id == current_id,
        "catalog_version": plan.catalog_version,
        "arrival_rate_rps": _arrival_rate_rps(plan.request),
        **headline,
        "precision": f"{precision['weights']}/{precision['kv_cache']}",
    }


# --- stored plan JSON → planner values ----------------------------------------------------------------


def _rows_json(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's rows, the largest (by offered rate) first; a single-configuration plan has one."""
    decision = response["plan"]
    if decision.get("fleet"):
        return sorted(decision["fleet"], key=lambda r: -r["offered_rps"])
    return [
        {**decision, "gpus": decision["gpus_total"], "offered_rps": None, "cost_usd_per_hour": response["cost"]["usd_per_hour"]}
    ]


def _disaggregated(response: dict[str, Any]) -> bool:
    return bool(response["plan"].get("topology") == "disaggregated")


def plan_shape(response: dict[str, Any]) -> PlanShape:
    """What the plan deploys: its rows (mixed pools), or a disaggregated plan's prefill and decode pools."""
    if _disaggregated(response):
        pools = tuple(
            ShapeRow(
                role=p["role"],
                gpu=p["gpu"],
                tp=p["tp"],
                pp=_layout(p)[0],
                ep=_layout(p)[1],
                replicas=p["replicas"],
                weights_precision=p["precision"]["weights"],
                kv_precision=p["precision"]["kv_cache"],
                batch_limit=p["batch_limit"],
                chunk_tokens=p["chunk_tokens"],
            )
            for p in response["plan"]["pools"]
        )
        return PlanShape(rows=pools, cost_usd_per_hour=response["cost"]["usd_per_hour"], topology="disaggregated")
    rows = tuple(
        ShapeRow(
            gpu=r["gpu"],
            tp=r["tp"],
            pp=_layout(r)[0],
            ep=_layout(r)[1],
            replicas=r["replicas"],
            weights_precision=r["precision"]["weights"],
            kv_precision=r["precision"]["kv_cache"],
            batch_limit=r["batch_limit"],
            chunk_tokens=r["chunk_tokens"],
        )
        for r in _rows_json(response)
    )
    return PlanShape(rows=rows, cost_usd_per_hour=response["cost"]["usd_per_hour"])


def prices_then(response: dict[str, Any]) -> dict[str, float]:
    """On-demand $/GPU-h the plan was made with: the prices its cost reports, else (plans stored
    before prices were reported) from its rows and its per-GPU alternatives (cost ÷ GPUs)."""
    prices: dict[str, float] = {}
    if response.get("cost", {}).get("prices") or _disaggregated(response):
        return {price["gpu"]: price["price_usd_per_hour"] for price in response["cost"]["prices"]}
    for alternative in response.get("justification", {}).get("alternatives", []):
        if alternative.get("kind") == "gpu" and alternative.get("cost_usd_per_hour") and alternative.get("gpus"):
            prices[alternative["name"]] = alternative["cost_usd_per_hour"] / alternative["gpus"]
    for row in _rows_json(response):
        if row["gpus"]:
            prices[row["gpu"]] = row["cost_usd_per_hour"] / row["gpus"]
    return prices


def _priced_spec(catalog: Catalog, slug: str, request: PlanRequest, default_provider: str, engine: str | None = None) -> GpuSpec:
    """Today's spec of `slug` at the request's provider's price (its override on top), at its profile under
    `engine` when the plan was priced on one (api/inputs.py engine_gpus); NotFoundError when the GPU, the
    profile or its price at that provider is gone, PlannerInputError when the engine no longer runs on it."""
    provider = request.provider or default_provider
    spec = catalog.gpu_spec(slug, request.efficiency_profile)
    pricing = priced(catalog, [spec], provider, price_overrides(request.prices))
    if engine is None:
        return pricing.specs[0]
    on_engine = engine_gpus(catalog, pricing.specs, engine, request.efficiency_profile)[0]
    if not on_engine:
        raise PlannerInputError(f"{engine} does not run on {slug}", field="engine", engine=engine)
    return on_engine[0]


def _engine(response: dict[str, Any], slug: str | None = None) -> str | None:
    """The engine a stored plan was priced `slug` on (plan.engine; null: the engine-agnostic calibration), at the
    release generation its profile named (`engine.profiles[]`: "trt-llm@0.14"), so that a plan priced on an older
    generation is re-read on that generation rather than on the newest; the bare engine where the profile was a
    fallback or names no generation (the same documented fallback is taken again)."""
    engine = (response.get("plan") or {}).get("engine")
    if not isinstance(engine, str):
        return None
    for profile in (response.get("engine") or {}).get("profiles") or []:
        if (
            profile.get("gpu") == slug
            and profile.get("engine") == engine
            and profile.get("generation")
            and not profile.get("fallback")
        ):
            return f"{engine}@{profile['generation']}"
    return engine


def deployed_rows(
    response: dict[str, Any], catalog: Catalog, request: PlanRequest, default_provider: str = DEFAULT_PRICE_PROVIDER
) -> tuple[DeployedRow, ...]:
    """The plan's rows with today's GPU specs (the request's provider's prices, efficiencies);
    NotFoundError when a GPU, profile, price or quantization left the catalog."""
    rows = _rows_json(response)
    total = sum(r["offered_rps"] for r in rows) if rows[0]["offered_rps"] is not None else None
    return tuple(
        DeployedRow(
            gpu=_priced_spec(catalog, r["gpu"], request, default_provider, _engine(response, r["gpu"])),
            precision=catalog.precision(r["precision"]["weights"], r["precision"]["kv_cache"]),
            tp=r["tp"],
            pp=_layout(r)[0],
            ep=_layout(r)[1],
            replicas=r["replicas"],
            batch_limit=r["batch_limit"],
            chunk_tokens=r["chunk_tokens"],
            traffic_share=1.0 if total is None else r["offered_rps"] / total,
        )
        for r in rows
    )


def deployed_levers(response: dict[str, Any], planned: PlanRequest, catalog: Catalog) -> Levers:
    """The speculative decoding and prefix cache a stored plan deploys (`plan.speculative`,
    `plan.prefix_caching`), its draft model (if any) read from today's catalog by the name the
    plan's own request pinned; NotFoundError when that model left the catalog."""
    decision = response["plan"]
    drafted, cached = decision.get("speculative"), decision.get("prefix_caching")
    speculation = None
    if drafted is not None:
        pin = planned.constraints.pin
        draft = None
        if drafted["method"] == "draft_model":
            if pin is None or pin.draft_model is None:
                raise PlannerInputError(
                    "the plan speculates with a draft model its request does not name", field="pin.draft_model"
                )
            draft = catalog.model_spec(pin.draft_model)
        speculation = DeployedSpeculation(
            method=drafted["method"],
            draft_tokens=drafted["draft_tokens"],
            acceptance_rate=drafted["acceptance_rate"],
            draft_model=draft,
        )
    prefix = None if cached is None else DeployedPrefixCache(cache_tokens=cached["cache_tokens"], routing=cached["routing"])
    return Levers(speculation=speculation, prefix_cache=prefix)


def _check(
    response: dict[str, Any],
    request: PlanRequest,
    catalog: Catalog,
    rate_factor: float = 1.0,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    *,
    planned: PlanRequest | None = None,
) -> Check:
    """The stored plan `response` (made from `planned`, default `request`) at `request`'s workload × `rate_factor`
    and its SLOs, with the plan's levers (deployed_levers), on today's catalog."""
    workload = request.traffic()
    workload = workload.at_rate(workload.arrival_rate_rps * rate_factor)
    try:
        model = catalog.model_spec(request.model)
        if _disaggregated(response):  # the pools under planner/disagg.py's model, the KV over the plans' link
            prefill, decode = deployed_pools(response, catalog, request, default_provider)
            return check_pools(
                prefill, decode, model, workload, request.targets(), link=stored_link(response, prefill.gpu, decode.gpu)
            )
        rows = deployed_rows(response, catalog, request, default_provider)
        levers = deployed_levers(response, planned or request, catalog)
    except (NotFoundError, PlannerInputError) as exc:
        return unavailable(workload.arrival_rate_rps, f"the plan cannot be evaluated on today's catalog: {exc.detail}")
    return check_plan(rows, model, workload, request.targets(), levers)


def deployed_pools(
    response: dict[str, Any], catalog: Catalog, request: PlanRequest, default_provider: str = DEFAULT_PRICE_PROVIDER
) -> tuple[DeployedPool, DeployedPool]:
    """A disaggregated plan's prefill and decode pools with today's GPU specs; NotFoundError as deployed_rows."""
    by_role = {p["role"]: p for p in response["plan"]["pools"]}
    prefill, decode = (
        DeployedPool(
            role=role,
            gpu=_priced_spec(catalog, by_role[role]["gpu"], request, default_provider, _engine(response, by_role[role]["gpu"])),
            precision=catalog.precision(by_role[role]["precision"]["weights"], by_role[role]["precision"]["kv_cache"]),
            tp=by_role[role]["tp"],
            pp=_layout(by_role[role])[0],
            ep=_layout(by_role[role])[1],
            replicas=by_role[role]["replicas"],
            batch_limit=by_role[role]["batch_limit"],
        )
        for role in ("prefill", "decode")
    )
    return prefill, decode


def efficiencies_then(response: dict[str, Any]) -> dict[str, Efficiency]:
    found = {}
    for gpu, values in response.get("provenance", {}).get("efficiencies", {}).items():
        try:
            found[gpu] = Efficiency(**values)
        except (TypeError, ValueError):
            continue  # a stored shape this version does not know: not comparable
    return found


def _context(
    request: PlanRequest, catalog_version: int, prices: dict[str, float], efficiencies: dict[str, Efficiency]
) -> PlanningContext:
    return PlanningContext(
        workload=request.traffic(),
        slo=request.targets(),
        constraints=request.constraints.model_dump(mode="json"),
        catalog_version=catalog_version,
        prices_usd_per_gpu_hour=prices,
        efficiencies=efficiencies,
        model_slug=request.model,
    )


def catalog_now(
    catalog: Catalog,
    gpus: list[str],
    request: PlanRequest,
    default_provider: str,
    engine: str | None | Callable[[str], str | None] = None,
) -> tuple[dict[str, float], dict[str, Efficiency]]:
    """Each GPU's price and efficiency today, on `engine` (one for all, or each GPU's own: `_engine`)."""
    prices: dict[str, float] = {}
    efficiencies: dict[str, Efficiency] = {}
    for slug in dict.fromkeys(gpus):
        try:
            spec = _priced_spec(catalog, slug, request, default_provider, engine(slug) if callable(engine) else engine)
        except (NotFoundError, PlannerInputError):
            continue
        prices[slug] = spec.price_usd_per_hour_on_demand
        efficiencies[slug] = spec.efficiency
    return prices, efficiencies


# --- re-plan and recheck ----------------------------------------------------------------------------------


def _replan_request(template: dict[str, Any], name: str, body: ReplanRequest) -> PlanRequest:
    merged = dict(template)
    if body.workload is not None:
        merged["workload"] = body.workload.model_dump(mode="json")
    if body.arrival_rate_rps is not None:
        merged["workload"] = {**merged["workload"], "arrival_rate_rps": body.arrival_rate_rps}
    if body.slo is not None:
        merged["slo"] = body.slo.model_dump(mode="json")
    if body.constraints is not None:
        merged["constraints"] = body.constraints.model_dump(mode="json")
    if body.verify is not None:
        merged["verify"] = body.verify
    return PlanRequest.model_validate({**merged, "name": name})


def replan(
    name: str,
    body: ReplanRequest,
    catalog: Catalog,
    *,
    run: Runner = run_directly,
    solver_time_limit_s: float = DEFAULT_SOLVER_TIME_LIMIT_S,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
) -> dict[str, Any]:
    """Plan the deployment again with what changed, diff it against the current plan and decide
    with the deployment's hysteresis; the ReplanResponse JSON (a class deployment's: the
    ClassesReplanResponse JSON of api/classes_replan.py)."""
    session = catalog.session
    deployments = Deployments(session)
    deployment = deployments.get(name)
    if "classes" in deployment.request:  # a class deployment: its classes planned again (api/classes_replan.py)
        from api.classes_replan import replan_classes  # it reads this module's catalog helpers: imported here, not above

        return replan_classes(
            deployment, body, catalog, run=run, solver_time_limit_s=solver_time_limit_s, default_provider=default_provider
        )
    if body.for_classes():
        raise PlannerInputError(
            f"deployment {name} plans one workload: give workload, arrival_rate_rps or slo, not classes or class_rates_rps "
            "(POST /v1/plans with its name and classes makes it a class deployment)",
            field="classes",
        )
    if deployment.current_plan_id is not None and is_classes_plan(Plans(session).get(deployment.current_plan_id).response):
        raise PlannerInputError(
            f"deployment {name}'s plan in force is a class plan but its settings are one workload's (a PUT replaced them): "
            "POST /v1/plans with its name makes a one-workload plan its current plan",
            field="workload",
        )
    request = _replan_request(deployment.request, name, body)
    hysteresis_spec = HysteresisSpec.model_validate(deployment.hysteresis)
    hysteresis = hysteresis_spec.to_hysteresis()
    new = create_plan(request, catalog, run=run, solver_time_limit_s=solver_time_limit_s, default_provider=default_provider)
    if deployment.current_plan_id is None:  # created by PUT whose first plan failed: nothing to keep
        deployments.adopt(name, new["id"], request=template_of(request))
        current = Plans(session).get(new["id"])
    else:
        current = Plans(session).get(deployment.current_plan_id)
    current_request = PlanRequest.model_validate(current.request)

    # the current plan judged by the new request's workload and SLO, on today's catalog
    at_rate = _check(current.response, request, catalog, default_provider=default_provider, planned=current_request)
    with_margin = _check(
        current.response, request, catalog, 1.0 + hysteresis.headroom_margin, default_provider, planned=current_request
    )
    before, after = plan_shape(current.response), plan_shape(new)
    before_now = at_rate.cost_usd_per_hour
    diff = plan_diff(before, after, before_now_usd_per_hour=before_now)
    involved = [r.gpu for r in before.rows] + [r.gpu for r in after.rows]
    prices_now, efficiencies_now = catalog_now(catalog, involved, request, default_provider, lambda slug: _engine(new, slug))
    reasons = change_reasons(
        _context(current_request, current.catalog_version, prices_then(current.response), efficiencies_then(current.response)),
        _context(request, new["provenance"]["catalog_version"], prices_now, efficiencies_now),
        gpus_involved=involved,
    )
    decision = decide(at_rate=at_rate, with_margin=with_margin, diff=diff, hysteresis=hysteresis)
    if current.id == new["id"]:
        decision_changed, reason = True, "the deployment had no plan in force; the new plan is adopted"
    else:
        decision_changed, reason = decision.changed, decision.reason
    if decision_changed:
        deployments.adopt(name, new["id"], request=template_of(request))
    else:
        deployments.update_request(name, template_of(request))
    return {
        "deployment": name,
        "changed": decision_changed,
        "reason": reason,
        "current": current.id,
        "adopted": new["id"] if decision_changed else current.id,
        "plan": new,
        "diff": diff_read(diff, reasons),
        "current_check": {"at_new_rate": check_read(at_rate), "with_margin": check_read(with_margin)},
        "hysteresis": hysteresis_spec.model_dump(mode="json"),
        "saving_usd_per_hour": None if math.isnan(before_now) else decision.saving_usd_per_hour,
        "threshold_usd_per_hour": decision.threshold_usd_per_hour,
    }


def recheck(plan_id: str, catalog: Catalog, *, default_provider: str = DEFAULT_PRICE_PROVIDER) -> dict[str, Any]:
    """Whether a stored plan still holds at its own workload and SLOs on today's catalog (at its
    request's provider's prices, else `default_provider`'s); the RecheckResponse JSON."""
    stored = Plans(catalog.session).get(plan_id)
    if "classes" in stored.request:  # its pools at its classes, simulated again (api/classes_replan.py)
        from api.classes_replan import recheck_classes  # it reads this module's catalog helpers: imported here, not above

        return recheck_classes(stored, catalog, default_provider=default_provider)
    request = PlanRequest.model_validate(stored.request)
    if isinstance(request.workload, BatchWorkloadSpec):
        raise PlannerInputError("a batch job's plan has no SLO to recheck: plan the job again", constraint="workload.kind")
    check = _check(stored.response, request, catalog, default_provider=default_provider)
    shape = plan_shape(stored.response)
    gpus = [r.gpu for r in shape.rows]
    prices_now, efficiencies_now = catalog_now(
        catalog, gpus, request, default_provider, lambda slug: _engine(stored.response, slug)
    )
    version_now = catalog.catalog_version()
    changes = change_reasons(
        _context(request, stored.catalog_version, prices_then(stored.response), efficiencies_then(stored.response)),
        _context(request, version_now, prices_now, efficiencies_now),
        gpus_involved=gpus,
    )
    then = shape.cost_usd_per_hour
    now = None if check.cost_usd_per_hour != check.cost_usd_per_hour else check.cost_usd_per_hour
    holds = check.meets_slo
    summary = f"still holds: {check.summary}" if holds else f"no longer holds: {check.summary}"
    if now is not None and abs(now - then) > 1e-9 * max(then, 1.0):
        summary += f"; it costs ${now:.2f}/h now against ${then:.2f}/h when planned"
    return {
        "plan_id": stored.id,
        "holds": holds,
        "summary": summary,
        "check": check_read(check),
        "cost": {
            "then_usd_per_hour": then,
            "now_usd_per_hour": now,
            "change_usd_per_hour": None if now is None else now - then,
            "then_usd_per_month": then * HOURS_PER_MONTH,
            "now_usd_per_month": None if now is None else now * HOURS_PER_MONTH,
        },
        "catalog_version_then": stored.catalog_version,
        "catalog_version_now": version_now,
        "changes": reasons_read(changes),
        "checked_at": datetime.now(UTC),
    }
