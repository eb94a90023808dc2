"""Re-planning a class deployment (POST /v1/deployments/{name}/replan when its settings are a
classes request): plan its classes again with the new rates (or the same request), diff the new
class plan against the one in force pool by pool and class by class (planner/class_diff.py), and
adopt it by the rule of docs/traffic-classes.md ("Re-planning a class deployment")."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast

from api.classes_plans import create_classes_plan
from api.deployment_service import catalog_now, efficiencies_then
from api.inputs import planning_inputs
from api.plan_service import Runner
from api.schemas.classes import ClassesPlanRequest, is_classes_plan
from api.schemas.deployments import HysteresisSpec, ReplanRequest, class_diff_read, reasons_read
from api.schemas.plans import PlanRequest
from catalog.deployments import Deployments, StoredDeployment
from catalog.documents import StoredDocument
from catalog.plans import Plans
from catalog.repository import Catalog
from planner.class_check import ClassCheck, ClassPlanCheck, DeployedClassPool, check_class_plan
from planner.class_diff import (
    ClassesContext,
    ClassFigures,
    ClassPlanShape,
    ClassPoolShape,
    class_change_reasons,
    class_plan_diff,
    decide_classes,
)
from planner.diff import CatalogState, ShapeRow
from planner.errors import PlannerInputError
from planner.units import HOURS_PER_MONTH, MS_PER_S

#: The arrangement whose `deferred` pool rents its replicas only part of the day (planner/plan_classes.py):
#: its cost is not replicas × tp × price, so it gives no price per GPU-hour.
_DEFERRED = "deferred"


def is_class_deployment(deployment: StoredDeployment) -> bool:
    """Whether the deployment is planned from a classes request (its settings carry `classes`)."""
    return "classes" in deployment.request


def classes_replan_request(template: dict[str, Any], name: str, body: ReplanRequest) -> ClassesPlanRequest:
    """The deployment's classes request with what changed: new classes, new rates by class, constraints, verify."""
    merged = dict(template)
    if body.classes is not None:
        merged["classes"] = [k.model_dump(mode="json") for k in body.classes]
    if body.class_rates_rps is not None:
        known = [k["name"] for k in merged["classes"]]
        unknown = sorted(set(body.class_rates_rps) - set(known))
        if unknown:
            raise PlannerInputError(
                f"class_rates_rps names classes the deployment does not have: {', '.join(unknown)} "
                f"(it has {', '.join(known)}); give `classes` to add one",
                field="class_rates_rps",
            )
        merged["classes"] = [
            {**k, "arrival_rate_rps": body.class_rates_rps.get(k["name"], k["arrival_rate_rps"])} for k in merged["classes"]
        ]
    if body.constraints is not None:
        merged["constraints"] = body.constraints.model_dump(mode="json")
    if body.verify is not None:
        merged["verify"] = body.verify
    return ClassesPlanRequest.model_validate({**merged, "name": name})


def class_plan_shape(response: dict[str, Any], request: dict[str, Any]) -> ClassPlanShape:
    """What a stored class plan deploys and predicts, each class with the rate its request gave."""
    rates = {k["name"]: float(k["arrival_rate_rps"]) for k in request["classes"]}
    limits = {k["name"]: int(k["admission_limit"]) for k in response["classes"] if k.get("admission_limit") is not None}
    return ClassPlanShape(
        arrangement=response["arrangement"]["chosen"],
        pools=tuple(
            ClassPoolShape(
                name=p["name"],
                classes=tuple(p["classes"]),
                scheduling=p["scheduling"],
                row=ShapeRow(
                    gpu=p["gpu"],
                    tp=p["tp"],
                    pp=p.get("pp", 1),  # a plan stored before pools carried their stages: 1
                    ep=p.get("ep", 1),
                    replicas=p["replicas"],
                    weights_precision=p["precision"]["weights"],
                    kv_precision=p["precision"]["kv_cache"],
                    batch_limit=p["batch_limit"],
                    chunk_tokens=p["chunk_tokens"],
                ),
                admission_limits=tuple((n, limits[n]) for n in p["classes"] if n in limits),
            )
            for p in response["pools"]
        ),
        classes=tuple(
            ClassFigures(
                name=k["name"],
                pool=k["pool"],
                arrival_rate_rps=rates.get(k["name"], math.nan),
                percentile=k["percentile"],
                ttft_s=k["ttft_ms"] / MS_PER_S,
                tpot_s=k["tpot_ms"] / MS_PER_S,
                e2e_s=k["e2e_s"],
                meets_target=k["meets_target"],
                shed_fraction=k["shed_fraction"],
            )
            for k in response["classes"]
        ),
        cost_usd_per_hour=response["cost_usd_per_hour"],
    )


def prices_then(response: dict[str, Any]) -> dict[str, float]:
    """$/GPU-h the class plan was made with, from its pools' costs (cost ÷ GPUs), the deferred pool's aside."""
    return {
        p["gpu"]: p["cost_usd_per_hour"] / (p["replicas"] * p["tp"] * p.get("pp", 1))  # $/h ÷ GPUs (tp × pp a replica)
        for p in response["pools"]
        if not (response["arrangement"]["chosen"] == _DEFERRED and p["name"] == _DEFERRED) and p["replicas"] * p["tp"]
    }


def cost_now_usd_per_hour(response: dict[str, Any], then: dict[str, float], now: dict[str, float]) -> float:
    """The class plan's pools at today's prices: each pool's cost × (price now ÷ price then); NaN when a
    pool's GPU has no price then (a deferred pool's alone) or none now (it left the catalog)."""
    total = 0.0
    for pool in response["pools"]:
        gpu = pool["gpu"]
        if gpu not in then or gpu not in now:
            return math.nan
        total += pool["cost_usd_per_hour"] * now[gpu] / then[gpu]  # cost scaled by the price's change
    return total


def replan_classes(
    deployment: StoredDeployment,
    body: ReplanRequest,
    catalog: Catalog,
    *,
    run: Runner,
    solver_time_limit_s: float,
    default_provider: str,
) -> dict[str, Any]:
    """Plan the class deployment again, diff it against the plan in force and adopt it by the rule of
    planner/class_diff.py; the ClassesReplanResponse JSON."""
    name = deployment.name
    if body.for_one_workload():
        raise PlannerInputError(
            f"deployment {name} plans traffic classes: give class_rates_rps or classes, not workload, arrival_rate_rps "
            "or slo (each class carries its own target)",
            field="workload",
        )
    session = catalog.session
    deployments, plans = Deployments(session), Plans(session)
    current = plans.get(deployment.current_plan_id) if deployment.current_plan_id else None
    if current is not None and not is_classes_plan(current.response):
        raise PlannerInputError(
            f"deployment {name}'s settings are a classes request but its plan in force is a one-workload plan: "
            "POST /v1/plans with its name and the classes makes a class plan its current plan",
            field="classes",
        )
    request = classes_replan_request(deployment.request, name, body)
    template = request.model_dump(mode="json", exclude={"name"})
    hysteresis_spec = HysteresisSpec.model_validate(deployment.hysteresis)
    checkpoint = getattr(getattr(run, "__self__", None), "checkpoint", None)  # a route's deadline, as create_plan reads it
    new = create_classes_plan(
        request,
        catalog,
        run=run,
        solver_time_limit_s=solver_time_limit_s,
        default_provider=default_provider,
        checkpoint=checkpoint,
        adopt=False,
    )
    if current is None:  # no plan in force: nothing to keep
        deployments.adopt(name, new["id"], request=template)
        current = plans.get(new["id"])
    before, after = class_plan_shape(current.response, current.request), class_plan_shape(new, request.model_dump(mode="json"))
    involved = [p.row.gpu for p in before.pools] + [p.row.gpu for p in after.pools]
    as_planned = cast(PlanRequest, request)  # catalog_now reads provider, prices and efficiency_profile, which it carries
    prices_now, efficiencies_now = catalog_now(catalog, involved, as_planned, default_provider)
    then_prices = prices_then(current.response)
    diff = class_plan_diff(
        before, after, before_now_usd_per_hour=cost_now_usd_per_hour(current.response, then_prices, prices_now)
    )
    current_request = ClassesPlanRequest.model_validate(current.request)
    reasons = class_change_reasons(
        ClassesContext(
            classes=tuple(k.to_class() for k in current_request.classes),
            constraints=current_request.constraints.model_dump(mode="json"),
            model_slug=current_request.model,
            catalog=CatalogState(
                catalog_version=current.catalog_version,
                prices_usd_per_gpu_hour=then_prices,
                efficiencies=efficiencies_then(current.response),
            ),
        ),
        ClassesContext(
            classes=tuple(k.to_class() for k in request.classes),
            constraints=request.constraints.model_dump(mode="json"),
            model_slug=request.model,
            catalog=CatalogState(
                catalog_version=new["provenance"]["catalog_version"],
                prices_usd_per_gpu_hour=prices_now,
                efficiencies=efficiencies_now,
            ),
        ),
        gpus_involved=involved,
    )
    hysteresis = hysteresis_spec.to_hysteresis()
    checks: tuple[ClassPlanCheck, ClassPlanCheck] | None = None
    if current.id != new["id"]:  # the plan in force at the new classes' rates, and at (1 + headroom_margin) × them
        inputs, _pricing = planning_inputs(as_planned, catalog, default_provider=default_provider)
        classes = [k.to_class() for k in request.classes]
        pools, arrangement = deployed_pools(current.response), current.response["arrangement"]["chosen"]
        checks = (
            run(check_class_plan, arrangement, pools, classes, inputs),
            run(partial(check_class_plan, load_factor=1.0 + hysteresis.headroom_margin), arrangement, pools, classes, inputs),
        )
    decision = decide_classes(
        diff, hysteresis, at_rate=None if checks is None else checks[0], with_margin=None if checks is None else checks[1]
    )
    if current.id == new["id"]:
        changed, reason = True, "the deployment had no plan in force; the new plan is adopted"
    else:
        changed, reason = decision.changed, decision.reason
    if changed:
        deployments.adopt(name, new["id"], request=template)
    else:
        deployments.update_request(name, template)
    return {
        "deployment": name,
        "changed": changed,
        "reason": reason,
        "current": current.id,
        "adopted": new["id"] if changed else current.id,
        "plan": new,
        "diff": class_diff_read(diff, reasons),
        "hysteresis": hysteresis_spec.model_dump(mode="json"),
        "saving_usd_per_hour": decision.saving_usd_per_hour,
        "threshold_usd_per_hour": decision.threshold_usd_per_hour,
        "current_check": None
        if checks is None
        else {"at_new_rate": class_check_read(checks[0]), "with_margin": class_check_read(checks[1])},
    }


def deployed_pools(response: dict[str, Any]) -> list[DeployedClassPool]:
    """A stored class plan's pools as deployed, for the forward model (planner/class_check.py): each
    with the admission limit its classes were planned with (classes[].admission_limit, set by the
    shedding arrangement; a plan stored before it carried none)."""
    limits = {k["name"]: k["admission_limit"] for k in response["classes"] if k.get("admission_limit") is not None}
    return [
        DeployedClassPool(
            name=p["name"],
            classes=tuple(p["classes"]),
            scheduling=p["scheduling"],
            gpu=p["gpu"],
            tp=p["tp"],
            replicas=p["replicas"],
            batch_limit=p["batch_limit"],
            chunk_tokens=p["chunk_tokens"],
            weights_precision=p["precision"]["weights"],
            kv_precision=p["precision"]["kv_cache"],
            admission_limits={n: limits[n] for n in p["classes"] if n in limits},
            pp=p.get("pp", 1),
            ep=p.get("ep", 1),
        )
        for p in response["pools"]
    ]


def day_run_in_pool(response: dict[str, Any]) -> list[float] | None:
    """A stored deferred plan's day run: the background work it served on the interactive pool in each
    period (verification.periods), which the check simulates again; None when the plan was not verified."""
    periods = (response.get("verification") or {}).get("periods") or []
    return [float(p["background_in_pool_rps"]) for p in periods] or None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None or math.isnan(seconds) else seconds * MS_PER_S


def _s(seconds: float) -> float | None:
    return None if math.isnan(seconds) else seconds


def class_check_read(check: ClassPlanCheck) -> dict[str, Any]:
    """A ClassPlanCheckRead's JSON (api/schemas/deployments.py)."""
    return {
        "load_factor": check.load_factor,
        "meets_targets": check.meets_targets,
        "summary": check.summary,
        "simulated": check.simulated,
        "classes": [
            {
                "name": k.name,
                "pool": k.pool,
                "arrival_rate_rps": k.arrival_rate_rps,
                "percentile": k.percentile,
                "ttft_ms": _ms(k.ttft_s),
                "tpot_ms": _ms(k.tpot_s),
                "e2e_s": _s(k.e2e_s),
                "shed_fraction": k.shed_fraction,
                "utilisation": _s(k.utilisation),
                "simulated_ttft_p99_ms": _ms(k.simulated_ttft_p99_s),
                "simulated_tpot_p99_ms": _ms(k.simulated_tpot_p99_s),
                "simulated_e2e_p99_s": k.simulated_e2e_p99_s,
                "meets_target": k.meets_target,
                "checked": k.checked,
                "problem": k.problem,
                "simulated_shed_fraction": k.simulated_shed_fraction,
            }
            for k in check.classes
        ],
    }


def recheck_classes(stored: StoredDocument, catalog: Catalog, *, default_provider: str) -> dict[str, Any]:
    """Whether a stored class plan still holds at its own classes on today's catalog: its pools by the
    queueing model and simulated again (planner/class_check.py), its cost now against when planned (each
    pool's cost scaled by its GPU's price change), and what changed in the catalog for its GPUs; the
    ClassesRecheckResponse JSON."""
    request = ClassesPlanRequest.model_validate(stored.request)
    as_planned = cast(PlanRequest, request)  # planning_inputs and catalog_now read fields it carries
    inputs, _pricing = planning_inputs(as_planned, catalog, default_provider=default_provider)
    response = dict(stored.response)
    arrangement = response["arrangement"]["chosen"]
    check = check_class_plan(
        arrangement,
        deployed_pools(response),
        [k.to_class() for k in request.classes],
        inputs,
        simulated=True,
        seed=0,
        background_in_pool_rps=day_run_in_pool(response),
    )
    gpus = [p["gpu"] for p in response["pools"]]
    then_prices = prices_then(response)
    prices_now, efficiencies_now = catalog_now(catalog, gpus, as_planned, default_provider)
    now = cost_now_usd_per_hour(response, then_prices, prices_now)
    version_now = catalog.catalog_version()

    def context(state: CatalogState) -> ClassesContext:
        return ClassesContext(
            classes=tuple(k.to_class() for k in request.classes),
            constraints=request.constraints.model_dump(mode="json"),
            model_slug=request.model,
            catalog=state,
        )

    changes = class_change_reasons(
        context(CatalogState(catalog_version=stored.catalog_version, prices_usd_per_gpu_hour=then_prices,
                             efficiencies=efficiencies_then(response))),
        context(CatalogState(catalog_version=version_now, prices_usd_per_gpu_hour=prices_now, efficiencies=efficiencies_now)),
        gpus_involved=gpus,
    )  # fmt: skip
    then = float(response["cost_usd_per_hour"])
    holds = check.meets_targets and all(k.checked for k in check.classes if k.pool != "deferred")
    summary = f"still holds: {check.summary}" if holds else f"no longer holds: {check.summary}"
    known = not math.isnan(now)
    if known and abs(now - then) > 1e-9 * max(then, 1.0):
        summary += f"; it costs ${now:.2f}/h now against ${then:.2f}/h when planned"
    return {
        "plan_id": stored.id,
        "arrangement": arrangement,
        "holds": holds,
        "summary": summary,
        "check": class_check_read(check),
        "cost": {
            "then_usd_per_hour": then,
            "now_usd_per_hour": now if known else None,
            "change_usd_per_hour": now - then if known else None,
            "then_usd_per_month": then * HOURS_PER_MONTH,
            "now_usd_per_month": now * HOURS_PER_MONTH if known else None,
        },
        "catalog_version_then": stored.catalog_version,
        "catalog_version_now": version_now,
        "changes": reasons_read(changes),
        "checked_at": datetime.now(UTC),
    }


#: Load factors of a class plan's latency wall: 0.5× to 1.5× its classes' rates in steps of 0.05, wide enough
#: for the hysteresis margins (default 1.1×) and for a pool planned at ρ 0.75 (chat in the worked example of
#: docs/traffic-classes.md) to reach saturation (1/0.75 ≈ 1.33×).
WALL_LOAD_FACTORS: tuple[float, ...] = tuple(round(0.5 + 0.05 * i, 2) for i in range(21))


def class_wall_series(
    request_json: dict[str, Any], response: dict[str, Any], catalog: Catalog, *, default_provider: str
) -> dict[str, Any]:
    """Each class's figures at its percentile on a stored class plan's pools (the queueing model,
    planner/class_check.py) with every class's rate × each of WALL_LOAD_FACTORS, against the classes'
    summed rate: the series api/charts.py `class_wall_chart` draws. A class the model does not check
    (a deferred one) has no curve; a point where a pool has no steady state is null."""
    request = ClassesPlanRequest.model_validate(request_json)
    inputs, _pricing = planning_inputs(cast(PlanRequest, request), catalog, default_provider=default_provider)
    classes = [k.to_class() for k in request.classes]
    arrangement, pools = response["arrangement"]["chosen"], deployed_pools(response)
    checks = [check_class_plan(arrangement, pools, classes, inputs, load_factor=f) for f in WALL_LOAD_FACTORS]
    total = sum(k.arrival_rate_rps for k in classes)
    curves = []
    for index, k in enumerate(classes):
        points = [c.classes[index] for c in checks]
        if not any(p.checked for p in points):
            continue
        slo = k.own_slo

        def value(p: ClassCheck, seconds: float, factor: float) -> float | None:
            modelled = p.checked and p.problem is None and math.isfinite(seconds)
            return seconds * factor if modelled else None

        curves.append({
            "name": k.name, "pool": points[0].pool, "percentile": points[0].percentile,
            "ttft_ms": [value(p, p.ttft_s, MS_PER_S) for p in points],
            "tpot_ms": [value(p, p.tpot_s, MS_PER_S) for p in points],
            "e2e_s": [value(p, p.e2e_s, 1.0) for p in points],
            "slo": {key: target * factor for key, target, factor in
                    (("ttft_ms", slo.ttft_s, MS_PER_S), ("tpot_ms", slo.tpot_s, MS_PER_S), ("e2e_s", slo.e2e_s, 1.0))
                    if target is not None},
        })  # fmt: skip
    return {
        "load_factor": list(WALL_LOAD_FACTORS),
        "rate_rps": [total * f for f in WALL_LOAD_FACTORS],
        "plan_rate_rps": total,
        "classes": curves,
    }
