"""From a fleet-plan request naming catalog rows to the planner's `FleetSpec`, and from the
`FleetPlan` back to the response body.

`plan_fleet(body, catalog)` reads the GPUs, models and precisions the request names (404 for an
unknown slug or efficiency profile) and applies the request's price overrides (api/fleet_inputs.py),
builds each workload's candidate table once per distinct (model, request mix, SLO) with
`planner.fleet_candidates.CandidateTables` (api/fleet_tables.py), and solves one fleet MILP
(`planner.fleet.solve_fleet`); api/fleet_plan_read.py turns the outcome into the response body.
An infeasible fleet raises the planner's InfeasiblePlanError, whose members (workload, period,
gpu, gpus_short, shortfalls) the problem document carries.

Bounded work (docs/reliability.md "Bounded work"): the catalog is read in the request's thread,
then the tables and the MILP run under the request's `Deadline`. The MILP's limit is the one
policy every planning endpoint shares (api.settings.solver_time_limit_s), taken when the MILP
starts: the least of the service's `solver_time_limit_s`, a share of the time the request has left
and the request's own `solver_time_limit_s`, which may only lower it; the tables' jobs carry the deadline into the worker processes, which stop at the next
(GPU, tp) search once it has passed, and jobs not yet started are cancelled; `solve_fleet` checks
it between stages. So a request answered 503 stops burning CPU within one stage. Before any of
that, a request whose MILP would be larger than `MAX_MILP_COLUMNS` is a 422 naming the bound.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from api.disagg_plans import LINK
from api.fleet_inputs import FleetInputs, fleet_inputs
from api.fleet_plan_read import FleetOutcome, fleet_plan_response
from api.fleet_tables import candidate_tables, deadline_checkpoint, table_jobs, table_workloads
from api.observability import Deadline
from api.schemas.fleet_plan_response import (
    FleetPlanResponse,
)
from api.schemas.fleet_plans import FleetPlanRequest, FleetWorkloadSpec
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.fleet_plans import FleetPlans, new_fleet_plan_id
from catalog.repository import Catalog
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.fleet_candidates import (
    CandidateTable,
    no_candidates_error,
)
from planner.fleet_classes import arrangement_options
from planner.fleet_pools import pool_options
from planner.fleet_solve import solve_fleet
from planner.fleet_spec import (
    Checkpoint,
    FleetConstraints,
    FleetSpec,
    FleetWorkload,
    PoolOption,
    no_checkpoint,
)
from planner.plan_records import PlanConstraints
from planner.planning import PlanningInputs, PlanningRequest
from planner.specs import ModelSpec
from planner.units import MS_PER_S
from planner.workload import FixedLength, Slo, Workload

#: Most replica variables (Σ_w candidates_w × periods) a fleet MILP may have: past it, building the
#: model and its LP relaxations alone would not fit the request timeout on a 2-core machine
#: (docs/fleet-benchmark.md "Bounded work: the cost model").
MAX_MILP_COLUMNS = 60_000


def milp_size_error(workloads: list[FleetWorkload], periods: int) -> PlannerInputError | None:
    """The 422 for a fleet whose MILP would have more replica columns (Σ_w candidates_w × periods)
    than MAX_MILP_COLUMNS, or None."""
    columns = sum(len(w.candidates) for w in workloads) * periods  # Σ_w |C_w| · P replica variables
    if columns <= MAX_MILP_COLUMNS:
        return None
    return PlannerInputError(
        f"the fleet MILP would have {columns} replica variables (Σ candidates per workload × {periods} periods), "
        f"more than this service's bound of {MAX_MILP_COLUMNS}: plan fewer workloads or periods, or narrow "
        "constraints.gpus, constraints.precisions or the search grid",
        constraint="milp_columns",
        limit=MAX_MILP_COLUMNS,
        needed=columns,
    )


def plan_fleet(
    body: FleetPlanRequest,
    catalog: Catalog,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    *,
    deadline: Deadline | None = None,
    solver_time_limit_s: float | None = None,
) -> FleetOutcome:
    """The cheapest fleet for `body` at the request's provider's prices (else `default_provider`'s).
    The catalog is read here; the tables and the MILP run under `deadline` when one is given
    (RequestTimeoutError past it, the work stopped), the MILP within api.settings.solver_time_limit_s
    of `solver_time_limit_s` (the service's; None: the request's alone), the time left and the
    request's `solver_time_limit_s`. Raises NotFoundError,
    InfeasiblePlanError (a workload no configuration serves, or demand beyond inventory or
    budget), PlannerInputError (no GPUs or precisions, a MILP past MAX_MILP_COLUMNS), SolverError."""
    started = time.perf_counter()
    inputs, models = fleet_inputs(body, catalog, default_provider)
    configured = body.solver_time_limit_s if solver_time_limit_s is None else solver_time_limit_s
    if deadline is None:
        return plan_with_tables(body, inputs, models, started=started, deadline=None, solver_time_limit_s=configured)
    return deadline.run(
        plan_with_tables, body, inputs, models, started=started, deadline=deadline, solver_time_limit_s=configured
    )


def plan_with_tables(
    body: FleetPlanRequest,
    inputs: FleetInputs,
    models: dict[str, ModelSpec],
    *,
    started: float,
    deadline: Deadline | None,
    solver_time_limit_s: float,
    tables: list[CandidateTable] | None = None,
    candidates_ms: float | None = None,
) -> FleetOutcome:
    """The tables and the MILP: pure work on specs already read (run under the request deadline).
    `tables` (one per workload without classes, in order) are used as given when an operation's tasks computed
    them (api/fleet_operation.py), with `candidates_ms` the time they took; else they are computed here. A
    workload with classes is offered its arrangements (`_class_options`)."""
    jobs = table_jobs(body, inputs, models)
    if tables is None:
        tables = candidate_tables(jobs, deadline)
    tabled = dict(zip((w.name for w in table_workloads(body)), tables, strict=True))
    by_workload: dict[str, CandidateTable] = {}
    workloads = []
    checkpoint = no_checkpoint if deadline is None else deadline_checkpoint(deadline)
    for w in body.workloads:
        if w.classes is not None:
            arranged = _class_options(body, w, inputs, models, checkpoint, solver_time_limit_s)
            workloads.append(
                FleetWorkload(name=w.name, candidates=(), demand_rps=tuple(w.day_demand(body.periods)), pool_options=arranged)
            )
            continue
        table = tabled[w.name]
        options = _pool_options(body, w, inputs, models, checkpoint)
        candidates = () if w.topology == "disaggregated" else table.candidates
        if not candidates and not options:
            if w.topology == "aggregated":
                raise no_candidates_error(w.name, table)
            raise InfeasiblePlanError(
                f"workload {w.name!r} (topology {w.topology}) has no prefill and decode pools meeting its SLOs at every "
                "period's demand"
                + ("" if w.topology == "disaggregated" else " and no aggregated candidate")
                + ": allow more GPU types or precisions, or relax its SLOs",
                constraint="candidates",
                workload=w.name,
            )
        by_workload[w.name] = table
        workloads.append(
            FleetWorkload(name=w.name, candidates=candidates, demand_rps=tuple(w.day_demand(body.periods)), pool_options=options)
        )
    if (too_large := milp_size_error(workloads, body.periods)) is not None:
        raise too_large
    if candidates_ms is None:
        candidates_ms = (time.perf_counter() - started) * MS_PER_S
    used = {c.gpu for w in workloads for c in w.candidates} | {g for w in workloads for o in w.pool_options for g in o.gpu_types}
    spec = FleetSpec(
        workloads=tuple(workloads),
        prices={gpu: price for gpu, price in inputs.prices.items() if gpu in used},
        inventory={gpu: counts if isinstance(counts, int) else tuple(counts) for gpu, counts in body.inventory.items()},
        spot={gpu: offer for gpu, offer in inputs.spot.items() if gpu in used},
        period_hours=body.period_hours,
        constraints=FleetConstraints(
            min_replicas=body.constraints.min_replicas,
            n_plus_one=body.constraints.n_plus_one,
            budget_usd_per_day=body.constraints.budget_usd_per_day,
        ),
    )
    if deadline is None:
        plan = solve_fleet(spec, time_limit_s=min(solver_time_limit_s, body.solver_time_limit_s))
    else:
        checkpoint()
        # the one policy (api.settings.solver_time_limit_s), taken when the MILP starts: the tables took their share
        limit_s = deadline.solver_time_limit_s(solver_time_limit_s, body.solver_time_limit_s)
        plan = solve_fleet(spec, time_limit_s=limit_s, checkpoint=checkpoint)
    return FleetOutcome(
        plan=plan,
        inputs=inputs,
        tables=by_workload,
        distinct_tables=len({(job[0], job[3].at_rate(1.0), job[4], job[6]) for job in jobs}),
        candidates_ms=candidates_ms,
        plan_ms=(time.perf_counter() - started) * MS_PER_S,
        pool_options_offered={w.name: sum(o.arrangement is None for o in w.pool_options) for w in workloads},
        arrangements_offered={w.name: tuple(o.arrangement for o in w.pool_options if o.arrangement) for w in workloads},
    )


def _pool_options(
    body: FleetPlanRequest, w: Any, inputs: FleetInputs, models: dict[str, ModelSpec], checkpoint: Checkpoint
) -> tuple[PoolOption, ...]:
    """The workload's separate-pool options (planner/fleet_pools.py): none for topology aggregated."""
    if w.topology == "aggregated":
        return ()
    return pool_options(
        gpus=inputs.gpus,
        model=models[w.model],
        precisions=inputs.precisions,
        tps=body.search.to_grid().tp_degrees,
        workload=replace(w.to_workload(), prefix_reuse=None),  # pools plan no prefix cache (the replicas' candidates do)
        slo=w.shape_slo().to_slo(),
        link=LINK,
        demand_rps=w.day_demand(body.periods),
        constraints=FleetConstraints(min_replicas=body.constraints.min_replicas, n_plus_one=body.constraints.n_plus_one),
        checkpoint=checkpoint,
    )


def _class_options(
    body: FleetPlanRequest,
    w: FleetWorkloadSpec,
    inputs: FleetInputs,
    models: dict[str, ModelSpec],
    checkpoint: Checkpoint,
    solver_time_limit_s: float,
) -> tuple[PoolOption, ...]:
    """The arrangement options of a workload with classes (planner/fleet_classes.py), each pool planned by the
    single-class planner on the fleet's GPUs, precisions and search grid, under its min_replicas and N+1,
    without speculation (as api/classes_plans.py plans class pools) and unsimulated (as every fleet option)."""
    grid = body.search.to_grid()
    base = PlanningRequest(
        workload=Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=1), output_tokens=FixedLength(tokens=1)),
        slo=Slo(e2e_s=1.0),  # both replaced per pool
        constraints=PlanConstraints(min_replicas=body.constraints.min_replicas, n_plus_one=body.constraints.n_plus_one),
        verify=False,
        tp_degrees=grid.tp_degrees,
        batch_limits=grid.batch_limits,
        chunk_budgets=grid.chunk_budgets,
        solver_time_limit_s=min(solver_time_limit_s, body.solver_time_limit_s),
    )
    planning = PlanningInputs(
        model=models[w.model], gpus=inputs.gpus, precisions=inputs.precisions, catalog_version=inputs.catalog_version
    )
    try:
        return arrangement_options(
            classes=[k.to_class() for k in w.classes or ()],
            inputs=planning,
            base=base,
            periods=body.periods,
            period_hours=body.period_hours,
            checkpoint=checkpoint,
        )
    except InfeasiblePlanError as error:
        raise InfeasiblePlanError(
            f"workload {w.name!r}: {error.detail}: allow more GPU types or precisions, or relax its classes' targets",
            constraint="classes",
            workload=w.name,
        ) from error


def create_fleet_plan(
    body: FleetPlanRequest,
    catalog: Catalog,
    fleet_plans: FleetPlans,
    *,
    default_provider: str,
    deadline: Deadline,
    solver_time_limit_s: float,
) -> FleetPlanResponse:
    """POST /v1/fleet-plans' work, in every planning endpoint's shape: resolve the specs, plan under
    the request's deadline (`plan_fleet`), store, and answer the stored response."""
    plan_id = new_fleet_plan_id()
    created_at = datetime.now(UTC)
    outcome = plan_fleet(body, catalog, default_provider, deadline=deadline, solver_time_limit_s=solver_time_limit_s)
    return store_fleet_plan(body, outcome, fleet_plans, plan_id=plan_id, created_at=created_at)


def store_fleet_plan(
    body: FleetPlanRequest, outcome: FleetOutcome, fleet_plans: FleetPlans, *, plan_id: str, created_at: datetime
) -> FleetPlanResponse:
    """Store the planned fleet under `plan_id` and answer it as stored."""
    plan = fleet_plan_response(body, outcome, plan_id=plan_id, created_at=created_at)
    fleet_plans.save(
        plan_id=plan_id,
        request=body.model_dump(mode="json"),
        response=plan.model_dump(mode="json"),
        catalog_version=plan.catalog_version,
        created_at=created_at,
    )
    return plan
