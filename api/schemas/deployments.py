"""Bodies of the deployment routes: a named deployment's settings and hysteresis, its plan history,
re-planning with a diff and the hysteresis decision, and the recheck of a stored plan.

Latencies at the edge are milliseconds (`*_ms`) except end-to-end (`e2e_s`); costs are US dollars
per hour and per month of 730 hours.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.schemas.catalog import Page, Slug
from api.schemas.classes import MAX_CLASSES, ClassesPlanResponse, TrafficClassSpec
from api.schemas.plan_response import PlanResponse, PoolRead
from api.schemas.plans import PlanConstraintsSpec, PlanRequest, PlanSlo
from api.schemas.workload import WorkloadSpec
from planner.class_diff import ClassPlanDiff
from planner.diff import (
    DEFAULT_HEADROOM_MARGIN,
    DEFAULT_MIN_SAVING_FRACTION,
    DEFAULT_MIN_SAVING_USD_PER_HOUR,
    Change,
    Check,
    Hysteresis,
    PlanDiff,
    Reason,
)
from planner.units import MS_PER_S

CURRENCY = "USD"


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class HysteresisSpec(_Input):
    """When a re-plan keeps the current plan: it still meets the SLOs at (1 + `headroom_margin`) × the
    new rate, and switching would save less than `min_saving_usd_per_hour` or less than
    `min_saving_fraction` of its cost (whichever is larger). A plan that misses the SLOs is always replaced."""

    headroom_margin: float = Field(
        default=DEFAULT_HEADROOM_MARGIN,
        ge=0,
        le=10,
        allow_inf_nan=False,
        description="Traffic headroom the current plan must still have (0.1 = 10 % above the new rate).",
    )
    min_saving_fraction: float = Field(
        default=DEFAULT_MIN_SAVING_FRACTION,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Smallest saving worth a change, as a fraction of the current plan's cost.",
    )
    min_saving_usd_per_hour: float = Field(
        default=DEFAULT_MIN_SAVING_USD_PER_HOUR,
        ge=0,
        le=1e9,
        allow_inf_nan=False,
        description="Smallest saving worth a change, USD per hour.",
    )

    def to_hysteresis(self) -> Hysteresis:
        return Hysteresis(
            headroom_margin=self.headroom_margin,
            min_saving_fraction=self.min_saving_fraction,
            min_saving_usd_per_hour=self.min_saving_usd_per_hour,
        )


class DeploymentPut(_Input):
    """A deployment's planning settings (as POST /v1/plans takes them) and its hysteresis."""

    model: Slug = Field(description="Model to serve (a catalog slug).", examples=["llama-3.1-8b"])
    workload: WorkloadSpec
    slo: PlanSlo
    constraints: PlanConstraintsSpec = Field(default_factory=PlanConstraintsSpec)
    efficiency_profile: Slug = Field(default="calibrated", description="As in POST /v1/plans.")
    verify: bool = Field(default=True, description="Verify each plan in the simulator.")
    hysteresis: HysteresisSpec = Field(default_factory=HysteresisSpec)

    def plan_request(self, name: str) -> PlanRequest:
        return PlanRequest.model_validate({**self.model_dump(mode="json", exclude={"hysteresis"}), "name": name})


class DeploymentSummary(BaseModel):
    name: str
    current_plan_id: str | None
    gpu: str | None = Field(description="GPU type of the current plan's largest row (a disaggregated plan's decode pool).")
    replicas: int | None
    gpus_total: int | None
    topology: Literal["aggregated", "disaggregated"] | None = Field(
        default=None, description="The current plan's topology (separate prefill and decode pools or not); null without a plan."
    )
    arrangement: str | None = Field(
        default=None, description="A class plan's chosen arrangement (docs/traffic-classes.md); null for a one-workload plan."
    )
    cost_usd_per_hour: float | None = Field(description="Current plan's on-demand cost as planned.")
    cost_usd_per_month: float | None = Field(description="730 hours.")
    cost_usd_per_million_output_tokens: float | None = Field(
        default=None, description="Current plan's cost per million output tokens."
    )
    currency: str = CURRENCY
    version: int = Field(description="Row version (ETag) for If-Match on PUT.")
    updated_at: datetime


class DeploymentPage(Page[DeploymentSummary]):
    """A page of deployments, by name."""


class DeploymentRead(BaseModel):
    name: str
    settings: dict[str, Any] = Field(description="The plan request (model, workload, slo, constraints, …) re-plans start from.")
    hysteresis: HysteresisSpec
    current_plan_id: str | None
    current_plan: PlanResponse | ClassesPlanResponse | None = Field(
        description="The plan in force (a class plan's as ClassesPlanResponse); null until the first plan."
    )
    plans_total: int = Field(description="Plans in the deployment's history.")
    version: int = Field(description="Row version (ETag) for If-Match on PUT.")
    created_at: datetime
    updated_at: datetime


class PlanHistoryItem(BaseModel):
    id: str
    created_at: datetime
    current: bool = Field(description="Whether this is the deployment's plan in force.")
    catalog_version: int
    arrival_rate_rps: float
    gpu: str
    tp: int
    replicas: int
    gpus_total: int
    precision: str = Field(description="weights/kv_cache.")
    batch_limit: int
    topology: Literal["aggregated", "disaggregated"] = Field(
        default="aggregated",
        description="Separate prefill and decode pools or not; a disaggregated plan's gpu, tp and batch_limit are its decode "
        "pool's, replicas and gpus_total count both pools.",
    )
    pools: list[PoolRead] = Field(default_factory=list, description="The plan's pools (plan.pools; a class plan's pools).")
    arrangement: str | None = Field(
        default=None, description="A class plan's chosen arrangement; its gpu, tp and batch_limit are its largest pool's."
    )
    cost_usd_per_hour: float
    cost_usd_per_month: float = Field(description="730 hours.")
    cost_usd_per_million_output_tokens: float | None = Field(default=None, description="As the plan answered it.")
    currency: str = CURRENCY


class PlanHistoryPage(Page[PlanHistoryItem]):
    """A page of a deployment's plans, newest first."""


class ReplanRequest(_Input):
    """What changed: a whole new workload, or only its arrival rate; optionally new SLOs, constraints.
    A class deployment takes new classes or new rates by class instead (docs/traffic-classes.md).
    Members omitted keep the deployment's settings."""

    workload: WorkloadSpec | None = Field(default=None, description="The new forecast (replaces the deployment's workload).")
    arrival_rate_rps: float | None = Field(
        default=None, gt=0, le=1e7, allow_inf_nan=False, description="Only a new arrival rate; lengths stay as they are."
    )
    slo: PlanSlo | None = None
    constraints: PlanConstraintsSpec | None = None
    verify: bool | None = Field(default=None, description="Override the deployment's `verify` for this re-plan.")
    classes: list[TrafficClassSpec] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CLASSES,
        description="A class deployment's new classes (replace its classes; as POST /v1/plans takes them).",
    )
    class_rates_rps: dict[str, Annotated[float, Field(gt=0, le=1e7, allow_inf_nan=False)]] | None = Field(
        default=None,
        description="A class deployment's new arrival rates by class name; the classes not named keep theirs.",
        examples=[{"chat": 80}],
    )

    @model_validator(mode="after")
    def _one_traffic(self) -> Self:
        if self.workload is not None and self.arrival_rate_rps is not None:
            raise ValueError("give either workload or arrival_rate_rps, not both")
        if self.classes is not None and self.class_rates_rps is not None:
            raise ValueError("give either classes or class_rates_rps, not both")
        one_workload = self.workload is not None or self.arrival_rate_rps is not None or self.slo is not None
        if one_workload and (self.classes is not None or self.class_rates_rps is not None):
            raise ValueError("workload, arrival_rate_rps and slo re-plan a one-workload deployment; classes and "
                             "class_rates_rps a class deployment: give one kind")  # fmt: skip
        return self

    def for_classes(self) -> bool:
        """Whether the request names classes (a class deployment's re-plan)."""
        return self.classes is not None or self.class_rates_rps is not None

    def for_one_workload(self) -> bool:
        """Whether the request names a workload, a rate or SLOs (a one-workload deployment's re-plan)."""
        return self.workload is not None or self.arrival_rate_rps is not None or self.slo is not None


class ChangeRead(BaseModel):
    before: Any
    after: Any
    changed: bool


class CostChangeRead(BaseModel):
    before: float = Field(description="The current plan's cost as planned.")
    before_now: float | None = Field(description="The current plan at today's catalog prices (null if its GPU left the catalog).")
    after: float = Field(description="The new plan's cost.")
    change: float | None = Field(description="after − before_now: what switching adds to (negative: saves from) today's bill.")


class ReasonRead(BaseModel):
    kind: Literal["traffic", "prices", "catalog", "slo", "constraints"]
    detail: str


class PoolChangeRead(BaseModel):
    """One pool from the current plan to the new one, matched by role (numbered when a mixed fleet has several)."""

    pool: str = Field(description="`prefill`, `decode`, `mixed`, or `mixed 2`… for a mixed fleet's configurations.")
    role: Literal["prefill", "decode", "mixed"]
    status: Literal["added", "removed", "changed", "same"]
    summary: str = Field(description="The pool's change in words, e.g. `prefill: replicas 2 → 3`.")
    gpu: ChangeRead
    tp: ChangeRead
    replicas: ChangeRead
    gpus: ChangeRead
    precision: ChangeRead = Field(description="weights/kv_cache.")
    batch_limit: ChangeRead
    chunk_tokens: ChangeRead
    pp: ChangeRead = Field(description="Pipeline stages of a replica (tp × pp GPUs; `gpus` counts them).")
    ep: ChangeRead = Field(description="Expert-parallel degree of a replica (1: experts tensor-split).")


class PlanDiffRead(BaseModel):
    topology: ChangeRead = Field(description="`aggregated` or `disaggregated`, before and after.")
    pools: list[PoolChangeRead] = Field(
        description="Pool by pool: aggregated → disaggregated is the mixed pool removed and a prefill and a decode pool added."
    )
    gpu: ChangeRead
    tp: ChangeRead
    replicas: ChangeRead
    gpus_total: ChangeRead
    batch_limit: ChangeRead
    chunk_tokens: ChangeRead
    precision: ChangeRead
    pp: ChangeRead = Field(description="The main configuration's pipeline stages (the plan block's pp).")
    ep: ChangeRead = Field(description="The main configuration's expert-parallel degree (the plan block's ep).")
    gpus_added: dict[str, int] = Field(description="GPUs per type the new plan has beyond the current one.")
    gpus_removed: dict[str, int] = Field(description="GPUs per type the new plan releases.")
    cost_usd_per_hour: CostChangeRead
    cost_usd_per_month: CostChangeRead = Field(description="730 hours.")
    currency: str = CURRENCY
    same_configuration: bool
    why: list[ReasonRead] = Field(
        description="What differs from when the current plan was made: traffic, slo, constraints, prices, catalog."
    )


class PredictedRead(BaseModel):
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_s: float | None = None


class RowCheckRead(BaseModel):
    role: Literal["mixed", "prefill", "decode"] = Field(
        default="mixed", description="The row's pool: `mixed` for an aggregated plan's rows, else prefill or decode."
    )
    gpu: str
    per_replica_rate_rps: float
    meets_slo: bool
    unstable: bool
    utilisation: float | None
    predicted: PredictedRead = Field(description="At the SLO's percentile, by the queueing model.")
    misses: list[str]
    problem: str | None


class CheckRead(BaseModel):
    """A stored plan under the forward model (one replica at λ·share/r, the queueing model)."""

    arrival_rate_rps: float
    meets_slo: bool
    summary: str
    cost_usd_per_hour: float | None = Field(description="At today's prices; null when its GPU left the catalog.")
    rows: list[RowCheckRead]


class CurrentPlanCheck(BaseModel):
    at_new_rate: CheckRead
    with_margin: CheckRead = Field(description="At (1 + headroom_margin) × the new rate.")


class ReplanResponse(BaseModel):
    deployment: str
    changed: bool = Field(description="Whether the deployment now runs the new plan.")
    reason: str = Field(description="Why it changed or kept the current plan.")
    current: str = Field(description="Id of the plan in force before this re-plan (the diff's `before`).")
    adopted: str = Field(description="Id of the plan in force after it: `plan.id` when changed, else `current`.")
    plan: PlanResponse = Field(description="The new plan (stored in the deployment's history either way).")
    diff: PlanDiffRead
    current_check: CurrentPlanCheck
    hysteresis: HysteresisSpec
    saving_usd_per_hour: float | None = Field(description="Current plan at today's prices − new plan.")
    threshold_usd_per_hour: float = Field(description="Smallest saving the hysteresis accepts for this change.")


class ClassPoolChangeRead(BaseModel):
    """One pool of a class plan from the current plan to the new one, matched by name."""

    pool: str = Field(description="The pool's name as the arrangement names it (`chat`, `shared`, `deferred`, …).")
    status: Literal["added", "removed", "changed", "same"]
    summary: str = Field(description="The pool's change in words, e.g. `chat: replicas 3 → 4`.")
    classes: ChangeRead = Field(description="The classes the pool serves.")
    scheduling: ChangeRead = Field(description="`fcfs` or `priority`.")
    gpu: ChangeRead
    tp: ChangeRead
    replicas: ChangeRead
    gpus: ChangeRead
    precision: ChangeRead = Field(description="weights/kv_cache.")
    batch_limit: ChangeRead
    chunk_tokens: ChangeRead


class ClassChangeRead(BaseModel):
    """One class from the current plan to the new one: its rate, its pool and its latencies at its percentile."""

    name: str
    status: Literal["added", "removed", "changed", "same"]
    arrival_rate_rps: ChangeRead
    pool: ChangeRead
    percentile: ChangeRead
    ttft_ms: ChangeRead
    tpot_ms: ChangeRead
    e2e_s: ChangeRead
    meets_target: ChangeRead
    shed_fraction: ChangeRead


class ClassPlanDiffRead(BaseModel):
    arrangement: ChangeRead = Field(description="The chosen arrangement (`segregated`, `shared_priority`, …), before and after.")
    pools: list[ClassPoolChangeRead] = Field(description="Pool by pool, matched by name.")
    classes: list[ClassChangeRead] = Field(description="Class by class, matched by name.")
    summary: str = Field(description="The arrangement's and pools' changes in one line.")
    replicas: ChangeRead = Field(description="Summed over the pools.")
    gpus_total: ChangeRead
    gpus_added: dict[str, int] = Field(description="GPUs per type the new plan has beyond the current one.")
    gpus_removed: dict[str, int] = Field(description="GPUs per type the new plan releases.")
    cost_usd_per_hour: CostChangeRead
    cost_usd_per_month: CostChangeRead = Field(description="730 hours.")
    currency: str = CURRENCY
    same_configuration: bool = Field(description="The same arrangement and every pool the same.")
    why: list[ReasonRead] = Field(description="What differs from when the current plan was made: traffic, constraints, prices.")


class ClassesReplanResponse(BaseModel):
    """A class deployment's re-plan: the new class plan, its diff and the adoption decision
    (docs/traffic-classes.md, "Re-planning a class deployment")."""

    deployment: str
    changed: bool = Field(description="Whether the deployment now runs the new plan.")
    reason: str = Field(description="Why it changed or kept the current plan.")
    current: str = Field(description="Id of the plan in force before this re-plan (the diff's `before`).")
    adopted: str = Field(description="Id of the plan in force after it: `plan.id` when changed, else `current`.")
    plan: ClassesPlanResponse = Field(description="The new class plan (stored in the deployment's history either way).")
    diff: ClassPlanDiffRead
    hysteresis: HysteresisSpec
    saving_usd_per_hour: float = Field(description="Current plan at today's prices (as planned if unpriceable) − new plan.")
    threshold_usd_per_hour: float = Field(description="The hysteresis threshold on the current plan's cost as planned.")
    current_check: ClassesCurrentCheck | None = Field(
        default=None,
        description="The plan in force's pools at the new classes' rates and at (1 + headroom_margin) × them, by the "
        "queueing model (planner/class_check.py); null when the deployment had no plan in force.",
    )


class ClassCheckRead(BaseModel):
    """One class on a stored class plan's pools (planner/class_check.py)."""

    name: str
    pool: str
    arrival_rate_rps: float
    percentile: float
    ttft_ms: float | None = Field(description="The queueing model's, at `percentile`; null when not checked.")
    tpot_ms: float | None
    e2e_s: float | None
    shed_fraction: float
    utilisation: float | None = Field(description="The pool's ρ per replica.")
    simulated_ttft_p99_ms: float | None = Field(
        default=None,
        description="The simulator's (null when not simulated): p99 for an FCFS pool, a priority pool's at `percentile`, "
        "a deferred plan's interactive class's the worst period of its day run.",
    )
    simulated_tpot_p99_ms: float | None = None
    simulated_e2e_p99_s: float | None = None
    meets_target: bool
    checked: bool = Field(description="False for a deferred class (a day schedule, not re-run) or a pool not evaluable.")
    problem: str | None = None
    simulated_shed_fraction: float | None = Field(
        default=None, description="A priority pool's refused fraction in the step-level class simulator (null otherwise)."
    )


class ClassPlanCheckRead(BaseModel):
    load_factor: float = Field(description="The classes' rates were multiplied by this.")
    meets_targets: bool = Field(description="Every class that could be checked meets its target.")
    summary: str
    simulated: bool
    classes: list[ClassCheckRead]


class ClassesCurrentCheck(BaseModel):
    at_new_rate: ClassPlanCheckRead
    with_margin: ClassPlanCheckRead = Field(description="At (1 + headroom_margin) × the new classes' rates.")


class ClassesRecheckResponse(BaseModel):
    """A stored class plan on today's catalog: its pools judged at its own classes (queueing model and
    simulators, planner/class_check.py), its cost now against when planned, and what changed."""

    plan_id: str
    arrangement: str
    holds: bool = Field(description="Whether every class that could be checked still meets its target.")
    summary: str
    check: ClassPlanCheckRead
    cost: RecheckCost
    catalog_version_then: int
    catalog_version_now: int
    changes: list[ReasonRead]
    checked_at: datetime


ClassesReplanResponse.model_rebuild()  # its current_check is defined after it


class RecheckCost(BaseModel):
    then_usd_per_hour: float
    now_usd_per_hour: float | None
    change_usd_per_hour: float | None
    then_usd_per_month: float
    now_usd_per_month: float | None
    currency: str = CURRENCY


class RecheckResponse(BaseModel):
    plan_id: str
    holds: bool = Field(description="Whether the plan still meets its SLOs at its workload with today's catalog.")
    summary: str
    check: CheckRead
    cost: RecheckCost
    catalog_version_then: int
    catalog_version_now: int
    changes: list[ReasonRead] = Field(
        description="What differs in the catalog for this plan's GPUs (prices, efficiencies, other records)."
    )
    checked_at: datetime


# --- planner values → JSON ---------------------------------------------------------------------------


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else value  # NaN marks "unknown" in the planner's dataclasses


def check_read(check: Check) -> dict[str, Any]:
    rows = []
    for row in check.rows:
        predicted: dict[str, float | None] = {}
        for metric, seconds in row.predicted_s.items():
            predicted["e2e_s" if metric == "e2e" else f"{metric}_ms"] = seconds if metric == "e2e" else seconds * MS_PER_S
        rows.append(
            {
                "role": row.role,
                "gpu": row.gpu,
                "per_replica_rate_rps": row.per_replica_rate_rps,
                "meets_slo": row.meets_slo,
                "unstable": row.unstable,
                "utilisation": row.utilisation,
                "predicted": predicted,
                "misses": list(row.misses),
                "problem": row.problem,
            }
        )
    return {
        "arrival_rate_rps": check.arrival_rate_rps,
        "meets_slo": check.meets_slo,
        "summary": check.summary,
        "cost_usd_per_hour": _none_if_nan(check.cost_usd_per_hour),
        "rows": rows,
    }


def reasons_read(reasons: tuple[Reason, ...]) -> list[dict[str, str]]:
    return [{"kind": r.kind, "detail": r.detail} for r in reasons]


def _change(c: Any) -> dict[str, Any]:
    before, after = (list(v) if isinstance(v, tuple) else v for v in (c.before, c.after))  # a pool's classes
    return {"before": before, "after": after, "changed": c.changed}


def _ms(c: Change) -> dict[str, Any]:
    """A latency change in seconds as milliseconds."""
    return {
        "before": None if c.before is None else c.before * MS_PER_S,
        "after": None if c.after is None else c.after * MS_PER_S,
        "changed": c.changed,
    }


def class_diff_read(diff: ClassPlanDiff, reasons: tuple[Reason, ...]) -> dict[str, Any]:
    def cost(c: Any) -> dict[str, Any]:
        return {"before": c.before, "before_now": _none_if_nan(c.before_now), "after": c.after, "change": _none_if_nan(c.change)}

    pool_fields = ("classes", "scheduling", "gpu", "tp", "replicas", "gpus", "precision", "batch_limit", "chunk_tokens")
    class_fields = ("arrival_rate_rps", "pool", "percentile", "e2e_s", "meets_target", "shed_fraction")
    return {
        "arrangement": _change(diff.arrangement),
        "pools": [
            {"pool": p.pool, "status": p.status, "summary": p.summary(), **{n: _change(getattr(p, n)) for n in pool_fields}}
            for p in diff.pools
        ],
        "classes": [
            {
                "name": k.name,
                "status": k.status,
                **{n: _change(getattr(k, n)) for n in class_fields},
                "ttft_ms": _ms(k.ttft_s),
                "tpot_ms": _ms(k.tpot_s),
            }
            for k in diff.classes
        ],
        "summary": diff.pools_summary(),
        "replicas": _change(diff.replicas),
        "gpus_total": _change(diff.gpus_total),
        "gpus_added": diff.gpus_added,
        "gpus_removed": diff.gpus_removed,
        "cost_usd_per_hour": cost(diff.cost_usd_per_hour),
        "cost_usd_per_month": cost(diff.cost_usd_per_month),
        "same_configuration": diff.same_configuration,
        "why": reasons_read(reasons),
    }


def diff_read(diff: PlanDiff, reasons: tuple[Reason, ...]) -> dict[str, Any]:
    def change(c: Any) -> dict[str, Any]:
        return {"before": c.before, "after": c.after, "changed": c.changed}

    def cost(c: Any) -> dict[str, Any]:
        return {"before": c.before, "before_now": _none_if_nan(c.before_now), "after": c.after, "change": _none_if_nan(c.change)}

    return {
        "topology": change(diff.topology),
        "pools": [
            {
                "pool": p.pool,
                "role": p.role,
                "status": p.status,
                "summary": p.summary(),
                **{
                    name: change(getattr(p, name))
                    for name in ("gpu", "tp", "pp", "ep", "replicas", "gpus", "precision", "batch_limit", "chunk_tokens")
                },
            }
            for p in diff.pools
        ],
        "gpu": change(diff.gpu),
        "tp": change(diff.tp),
        "replicas": change(diff.replicas),
        "gpus_total": change(diff.gpus_total),
        "batch_limit": change(diff.batch_limit),
        "chunk_tokens": change(diff.chunk_tokens),
        "precision": change(diff.precision),
        "pp": change(diff.pp),
        "ep": change(diff.ep),
        "gpus_added": diff.gpus_added,
        "gpus_removed": diff.gpus_removed,
        "cost_usd_per_hour": cost(diff.cost_usd_per_hour),
        "cost_usd_per_month": cost(diff.cost_usd_per_month),
        "same_configuration": diff.same_configuration,
        "why": reasons_read(reasons),
    }
