"""POST /v1/plans for a batch job (`workload.kind: "batch"`): the planner's job plan
(planner/batch_jobs.py) as a plan response, stored like any plan so GET /v1/plans/{id} and its CSV
read it back.

A batch plan has the usual decision (GPU, tp, replicas, batch limit, chunk budget, precision) and
cost (per hour while the job runs, per million output tokens of the job), no latency predictions
and no justification (it has no SLO to justify), and a `batch_job` section with the throughput per
replica (analytic and simulated), the finish time, the GPU-hours and the cost per job.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from api.errors import RequestTimeoutError
from api.observability import Deadline
from api.problems import problem_type_for
from api.rounding import rounded
from api.schemas.plan_response import PlanResponse
from api.schemas.plan_result import provenance_read
from api.schemas.plans import PlanConstraintsSpec, PlanRequest
from api.schemas.what_if import WHAT_IF_CSV_COLUMNS, WhatIfRequest
from api.schemas.workload import BatchWorkloadSpec, length_distribution
from catalog.plans import Plans, new_plan_id
from catalog.prices import Pricing
from planner.batch_jobs import MIN_BILLED_S, BatchJob, BatchPlan, plan_batch_job
from planner.errors import HeadroomError
from planner.plan_result import Provenance
from planner.planning import HOURS_PER_MONTH, PlanningInputs
from planner.units import MS_PER_S, SECONDS_PER_HOUR

BILLING = (
    f"per second, at least {MIN_BILLED_S:.0f} s per replica, every replica from the start to the job's finish "
    "(RunPod bills pods per second; AWS EC2 per second with a 60-second minimum); model loading not counted"
)
METHOD = (
    "throughput per replica = the queueing model's saturation rate (every slot busy, the job's length moments); "
    "finish = (⌈requests/replicas⌉ + slots) / throughput; candidates taken cheapest cost floor first; the winner "
    "simulated on a sample of the job all present at t = 0 and sized with the lower of the two rates"
)


def batch_job(body: PlanRequest) -> BatchJob:
    """The planner's job from a batch plan request (`workload.kind: batch`)."""
    if not isinstance(body.workload, BatchWorkloadSpec):
        raise TypeError("batch_job needs a batch workload")
    return job_of(body.workload, body.constraints)


def job_of(workload: BatchWorkloadSpec, constraints: PlanConstraintsSpec) -> BatchJob:
    """The planner's job from a batch workload and the plan's constraints (max_gpus, min_confidence)."""
    return BatchJob(
        requests=workload.job_requests(),
        prompt_tokens=length_distribution(workload.prompt_tokens),
        output_tokens=length_distribution(workload.output_tokens),
        deadline_s=None if workload.deadline_h is None else workload.deadline_h * SECONDS_PER_HOUR,
        max_gpus=constraints.max_gpus,
        min_confidence=constraints.min_confidence,
    )


def _verification(plan: BatchPlan) -> dict[str, Any] | None:
    simulated = plan.simulated
    if simulated is None:
        return None
    return {
        "sample_requests": simulated.requests,
        "seed": simulated.seed,
        "completion_rate_rps": simulated.completion_rate_rps,
        "ci_low_rps": simulated.ci_low_rps,
        "ci_high_rps": simulated.ci_high_rps,
        "confidence_level": simulated.confidence_level,
        "window_completions": simulated.window_completions,
        "window_s": simulated.window_s,
        "makespan_s": simulated.makespan_s,
        "makespan_rate_rps": simulated.makespan_rate_rps,
        "predicted_makespan_s": simulated.predicted_makespan_s,
    }


def batch_job_read(plan: BatchPlan) -> dict[str, Any]:
    """The response's `batch_job` section (BatchJobRead), hours at the edge."""
    job, sizing, group = plan.job, plan.sizing, plan.option.group
    return {
        "requests": job.requests,
        "prompt_tokens_total": job.prompt_tokens_total,
        "output_tokens_total": job.output_tokens_total,
        "slots": plan.option.slots,
        "throughput_rps_per_replica": plan.throughput_rps,
        "analytic_throughput_rps": plan.analytic_throughput_rps,
        "verified_throughput_rps": None if plan.simulated is None else plan.simulated.completion_rate_rps,
        "verification": _verification(plan),
        "replicas": sizing.replicas,
        "gpus": sizing.gpus,
        "requests_per_replica": sizing.requests_per_replica,
        "finish_h": sizing.finish_s / SECONDS_PER_HOUR,
        "deadline_h": None if job.deadline_s is None else job.deadline_s / SECONDS_PER_HOUR,
        "max_gpus": job.max_gpus,
        "billed_h_per_replica": sizing.billed_s / SECONDS_PER_HOUR,
        "gpu_hours": sizing.gpu_hours,
        "price_usd_per_gpu_hour": group.price_usd_per_hour / group.tp,
        "cost_usd": sizing.cost_usd,
        "usd_per_million_output_tokens": plan.usd_per_million_output_tokens,
        "binding": plan.binding,
        "candidates_total": plan.candidates_total,
        "candidates_evaluated": plan.candidates_evaluated,
        "verifications": plan.verifications,
        "billing": BILLING,
        "method": METHOD,
    }


def _warnings(gpu: str, grade: str | None) -> list[dict[str, Any]]:
    if grade != "low":
        return []
    return [
        {
            "code": "low_confidence_plan",
            "gpu": gpu,
            "grade": "low",
            "message": f"the job runs on {gpu}, whose calibration is graded low (GET /v1/gpus/{gpu}: efficiency.confidence): "
            "its throughput and so its finish time and cost may be off by more than the calibration's usual error; "
            "constraints.min_confidence leaves such GPUs out",
        }
    ]


def batch_plan_response(
    plan_id: str, plan: BatchPlan, inputs: PlanningInputs, pricing: Pricing, created_at: str, plan_ms: float
) -> dict[str, Any]:
    """The JSON body (also what is stored) of a batch job's plan, rounded as api/rounding.py says."""
    group, sizing = plan.option.group, plan.sizing
    gpu = group.gpu.slug
    per_hour = sizing.replicas * group.price_usd_per_hour  # replicas × tp × $/GPU-h, while the job runs
    provenance = Provenance(
        catalog_version=inputs.catalog_version, solver="planner/batch_jobs.py: branch and bound on cost floors",
        status="optimal" if plan.simulated is not None else "optimal (unverified)", mip_gap=None, solve_ms=0.0,
        plan_ms=plan_ms, efficiency_profile=inputs.efficiency_profile, efficiencies={gpu: group.gpu.efficiency},
        created_at=created_at,
    )  # fmt: skip
    body = {
        "id": plan_id,
        "name": None,
        "plan": {
            "gpu": gpu, "tp": group.tp, "replicas": sizing.replicas, "gpus_total": sizing.gpus,
            "precision": {"weights": group.precision.weights.slug, "kv_cache": group.precision.kv_cache.slug},
            "batch_limit": plan.option.batch_limit, "chunk_tokens": plan.option.chunk_tokens,
            "target_rho": 1.0,  # an offline job keeps every slot busy: it runs at saturation by design
            "fleet": None,
            "topology": "aggregated",
            "pools": [{
                "role": "mixed", "gpu": gpu, "tp": group.tp, "replicas": sizing.replicas,
                "batch_limit": plan.option.batch_limit, "chunk_tokens": plan.option.chunk_tokens,
                "precision": {"weights": group.precision.weights.slug, "kv_cache": group.precision.kv_cache.slug},
            }],
        },
        "cost": {
            "usd_per_hour": per_hour, "usd_per_month": per_hour * HOURS_PER_MONTH,
            "usd_per_million_output_tokens": plan.usd_per_million_output_tokens, "currency": "USD",
            "prices": [price.read() for slug, price in pricing.prices.items() if slug == gpu],
            "notes": list(pricing.notes),
        },
        "predicted": None,
        "justification": None,
        "verification": None,
        "provenance": provenance_read(provenance).model_dump(mode="json"),
        "calibration_grades": {gpu: group.gpu.calibration_grade},
        "warnings": _warnings(gpu, group.gpu.calibration_grade),
        "batch_job": batch_job_read(plan),
    }  # fmt: skip
    answer: dict[str, Any] = rounded(PlanResponse.model_validate(body).model_dump(mode="json"))  # a dict stays a dict
    return answer


def create_batch_plan(
    body: PlanRequest,
    inputs: PlanningInputs,
    pricing: Pricing,
    session: Session,
    *,
    run: Callable[..., Any],
    checkpoint: Callable[[], None] | None,
) -> dict[str, Any]:
    """Plan the batch job in `body` on the gathered specs and store it unless a dry run; the response JSON.
    `run(fn)` does the pure planning work (a route passes its deadline's)."""
    started = time.perf_counter()
    job = batch_job(body)
    work = partial(
        plan_batch_job, job, model=inputs.model, gpus=inputs.gpus, precisions=inputs.precisions, verify=body.verify,
        checkpoint=checkpoint,
    )  # fmt: skip
    plan = run(work)
    plan_id, created_at = new_plan_id(), datetime.now(UTC)
    content = batch_plan_response(
        plan_id, plan, inputs, pricing, created_at.isoformat(), (time.perf_counter() - started) * MS_PER_S
    )
    if body.store:  # a dry run (store false) writes nothing
        Plans(session).save(
            plan_id=plan_id,
            name=None,
            request=body.model_dump(mode="json"),
            response=content,
            catalog_version=inputs.catalog_version,
            created_at=created_at,
        )
    return content


# --- what-if: a job's deadline or size swept ---------------------------------------------------------------


def _job_point(index: int, job: BatchJob, gpu: str | None, plan: BatchPlan | None, error: HeadroomError | None) -> dict[str, Any]:
    """One what-if point of a batch sweep (WhatIfPoint's fields): the job's plan, or why there is none."""
    row: dict[str, Any] = {
        **dict.fromkeys(WHAT_IF_CSV_COLUMNS), "currency": "USD", "point": index, "gpu_allowed": gpu, "feasible": plan is not None,
        "verified": plan is not None and plan.simulated is not None, "job_requests": job.requests,
        "job_deadline_h": None if job.deadline_s is None else job.deadline_s / SECONDS_PER_HOUR, "solve_ms": None,
    }  # fmt: skip
    if plan is None:
        kind = problem_type_for(error) if error is not None else None
        constraint = error.extensions.get("constraint") if error is not None else None
        return {**row, "infeasible_problem": kind.uri if kind else None,
                "infeasible_constraint": None if constraint is None else str(constraint),
                "infeasible_reason": None if error is None else error.detail}  # fmt: skip
    group, sizing = plan.option.group, plan.sizing
    per_hour = sizing.replicas * group.price_usd_per_hour
    return {
        **row,
        "gpu": group.gpu.slug, "tp": group.tp, "replicas": sizing.replicas, "gpus_total": sizing.gpus,
        "weights_precision": group.precision.weights.slug, "kv_cache_precision": group.precision.kv_cache.slug,
        "batch_limit": plan.option.batch_limit, "chunk_tokens": plan.option.chunk_tokens, "target_rho": 1.0, "fleet_rows": 1,
        "cost_usd_per_hour": per_hour, "cost_usd_per_month": per_hour * HOURS_PER_MONTH,
        "cost_usd_per_million_output_tokens": plan.usd_per_million_output_tokens,
        "job_finish_h": sizing.finish_s / SECONDS_PER_HOUR, "job_gpu_hours": sizing.gpu_hours, "job_cost_usd": sizing.cost_usd,
        "job_throughput_rps_per_replica": plan.throughput_rps,
    }  # fmt: skip


def _swept_jobs(body: WhatIfRequest) -> list[BatchJob]:
    """The job at each value of the sweep's job axis (deadlines or sizes), the rest as the workload gives it."""
    if not isinstance(body.workload, BatchWorkloadSpec):
        raise TypeError("a job sweep needs a batch workload")
    sweep = body.sweep
    base = body.workload
    if sweep.deadlines_h is not None:
        return [job_of(base.model_copy(update={"deadline_h": hours}), body.constraints) for hours in sweep.deadlines_h]
    sizes = sweep.job_requests or []
    return [job_of(base.model_copy(update={"requests": n, "total_tokens": None}), body.constraints) for n in sizes]


def batch_plan_request(body: WhatIfRequest, constraints: PlanConstraintsSpec) -> PlanRequest:
    """The plan request a job sweep gathers its specs with (same 404s as POST /v1/plans); its first
    swept deadline stands in for the workload's."""
    if not isinstance(body.workload, BatchWorkloadSpec):
        raise TypeError("a job sweep needs a batch workload")
    first = {"deadline_h": body.sweep.deadlines_h[0]} if body.sweep.deadlines_h else {}
    return PlanRequest(
        model=body.model, workload=body.workload.model_copy(update=first), constraints=constraints,
        efficiency_profile=body.efficiency_profile, verify=body.verify, provider=body.provider, prices=body.prices,
    )  # fmt: skip


def batch_sweep_points(
    body: WhatIfRequest, inputs: PlanningInputs, pricing: Pricing, *, deadline: Deadline
) -> list[dict[str, Any]]:
    """Each point's cheapest job plan (or why none), GPU types × job values, job values fastest; as
    `api.what_if.sweep_points` answers for traffic. Pure planner work on specs already read."""
    gpu_axis: list[str | None] = list(body.sweep.gpus) if body.sweep.gpus is not None else [None]
    points: list[dict[str, Any]] = []
    for gpu in gpu_axis:
        gpus = inputs.gpus if gpu is None else tuple(g for g in inputs.gpus if g.slug == gpu)
        for job in _swept_jobs(body):
            if deadline.remaining_s() <= 0:
                raise RequestTimeoutError(timeout_s=deadline.timeout_s)  # stops an abandoned sweep between points
            started = time.perf_counter()
            plan, error = None, None
            try:
                plan = plan_batch_job(job, model=inputs.model, gpus=gpus, precisions=inputs.precisions, verify=body.verify,
                                      checkpoint=deadline.checkpoint)  # fmt: skip
            except HeadroomError as exc:
                if problem_type_for(exc).status != 422:
                    raise
                error = exc
            point = _job_point(len(points) + 1, job, gpu, plan, error)
            point["plan_ms"] = (time.perf_counter() - started) * MS_PER_S
            point["provider"] = pricing.provider
            chosen = pricing.prices.get(point["gpu"]) if point["gpu"] is not None else None
            point["price_usd_per_gpu_hour"] = None if chosen is None else chosen.on_demand_usd_per_hour
            points.append(point)
    return points
