"""Re-planning a class deployment: what changes between two class plans (planner/plan_classes.py),
pool by pool and class by class, and whether to adopt the new one.

The diff is planner/diff.py's, for a class plan's shape: its chosen arrangement, its pools matched
by name (`chat`, `shared`, `deferred`, … as the arrangement names them), each with its classes,
scheduling and configuration, and each class's arrival rate, pool and predicted latencies at its
percentile.

Adoption. The current plan's pools are judged at the new classes' rates and at (1 + m) × them by
the forward model of a class plan (planner/class_check.py), as a one-workload plan is (planner/diff.py
`decide`), m the deployment's headroom margin:

    same arrangement and pools:  adopt  ⇔  |C_new − C_then| > 0  and  |C_new − C_then| ≥ T
    other arrangement or pools:  adopt  ⇔  the current pools miss a class's target at the new rates
                                           or  at (1 + m) × them
                                           or  C_now − C_new ≥ T  (and > 0)
                                           or  some class of the current plan cannot be checked

where C_then is the current plan's cost as planned, C_now at today's prices (as planned when it
cannot be priced), C_new the new plan's, and T = max(s_usd, s_frac · C_then) with (s_usd, s_frac)
the deployment's hysteresis thresholds (planner.diff.Hysteresis). A current plan that cannot be
checked (a deferred arrangement's background classes run on a day schedule this model does not
re-run; a GPU gone from the catalog) gives no grounds to keep it: its change is adopted. The same
pools at another price are the same deployment; their new plan is adopted only when its cost moved
beyond the threshold, so the plan in force states today's cost without a price moving by noise
churning it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from planner.diff import CatalogState, Decision, Hysteresis, Reason, ShapeRow, catalog_reasons
from planner.diff_changes import (
    SAME_RELATIVE,
    Change,
    CostChange,
    Status,
    cost_changes,
    field_change,
    gpu_changes,
    names_in_order,
    pool_change_summary,
    status_of,
)
from planner.errors import PlannerInputError
from planner.traffic_classes import TrafficClass

if TYPE_CHECKING:  # the forward model of a class plan (planner/class_check.py) plans; this module only compares
    from planner.class_check import ClassPlanCheck


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassPoolShape:
    """One pool of a class plan: its name, the classes it serves, its scheduling and its configuration."""

    name: str
    classes: tuple[str, ...]
    scheduling: Literal["fcfs", "priority"]
    row: ShapeRow
    #: The shedding arrangement's admission limit per shed class, (class, K) in the pool's order: a
    #: setting the pool is deployed with (its router refuses at K), so another K is another pool.
    admission_limits: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassFigures:
    """One class of a class plan: its rate, its pool and its predicted latencies at its percentile (seconds)."""

    name: str
    pool: str
    arrival_rate_rps: float
    percentile: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    meets_target: bool
    shed_fraction: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassPlanShape:
    """What a class plan deploys and predicts: its arrangement, pools, classes and cost when planned."""

    arrangement: str
    pools: tuple[ClassPoolShape, ...]
    classes: tuple[ClassFigures, ...]
    cost_usd_per_hour: float

    def __post_init__(self) -> None:
        if not self.pools:
            raise PlannerInputError("a class plan shape needs at least one pool")

    def gpus_by_type(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pool in self.pools:
            counts[pool.row.gpu] = counts.get(pool.row.gpu, 0) + pool.row.gpus
        return counts


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassPoolChange:
    """One pool from the current class plan to the new one, matched by name."""

    pool: str
    status: Status
    classes: Change
    scheduling: Change
    gpu: Change
    tp: Change
    replicas: Change
    gpus: Change
    precision: Change
    batch_limit: Change
    chunk_tokens: Change
    admission_limits: Change

    def summary(self) -> str:
        """`chat: replicas 3 → 4` (or `shared: added`, `summarise: removed`, `chat: same`)."""
        fields = (
            ("classes", self.classes),
            ("scheduling", self.scheduling),
            ("gpu", self.gpu),
            ("tp", self.tp),
            ("replicas", self.replicas),
            ("precision", self.precision),
            ("batch limit", self.batch_limit),
            ("chunk tokens", self.chunk_tokens),
            ("admission limit", self.admission_limits),
        )
        return pool_change_summary(self.pool, self.status, fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassChange:
    """One class from the current class plan to the new one, matched by name: its rate, pool and latencies."""

    name: str
    status: Status
    arrival_rate_rps: Change
    pool: Change
    percentile: Change
    ttft_s: Change
    tpot_s: Change
    e2e_s: Change
    meets_target: Change
    shed_fraction: Change


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassPlanDiff:
    arrangement: Change
    pools: tuple[ClassPoolChange, ...]
    classes: tuple[ClassChange, ...]
    replicas: Change
    gpus_total: Change
    gpus_added: dict[str, int]
    gpus_removed: dict[str, int]
    cost_usd_per_hour: CostChange
    cost_usd_per_month: CostChange
    same_configuration: bool

    def pools_summary(self) -> str:
        """The arrangement's and the pools' changes in one line; `same arrangement and pools` if none."""
        parts = [] if not self.arrangement.changed else [f"arrangement {self.arrangement.before} → {self.arrangement.after}"]
        parts += [p.summary() for p in self.pools if p.status != "same"]
        return "; ".join(parts) if parts else "same arrangement and pools"


def _pool_changes(before: Sequence[ClassPoolShape], after: Sequence[ClassPoolShape]) -> tuple[ClassPoolChange, ...]:
    old, new = {p.name: p for p in before}, {p.name: p for p in after}
    changes = []
    for name in names_in_order(list(old), list(new)):
        b, a = old.get(name), new.get(name)

        def field(get: Callable[[ClassPoolShape], object], b: ClassPoolShape | None = b, a: ClassPoolShape | None = a) -> Change:
            return field_change(get, b, a)

        changes.append(
            ClassPoolChange(
                pool=name,
                status=status_of(b, a),
                classes=field(lambda p: p.classes),
                scheduling=field(lambda p: p.scheduling),
                gpu=field(lambda p: p.row.gpu),
                tp=field(lambda p: p.row.tp),
                replicas=field(lambda p: p.row.replicas),
                gpus=field(lambda p: p.row.gpus),
                precision=field(lambda p: f"{p.row.weights_precision}/{p.row.kv_precision}"),
                batch_limit=field(lambda p: p.row.batch_limit),
                chunk_tokens=field(lambda p: p.row.chunk_tokens),
                admission_limits=field(lambda p: tuple(f"{n} {k}" for n, k in p.admission_limits) or "none"),
            )
        )
    return tuple(changes)


def _class_changes(before: Sequence[ClassFigures], after: Sequence[ClassFigures]) -> tuple[ClassChange, ...]:
    old, new = {k.name: k for k in before}, {k.name: k for k in after}
    changes = []
    for name in names_in_order(list(old), list(new)):
        b, a = old.get(name), new.get(name)

        def field(get: Callable[[ClassFigures], object], b: ClassFigures | None = b, a: ClassFigures | None = a) -> Change:
            return field_change(get, b, a)

        changes.append(
            ClassChange(
                name=name,
                status=status_of(b, a),
                arrival_rate_rps=field(lambda k: k.arrival_rate_rps),
                pool=field(lambda k: k.pool),
                percentile=field(lambda k: k.percentile),
                ttft_s=field(lambda k: k.ttft_s),
                tpot_s=field(lambda k: k.tpot_s),
                e2e_s=field(lambda k: k.e2e_s),
                meets_target=field(lambda k: k.meets_target),
                shed_fraction=field(lambda k: k.shed_fraction),
            )
        )
    return tuple(changes)


def class_plan_diff(before: ClassPlanShape, after: ClassPlanShape, *, before_now_usd_per_hour: float) -> ClassPlanDiff:
    """Pool by pool and class by class from the current class plan to the new one; GPUs added and removed per type."""
    gpus_total, added, removed = gpu_changes(before.gpus_by_type(), after.gpus_by_type())
    per_hour, per_month = cost_changes(before.cost_usd_per_hour, before_now_usd_per_hour, after.cost_usd_per_hour)
    pools = _pool_changes(before.pools, after.pools)
    return ClassPlanDiff(
        arrangement=Change(before=before.arrangement, after=after.arrangement),
        pools=pools,
        classes=_class_changes(before.classes, after.classes),
        replicas=Change(before=sum(p.row.replicas for p in before.pools), after=sum(p.row.replicas for p in after.pools)),
        gpus_total=gpus_total,
        gpus_added=added,
        gpus_removed=removed,
        cost_usd_per_hour=per_hour,
        cost_usd_per_month=per_month,
        same_configuration=before.arrangement == after.arrangement and all(p.status == "same" for p in pools),
    )


def decide_classes(
    diff: ClassPlanDiff,
    hysteresis: Hysteresis,
    *,
    at_rate: ClassPlanCheck | None = None,
    with_margin: ClassPlanCheck | None = None,
) -> Decision:
    """Adopt the new class plan or keep the current one (module docstring). `saving_usd_per_hour` is
    C_now − C_new (C_now as planned when the current plan cannot be priced today); the threshold is
    the hysteresis's on the current plan's cost as planned, which the same pools' cost is compared with.

    `at_rate` and `with_margin`: the current plan's pools at the new classes' rates and at
    (1 + headroom_margin) × them (planner/class_check.py). With them, other pools are adopted as a
    one-workload plan's other configuration is (planner/diff.py `decide`): when the current pools miss
    a class's target at the new rates or at the margin, or switching saves at least the threshold;
    else the current plan is kept. A current plan whose classes could not all be checked (a deferred
    arrangement's background classes, a GPU gone from the catalog) gives no grounds to keep it."""
    cost = diff.cost_usd_per_hour
    saving = (cost.before_now if math.isfinite(cost.before_now) else cost.before) - cost.after  # C_now − C_new
    drift = cost.after - cost.before  # the same pools' cost today against the plan in force's as planned
    threshold = max(hysteresis.min_saving_usd_per_hour, hysteresis.min_saving_fraction * cost.before)

    def result(changed: bool, reason: str) -> Decision:
        return Decision(changed=changed, reason=reason, saving_usd_per_hour=saving, threshold_usd_per_hour=threshold)

    if not diff.same_configuration:
        pools = f"the new plan deploys other pools ({diff.pools_summary()})"
        checked = (
            at_rate is not None and with_margin is not None and all(k.checked for k in (*at_rate.classes, *with_margin.classes))
        )
        if not checked or at_rate is None or with_margin is None:
            return result(True, f"{pools}; it is adopted")
        margin = f"{1.0 + hysteresis.headroom_margin:g}×"
        if not at_rate.meets_targets:
            return result(True, f"{pools} and the current pools miss at the new rates ({at_rate.summary}); it is adopted")
        if not with_margin.meets_targets:
            return result(
                True, f"{pools} and the current pools meet every target at the new rates but not at {margin} them "
                f"({with_margin.summary}); it is adopted"
            )  # fmt: skip
        if saving > 0 and saving >= threshold:
            return result(
                True, f"the current pools still meet every class's target at {margin} the new rates, but switching saves "
                f"${saving:.2f}/h (≥ ${threshold:.2f}/h); {pools} is adopted"
            )  # fmt: skip
        worth = f"would cost ${-saving:.2f}/h more" if saving <= 0 else f"would save only ${saving:.2f}/h (< ${threshold:.2f}/h)"
        return result(
            False, f"the current pools still meet every class's target at {margin} the new rates ({with_margin.summary}); "
            f"the new plan's other pools ({diff.pools_summary()}) {worth}; the current plan is kept"
        )  # fmt: skip
    if drift != 0 and abs(drift) >= threshold:
        return result(
            True,
            f"the same arrangement and pools cost ${cost.after:.2f}/h now against ${cost.before:.2f}/h as planned "
            f"(a change of ${abs(drift):.2f}/h ≥ ${threshold:.2f}/h); the new plan is adopted",
        )
    return result(
        False,
        f"the new plan deploys the same arrangement and pools at ${cost.after:.2f}/h against ${cost.before:.2f}/h as "
        f"planned (a change of ${abs(drift):.2f}/h, under ${threshold:.2f}/h or none); the current plan is kept",
    )


# --- why ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassesContext:
    """What a class plan was (or is now) made from, as far as the reasons for a change go."""

    classes: tuple[TrafficClass, ...]
    constraints: Mapping[str, Any] = field(default_factory=dict)
    model_slug: str = ""
    catalog: CatalogState = field(default_factory=CatalogState)


def _traffic_changes(before: Sequence[TrafficClass], after: Sequence[TrafficClass]) -> list[str]:
    """Class by class: a new rate (with its change), other traffic or targets, classes added or removed."""
    old, new = {k.name: k for k in before}, {k.name: k for k in after}
    changes = []
    for name in names_in_order(list(old), list(new)):
        b, a = old.get(name), new.get(name)
        if b is None or a is None:
            changes.append(f"class {name} {'added' if b is None else 'removed'}")
            continue
        if abs(a.arrival_rate_rps - b.arrival_rate_rps) > SAME_RELATIVE * max(a.arrival_rate_rps, b.arrival_rate_rps):
            ratio = a.arrival_rate_rps / b.arrival_rate_rps - 1.0
            changes.append(f"{name} arrival rate {b.arrival_rate_rps:g} → {a.arrival_rate_rps:g} rps ({ratio:+.0%})")
        if dataclasses.replace(b, arrival_rate_rps=a.arrival_rate_rps, demand_rps=None) != dataclasses.replace(
            a, demand_rps=None
        ):
            changes.append(f"{name}'s lengths, target, priority or shedding changed")
        if b.demand_rps != a.demand_rps:
            changes.append(f"{name}'s day profile changed")
    return changes


def class_change_reasons(then: ClassesContext, now: ClassesContext, *, gpus_involved: Sequence[str]) -> tuple[Reason, ...]:
    """Why a class re-plan can differ from the plan made `then`: its classes' traffic, the constraints,
    and the catalog (planner.diff.catalog_reasons)."""
    reasons: list[Reason] = []
    traffic = _traffic_changes(then.classes, now.classes)
    if traffic:
        reasons.append(Reason(kind="traffic", detail="; ".join(traffic)))
    if dict(then.constraints) != dict(now.constraints) or then.model_slug != now.model_slug:
        reasons.append(Reason(kind="constraints", detail="the model or the plan's constraints changed"))
    return (*reasons, *catalog_reasons(then.catalog, now.catalog, gpus_involved=gpus_involved))
