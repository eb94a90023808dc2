"""The plan service: POST /v1/plans' work, and the plan a deployment's PUT or re-plan makes.
Its shape is every planning endpoint's: resolve the specs from the catalog (api/inputs.py), run
the pure planner function under the request's deadline, store the answer, build the response.
Deployments (adopting, re-planning with hysteresis, re-checking) are api/deployment_service.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from api.batch_jobs import create_batch_plan
from api.disagg_plans import topology_plan
from api.inputs import check_engines, engine_inputs, engine_profile_read, planning_inputs
from api.schemas.plan_response import PlanResponse, plan_response
from api.schemas.plans import PlanRequest
from api.schemas.workload import BatchWorkloadSpec
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.deployments import Deployments
from catalog.plans import Plans, new_plan_id
from catalog.repository import Catalog
from planner.engines import EngineChoice, allowed_engines, narrowed_by_pin, parse_engine
from planner.errors import (
    HeadroomError,
    InfeasiblePlanError,
    ModelDoesNotFitError,
    PlannerInputError,
    UnstableLoadError,
    UnsupportedConfigurationError,
)
from planner.planning import PlanningInputs, PlanningRequest, plan_capacity

#: Runs pure planning work: `run(fn, *args)` → fn(*args), e.g. bounded by a request's deadline.
Runner = Callable[..., Any]
#: The planner's own default solver limit (planner.planning.PlanningRequest), for callers without settings.
DEFAULT_SOLVER_TIME_LIMIT_S = cast(float, PlanningRequest.__dataclass_fields__["solver_time_limit_s"].default)


def template_of(body: PlanRequest) -> dict[str, Any]:
    """The plan request a deployment is re-planned from (its name is the deployment's)."""
    return body.model_dump(mode="json", exclude={"name"})


def run_directly(fn: Callable[..., Any], /, *args: Any) -> Any:
    return fn(*args)


def create_plan(
    body: PlanRequest,
    catalog: Catalog,
    *,
    run: Runner = run_directly,
    solver_time_limit_s: float = DEFAULT_SOLVER_TIME_LIMIT_S,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Plan `body` on today's catalog and store it (as POST /v1/plans does); the response JSON.
    `run(plan_capacity, request, inputs)` does the pure planning work (a route passes its deadline's `run`).
    With engines allowed (`engine`, or constraints.pin.engine), each is planned on its engine profiles
    and the cheapest answers, the others becoming `engine` alternatives (planner/engines.py)."""
    engines = requested_engines(body)
    if engines is not None:
        check_engines(catalog, engines)
    inputs, pricing = planning_inputs(body, catalog, default_provider=default_provider)
    if checkpoint is None:  # a route's `run` is its deadline's: the planner stops at its steps when that passes
        checkpoint = getattr(getattr(run, "__self__", None), "checkpoint", None)
    plan_id = new_plan_id()
    created_at = datetime.now(UTC)

    def planned(inputs: PlanningInputs, engine: str | None) -> dict[str, Any]:
        if isinstance(body.workload, BatchWorkloadSpec):  # a job of fixed size, no SLO: planned for throughput
            return create_batch_plan(body, inputs, pricing, catalog.session, run=run, checkpoint=checkpoint)
        request = PlanningRequest(
            workload=body.traffic(),
            slo=body.targets(),
            constraints=body.constraints.to_constraints(),
            verify=body.verify,
            solver_time_limit_s=solver_time_limit_s,
            checkpoint=checkpoint,
        )

        def aggregated() -> dict[str, Any]:
            result = run(plan_capacity, request, inputs)
            return plan_response(
                plan_id,
                body.name,
                result,
                created_at.isoformat(),
                prices=[price.read() for price in pricing.prices.values()],
                price_notes=pricing.notes,
                calibration_grades={gpu.slug: gpu.calibration_grade for gpu in inputs.gpus},
                engine=None if engine is None else parse_engine(engine)[0],  # the bare engine: the deploy target
            )

        if body.constraints.topology == "aggregated":
            return aggregated()
        # the one dispatch point for separate prefill and decode pools (api/disagg_plans.py)
        return topology_plan(
            body,
            request,
            inputs,
            pricing,
            plan_id=plan_id,
            created_at=created_at.isoformat(),
            run=run,
            aggregated=aggregated,
            engine=None if engine is None else parse_engine(engine)[0],
        )

    if isinstance(body.workload, BatchWorkloadSpec) and engines is None:
        return planned(inputs, None)  # create_batch_plan stores the job's plan itself
    if engines is None:
        content = planned(inputs, None)
    elif isinstance(body.workload, BatchWorkloadSpec):  # stored by create_batch_plan too
        if len(engines) > 1:
            raise PlannerInputError(
                "a batch job is planned on one engine: name one in `engine` (choosing among engines is for interactive traffic)",
                field="engine",
            )
        return planned(engine_inputs(catalog, body.efficiency_profile, inputs, engines[0])[0], engines[0])
    else:
        content = _cheapest_engine(catalog, body, inputs, engines, planned)
    if body.store:  # a dry run (store false) writes nothing
        Plans(catalog.session).save(
            plan_id=plan_id,
            name=body.name,
            request=body.model_dump(mode="json"),
            response=content,
            catalog_version=inputs.catalog_version,
            created_at=created_at,
        )
    return content


def requested_engines(body: PlanRequest) -> tuple[str, ...] | None:
    """The engines a request allows (`engine`, narrowed by constraints.pin.engine: a bare pin matches every
    generation of its engine, planner/engines.py `narrowed_by_pin`); None for neither. PlannerInputError (422)
    when the pin matches none of the allowed engines."""
    pinned = None if body.constraints.pin is None else body.constraints.pin.engine
    return narrowed_by_pin(allowed_engines(body.engine), pinned)


#: What makes one engine's plan impossible without making the request wrong: the next engine is tried.
_ENGINE_REFUSALS = (
    InfeasiblePlanError,
    ModelDoesNotFitError,
    UnsupportedConfigurationError,
    UnstableLoadError,
    PlannerInputError,
)


def _cheapest_engine(
    catalog: Catalog,
    body: PlanRequest,
    inputs: PlanningInputs,
    engines: Sequence[str],
    planned: Callable[[PlanningInputs, str | None], dict[str, Any]],
) -> dict[str, Any]:
    """Each engine's plan; the cheapest's content with `engine` (chosen, why, its profiles) and the others as alternatives."""
    answers: dict[str, tuple[dict[str, Any], dict[str, EngineChoice]]] = {}
    refused: dict[str, HeadroomError] = {}
    for engine in engines:
        try:
            engine_specs, choices = engine_inputs(catalog, body.efficiency_profile, inputs, engine)
            answers[engine] = (planned(engine_specs, engine), choices)
        except _ENGINE_REFUSALS as error:
            refused[engine] = error
    if not answers:
        raise refused[engines[0]]
    chosen = min(answers, key=lambda e: (_cost(answers[e][0]), engines.index(e)))
    content, choices = answers[chosen]
    gpus = [row["gpu"] for row in content["plan"].get("pools") or [{"gpu": content["plan"]["gpu"]}]]
    main = choices[content["plan"]["gpu"]]
    if len(engines) == 1:
        why = f"the only engine allowed ({chosen})"
    else:
        others = ", ".join(f"{e} ${_cost(answers[e][0]):,.2f}/h" for e in answers if e != chosen)
        why = f"the cheapest of {', '.join(engines)} at ${_cost(content):,.2f}/h" + (f" (then {others})" if others else "")
        if refused:
            why += "; " + "; ".join(f"{e}: no plan ({_detail(error)})" for e, error in refused.items())
    content["engine"] = {
        "chosen": chosen,
        "allowed": list(engines),
        "reason": why,
        "profile": engine_profile_read(main),
        "profiles": [engine_profile_read(choices[g]) for g in dict.fromkeys(gpus) if g in choices],
    }
    catalog_grades = {gpu.slug: gpu.calibration_grade for gpu in inputs.gpus}
    for warning in content.get("warnings") or []:  # a grade the engine profile lowered: the catalog's alone is not why
        choice = choices.get(warning.get("gpu"))
        if choice is not None and catalog_grades.get(choice.gpu) != choice.calibration_grade:
            warning["message"] += (
                f"; priced on {chosen}, whose profile for {choice.gpu} is under-determined ({', '.join(choice.at_bounds)} "
                "on the fit's bounds), which lowers its grade one step (engine.profile.reason)"
            )
    justification = content.get("justification")
    if isinstance(justification, dict) and isinstance(justification.get("alternatives"), list):
        for engine in engines:
            if engine == chosen:
                continue
            if engine in answers:
                justification["alternatives"].append(_engine_alternative(engine, answers[engine][0], content))
            else:
                justification["alternatives"].append(
                    {
                        "kind": "engine",
                        "name": engine,
                        "cost_usd_per_hour": None,
                        "exact": True,
                        "reason": f"no plan on {engine}: {_detail(refused[engine])}",
                    }
                )
    return dict(PlanResponse.model_validate(content).model_dump(mode="json"))


def _cost(content: Mapping[str, Any]) -> float:
    cost = content.get("cost") or {}
    value = cost.get("usd_per_hour")
    return float(value) if value is not None else math.inf


def _detail(error: HeadroomError) -> str:
    return str(getattr(error, "detail", error))


def _engine_alternative(engine: str, other: Mapping[str, Any], chosen: Mapping[str, Any]) -> dict[str, Any]:
    """The best plan on `engine` as a justification alternative, and why it lost to the chosen one."""
    plan = other["plan"]
    cost, best = _cost(other), _cost(chosen)
    verification = other.get("verification") or {}
    return {
        "kind": "engine",
        "name": engine,
        "gpu": plan["gpu"],
        "tp": plan["tp"],
        "weights_precision": plan["precision"]["weights"],
        "kv_precision": plan["precision"]["kv_cache"],
        "batch_limit": plan["batch_limit"],
        "chunk_tokens": plan["chunk_tokens"],
        "replicas": plan["replicas"],
        "gpus": plan["gpus_total"],
        "cost_usd_per_hour": cost,
        "exact": True,
        "verified": verification.get("meets_slo") if isinstance(verification, dict) else None,
        "reason": f"its best plan on {engine} costs ${cost:,.2f}/h, ${cost - best:,.2f}/h more than on {chosen['plan']['engine']}",
        "confidence": (other.get("calibration_grades") or {}).get(plan["gpu"]),
    }


def create_named_plan(
    body: PlanRequest,
    catalog: Catalog,
    *,
    run: Runner = run_directly,
    solver_time_limit_s: float = DEFAULT_SOLVER_TIME_LIMIT_S,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """POST /v1/plans' whole work (the route and `headroom plan` alike): `create_plan`, and a stored
    plan with a deployment `name` becomes that deployment's current plan (the first creates it). A
    re-plan calls `create_plan` alone, since hysteresis decides whether its plan is adopted."""
    content = create_plan(
        body, catalog, run=run, solver_time_limit_s=solver_time_limit_s, default_provider=default_provider, checkpoint=checkpoint
    )
    if body.store:
        Deployments(catalog.session).record_named_plan(body.name, content["id"], body.model_dump(mode="json"))
    return content
