"""Re-planning a deployment: how a stored plan fares under a new workload, SLO or catalog, what
changes between two plans, why, and whether to change at all (hysteresis).

The forward model is the planner's own replica decision (planner/planning.py): one replica of
the configuration at the per-replica rate λ·share/r, predicted by the queueing model
(`planner.queueing.predict`, no router thinning), every SLO target at the SLO's percentile, with the
plan's levers (`Levers`: its speculative draft and its prefix cache, rebuilt as planner/candidates.py
and planner/plan_prefix.py build them). A plan re-checked against the workload and catalog it was
planned with therefore always holds.

Hysteresis keeps fleets from flapping. With margin m and saving thresholds (s_frac, s_usd):

    change  ⇔  current misses an SLO at (1 + m)·λ_new
               or  (C_now − C_new) ≥ max(s_usd, s_frac · C_now)  and  C_now − C_new > 0

where C_now is the current plan's cost at today's prices and C_new the new plan's. A plan that no
longer meets the SLOs at the new rate itself is always replaced.

The forward model on a stored plan is planner/diff_check.py, and the change records this diff shares with a
class plan's (planner/class_diff.py) are planner/diff_changes.py; their public names are importable from here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from planner.diff_changes import (
    SAME_RELATIVE,
    Change,
    CostChange,
    PoolRole,
    Status,
    cost_changes,
    field_change,
    gpu_changes,
    names_in_order,
    pool_change_summary,
    status_of,
)
from planner.diff_check import (
    NO_LEVERS,
    Check,
    DeployedPool,
    DeployedPrefixCache,
    DeployedRow,
    DeployedSpeculation,
    Levers,
    RowCheck,
    check_plan,
    check_pools,
    check_row,
    format_latency,
    unavailable,
)
from planner.errors import PlannerInputError
from planner.specs import Efficiency
from planner.workload import Slo, Workload

__all__ = [
    "DEFAULT_HEADROOM_MARGIN",
    "DEFAULT_MIN_SAVING_FRACTION",
    "DEFAULT_MIN_SAVING_USD_PER_HOUR",
    "NO_LEVERS",
    "CatalogState",
    "Change",
    "Check",
    "CostChange",
    "Decision",
    "DeployedPool",
    "DeployedPrefixCache",
    "DeployedRow",
    "DeployedSpeculation",
    "Hysteresis",
    "Levers",
    "PlanDiff",
    "PlanShape",
    "PlanningContext",
    "PoolChange",
    "PoolRole",
    "Reason",
    "RowCheck",
    "ShapeRow",
    "catalog_reasons",
    "change_reasons",
    "check_plan",
    "check_pools",
    "check_row",
    "decide",
    "plan_diff",
    "pool_change_summary",
    "pool_changes_summary",
    "pool_diff",
    "unavailable",
]

#: Defaults of the hysteresis policy. Not physics: an operator's choice, stated so it can be overridden.
#: 10 % headroom is the smallest traffic step the plan's sensitivity section reports (planning.TRAFFIC_FACTORS);
#: 5 % saving is the smallest change worth a redeploy under this default.
DEFAULT_HEADROOM_MARGIN = 0.10
DEFAULT_MIN_SAVING_FRACTION = 0.05
DEFAULT_MIN_SAVING_USD_PER_HOUR = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Hysteresis:
    """Keep the current plan while it meets the SLOs at (1 + headroom_margin) × the new rate and
    switching would save less than both thresholds allow."""

    headroom_margin: float = DEFAULT_HEADROOM_MARGIN
    min_saving_fraction: float = DEFAULT_MIN_SAVING_FRACTION
    min_saving_usd_per_hour: float = DEFAULT_MIN_SAVING_USD_PER_HOUR

    def __post_init__(self) -> None:
        if not (0.0 <= self.headroom_margin <= 10.0 and math.isfinite(self.headroom_margin)):
            raise PlannerInputError(f"headroom_margin must be in [0, 10], got {self.headroom_margin}", field="headroom_margin")
        if not (0.0 <= self.min_saving_fraction <= 1.0):
            raise PlannerInputError(
                f"min_saving_fraction must be in [0, 1], got {self.min_saving_fraction}", field="min_saving_fraction"
            )
        if not (0.0 <= self.min_saving_usd_per_hour and math.isfinite(self.min_saving_usd_per_hour)):
            raise PlannerInputError(
                f"min_saving_usd_per_hour must be >= 0, got {self.min_saving_usd_per_hour}", field="min_saving_usd_per_hour"
            )


# --- the diff -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ShapeRow:
    """One configuration a plan deploys: a row of an aggregated plan (role `mixed`) or a pool of a
    disaggregated one (a prefill pool has no batch limit: its token budget is chunk_tokens)."""

    gpu: str
    tp: int
    replicas: int
    weights_precision: str
    kv_precision: str
    batch_limit: int | None
    chunk_tokens: int | None
    role: PoolRole = "mixed"
    #: Pipeline stages and expert-parallel degree of a replica (tp × pp GPUs; a plan stored without them: 1).
    pp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp * self.pp  # replicas × tp·pp GPUs


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanShape:
    """What a plan deploys: its rows (the largest first) and its cost when planned."""

    rows: tuple[ShapeRow, ...]
    cost_usd_per_hour: float
    topology: Literal["aggregated", "disaggregated"] = "aggregated"

    def __post_init__(self) -> None:
        if not self.rows:
            raise PlannerInputError("a plan shape needs at least one row")

    @property
    def main(self) -> ShapeRow:
        """The configuration the plan's `plan` block names: the first row, or a disaggregated plan's decode pool."""
        if self.topology == "disaggregated":
            return next((r for r in self.rows if r.role == "decode"), self.rows[0])
        return self.rows[0]

    def gpus_by_type(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.rows:
            counts[row.gpu] = counts.get(row.gpu, 0) + row.gpus
        return counts


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolChange:
    """One pool from one plan to the next, by role (and position among pools of that role: a mixed fleet
    has one mixed pool per configuration). `status`: added, removed, changed or same."""

    pool: str
    role: PoolRole
    status: Status
    gpu: Change
    tp: Change
    replicas: Change
    gpus: Change
    precision: Change
    batch_limit: Change
    chunk_tokens: Change
    pp: Change
    ep: Change

    def summary(self) -> str:
        """`prefill: replicas 2 → 3, gpu h100-sxm → a100-80gb-sxm` (or `decode: added`, `mixed: removed`)."""
        fields = (
            ("gpu", self.gpu),
            ("tp", self.tp),
            ("pp", self.pp),
            ("ep", self.ep),
            ("replicas", self.replicas),
            ("precision", self.precision),
            ("batch limit", self.batch_limit),
            ("chunk tokens", self.chunk_tokens),
        )
        return pool_change_summary(self.pool, self.status, fields)


def _pool_names(rows: Sequence[ShapeRow]) -> list[str]:
    """Each row's pool name: its role, numbered when a role has several rows (`mixed 1`, `mixed 2`)."""
    counts = {role: sum(1 for r in rows if r.role == role) for role in {r.role for r in rows}}
    seen: dict[str, int] = {}
    names = []
    for row in rows:
        seen[row.role] = seen.get(row.role, 0) + 1
        names.append(row.role if counts[row.role] == 1 else f"{row.role} {seen[row.role]}")
    return names


def pool_diff(before: Sequence[ShapeRow], after: Sequence[ShapeRow]) -> tuple[PoolChange, ...]:
    """Pool by pool from `before` to `after`: matched by name (role, numbered within a role), in
    before's order then after's new pools; aggregated → disaggregated is the mixed pool removed and
    a prefill and a decode pool added."""
    old = dict(zip(_pool_names(before), before, strict=True))
    new = dict(zip(_pool_names(after), after, strict=True))
    changes = []
    for name in names_in_order(list(old), list(new)):
        b, a = old.get(name), new.get(name)
        either = a if a is not None else b
        if either is None:  # unreachable: the name came from one of the two plans
            raise PlannerInputError(f"pool {name} is in neither plan")

        def field(get: Callable[[ShapeRow], object], b: ShapeRow | None = b, a: ShapeRow | None = a) -> Change:
            return field_change(get, b, a)

        changes.append(
            PoolChange(
                pool=name,
                role=either.role,
                status=status_of(b, a),
                gpu=field(lambda r: r.gpu),
                tp=field(lambda r: r.tp),
                replicas=field(lambda r: r.replicas),
                gpus=field(lambda r: r.gpus),
                precision=field(lambda r: f"{r.weights_precision}/{r.kv_precision}"),
                batch_limit=field(lambda r: r.batch_limit),
                chunk_tokens=field(lambda r: r.chunk_tokens),
                pp=field(lambda r: r.pp),
                ep=field(lambda r: r.ep),
            )
        )
    return tuple(changes)


def pool_changes_summary(before: PlanShape, after: PlanShape) -> str:
    """The pools' changes in one line: the topology's change first, then each pool that changed; `same pools` if none."""
    parts = [] if before.topology == after.topology else [f"topology {before.topology} → {after.topology}"]
    parts += [c.summary() for c in pool_diff(before.rows, after.rows) if c.status != "same"]
    return "; ".join(parts) if parts else "same pools"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanDiff:
    topology: Change
    pools: tuple[PoolChange, ...]
    gpu: Change
    tp: Change
    replicas: Change
    gpus_total: Change
    batch_limit: Change
    chunk_tokens: Change
    precision: Change
    gpus_added: dict[str, int]
    gpus_removed: dict[str, int]
    cost_usd_per_hour: CostChange
    cost_usd_per_month: CostChange
    same_configuration: bool
    #: The main configuration's pipeline stages and expert-parallel degree (the `plan` block's pp and ep).
    pp: Change
    ep: Change


def plan_diff(before: PlanShape, after: PlanShape, *, before_now_usd_per_hour: float) -> PlanDiff:
    """Field by field from the current plan to the new one; GPUs added and removed per type."""
    b, a = before.main, after.main
    gpus_total, added, removed = gpu_changes(before.gpus_by_type(), after.gpus_by_type())
    per_hour, per_month = cost_changes(before.cost_usd_per_hour, before_now_usd_per_hour, after.cost_usd_per_hour)
    return PlanDiff(
        topology=Change(before=before.topology, after=after.topology),
        pools=pool_diff(before.rows, after.rows),
        gpu=Change(before=b.gpu, after=a.gpu),
        tp=Change(before=b.tp, after=a.tp),
        replicas=Change(before=sum(r.replicas for r in before.rows), after=sum(r.replicas for r in after.rows)),
        gpus_total=gpus_total,
        batch_limit=Change(before=b.batch_limit, after=a.batch_limit),
        chunk_tokens=Change(before=b.chunk_tokens, after=a.chunk_tokens),
        precision=Change(before=f"{b.weights_precision}/{b.kv_precision}", after=f"{a.weights_precision}/{a.kv_precision}"),
        gpus_added=added,
        gpus_removed=removed,
        cost_usd_per_hour=per_hour,
        cost_usd_per_month=per_month,
        same_configuration=sorted(before.rows, key=repr) == sorted(after.rows, key=repr),
        pp=Change(before=b.pp, after=a.pp),
        ep=Change(before=b.ep, after=a.ep),
    )


# --- why ------------------------------------------------------------------------------------------------

ReasonKind = Literal["traffic", "prices", "catalog", "slo", "constraints"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reason:
    kind: ReasonKind
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanningContext:
    """What a plan was (or is now) made from, as far as the reasons for a change go."""

    workload: Workload
    slo: Slo
    constraints: Mapping[str, Any] = field(default_factory=dict)
    catalog_version: int = 0
    prices_usd_per_gpu_hour: Mapping[str, float] = field(default_factory=dict)
    efficiencies: Mapping[str, Efficiency] = field(default_factory=dict)
    model_slug: str = ""

    @property
    def catalog(self) -> CatalogState:
        return CatalogState(
            catalog_version=self.catalog_version,
            prices_usd_per_gpu_hour=self.prices_usd_per_gpu_hour,
            efficiencies=self.efficiencies,
        )


def _differs(a: float, b: float) -> bool:
    return abs(a - b) > SAME_RELATIVE * max(abs(a), abs(b), 1.0)


def _traffic_changes(before: Workload, after: Workload) -> list[str]:
    changes = []
    if _differs(before.arrival_rate_rps, after.arrival_rate_rps):
        ratio = after.arrival_rate_rps / before.arrival_rate_rps - 1.0
        changes.append(f"arrival rate {before.arrival_rate_rps:g} → {after.arrival_rate_rps:g} rps ({ratio:+.0%})")
    for name, b, a in (
        ("prompt", before.prompt_tokens, after.prompt_tokens),
        ("output", before.output_tokens, after.output_tokens),
    ):
        if b != a:
            changes.append(f"{name} length mean {b.mean:.4g} → {a.mean:.4g} tokens")
    if _differs(before.arrival_cv, after.arrival_cv):
        changes.append(f"arrival CV {before.arrival_cv:g} → {after.arrival_cv:g}")
    return changes


def _shown(metric: str, value: float | None) -> str:
    return "none" if value is None else format_latency(metric, value)


def _slo_changes(before: Slo, after: Slo) -> list[str]:
    changes = []
    for metric in ("ttft", "tpot", "e2e"):
        b, a = getattr(before, f"{metric}_s"), getattr(after, f"{metric}_s")
        if b != a:
            changes.append(f"{metric.upper()} target {_shown(metric, b)} → {_shown(metric, a)}")
    if before.percentile != after.percentile:
        changes.append(f"percentile p{before.percentile:g} → p{after.percentile:g}")
    return changes


def change_reasons(then: PlanningContext, now: PlanningContext, *, gpus_involved: Sequence[str]) -> tuple[Reason, ...]:
    """Why a re-plan can differ from the plan made `then`: traffic, SLO, constraints, prices of the
    GPUs involved, other catalog changes (efficiencies, or any write that moved the catalog version)."""
    reasons: list[Reason] = []
    traffic = _traffic_changes(then.workload, now.workload)
    if traffic:
        reasons.append(Reason(kind="traffic", detail="; ".join(traffic)))
    slo = _slo_changes(then.slo, now.slo)
    if slo:
        reasons.append(Reason(kind="slo", detail="; ".join(slo)))
    if dict(then.constraints) != dict(now.constraints) or then.model_slug != now.model_slug:
        reasons.append(Reason(kind="constraints", detail="the model or the plan's constraints changed"))
    return (*reasons, *catalog_reasons(then.catalog, now.catalog, gpus_involved=gpus_involved))


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogState:
    """The catalog as far as a plan's GPUs go: its version, their on-demand prices and efficiencies."""

    catalog_version: int = 0
    prices_usd_per_gpu_hour: Mapping[str, float] = field(default_factory=dict)
    efficiencies: Mapping[str, Efficiency] = field(default_factory=dict)


def catalog_reasons(then: CatalogState, now: CatalogState, *, gpus_involved: Sequence[str]) -> tuple[Reason, ...]:
    """The catalog's part of `change_reasons` (a class plan's re-plan uses it alone): prices of the
    GPUs involved, their efficiencies, or any other write that moved the catalog version."""
    reasons: list[Reason] = []
    prices = [
        f"{gpu} ${then.prices_usd_per_gpu_hour[gpu]:.4g} → ${now.prices_usd_per_gpu_hour[gpu]:.4g}/GPU-h"
        for gpu in dict.fromkeys(gpus_involved)
        if gpu in then.prices_usd_per_gpu_hour
        and gpu in now.prices_usd_per_gpu_hour
        and _differs(then.prices_usd_per_gpu_hour[gpu], now.prices_usd_per_gpu_hour[gpu])
    ]
    if prices:
        reasons.append(Reason(kind="prices", detail="; ".join(prices)))
    if then.catalog_version != now.catalog_version:
        efficiencies = [
            f"{gpu} efficiencies changed"
            for gpu in dict.fromkeys(gpus_involved)
            if gpu in then.efficiencies and gpu in now.efficiencies and then.efficiencies[gpu] != now.efficiencies[gpu]
        ]
        if efficiencies or not prices:
            what = "; ".join(efficiencies) if efficiencies else "other records changed"
            reasons.append(
                Reason(kind="catalog", detail=f"catalog version {then.catalog_version} → {now.catalog_version}: {what}")
            )
    return tuple(reasons)


# --- the decision -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    changed: bool
    reason: str
    saving_usd_per_hour: float
    threshold_usd_per_hour: float


def decide(*, at_rate: Check, with_margin: Check, diff: PlanDiff, hysteresis: Hysteresis) -> Decision:
    """Keep the current plan or switch to the new one (module docstring): `at_rate` is the current plan
    at the new rate, `with_margin` at (1 + margin) × the new rate."""
    current_now = diff.cost_usd_per_hour.before_now
    saving = -diff.cost_usd_per_hour.change  # C_now − C_new
    threshold = (
        max(hysteresis.min_saving_usd_per_hour, hysteresis.min_saving_fraction * current_now)
        if math.isfinite(current_now)
        else 0.0
    )
    margin = f"{1.0 + hysteresis.headroom_margin:g}×"

    def result(changed: bool, reason: str) -> Decision:
        return Decision(changed=changed, reason=reason, saving_usd_per_hour=saving, threshold_usd_per_hour=threshold)

    if diff.same_configuration:
        return result(False, "the new plan is the current configuration; nothing to change")
    if not at_rate.meets_slo:
        return result(True, f"the current plan no longer meets the SLOs at the new rate ({at_rate.summary})")
    if not with_margin.meets_slo:
        return result(True, f"the current plan meets the SLOs at the new rate but not at {margin} it ({with_margin.summary})")
    if saving > 0 and saving >= threshold:
        return result(
            True,
            f"the current plan still meets the SLOs at {margin} the new rate, but switching saves "
            f"${saving:.2f}/h (≥ ${threshold:.2f}/h)",
        )
    if saving <= 0:
        return result(
            False,
            f"the current plan still meets the SLOs at {margin} the new rate ({with_margin.summary}) "
            f"and the new plan would not be cheaper (${-saving:.2f}/h more)",
        )
    return result(
        False,
        f"the current plan still meets the SLOs at {margin} the new rate ({with_margin.summary}) "
        f"and switching would save only ${saving:.2f}/h (< ${threshold:.2f}/h)",
    )
