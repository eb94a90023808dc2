"""The plan service: POST /v1/plans' work, and the plan a deployment's PUT or re-plan makes.
Its shape is every planning endpoint's: resolve the specs from the catalog (api/inputs.py), run
the pure planner function under the request's deadline, store the answer, build the response.
Deployments (adopting, re-planning with hysteresis, re-checking) are api/deployment_service.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy.orm import Session

from api.batch_jobs import create_batch_plan
from api.instance_plans import instance_pricing
from api.schemas.plans import DEFAULT_PRECISIONS, PlanRequest, plan_response
from api.schemas.prices import price_overrides
from api.schemas.workload import BatchWorkloadSpec
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.errors import NotFoundError
from catalog.plans import Plans, new_plan_id
from catalog.prices import Prices, Pricing
from catalog.repository import Catalog
from planner.errors import PlannerInputError
from planner.planning import PlanningInputs, PlanningRequest, plan_capacity
from planner.specs import GpuSpec, InstanceTypeSpec, Precision

#: Efficiency names every GPU has; any other name is a stored profile that some GPUs may lack.
BUILT_IN_EFFICIENCIES = ("calibrated", "ideal")
#: Upper bound on GPU types gathered when a request names none (the catalog's page limit).
MAX_GPU_TYPES = 100


def planning_inputs(
    body: PlanRequest, catalog: Catalog, *, default_provider: str = DEFAULT_PRICE_PROVIDER
) -> tuple[PlanningInputs, Pricing]:
    """Specs for the planner: the named (or every) GPU at the requested efficiencies and at the
    request's provider's prices (else `default_provider`'s) with its `prices` on top, the model,
    the allowed precisions; and which price each GPU got. Unknown slugs are 404; a named profile
    missing for a GPU the request names is 404, and GPUs the request does not name are skipped
    when they lack it. GPUs without a price are left out (the pricing's notes say which); an
    unknown provider is 404, nothing priced a 422 (catalog.prices)."""
    profile = body.efficiency_profile
    constraints = body.constraints
    model = catalog.model_spec(body.model)
    # one query for the GPUs and one for the quantizations (was one per GPU and two per precision:
    # ~7 ms of SQLAlchemy per request on SQLite, see docs/plan-benchmark.md)
    if constraints.gpus is not None:
        gpus = catalog.gpu_specs(profile, slugs=list(dict.fromkeys(constraints.gpus)))
    else:
        gpus = catalog.gpu_specs(profile, limit=MAX_GPU_TYPES)
        if not gpus and profile not in BUILT_IN_EFFICIENCIES:
            raise NotFoundError(
                f"no GPU has an efficiency profile named {profile!r}: use 'calibrated', 'ideal' or a profile stored "
                "with POST /v1/calibrations",
                kind="efficiency_profile",
                name=profile,
            )
    for slug in [*constraints.inventory, *body.prices]:
        catalog.get_gpu(slug)  # 404 for an inventory or a price of a GPU nobody catalogued
    instance_types: tuple[InstanceTypeSpec, ...] = ()
    if constraints.unit == "instance":  # priced per instance-hour, not from the per-GPU list (api/instance_plans.py)
        pricing, instance_types = instance_pricing(catalog.session, gpus, body.provider or default_provider, body.prices)
    else:
        pricing = Prices(catalog.session).price_specs(gpus, body.provider or default_provider, price_overrides(body.prices))
    if gpus.skipped:  # rows the planner cannot use: named in the plan's cost notes, not a 500 for every plan
        pricing = dataclasses.replace(pricing, notes=(*gpus.skipped, *pricing.notes))
    if constraints.precisions is not None:
        precisions = catalog.precisions(list(dict.fromkeys((p.weights, p.kv_cache) for p in constraints.precisions)))
    else:
        precisions = catalog.precisions(DEFAULT_PRECISIONS, skip_unknown=True)
        if not precisions:  # the caller constrained nothing: what is missing is the catalog's, say so
            defaults = ", ".join(f"{weights}/{kv_cache}" for weights, kv_cache in DEFAULT_PRECISIONS)
            raise PlannerInputError(
                f"the catalog has none of the default precisions {defaults}: add their quantizations "
                "(POST /v1/quantizations) or name precisions in constraints.precisions",
                constraint="precisions",
                default_precisions=[f"{w}/{kv}" for w, kv in DEFAULT_PRECISIONS],
            )
    # what the request did not allow, for an impossible request's advice ("allow h100-sxm")
    other_gpus: tuple[GpuSpec, ...] = ()
    if constraints.gpus is not None and constraints.unit == "gpu":
        named = set(constraints.gpus)
        others = [g for g in catalog.gpu_specs(profile, limit=MAX_GPU_TYPES) if g.slug not in named]
        try:
            other_gpus = (
                tuple(
                    Prices(catalog.session)
                    .price_specs(others, body.provider or default_provider, price_overrides(body.prices))
                    .specs
                )
                if others
                else ()
            )
        except PlannerInputError:
            other_gpus = ()  # none of them priced at this provider: nothing to suggest
    other_precisions: tuple[Precision, ...] = ()
    if constraints.precisions is not None:
        allowed = {(p.weights.slug, p.kv_cache.slug) for p in precisions}
        other_precisions = tuple(
            p
            for p in catalog.precisions(DEFAULT_PRECISIONS, skip_unknown=True)
            if (p.weights.slug, p.kv_cache.slug) not in allowed
        )
    inputs = PlanningInputs(
        model=model,
        gpus=pricing.specs,
        precisions=precisions,
        efficiency_profile=profile,
        catalog_version=catalog.catalog_version(),
        other_gpus=other_gpus,
        other_precisions=other_precisions,
        instance_types=instance_types,
    )
    return inputs, pricing


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
    session: Session,
    *,
    run: Runner = run_directly,
    solver_time_limit_s: float = DEFAULT_SOLVER_TIME_LIMIT_S,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Plan `body` on today's catalog and store it (as POST /v1/plans does); the response JSON.
    `run(plan_capacity, request, inputs)` does the pure planning work (a route passes its deadline's `run`)."""
    inputs, pricing = planning_inputs(body, catalog, default_provider=default_provider)
    if checkpoint is None:  # a route's `run` is its deadline's: the planner stops at its steps when that passes
        checkpoint = getattr(getattr(run, "__self__", None), "checkpoint", None)
    if isinstance(body.workload, BatchWorkloadSpec):  # a job of fixed size, no SLO: planned for throughput
        return create_batch_plan(body, inputs, pricing, session, run=run, checkpoint=checkpoint)
    request = PlanningRequest(
        workload=body.traffic(),
        slo=body.targets(),
        constraints=body.constraints.to_constraints(),
        verify=body.verify,
        solver_time_limit_s=solver_time_limit_s,
        checkpoint=checkpoint,
    )
    result = run(plan_capacity, request, inputs)
    plan_id = new_plan_id()
    created_at = datetime.now(UTC)
    content = plan_response(
        plan_id,
        body.name,
        result,
        created_at.isoformat(),
        prices=[price.read() for price in pricing.prices.values()],
        price_notes=pricing.notes,
        calibration_grades={gpu.slug: gpu.calibration_grade for gpu in inputs.gpus},
        engine=None if body.constraints.pin is None else body.constraints.pin.engine,
    )
    if body.store:  # a dry run (store false) writes nothing
        Plans(session).save(
            plan_id=plan_id,
            name=body.name,
            request=body.model_dump(mode="json"),
            response=content,
            catalog_version=inputs.catalog_version,
            created_at=created_at,
        )
    return content
