"""The fleet plan's schedule as CSV (`GET /v1/fleet-plans/{id}` with `Accept: text/csv`): one row per
period, workload and configuration, columns in `CSV_COLUMNS`.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from api.csv_export import CURRENCY
from api.rounding import rounded
from api.schemas.fleet_plan_response import AssignmentRead, FleetPlanResponse, PeriodRead
from api.schemas.plan_response import PrecisionRead
from planner.units import HOURS_PER_MONTH

#: The CSV schedule's columns, in order; units in the names. Stable: spreadsheets refer to them.
CSV_COLUMNS: tuple[str, ...] = (
    "period",
    "start_hour",
    "workload",
    "gpu",
    "tp",
    "weights_precision",
    "kv_cache_precision",
    "batch_limit",
    "chunk_tokens",
    "replicas",
    "gpus",
    "gpus_reserved",
    "gpus_on_demand",
    "gpus_spot",
    "demand_rps",
    "offered_rps",
    "capacity_rps",
    "target_rho",
    "cost_usd",
    "cost_usd_per_hour",
    "cost_usd_per_month",
    "currency",
    "calibration_grade",
    "warning",
    "pool_role",
    "class_name",
    "prefix_cache_hit_rate",
    "prefix_cache_tokens",
    "speculative_method",
    "speculative_draft_tokens",
    "prefix_cache_routing",
    "speculative_tokens_per_step",
    "speculative_acceptance_rate",
    "pp",
    "ep",
)

CSV_MEDIA_TYPE = "text/csv"

CSV_DESCRIPTION = (
    "The schedule, one row per period, workload and configuration (a workload that mixes configurations "
    "in a period has one row per configuration). Columns: " + ", ".join(CSV_COLUMNS) + ". Within a period and "
    "GPU type, rows take reserved GPUs first, then on-demand, then spot, in row order; `cost_usd` is the row's "
    "GPUs at that period's mean price per GPU held (as `cost.per_workload_usd`), so idle reserved GPUs are in "
    "no row; `cost_usd_per_hour` is that cost over the period's hours and `cost_usd_per_month` the same rate over "
    "730 h; `currency` is USD; `calibration_grade` is the row's GPU's calibration grade and `warning` the plan's "
    "warning about it, if any; `pool_role` is `mixed` for replicas that prefill and decode, `prefill` or `decode` for a "
    "workload served by separate pools (one row per pool and period, after the period's replica rows: `demand_rps` "
    "and `offered_rps` are the workload's whole demand, which both pools carry, `capacity_rps` is empty and "
    "`target_rho` is the pool's ρ; as the plan CSV's `pool_role`); `class_name` is the traffic class a class pool's row "
    "serves (empty for a plain workload): a workload with classes has one row per class and period after the period's "
    "other rows, on its arrangement's pool (`demand_rps` and `offered_rps` the class's rate, `target_rho` the pool's "
    "utilisation); a shared pool's replicas, GPUs and cost are on its first class's row, its other classes' rows "
    "carry 0; `prefix_cache_hit_rate`, `prefix_cache_tokens`, `speculative_method`, "
    "`speculative_draft_tokens`, `prefix_cache_routing`, `speculative_tokens_per_step` and `speculative_acceptance_rate` "
    "are the row's levers as the plan CSV's (empty without); `pp` and `ep` are the row's pipeline stages and "
    "expert-parallel degree, as the plan CSV's (a replica is tp × pp GPUs: `gpus` = replicas × tp × pp). Numbers are "
    "rounded as the JSON is (cents, 6 significant figures)."
)


def schedule_csv(plan: FleetPlanResponse) -> str:
    """The plan's schedule as CSV text with `CSV_COLUMNS` as the header."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180
    writer.writerow(CSV_COLUMNS)
    warnings = {w.gpu: w.message for w in plan.warnings}
    for period in plan.periods:
        left = {
            gpu: [plan.reserved_gpus.get(gpu, 0), period.on_demand_gpus.get(gpu, 0), period.spot_gpus.get(gpu, 0)]
            for gpu in period.gpus_held
        }
        for row in period.workloads:
            cells = _csv_cells(
                plan,
                period,
                left,
                name=row.name,
                gpu=row.gpu,
                tp=row.tp,
                precision=row.precision,
                batch_limit=row.batch_limit,
                chunk_tokens=row.chunk_tokens,
                replicas=row.replicas,
                gpus=row.gpus,
                rates=(row.demand_rps, row.offered_rps, row.capacity_rps, row.target_rho),
                grade=row.calibration_grade,
                warning=warnings.get(row.gpu),
                role="mixed",
                extra=_lever_cells(row),
                layout=(row.pp, row.ep),
            )
            writer.writerow(
                ["" if cell is None else rounded(cell, column) for cell, column in zip(cells, CSV_COLUMNS, strict=True)]
            )
        for pair in period.pools:
            for pool in (pair.prefill, pair.decode):
                cells = _csv_cells(
                    plan,
                    period,
                    left,
                    name=pair.name,
                    gpu=pool.gpu,
                    tp=pool.tp,
                    precision=pool.precision,
                    batch_limit=pool.batch_limit,
                    chunk_tokens=pool.chunk_tokens,
                    replicas=pool.replicas,
                    gpus=pool.gpus,
                    rates=(pair.demand_rps, pair.demand_rps, None, pool.rho),  # both pools carry the whole demand
                    grade=pool.calibration_grade,
                    warning=warnings.get(pool.gpu),
                    role=pool.role,
                    layout=(pool.pp, 1),
                )
                writer.writerow(
                    ["" if cell is None else rounded(cell, column) for cell, column in zip(cells, CSV_COLUMNS, strict=True)]
                )
        for arranged in period.class_pools:
            for class_pool in arranged.pools:
                for index, k in enumerate(c for c in arranged.classes if c.name in class_pool.classes):
                    first = index == 0  # a shared pool's GPUs, replicas and cost are on its first class's row
                    cells = _csv_cells(
                        plan,
                        period,
                        left if first else {},
                        name=arranged.name,
                        gpu=class_pool.gpu,
                        tp=class_pool.tp,
                        precision=class_pool.precision,
                        batch_limit=class_pool.batch_limit,
                        chunk_tokens=class_pool.chunk_tokens,
                        replicas=class_pool.replicas if first else 0,
                        gpus=class_pool.gpus if first else 0,
                        rates=(k.demand_rps, k.demand_rps, None, class_pool.utilisation),
                        grade=class_pool.calibration_grade,
                        warning=warnings.get(class_pool.gpu),
                        role="mixed",
                        extra=(k.name, *(None,) * 7),
                        layout=(class_pool.pp, class_pool.ep),
                    )
                    writer.writerow(
                        ["" if cell is None else rounded(cell, column) for cell, column in zip(cells, CSV_COLUMNS, strict=True)]
                    )
    return out.getvalue()


def _csv_cells(
    plan: FleetPlanResponse,
    period: PeriodRead,
    left: dict[str, list[int]],
    *,
    name: str,
    gpu: str,
    tp: int,
    precision: PrecisionRead,
    batch_limit: int | None,
    chunk_tokens: int | None,
    replicas: int,
    gpus: int,
    rates: tuple[float, float, float | None, float],
    grade: str | None,
    warning: str | None,
    role: str,
    extra: tuple[Any, ...] = (None,) * 8,
    layout: tuple[int, int] = (1, 1),
) -> tuple[Any, ...]:
    """One CSV row in `CSV_COLUMNS` order: its GPUs taken from what is `left` of the period's reserved, on-demand and
    spot GPUs of its type, in that order (`left` is updated); `rates` = (demand, offered, capacity, target ρ);
    `layout` = (pp, ep)."""
    bought = left.setdefault(gpu, [0, 0, 0])
    taken = []
    need = gpus
    for index in range(3):
        take = min(need, bought[index])
        bought[index] -= take
        need -= take
        taken.append(take)
    held = period.gpus_held.get(gpu, 0)
    period_gpu_usd = _period_gpu_cost(plan, period, gpu)
    demand, offered, capacity, rho = rates
    row_usd = gpus * period_gpu_usd / held if held else 0.0  # the row's share of the period's GPUs of its type
    return (
        period.period,
        _number(period.start_hour),
        name,
        gpu,
        tp,
        precision.weights,
        precision.kv_cache,
        batch_limit,
        "" if chunk_tokens is None else chunk_tokens,
        replicas,
        gpus,
        *taken,
        _number(demand),
        _number(offered),
        None if capacity is None else _number(capacity),
        _number(rho),
        _number(row_usd),
        _number(row_usd / plan.period_hours),
        _number(row_usd / plan.period_hours * HOURS_PER_MONTH),
        CURRENCY,
        grade,
        warning,
        role,
        *extra,
        *layout,
    )


def _lever_cells(row: AssignmentRead, class_name: str | None = None) -> tuple[Any, ...]:
    """`class_name` and the lever columns of a replica row."""
    prefix, draft = row.prefix_caching, row.speculative
    return (
        class_name,
        None if prefix is None else prefix.hit_rate,
        None if prefix is None else prefix.cache_tokens,
        None if draft is None else draft.method,
        None if draft is None else draft.draft_tokens,
        None if prefix is None else prefix.routing,
        None if draft is None else draft.tokens_per_step,
        None if draft is None else draft.acceptance_rate,
    )


def _period_gpu_cost(plan: FleetPlanResponse, period: PeriodRead, gpu: str) -> float:
    """USD of every GPU of type `gpu` held in `period`: reserved at the reserved price, the rest at theirs."""
    rates = _gpu_prices(plan)
    hours = plan.period_hours
    price = rates.get(gpu, {"reserved": 0.0, "on_demand": 0.0, "spot": 0.0})
    return hours * (
        plan.reserved_gpus.get(gpu, 0) * price["reserved"]
        + period.on_demand_gpus.get(gpu, 0) * price["on_demand"]
        + period.spot_gpus.get(gpu, 0) * price["spot"]
    )


def _gpu_prices(plan: FleetPlanResponse) -> dict[str, dict[str, float]]:
    return {
        gpu: {"reserved": p.reserved_usd_per_hour, "on_demand": p.on_demand_usd_per_hour, "spot": p.spot_usd_per_hour or 0.0}
        for gpu, p in plan.prices.items()
    }


def _number(value: float) -> float:
    """A computed figure; rounded by its column's unit when written (api/rounding.py)."""
    return value
