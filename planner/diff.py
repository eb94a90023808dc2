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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from planner.disagg import DecodePool, KvLink, PrefillPool, predict_disagg
from planner.errors import HeadroomError, PlannerInputError, UnstableLoadError
from planner.memory import kv_bytes_per_token, kv_capacity_tokens, memory_fit
from planner.parallel import is_valid_tensor_parallel
from planner.performance import build_step_model
from planner.plan_prefix import measured_prompts, reduced_prompts
from planner.precision import check_precision
from planner.prefix_cache import Routing, prefix_hits
from planner.queueing import Prediction, predict
from planner.specs import Efficiency, GpuSpec, ModelSpec, Precision
from planner.speculative import (
    MethodName,
    draft_model_speculation,
    head_speculation,
    speculative_kv_capacity_tokens,
    speculative_step_model,
)
from planner.step_model import Speculation, StepModel
from planner.units import HOURS_PER_MONTH, MS_PER_S
from planner.workload import Serving, Slo, Workload

#: A pool's role: `mixed` (prefill and decode on the same replicas, every aggregated row), `prefill` or `decode`.
PoolRole = Literal["mixed", "prefill", "decode"]

#: Relative difference below which two prices or rates count as equal (float noise from JSON round trips).
_SAME = 1e-9

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


# --- the forward model on a stored configuration ------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployedRow:
    """One configuration of a plan as deployed, with today's specs, and the share of the traffic it serves."""

    gpu: GpuSpec
    precision: Precision
    tp: int
    replicas: int
    batch_limit: int
    chunk_tokens: int | None
    traffic_share: float = 1.0

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.tp < 1:
            raise PlannerInputError(f"a deployed row needs replicas >= 1 and tp >= 1, got {self.replicas}, {self.tp}")
        if not (0.0 < self.traffic_share <= 1.0):
            raise PlannerInputError(f"traffic_share must be in (0, 1], got {self.traffic_share}")

    @property
    def cost_usd_per_hour(self) -> float:
        return self.replicas * self.tp * self.gpu.price_usd_per_hour_on_demand  # replicas × tp GPUs × $/GPU-h


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployedSpeculation:
    """The speculative decoding a plan deploys (its `plan.speculative`): the draft method, k and the
    acceptance rate it was planned with, and for `draft_model` the catalog model that drafts
    (constraints.pin.draft_model)."""

    method: MethodName
    draft_tokens: int
    acceptance_rate: float
    draft_model: ModelSpec | None = None

    def __post_init__(self) -> None:
        if self.method == "draft_model" and self.draft_model is None:
            raise PlannerInputError("a plan speculating with a draft model needs the draft model", field="pin.draft_model")

    def on(self, model: ModelSpec, row: DeployedRow) -> Speculation:
        """The draft's per-pass cost on `row`'s configuration, as planner/candidates.py speculative_groups builds it."""
        if self.draft_model is not None:
            return draft_model_speculation(
                self.draft_model, row.precision, row.tp, draft_tokens=self.draft_tokens, acceptance_rate=self.acceptance_rate
            )
        return head_speculation(
            model, row.precision, row.tp, method=self.method, draft_tokens=self.draft_tokens, acceptance_rate=self.acceptance_rate
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployedPrefixCache:
    """The prefix cache a plan deploys (its `plan.prefix_caching`): the KV tokens each replica gives
    it and the routing it was planned under (`as_measured` for a measured hit rate)."""

    cache_tokens: int
    routing: str

    def __post_init__(self) -> None:
        if self.cache_tokens < 0:
            raise PlannerInputError(f"a prefix cache needs cache_tokens >= 0, got {self.cache_tokens}", field="cache_tokens")


@dataclass(frozen=True, slots=True, kw_only=True)
class Levers:
    """What a plan deploys beside its rows' configurations, each None when it deploys none."""

    speculation: DeployedSpeculation | None = None
    prefix_cache: DeployedPrefixCache | None = None


NO_LEVERS = Levers()


def _with_levers(
    row: DeployedRow, model: ModelSpec, workload: Workload, levers: Levers, step_model: StepModel, capacity: int
) -> tuple[StepModel, int, Workload]:
    """The row's step model, KV capacity and offered workload with the plan's levers, as the planner
    predicted its configuration: speculation verifies the draft and gives the draft's weights and cache
    their memory (planner/candidates.py speculative_groups); the prefix cache takes its tokens from the
    KV and the replicas prefill the prompt mixture of its hit classes (planner/plan_prefix.py), at the
    row's replica count and `workload`'s rate (the hit rate the plan reports is at its own replica count).
    A workload without prefix reuse finds nothing cached: the cache only takes its memory."""
    if levers.speculation is not None:
        spec = levers.speculation.on(model, row)
        capacity = speculative_kv_capacity_tokens(row.gpu, model, row.precision, row.tp, row.gpu.efficiency, spec)
        step_model = speculative_step_model(step_model, spec)
    cache = levers.prefix_cache
    if cache is None:
        return step_model, capacity, workload
    capacity -= cache.cache_tokens
    if capacity <= 0:
        raise PlannerInputError(f"a prefix cache of {cache.cache_tokens} tokens leaves no KV for the sequences on {row.gpu.slug}")
    reuse = workload.prefix_reuse
    if reuse is None:
        return step_model, capacity, workload
    if reuse.measured:
        assert reuse.hit_rate is not None  # measured ⇔ a hit rate is given (PrefixReuse)
        mix = measured_prompts(workload.prompt_tokens, reuse.hit_rate)
    else:
        routing: Routing = "prefix_aware" if cache.routing == "prefix_aware" else "random"
        hits = prefix_hits(reuse, cache.cache_tokens, routing, row.replicas, arrival_rate_rps=workload.arrival_rate_rps)
        mix = reduced_prompts(workload.prompt_tokens, hits.classes)
    return step_model, capacity, replace(workload, prompt_tokens=mix, prefix_reuse=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class RowCheck:
    """One row under the forward model: latencies at the SLO's percentile (seconds) or why it cannot run."""

    gpu: str
    per_replica_rate_rps: float
    meets_slo: bool
    unstable: bool
    utilisation: float | None
    predicted_s: dict[str, float]
    misses: tuple[str, ...]
    problem: str | None = None
    role: PoolRole = "mixed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """A plan under the forward model at one arrival rate."""

    arrival_rate_rps: float
    meets_slo: bool
    rows: tuple[RowCheck, ...]
    cost_usd_per_hour: float
    summary: str


def _targets(slo: Slo) -> dict[str, float]:
    return {m: t for m, t in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)) if t is not None}


def _at(prediction: Prediction, metric: str) -> float:
    latency = getattr(prediction, metric)
    return 0.0 if latency is None else latency.at_percentile_s


def _fmt(metric: str, seconds: float) -> str:
    return f"{seconds:.3g} s" if metric == "e2e" else f"{seconds * MS_PER_S:.4g} ms"


def check_row(row: DeployedRow, model: ModelSpec, workload: Workload, slo: Slo, levers: Levers = NO_LEVERS) -> RowCheck:
    """The row at its share of `workload`'s rate: one replica at λ·share/r, as the planner decides
    replicas, with the plan's speculation and prefix cache (`_with_levers`)."""
    rate = workload.arrival_rate_rps * row.traffic_share / row.replicas  # λ · share / r per replica
    try:
        check_precision(row.gpu, row.precision)
        if row.tp > row.gpu.gpus_per_node or not is_valid_tensor_parallel(row.gpu, model, row.tp):
            raise PlannerInputError(f"tp {row.tp} is not valid for {model.slug} on {row.gpu.slug}")
        fit = memory_fit(row.gpu, model, row.precision, row.tp, row.gpu.efficiency)
        if not fit.fits:
            raise PlannerInputError(f"{model.slug} no longer fits on {row.tp} × {row.gpu.slug}")
        step_model = build_step_model(row.gpu, model, row.precision, row.tp, row.gpu.efficiency)
        capacity = kv_capacity_tokens(row.gpu, model, row.precision, row.tp, row.gpu.efficiency)
        step_model, capacity, offered = _with_levers(row, model, workload, levers, step_model, capacity)
        serving = Serving(replicas=1, batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens)
        prediction = predict(step_model, offered.at_rate(rate), serving, kv_capacity_tokens=capacity, percentile=slo.percentile)
    except HeadroomError as exc:
        return RowCheck(
            gpu=row.gpu.slug,
            per_replica_rate_rps=rate,
            meets_slo=False,
            unstable=False,
            utilisation=None,
            predicted_s={},
            misses=("configuration",),
            problem=exc.detail,
        )
    targets = _targets(slo)
    predicted = {} if prediction.unstable else {metric: _at(prediction, metric) for metric in targets}
    misses = tuple(m for m, target in targets.items() if prediction.unstable or predicted[m] > target)
    return RowCheck(
        gpu=row.gpu.slug,
        per_replica_rate_rps=rate,
        meets_slo=not misses,
        unstable=prediction.unstable,
        utilisation=prediction.utilisation,
        predicted_s=predicted,
        misses=misses,
    )


def check_plan(rows: Sequence[DeployedRow], model: ModelSpec, workload: Workload, slo: Slo, levers: Levers = NO_LEVERS) -> Check:
    """Every row of a deployed plan at `workload`'s rate, with the plan's levers, and a one-sentence summary."""
    if not rows:
        raise PlannerInputError("a deployed plan needs at least one row")
    checks = tuple(check_row(row, model, workload, slo, levers) for row in rows)
    meets = all(c.meets_slo for c in checks)
    return Check(
        arrival_rate_rps=workload.arrival_rate_rps,
        meets_slo=meets,
        rows=checks,
        cost_usd_per_hour=sum(r.cost_usd_per_hour for r in rows),
        summary=_summary(checks, slo, meets),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployedPool:
    """One pool of a disaggregated plan as deployed, with today's specs (a prefill pool has no batch limit)."""

    role: Literal["prefill", "decode"]
    gpu: GpuSpec
    precision: Precision
    tp: int
    replicas: int
    batch_limit: int | None

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.tp < 1:
            raise PlannerInputError(f"a deployed pool needs replicas >= 1 and tp >= 1, got {self.replicas}, {self.tp}")
        if self.role == "decode" and (self.batch_limit is None or self.batch_limit < 1):
            raise PlannerInputError(f"a decode pool needs a batch limit >= 1, got {self.batch_limit}")

    @property
    def cost_usd_per_hour(self) -> float:
        return self.replicas * self.tp * self.gpu.price_usd_per_hour_on_demand  # replicas × tp GPUs × $/GPU-h


def check_pools(
    prefill: DeployedPool, decode: DeployedPool, model: ModelSpec, workload: Workload, slo: Slo, *, link: KvLink
) -> Check:
    """A disaggregated plan under planner/disagg.py's model at `workload`'s rate: the planner's own
    prediction of its pools (predict_disagg, the KV crossing `link`), one row per pool with its ρ;
    TTFT, TPOT and E2E are the deployment's, so both rows carry them."""
    rate = workload.arrival_rate_rps
    pools = (prefill, decode)
    try:
        steps = []
        for pool in pools:
            check_precision(pool.gpu, pool.precision)
            if pool.tp > pool.gpu.gpus_per_node or not is_valid_tensor_parallel(pool.gpu, model, pool.tp):
                raise PlannerInputError(f"tp {pool.tp} is not valid for {model.slug} on {pool.gpu.slug}")
            if not memory_fit(pool.gpu, model, pool.precision, pool.tp, pool.gpu.efficiency).fits:
                raise PlannerInputError(f"{model.slug} no longer fits on {pool.tp} × {pool.gpu.slug}")
            steps.append(build_step_model(pool.gpu, model, pool.precision, pool.tp, pool.gpu.efficiency))
        capacity = kv_capacity_tokens(decode.gpu, model, decode.precision, decode.tp, decode.gpu.efficiency)
        prediction = predict_disagg(
            PrefillPool(step_model=steps[0], replicas=prefill.replicas, tp=prefill.tp),
            DecodePool(
                step_model=steps[1],
                replicas=decode.replicas,
                batch_limit=decode.batch_limit or 1,
                kv_capacity_tokens=float(capacity),
                tp=decode.tp,
            ),
            workload,
            link=link,
            kv_bytes_per_token=kv_bytes_per_token(model, decode.precision.kv_cache),
            percentile=slo.percentile,
        )
    except UnstableLoadError as exc:
        rows = tuple(
            RowCheck(
                gpu=p.gpu.slug,
                per_replica_rate_rps=rate / p.replicas,
                meets_slo=False,
                unstable=True,
                utilisation=None,
                predicted_s={},
                misses=tuple(_targets(slo)),
                problem=None,
                role=p.role,
            )
            for p in pools
        )
        summary = f"a pool would be overloaded ({exc.detail})"
        return Check(arrival_rate_rps=rate, meets_slo=False, rows=rows, cost_usd_per_hour=_pools_cost(pools), summary=summary)
    except HeadroomError as exc:
        rows = tuple(
            RowCheck(
                gpu=p.gpu.slug,
                per_replica_rate_rps=rate / p.replicas,
                meets_slo=False,
                unstable=False,
                utilisation=None,
                predicted_s={},
                misses=("configuration",),
                problem=exc.detail,
                role=p.role,
            )
            for p in pools
        )
        return Check(arrival_rate_rps=rate, meets_slo=False, rows=rows, cost_usd_per_hour=_pools_cost(pools), summary=exc.detail)
    targets = _targets(slo)
    latencies = {"ttft": prediction.ttft_s, "tpot": prediction.tpot_s, "e2e": prediction.e2e_s}
    predicted = {metric: latencies[metric] for metric in targets}
    misses = tuple(m for m, target in targets.items() if predicted[m] > target)
    rows = tuple(
        RowCheck(
            gpu=p.gpu.slug,
            per_replica_rate_rps=rate / p.replicas,  # every request passes through both pools
            meets_slo=not misses,
            unstable=False,
            utilisation=rho,
            predicted_s=dict(predicted),
            misses=misses,
            role=p.role,
        )
        for p, rho in ((prefill, prediction.prefill.rho), (decode, prediction.decode.rho))
    )
    return Check(
        arrival_rate_rps=rate,
        meets_slo=not misses,
        rows=rows,
        cost_usd_per_hour=_pools_cost(pools),
        summary=_summary(rows, slo, not misses),
    )


def _pools_cost(pools: Sequence[DeployedPool]) -> float:
    return sum(p.cost_usd_per_hour for p in pools)


def unavailable(arrival_rate_rps: float, problem: str) -> Check:
    """A plan that cannot be evaluated any more (its GPU, model or profile left the catalog)."""
    row = RowCheck(
        gpu="",
        per_replica_rate_rps=0.0,
        meets_slo=False,
        unstable=False,
        utilisation=None,
        predicted_s={},
        misses=("configuration",),
        problem=problem,
    )
    return Check(arrival_rate_rps=arrival_rate_rps, meets_slo=False, rows=(row,), cost_usd_per_hour=math.nan, summary=problem)


def _summary(checks: Sequence[RowCheck], slo: Slo, meets: bool) -> str:
    targets = _targets(slo)
    label = f"p{slo.percentile:g}"
    problems = [c.problem for c in checks if c.problem]
    if problems:
        return problems[0]
    if any(c.unstable for c in checks):
        return "a replica would be overloaded (arrivals at or above its saturation rate)"
    if meets:
        return f"{label} " + ", ".join(
            f"{m.upper()} {_fmt(m, max(c.predicted_s[m] for c in checks))} ≤ {_fmt(m, t)}" for m, t in targets.items()
        )
    worst = [(c, m) for c in checks for m in c.misses]
    return f"{label} " + ", ".join(f"{m.upper()} {_fmt(m, c.predicted_s[m])} > {_fmt(m, targets[m])} target" for c, m in worst)


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

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp


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
class Change:
    before: Any
    after: Any

    @property
    def changed(self) -> bool:
        return bool(self.before != self.after)


@dataclass(frozen=True, slots=True, kw_only=True)
class CostChange:
    """before: as planned; before_now: the current plan at today's prices; change = after − before_now."""

    before: float
    before_now: float
    after: float
    change: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolChange:
    """One pool from one plan to the next, by role (and position among pools of that role: a mixed fleet
    has one mixed pool per configuration). `status`: added, removed, changed or same."""

    pool: str
    role: PoolRole
    status: Literal["added", "removed", "changed", "same"]
    gpu: Change
    tp: Change
    replicas: Change
    gpus: Change
    precision: Change
    batch_limit: Change
    chunk_tokens: Change

    def summary(self) -> str:
        """`prefill: replicas 2 → 3, gpu h100-sxm → a100-80gb-sxm` (or `decode: added`, `mixed: removed`)."""
        fields = (
            ("gpu", self.gpu),
            ("tp", self.tp),
            ("replicas", self.replicas),
            ("precision", self.precision),
            ("batch limit", self.batch_limit),
            ("chunk tokens", self.chunk_tokens),
        )
        return pool_change_summary(self.pool, self.status, fields)


def pool_change_summary(pool: str, status: str, fields: Sequence[tuple[str, Change]]) -> str:
    """`pool: name before → after, …` over the fields that changed (`pool: same` when none did), or
    `pool: added` / `pool: removed`; a tuple value (a pool's classes) is shown comma-separated."""
    if status in ("added", "removed"):
        return f"{pool}: {status}"

    def shown(value: object) -> str:
        return ", ".join(str(v) for v in value) if isinstance(value, tuple) else str(value)

    changed = [f"{name} {shown(c.before)} → {shown(c.after)}" for name, c in fields if c.changed]
    return f"{pool}: " + (", ".join(changed) if changed else "same")


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
    for name in [*old, *(n for n in new if n not in old)]:
        b, a = old.get(name), new.get(name)
        status: Literal["added", "removed", "changed", "same"] = (
            "added" if b is None else "removed" if a is None else "same" if a == b else "changed"
        )
        either = a if a is not None else b
        if either is None:  # unreachable: the name came from one of the two plans
            raise PlannerInputError(f"pool {name} is in neither plan")

        def field(get: Any, b: ShapeRow | None = b, a: ShapeRow | None = a) -> Change:
            return Change(before=None if b is None else get(b), after=None if a is None else get(a))

        changes.append(
            PoolChange(
                pool=name,
                role=either.role,
                status=status,
                gpu=field(lambda r: r.gpu),
                tp=field(lambda r: r.tp),
                replicas=field(lambda r: r.replicas),
                gpus=field(lambda r: r.gpus),
                precision=field(lambda r: f"{r.weights_precision}/{r.kv_precision}"),
                batch_limit=field(lambda r: r.batch_limit),
                chunk_tokens=field(lambda r: r.chunk_tokens),
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


def plan_diff(before: PlanShape, after: PlanShape, *, before_now_usd_per_hour: float) -> PlanDiff:
    """Field by field from the current plan to the new one; GPUs added and removed per type."""
    b, a = before.main, after.main
    counts_before, counts_after = before.gpus_by_type(), after.gpus_by_type()
    added = {gpu: n - counts_before.get(gpu, 0) for gpu, n in counts_after.items() if n > counts_before.get(gpu, 0)}
    removed = {gpu: n - counts_after.get(gpu, 0) for gpu, n in counts_before.items() if n > counts_after.get(gpu, 0)}
    change = after.cost_usd_per_hour - before_now_usd_per_hour  # what switching adds to today's bill
    return PlanDiff(
        topology=Change(before=before.topology, after=after.topology),
        pools=pool_diff(before.rows, after.rows),
        gpu=Change(before=b.gpu, after=a.gpu),
        tp=Change(before=b.tp, after=a.tp),
        replicas=Change(before=sum(r.replicas for r in before.rows), after=sum(r.replicas for r in after.rows)),
        gpus_total=Change(before=sum(counts_before.values()), after=sum(counts_after.values())),
        batch_limit=Change(before=b.batch_limit, after=a.batch_limit),
        chunk_tokens=Change(before=b.chunk_tokens, after=a.chunk_tokens),
        precision=Change(before=f"{b.weights_precision}/{b.kv_precision}", after=f"{a.weights_precision}/{a.kv_precision}"),
        gpus_added=added,
        gpus_removed=removed,
        cost_usd_per_hour=CostChange(
            before=before.cost_usd_per_hour, before_now=before_now_usd_per_hour, after=after.cost_usd_per_hour, change=change
        ),
        cost_usd_per_month=CostChange(
            before=before.cost_usd_per_hour * HOURS_PER_MONTH,
            before_now=before_now_usd_per_hour * HOURS_PER_MONTH,
            after=after.cost_usd_per_hour * HOURS_PER_MONTH,
            change=change * HOURS_PER_MONTH,
        ),  # $/h × 730 h
        same_configuration=sorted(before.rows, key=repr) == sorted(after.rows, key=repr),
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
    return abs(a - b) > _SAME * max(abs(a), abs(b), 1.0)


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
    return "none" if value is None else _fmt(metric, value)


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
