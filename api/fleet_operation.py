"""A fleet plan as an operation (`POST /v1/fleet-plans` with `Prefer: respond-async`, or without it
when it is estimated to take longer than HEADROOM_ASYNC_THRESHOLD_S): its candidate tables fan out
over the task workers, one unit per (distinct workload shape, GPU type) — each
`planner.fleet_candidates.gpu_candidate_table` — and a last unit gathers them
(`merged_tables`, one table per shape, exactly what the synchronous route computes), solves the
MILP and stores the plan in the transaction that records the unit, so the operation's
`result_location` is the stored plan.

The task engine (api/tasks.py) sends the last unit only once every table unit is stored (`Kind.
final_unit`). Every unit is bounded by OPERATION_TIMEOUT_S, the MILP's stages each by
HEADROOM_SOLVER_TIME_LIMIT_S.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from api import fleet_inputs, fleet_plans, fleet_tables
from api.observability import Deadline
from api.operations import OperationQueue
from api.schemas.fleet_plans import FleetPlanRequest
from api.settings import Settings
from catalog.fleet_plans import FleetPlans, new_fleet_plan_id
from catalog.operations import StoredOperation
from catalog.repository import Catalog
from planner.candidates import Drop
from planner.errors import PlannerInputError
from planner.fleet_candidates import CandidateTable, SloRefusal, gpu_candidate_table, merged_tables
from planner.fleet_levers import CandidateLevers
from planner.optimizer import Candidate
from planner.plan_result import PrefixCaching, SpeculativeChoice
from planner.specs import ModelSpec
from planner.units import MS_PER_S
from planner.workload import Slo, Workload

#: An operation's `kind` for a fleet plan (api/tasks.py runs it).
OPERATION_KIND = "fleet-plan"
#: How long one unit may take: nine tenths of Dramatiq's 10-minute task limit (api/tasks.py
#: TASK_TIME_LIMIT_MS), so the plan's own deadline stops it first, with a problem that says so.
OPERATION_TIMEOUT_S = 540.0

#: What one candidate table of one workload shape on one GPU type costs to compute, and what the
#: MILP costs per workload-period, in one process on this repository's 2-core machine, caches cold:
#: bench/operations.py's 50-workload × 24-period fleet (12 distinct shapes × the 7 GPU types the
#: reference catalog prices) gave 84 tables in 5.5 s (mean 0.065 s, slowest 0.90 s; a second run
#: 0.058 s) and a MILP of 1,200 workload-periods in 8.9 s (7.4 ms each; stopped by its 10 s stage
#: limit at a 3.1 % gap), load average 0.9–1.7 (`python -m bench.operations --per-table`,
#: docs/operations.md). A fleet plan's estimate is shapes × GPU types × TABLE_COST_S + workloads ×
#: periods × MILP_COST_S; past HEADROOM_ASYNC_THRESHOLD_S it runs as an operation.
TABLE_COST_S = 0.065
MILP_COST_S = 0.0074
#: What one planner/plan_disagg.py run (verify false) costs per GPU type it plans across, for a workload whose
#: topology allows pools (planner/fleet_pools.py: one run per GPU group and distinct demand, the groups each GPU
#: type alone and, with several, all of them together). `python -m bench.operations --per-pool-plan`: FLEET_50X24's
#: 9 shapes with a TTFT target at their lowest, middle and highest demand, caches cleared first, on this 2-core
#: machine: on one of the 7 reference GPU types 189 runs, CPU time 0.019 s each (wall 0.050 s, slowest 0.45 s);
#: on all 7 at once 27 runs, CPU 0.111 s (wall 0.29 s), under 7 × 0.019 = 0.133 s, so "0.019 s per GPU type
#: planned across" errs long, as the tables' estimate does. The wall times were taken at load average ~10 (other
#: processes on both cores, 2026-12-04), so the CPU time stands for an uncontended run, as TABLE_COST_S's load
#: 0.9–1.7 did.
POOL_PLAN_COST_S = 0.019
#: What arranging one distinct vector of a class workload's per-period rates costs per GPU type (planner/fleet_classes.py:
#: each arrangement's single-class plans). `python -m bench.fleet_api_benchmark --scenario levers`, warm run (its tables
#: cached, so the request's CPU is the class workload's 24 distinct rate vectors of 2 classes on 3 GPU types plus a MILP
#: of 0.07 s): 2.28 s of process CPU, 2.2 s / 24 / 3 ≈ 0.031 s per vector and GPU type (docs/fleet-benchmark.md
#: "Levers and classes"; load average 14, which inflates wall time more than CPU time).
CLASS_ARRANGE_COST_S = 0.031


@dataclass(frozen=True, slots=True)
class Shape:
    """One distinct (model, length mix, SLO) of the request: one candidate table."""

    model: ModelSpec
    workload: Workload
    slo: Slo
    levers: fleet_tables.TableLevers = ("off", None, None)


@dataclass(frozen=True, slots=True)
class Prepared:
    """What every unit of one fleet-plan operation shares, read from the catalog once per worker."""

    body: FleetPlanRequest
    inputs: fleet_inputs.FleetInputs
    models: dict[str, ModelSpec]
    shapes: tuple[Shape, ...]
    #: each workload's shape, an index into `shapes`, in the request's order
    workload_shapes: tuple[int, ...]


def _shapes(
    body: FleetPlanRequest, inputs: fleet_inputs.FleetInputs, models: dict[str, ModelSpec]
) -> tuple[tuple[Shape, ...], tuple[int, ...]]:
    """The request's distinct shapes (first appearance first) and each workload's one."""
    index: dict[tuple[ModelSpec, Workload, Slo, fleet_tables.TableLevers], int] = {}
    of_workload = []
    for model, _gpus, _precisions, workload, slo, _grid, levers in fleet_tables.table_jobs(body, inputs, models):
        key = (model, workload.at_rate(1.0), slo, levers)
        of_workload.append(index.setdefault(key, len(index)))
    return tuple(Shape(model=m, workload=w, slo=s, levers=lv) for m, w, s, lv in index), tuple(of_workload)


def distinct_shapes(body: FleetPlanRequest) -> int:
    """How many candidate tables per GPU type the request needs (equal shapes share one), from the body alone."""
    return len(
        {
            (
                w.model,
                w.to_workload().at_rate(1.0),
                w.shape_slo().to_slo(),
                fleet_tables.table_levers(body, w)[0],
                w.draft_model,
                w.acceptance_rate,
            )
            for w in fleet_tables.table_workloads(body)
        }
    )


def pool_plan_gpu_types(body: FleetPlanRequest, gpu_types: int) -> int:
    """The GPU types planned across by the plan_disagg runs of the pool options (planner/fleet_pools.py), summed:
    per workload whose topology allows pools, one run per distinct demand (an idle period is one more) on each GPU
    type alone and, with several, one on all of them (gpu_types more)."""
    per_demand = gpu_types + (gpu_types if gpu_types > 1 else 0)  # each type alone, then all together
    return sum(len(set(w.day_demand(body.periods))) * per_demand for w in body.workloads if w.topology != "aggregated")


def estimated_plan_s(body: FleetPlanRequest, gpu_types: int) -> float:
    """How long the plan is expected to take in one process, caches cold: tables (shapes and their lever
    variants) × GPU types × TABLE_COST_S, the pool options' GPU types planned across × POOL_PLAN_COST_S, the
    class workloads' distinct rate vectors × GPU types × CLASS_ARRANGE_COST_S,
    workloads × periods × MILP_COST_S for its MILP. Tables already cached in the API process and the
    table processes' parallelism are left out, so it errs towards 202."""
    tables_s = body.lever_tables() * gpu_types * TABLE_COST_S  # a shape's prefix-cache and draft variants are tables too
    pools_s = pool_plan_gpu_types(body, gpu_types) * POOL_PLAN_COST_S
    classes_s = class_rate_vectors(body) * gpu_types * CLASS_ARRANGE_COST_S
    return tables_s + pools_s + classes_s + len(body.workloads) * body.periods * MILP_COST_S


def class_rate_vectors(body: FleetPlanRequest) -> int:
    """Distinct per-period rate vectors over the workloads with classes: each is arranged once (planner/fleet_classes.py)."""
    vectors = 0
    for w in body.workloads:
        if w.classes is not None:
            rates = [k.to_class().day_rps(body.periods) for k in w.classes]
            vectors += len({tuple(r[p] for r in rates) for p in range(body.periods)})
    return vectors


def gpu_types_allowed(body: FleetPlanRequest, catalog: Catalog) -> int:
    """GPU types the plan may use, cheaply: the request's list, else every catalog GPU."""
    if body.constraints.gpus is not None:
        return len(set(body.constraints.gpus))
    return catalog.list_gpus(limit=1, offset=0).total


def runs_as_operation(body: FleetPlanRequest, catalog: Catalog, settings: Settings, *, asked: bool) -> bool:
    """Whether the plan is answered 202 and run as an operation: asked (`Prefer: respond-async`), or
    estimated to take longer than HEADROOM_ASYNC_THRESHOLD_S."""
    return asked or estimated_plan_s(body, gpu_types_allowed(body, catalog)) > settings.async_threshold_s


def operation_request(body: FleetPlanRequest, settings: Settings, gpus: list[str]) -> dict[str, Any]:
    return {"body": body.model_dump(mode="json"), "default_provider": settings.default_price_provider, "gpus": gpus}


def start_operation(body: FleetPlanRequest, catalog: Catalog, settings: Settings, tasks: OperationQueue) -> StoredOperation:
    """Read the plan's specs now (404 and 422 as the synchronous route answers them), then store it
    as a queued operation of one unit per (shape, GPU type) and a last one for the MILP."""
    inputs, models = fleet_inputs.fleet_inputs(body, catalog, settings.default_price_provider)
    shapes, _ = _shapes(body, inputs, models)
    gpus = [gpu.slug for gpu in inputs.gpus]
    return tasks.submit(
        kind=OPERATION_KIND, request=operation_request(body, settings, gpus), units_total=len(shapes) * len(gpus) + 1
    )


def prepare(request: dict[str, Any], catalog: Catalog) -> Prepared:
    body = FleetPlanRequest.model_validate(request["body"])
    inputs, models = fleet_inputs.fleet_inputs(body, catalog, request["default_provider"])
    if [gpu.slug for gpu in inputs.gpus] != request["gpus"]:  # the unit count was fixed by these
        raise PlannerInputError(
            f"the GPU types this fleet plan may use changed in the catalog after it was asked for "
            f"({request['gpus']} then, {[gpu.slug for gpu in inputs.gpus]} now): ask again",
            constraint="gpus",
        )
    shapes, workload_shapes = _shapes(body, inputs, models)
    return Prepared(body=body, inputs=inputs, models=models, shapes=shapes, workload_shapes=workload_shapes)


def _deadline() -> Deadline:
    return Deadline(timeout_s=OPERATION_TIMEOUT_S, expires_at_s=time.monotonic() + OPERATION_TIMEOUT_S)


def run_unit(prepared: Prepared, index: int, _settings: Settings, _session: Session) -> dict[str, Any]:
    """Table unit `index`: shape index // GPU types on GPU type index % GPU types, as JSON."""
    gpus = prepared.inputs.gpus
    shape = prepared.shapes[index // len(gpus)]
    deadline = _deadline()
    started = time.perf_counter()
    table = gpu_candidate_table(
        model=shape.model, gpu=gpus[index % len(gpus)], precisions=prepared.inputs.precisions, workload=shape.workload,
        slo=shape.slo, grid=prepared.body.search.to_grid(), checkpoint=deadline.checkpoint,
        speculative=shape.levers[0], published=shape.levers[1], draft=shape.levers[2],
    )  # fmt: skip
    return {"table": table_json(table), "ms": (time.perf_counter() - started) * MS_PER_S}


def final_unit(prepared: Prepared, units: list[Any], settings: Settings, session: Session) -> dict[str, Any]:
    """The last unit: the gathered tables merged per shape, the MILP solved, the plan stored in
    `session`; its FleetPlanResponse JSON."""
    gpus = len(prepared.inputs.gpus)
    by_shape = [
        merged_tables([table_from_json(unit["table"]) for unit in units[shape * gpus : (shape + 1) * gpus]])
        for shape in range(len(prepared.shapes))
    ]
    deadline = _deadline()
    created_at = datetime.now(UTC)
    outcome = deadline.run(
        fleet_plans.plan_with_tables, prepared.body, prepared.inputs, prepared.models, started=time.perf_counter(),
        deadline=deadline, solver_time_limit_s=settings.solver_time_limit_s,
        tables=[by_shape[shape] for shape in prepared.workload_shapes],
        candidates_ms=sum(unit["ms"] for unit in units),
    )  # fmt: skip
    plan = fleet_plans.store_fleet_plan(
        prepared.body, outcome, FleetPlans(session), plan_id=new_fleet_plan_id(), created_at=created_at
    )
    return plan.model_dump(mode="json")


def result(_prepared: Any, units: list[Any], _elapsed_ms: float) -> dict[str, Any]:
    plan: dict[str, Any] = units[-1]
    return plan


def location(units: list[Any]) -> str:
    return f"/v1/fleet-plans/{units[-1]['id']}"


# ---- a table as JSON (a unit's result is stored in the database) ----------------------------------


def _float_json(value: float | None) -> float | str | None:
    """JSON has no infinity (PostgreSQL's jsonb refuses it): non-finite floats travel as text."""
    return value if value is None or math.isfinite(value) else repr(value)


def _float_back(value: float | str | None) -> float | None:
    return float(value) if isinstance(value, str) else value


def table_json(table: CandidateTable) -> dict[str, Any]:
    fields = {f.name: getattr(table, f.name) for f in dataclasses.fields(table)}
    return {
        **fields,
        "candidates": [
            {f.name: getattr(c, f.name) for f in dataclasses.fields(c) if f.name != "instance_offers"} for c in table.candidates
        ],
        "drops": [
            {f.name: _float_json(v) if isinstance(v := getattr(d, f.name), float) else v for f in dataclasses.fields(d)}
            for d in table.drops
        ],
        "slo_refusals": [dataclasses.asdict(r) for r in table.slo_refusals],
        "levers": {cid: dataclasses.asdict(levers) for cid, levers in table.levers.items()},
    }


def table_from_json(data: dict[str, Any]) -> CandidateTable:
    float_fields = ("bound_s", "target_s", "needed_bytes", "available_bytes")
    counts = {k: v for k, v in data.items() if k not in ("candidates", "drops", "slo_refusals", "levers")}
    drops: list[Drop] = []
    for drop in data["drops"]:
        fields: dict[str, Any] = {k: _float_back(v) if k in float_fields else v for k, v in drop.items()}
        drops.append(Drop(**fields))
    return CandidateTable(
        **counts,
        candidates=tuple(Candidate(**c) for c in data["candidates"]),
        drops=tuple(drops),
        slo_refusals=tuple(SloRefusal(**r) for r in data["slo_refusals"]),
        levers={cid: _levers_back(levers) for cid, levers in data.get("levers", {}).items()},
    )


def _levers_back(data: dict[str, Any]) -> CandidateLevers:
    prefix, draft = data.get("prefix_caching"), data.get("speculative")
    return CandidateLevers(
        prefix_caching=None if prefix is None else PrefixCaching(**prefix),
        speculative=None if draft is None else SpeculativeChoice(**draft),
    )
