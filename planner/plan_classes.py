"""Plans for several traffic classes: which arrangement of pools serves them cheapest.

Arrangements compared (each priced in USD per hour; the cheapest feasible one is chosen):

(a) ``shared_fcfs`` — one pool, first come first served, planned by the single-class planner
    (planner/planning.py) for the merged stream at the tightest target of any class: every
    request, background ones included, gets the interactive TTFT.
(b) ``shared_priority`` — one pool with non-preemptive priority: the background classes fill idle
    slots. Its configuration is searched over the single-class planner's candidates for the merged
    stream (`_cheapest_pool`, branch and bound on cost), each at the fewest replicas that keep the
    pool in the analytic model's validated region (ρ ≤ RELIABLE_MAX_UTILISATION) and every class on
    target. The figures: the queueing model's prediction for the merged stream on that pool
    (planner/queueing.py: step times with everyone in the batch, hence TPOT for all classes) with
    its FCFS slot wait replaced by each class's priority wait (Cobham, planner/queueing_priority.py)
    at the same percentile: TTFT_k ≈ TTFT_fcfs − wait_fcfs + wait_k. With verification the winner's
    classes are simulated at slot level (planner/simulator_classes.py); a miss refuses that pool.
(c) ``segregated`` — one pool per class, each planned by the single-class planner at its own SLO
    (a deadline as a p99 end-to-end target of H hours, which lets the background pool run hot).
(b') ``shared_priority_shedding`` — (b) with the lowest class, where its `max_shed_fraction` allows,
    admitted only into a free slot (never queued): its refusal fraction from the birth–death chain
    (planner/queueing_priority.py) must stay within `max_shed_fraction`, and the pool is sized for
    the admitted load.
(d) ``deferred`` — with a day profile (`TrafficClass.demand_rps`): the interactive pool sized for
    its peak, the background work deferred within its deadline into its idle hours and, where
    needed, extra off-peak replicas (planner/plan_deferral.py); not comparable without a profile.

Why (b) or (c) beat (a): a queue's wait grows as 1/(1 − ρ). In (a) the background load raises the
ρ the interactive requests see, so the pool must be run cool enough for the interactive tail
with all the load in it. Under priority, an interactive request waits behind the interactive
load only, σ_1, plus the residual of a busy slot — Cobham's W_1 = P_w·s̄/c / (1 − σ_1) — so the
background load rides in capacity the interactive class must hold idle anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from planner.candidates import Group, Option, enumerate_all_options, enumerate_groups, packed_groups
from planner.errors import ConvergenceError, InfeasiblePlanError, PlannerInputError, UnstableLoadError
from planner.memory import kv_capacity_tokens
from planner.performance import build_step_model
from planner.pins import apply_pins
from planner.plan_deferral import deferral_schedule
from planner.plan_predict import _cached_prediction, _saturation
from planner.plan_rows import FleetRow, candidate_id_of
from planner.plan_verify import MAX_VERIFY_ROUNDS
from planner.planning import PlanningInputs, PlanningRequest, PlanResult, plan_capacity
from planner.queueing import RELIABLE_MAX_UTILISATION, Latency, Prediction, predict
from planner.queueing_priority import ClassLoad, priority_waits, shed_probabilities
from planner.simulator_classes import simulate_classes
from planner.step_model import StepModel
from planner.traffic_classes import S_PER_H, TrafficClass, merged_workload, tightest_slo
from planner.workload import Serving, Slo, Workload

__all__ = ["ArrangementCost", "ClassFigures", "ClassesPlan", "plan_classes"]

#: Largest number of replicas the priority pool search adds, on one configuration, above the
#: fewest its utilisation cap allows, while no cheaper pool has been found.
MAX_EXTRA_REPLICAS = 64
#: The share of the verifying class simulation not measured (the simulator's default).
WARMUP_FRACTION = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrangementCost:
    name: str
    cost_usd_per_hour: float | None  # None: not comparable / infeasible
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassFigures:
    name: str
    arrangement_pool: str
    percentile: float
    ttft_s: float  # at `percentile`
    tpot_s: float
    e2e_s: float
    deadline_h: float | None
    meets_target: bool
    shed_fraction: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolPlan:
    name: str
    classes: tuple[str, ...]
    gpu: str
    tp: int
    replicas: int
    batch_limit: int
    chunk_tokens: int | None
    cost_usd_per_hour: float
    utilisation: float
    weights_precision: str
    kv_precision: str
    scheduling: str = "fcfs"  # "priority": the classes share the pool, the lower priority value served first


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassVerified:
    """One class on the priority pool, the queueing model's wait for a slot against the class simulator's."""

    name: str
    wait_model_s: float  # at the plan's percentile
    wait_simulated_s: float
    ttft_simulated_s: float  # the class's TTFT with the simulated wait in place of the model's
    e2e_simulated_s: float
    shed_fraction_simulated: float
    meets_target: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Verified:
    method: str
    interactive_p99_wait_model_s: float
    interactive_p99_wait_simulated_s: float
    classes: tuple[ClassVerified, ...] = ()
    #: Pools the simulator refused on the way (configuration and replicas, why), cheapest first.
    refuted: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassesPlan:
    chosen: str
    compared: tuple[ArrangementCost, ...]
    pools: tuple[PoolPlan, ...]
    classes: tuple[ClassFigures, ...]
    verification: Verified | None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Candidate:
    name: str
    cost_usd_per_hour: float
    pools: tuple[PoolPlan, ...]
    classes: tuple[ClassFigures, ...]
    #: Whether the cost is the arrangement's last word: its single-class plans were simulated (or
    #: the request does not verify). A cost that is not final is a lower bound: simulation only
    #: ever raises a single-class plan's cost (planner/plan_verify.py `_verified_search`).
    final: bool = True
    verification: Verified | None = None


def _pool(name: str, classes: Sequence[TrafficClass], result: PlanResult) -> PoolPlan:
    row = result.row
    return PoolPlan(
        name=name,
        classes=tuple(k.name for k in classes),
        gpu=row.gpu,
        tp=row.tp,
        replicas=result.replicas,
        batch_limit=row.batch_limit,
        chunk_tokens=row.chunk_tokens,
        cost_usd_per_hour=result.cost_usd_per_hour,
        utilisation=result.target_rho,
        weights_precision=row.weights_precision,
        kv_precision=row.kv_precision,
    )


def _row_model(row: FleetRow, inputs: PlanningInputs) -> tuple[StepModel, int]:
    """The step model and KV capacity of a plan row's configuration, as enumeration builds them (planner/candidates.py)."""
    gpu = next(g for g in inputs.gpus if g.slug == row.gpu)
    precision = next(
        p for p in inputs.precisions if p.weights.slug == row.weights_precision and p.kv_cache.slug == row.kv_precision
    )
    return (
        build_step_model(gpu, inputs.model, precision, row.tp, gpu.efficiency),
        kv_capacity_tokens(gpu, inputs.model, precision, row.tp, gpu.efficiency),
    )


def _pool_prediction(result: PlanResult, workload: Workload, percentile: float, inputs: PlanningInputs) -> Prediction:
    """The queueing model's prediction for a single-class plan's largest row at its load: the one an
    explained plan reports as `predicted` (planning.py `_main_prediction`), without the explained
    plan's re-planned sections, which the class plan does not show."""
    row = result.row
    step_model, capacity = _row_model(row, inputs)
    if workload.arrival_cv == 1.0 and len(result.rows) == 1:
        # a random split of Poisson arrivals is Poisson: one replica at λ/r, the rate the search probed
        serving = Serving(replicas=1, batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens)
        rate_rps = workload.arrival_rate_rps / row.replicas
        return _cached_prediction(step_model, workload.at_rate(1.0), serving, capacity, rate_rps, percentile)
    serving = Serving(replicas=row.replicas, batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens)
    return predict(step_model, workload.at_rate(row.offered_rps), serving, kv_capacity_tokens=capacity, percentile=percentile)


def _figures(k: TrafficClass, pool: str, result: PlanResult, prediction: Prediction) -> ClassFigures:
    def at(latency: Latency | None) -> float:
        return 0.0 if latency is None else latency.at_percentile_s

    return ClassFigures(
        name=k.name,
        arrangement_pool=pool,
        percentile=prediction.percentile,
        ttft_s=at(prediction.ttft),
        tpot_s=at(prediction.tpot),
        e2e_s=at(prediction.e2e),
        deadline_h=k.deadline_h,
        meets_target=True,  # the single-class planner met the target it was given
        shed_fraction=0.0,
    )


@dataclass(slots=True, kw_only=True)
class _Context:
    """One `plan_classes` call: its inputs and the single-class plans made so far.

    `plans` holds them by (class names, SLO, verified): the deferred arrangement's pools are also
    the segregated ones, and a verified plan stands in for an unverified one of the same pool (it
    is the final answer the unverified one is a lower bound of)."""

    classes: Sequence[TrafficClass]
    inputs: PlanningInputs
    base: PlanningRequest
    plans: dict[tuple[tuple[str, ...], Slo, bool], PlanResult] = field(default_factory=dict)
    #: The priority pool's candidate configurations, enumerated once for both priority arrangements.
    priority_options: list[Option] | None = None

    @property
    def checkpoint(self) -> Callable[[], None] | None:
        return self.base.checkpoint


def _plan_one(ctx: _Context, classes: Sequence[TrafficClass], slo: Slo, *, verify: bool) -> tuple[PlanResult, Prediction, bool]:
    """The single-class plan for `classes` merged at `slo` (simulated when `verify` and the request
    verifies), its prediction, and whether it is final (simulated, or the request does not verify).

    Planned without the justification (`explain` off): the class plan shows each pool's cost and
    predicted percentiles, not its re-planned sections."""
    names = tuple(k.name for k in classes)
    verify = verify and ctx.base.verify
    key = (names, slo, verify)
    if not verify and (names, slo, True) in ctx.plans:
        key = (names, slo, True)
    if key not in ctx.plans:
        request = replace(ctx.base, workload=merged_workload(classes), slo=slo, advise=False, explain=False, verify=verify)
        ctx.plans[key] = plan_capacity(request, ctx.inputs)
    result = ctx.plans[key]
    prediction = _pool_prediction(result, merged_workload(classes), slo.percentile, ctx.inputs)
    return result, prediction, key[2] or not ctx.base.verify


def _segregated(ctx: _Context, *, verify: bool) -> _Candidate:
    pools, figures, final = [], [], True
    for k in ctx.classes:
        result, prediction, simulated = _plan_one(ctx, [k], k.own_slo, verify=verify)
        final = final and simulated
        pools.append(_pool(k.name, [k], result))
        figures.append(_figures(k, k.name, result, prediction))
    return _Candidate(
        name="segregated",
        cost_usd_per_hour=sum(p.cost_usd_per_hour for p in pools),
        pools=tuple(pools),
        classes=tuple(figures),
        final=final,
    )


def _shared_fcfs(ctx: _Context, *, verify: bool) -> _Candidate:
    classes = ctx.classes
    result, prediction, final = _plan_one(ctx, classes, tightest_slo(classes), verify=verify)
    return _Candidate(
        name="shared_fcfs",
        cost_usd_per_hour=result.cost_usd_per_hour,
        pools=(_pool("shared", classes, result),),
        classes=tuple(_figures(k, "shared", result, prediction) for k in classes),
        final=final,
    )


def _meets(slo: Slo, ttft_s: float, tpot_s: float, e2e_s: float) -> bool:
    return all(
        target is None or value <= target for target, value in ((slo.ttft_s, ttft_s), (slo.tpot_s, tpot_s), (slo.e2e_s, e2e_s))
    )


def _shed_fractions(classes: Sequence[TrafficClass], replicas: int, service_s: float, slots: int) -> dict[str, float]:
    """Refusal fraction per class when the lowest-priority classes that may be shed are admitted only
    while a replica has fewer than `slots` requests in it (into a free slot, never to queue): the
    birth–death chain of planner/queueing_priority.py."""
    lowest = max(k.priority for k in classes)
    loads = [
        ClassLoad(
            name=k.name,
            arrival_rate_rps=k.arrival_rate_rps / replicas,
            service_s=service_s,
            priority=k.priority,
            admission_limit=slots if k.priority == lowest and k.max_shed_fraction > 0 else None,
        )
        for k in classes
    ]
    return {r.name: r.shed_probability for r in shed_probabilities(loads, slots=slots)}


def _shared_priority_shedding(ctx: _Context, *, verify: bool) -> _Candidate:
    if not any(k.max_shed_fraction > 0 for k in ctx.classes):
        raise _NotComparable("no class may be shed (every max_shed_fraction is 0)")
    return _shared_priority(ctx, verify=verify, shedding=True)


class _NotComparable(Exception):
    """An arrangement the request gives no grounds to price (its reason is the message)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Trial:
    """A priority pool the queueing model accepts: `replicas` of `option`, each class's figures, the
    per-replica class loads and slots the class simulator checks, and each class's modelled wait."""

    option: Option
    replicas: int
    cost_usd_per_hour: float
    utilisation: float
    figures: tuple[ClassFigures, ...]
    loads: tuple[ClassLoad, ...]
    slots: int
    waits_s: dict[str, float]
    ttft_fcfs_s: float  # the merged stream's, FCFS, at the percentile
    e2e_fcfs_s: float
    fcfs_wait_s: float  # its slot wait at the percentile


def _priority_options(ctx: _Context) -> list[Option]:
    """The configurations a priority pool may take: the single-class planner's candidates for the
    merged stream (memory holds its p99 request; the request's grids, pins and GPUs), kept where
    the interactive classes' own SLO floors admit the (GPU, precision, tp): a prefill of an
    interactive prompt no faster than its TTFT target cannot be helped by priority."""
    classes, base = ctx.classes, ctx.base
    interactive = [k for k in classes if k.slo is not None]
    background = [k for k in classes if k.slo is None]
    merged = merged_workload(classes)
    request, inputs = apply_pins(replace(base, workload=merged, slo=tightest_slo(background)), ctx.inputs)
    if 1 not in request.pp_degrees:
        raise PlannerInputError(
            "a class plan's pools are not searched in pipeline stages: only pp 1 can be pinned",
            constraint="pin.pp",
            field="constraints.pin.pp",
        )

    def groups(workload: Workload, slo: Slo) -> list[Group]:
        return enumerate_groups(
            model=inputs.model,
            gpus=inputs.gpus,
            precisions=inputs.precisions,
            workload=workload,
            slo=slo,
            tp_degrees=request.tp_degrees,
            min_confidence=request.constraints.min_confidence,
        )[0]

    served = {g.key for g in groups(merged_workload(interactive), tightest_slo(interactive))}
    kept = [g for g in groups(merged, request.slo) if g.key in served]
    if request.constraints.unit == "instance":
        if not inputs.instance_types:
            raise PlannerInputError(
                "a plan in whole instances needs the provider's instance types; none were given", constraint="unit"
            )
        kept, _ = packed_groups(kept, inputs.instance_types)
    return enumerate_all_options(kept, merged, batch_limits=request.batch_limits, chunk_budgets=request.chunk_budgets)


def _replica_prediction(option: Option, workload: Workload, replicas: int, percentile: float) -> Prediction:
    """The queueing model for one replica of `option` taking its share of `workload`."""
    group = option.group
    if workload.arrival_cv == 1.0:
        # a random split of Poisson arrivals is Poisson: one replica at λ/r (cached across the search)
        serving = Serving(replicas=1, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
        return _cached_prediction(
            group.step_model,
            workload.at_rate(1.0),
            serving,
            group.kv_capacity_tokens,
            workload.arrival_rate_rps / replicas,
            percentile,
        )
    serving = Serving(replicas=replicas, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
    return predict(group.step_model, workload, serving, kv_capacity_tokens=group.kv_capacity_tokens, percentile=percentile)


def _with_wait(fcfs_s: float, fcfs_wait_s: float, class_wait_s: float) -> float:
    """A class's latency at the percentile under priority: the merged stream's FCFS latency plus the
    extra wait the class's priority wait has over the FCFS slot wait, both at the percentile.

    Never below the FCFS latency: a percentile of TTFT less a percentile of the wait is no
    percentile of anything. When the batch is bursty the queueing model's FCFS slot wait can be
    most of its p99 TTFT (on the worked example, 7 H100s: 0.82 s of 0.92 s) while the slot-level
    Cobham wait is 0, and subtracting left a 0.10 s "chat TTFT" below the prefill of the merged
    stream's own p99 prompt. Priority's gain for the top class is therefore not credited here: it
    would need each class's TTFT within the shared batch (its own prompts' prefill)."""
    return fcfs_s + max(0.0, class_wait_s - fcfs_wait_s)


def _trial(
    ctx: _Context, option: Option, replicas: int, *, shedding: bool, classes: Sequence[TrafficClass] | None = None
) -> _Trial | None:
    """`replicas` of `option` as one priority pool, if the queueing model finds every class on target
    with ρ ≤ RELIABLE_MAX_UTILISATION; None otherwise. Each class's TTFT and
    E2E are the merged stream's, plus what the class's Cobham wait at the percentile adds to the
    merged stream's FCFS slot wait there, never less (`_with_wait`); TPOT is the merged stream's
    (everyone shares the batch). `classes`: the
    request's classes, or others at other rates (a period of the day profile)."""
    classes = ctx.classes if classes is None else classes
    interactive = [k for k in classes if k.slo is not None]
    workload = merged_workload(classes)
    percentile = max(k.own_slo.percentile for k in classes)
    try:
        prediction = _replica_prediction(option, workload, replicas, percentile)
        q = prediction.queueing
        if shedding and q is None and interactive:
            # the full load does not fit: the slot holding time of the interactive load alone
            # (shorter than with the background in the batch, so the refusal estimate is optimistic;
            # the admitted load's prediction below still decides)
            q = _replica_prediction(option, merged_workload(interactive), replicas, percentile).queueing
        if q is None or (not shedding and (prediction.unstable or prediction.ttft is None)):
            return None
        shed = dict.fromkeys((k.name for k in classes), 0.0)
        if shedding:
            shed = _shed_fractions(classes, replicas, q.service_s, q.slots)
            if any(shed[k.name] > k.max_shed_fraction for k in classes):
                return None
            admitted = [replace(k, arrival_rate_rps=k.arrival_rate_rps * (1.0 - shed[k.name])) for k in classes]
            prediction = _replica_prediction(option, merged_workload(admitted), replicas, percentile)
            q = prediction.queueing
        if prediction.unstable or q is None or prediction.ttft is None or prediction.tpot is None or prediction.e2e is None:
            return None
        if q.utilisation > RELIABLE_MAX_UTILISATION:
            return None
        loads = tuple(
            ClassLoad(
                name=k.name,
                arrival_rate_rps=k.arrival_rate_rps * (1.0 - shed[k.name]) / replicas,
                service_s=q.service_s,
                priority=k.priority,
            )
            for k in classes
        )
        waits = {w.name: w.wait_at_percentile_s(percentile) for w in priority_waits(loads, slots=q.slots)}
    except (UnstableLoadError, ConvergenceError):
        return None
    fcfs_wait = q.wait_at_percentile_s
    tpot = prediction.tpot.at_percentile_s
    figures = []
    for k in classes:
        ttft = _with_wait(prediction.ttft.at_percentile_s, fcfs_wait, waits[k.name])
        e2e = _with_wait(prediction.e2e.at_percentile_s, fcfs_wait, waits[k.name])
        figures.append(
            ClassFigures(
                name=k.name,
                arrangement_pool="shared",
                percentile=percentile,
                ttft_s=ttft,
                tpot_s=tpot,
                e2e_s=e2e,
                deadline_h=k.deadline_h,
                meets_target=_meets(k.own_slo, ttft, tpot, e2e),
                shed_fraction=shed[k.name],
            )
        )
    if not all(f.meets_target for f in figures):
        return None
    return _Trial(
        option=option,
        replicas=replicas,
        cost_usd_per_hour=option.group.cost_usd_per_hour(replicas),
        utilisation=q.utilisation,
        figures=tuple(figures),
        loads=loads,
        slots=q.slots,
        waits_s=waits,
        ttft_fcfs_s=prediction.ttft.at_percentile_s,
        e2e_fcfs_s=prediction.e2e.at_percentile_s,
        fcfs_wait_s=fcfs_wait,
    )


def _within_limits(ctx: _Context, option: Option, replicas: int) -> bool:
    """The request's limits a single pool can break: GPUs in all, per type, and the budget."""
    limits = ctx.base.constraints
    gpus = replicas * option.group.tp
    if limits.max_gpus is not None and gpus > limits.max_gpus:
        return False
    if limits.inventory.get(option.group.gpu.slug, gpus) < gpus:
        return False
    return limits.budget_usd_per_hour is None or option.group.cost_usd_per_hour(replicas) <= limits.budget_usd_per_hour


def _cheapest_pool(ctx: _Context, options: Sequence[Option], *, shedding: bool, fewest: dict[str, int]) -> _Trial | None:
    """The cheapest (option, replicas) the queueing model accepts as a priority pool: branch and bound.

    Each option starts at the fewest replicas its saturation allows under ρ ≤ RELIABLE_MAX_UTILISATION
    (or `fewest[option.id]` where the simulator refused fewer); options are taken in order of that
    pool's cost (a lower bound on any pool of theirs), replicas are added while the pool still costs
    less than the best found (`_fewest_replicas`), and the search stops at the first option whose
    bound reaches it."""
    classes, constraints = ctx.classes, ctx.base.constraints
    workload = merged_workload(classes)
    # the load a pool must carry at the least: a shed class at most its max_shed_fraction less
    carried_rps = sum(k.arrival_rate_rps * (1.0 - (k.max_shed_fraction if shedding else 0.0)) for k in classes)
    mix = workload.at_rate(1.0)
    starts: list[tuple[float, int, Option]] = []
    for option in options:
        serving = Serving(replicas=1, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
        try:
            saturation = _saturation(option.group.step_model, mix, serving, option.group.kv_capacity_tokens)
        except ConvergenceError:
            continue
        if not saturation > 0:
            continue
        least = math.ceil(carried_rps / (saturation * RELIABLE_MAX_UTILISATION))  # ρ = λ/(r·saturation) ≤ cap
        least = max(least, constraints.min_replicas, 1, fewest.get(option.id, 1))
        starts.append((option.group.cost_usd_per_hour(least), least, option))
    starts.sort(key=lambda t: (t[0], t[2].id))
    best: _Trial | None = None
    for bound, least, option in starts:
        if best is not None and bound >= best.cost_usd_per_hour:
            break  # every later option costs at least its bound
        # the most replicas worth trying: cheaper than the best found and within the request's limits
        most = least - 1
        while most < least + MAX_EXTRA_REPLICAS and _within_limits(ctx, option, most + 1):
            if best is not None and option.group.cost_usd_per_hour(most + 1) >= best.cost_usd_per_hour:
                break
            most += 1
        found = _fewest_replicas(ctx, option, least, most, shedding=shedding)
        if found is not None:
            best = found
    return best


def _fewest_replicas(ctx: _Context, option: Option, least: int, most: int, *, shedding: bool) -> _Trial | None:
    """The priority pool on `option` with the fewest replicas in [least, most] the model accepts.

    Acceptance only grows with replicas (each replica's rate falls, and with it every predicted
    percentile and Cobham wait: the monotonicity the single-class search rests on), so `least` is
    tried first (the usual answer), then `most` (a configuration that fails even there is given up
    after two predictions), then the boundary is bisected."""

    def accepted(replicas: int) -> _Trial | None:
        if ctx.checkpoint is not None:
            ctx.checkpoint()
        found = _trial(ctx, option, replicas, shedding=shedding)
        if found is None or not ctx.base.constraints.n_plus_one:
            return found
        # with any one replica lost, the rest still keep every class on target
        return found if replicas > 1 and _trial(ctx, option, replicas - 1, shedding=shedding) is not None else None

    if most < least:
        return None
    found = accepted(least)
    if found is not None or most == least:
        return found
    found = accepted(most)
    if found is None:
        return None
    low, high = least, most  # low refused, high accepted
    while high - low > 1:
        middle = (low + high) // 2
        trial = accepted(middle)
        if trial is None:
            low = middle
        else:
            high, found = middle, trial
    return found


def _simulated(ctx: _Context, trial: _Trial) -> tuple[ClassVerified, ...]:
    """Every class's wait on one replica of `trial` by the class simulator (planner/simulator_classes.py),
    as many measured requests as the single-class planner verifies with (`verify_requests`), and the
    class's TTFT and E2E with the simulated wait in place of the model's."""
    base = ctx.base
    rate = sum(k.arrival_rate_rps for k in trial.loads)
    duration_s = base.verify_requests / rate / (1.0 - WARMUP_FRACTION)  # the first tenth is warm-up
    simulated = {
        s.name: s
        for s in simulate_classes(
            trial.loads,
            slots=trial.slots,
            duration_s=duration_s,
            seed=base.seed,
            warmup_fraction=WARMUP_FRACTION,
            percentile=trial.figures[0].percentile,
        )
    }
    checks = []
    for k, f in zip(ctx.classes, trial.figures, strict=True):
        wait = simulated[k.name].wait_at_percentile_s
        ttft = _with_wait(trial.ttft_fcfs_s, trial.fcfs_wait_s, wait)
        e2e = _with_wait(trial.e2e_fcfs_s, trial.fcfs_wait_s, wait)
        checks.append(
            ClassVerified(
                name=k.name,
                wait_model_s=trial.waits_s[k.name],
                wait_simulated_s=wait,
                ttft_simulated_s=ttft,
                e2e_simulated_s=e2e,
                shed_fraction_simulated=simulated[k.name].shed_fraction,
                meets_target=_meets(k.own_slo, ttft, f.tpot_s, e2e),
            )
        )
    return tuple(checks)


def _shared_priority(ctx: _Context, *, verify: bool, shedding: bool = False) -> _Candidate:
    """One pool for every class under non-preemptive priority, its configuration searched
    (`_cheapest_pool`). With `verify` (and the request verifying), the cheapest pool's classes are
    simulated (`_simulated`); a pool where any class misses its target is refused at that replica
    count and the search runs again, for at most MAX_VERIFY_ROUNDS rounds. Without, the cost is the
    queueing model's, a lower bound on the simulated search's."""
    classes = ctx.classes
    interactive = [k for k in classes if k.slo is not None]
    if not interactive or len(interactive) == len(classes):
        raise InfeasiblePlanError("a priority pool needs at least one latency class and one deadline class", constraint="classes")
    if ctx.priority_options is None:
        ctx.priority_options = _priority_options(ctx)
    simulate = verify and ctx.base.verify
    fewest: dict[str, int] = {}
    refuted: list[str] = []
    for _ in range(MAX_VERIFY_ROUNDS if simulate else 1):
        trial = _cheapest_pool(ctx, ctx.priority_options, shedding=shedding, fewest=fewest)
        if trial is None:
            break
        verification = None
        if simulate:
            checks = _simulated(ctx, trial)
            misses = [c.name for c in checks if not c.meets_target]
            if misses:
                fewest[trial.option.id] = trial.replicas + 1
                refuted.append(f"{trial.option.id} × {trial.replicas}: simulated p99 missed for {', '.join(misses)}")
                continue
            top = min(trial.loads, key=lambda k: k.priority)
            interactive_check = next(c for c in checks if c.name == top.name)
            verification = Verified(
                method="slot-level class simulator (planner/simulator_classes.py), one replica",
                interactive_p99_wait_model_s=interactive_check.wait_model_s,
                interactive_p99_wait_simulated_s=interactive_check.wait_simulated_s,
                classes=checks,
                refuted=tuple(refuted),
            )
        group = trial.option.group
        pool = PoolPlan(
            name="shared",
            classes=tuple(k.name for k in classes),
            gpu=group.gpu.slug,
            tp=group.tp,
            replicas=trial.replicas,
            batch_limit=trial.option.batch_limit,
            chunk_tokens=trial.option.chunk_tokens,
            cost_usd_per_hour=trial.cost_usd_per_hour,
            utilisation=trial.utilisation,
            weights_precision=group.precision.weights.slug,
            kv_precision=group.precision.kv_cache.slug,
            scheduling="priority",
        )
        return _Candidate(
            name="shared_priority_shedding" if shedding else "shared_priority",
            cost_usd_per_hour=pool.cost_usd_per_hour,
            pools=(pool,),
            classes=trial.figures,
            final=simulate or not ctx.base.verify,
            verification=verification,
        )
    if refuted:
        raise InfeasiblePlanError(
            f"the class simulator refused every priority pool the search proposed ({len(refuted)} tried)",
            constraint="verification",
        )
    raise InfeasiblePlanError(
        f"no priority pool within ρ ≤ {RELIABLE_MAX_UTILISATION} meets every class's target", constraint="classes"
    )


def _day_periods(classes: Sequence[TrafficClass]) -> int | None:
    """The number of periods the classes' day profiles share (None: no class has one)."""
    lengths = {len(k.demand_rps) for k in classes if k.demand_rps is not None}
    if len(lengths) > 1:
        raise PlannerInputError(
            f"every class's demand_rps must give the same number of periods, got {sorted(lengths)}", field="classes"
        )
    return lengths.pop() if lengths else None


#: Fractions of a period's idle capacity tried for deferred work, largest first, until the
#: interactive classes stay on target with it in the pool (`_spare_rps`).
SPARE_STEPS = (1.0, 0.75, 0.5, 0.25)


def _spare_rps(
    ctx: _Context, interactive_plan: PlanResult, interactive_rps: Sequence[float], background: Sequence[TrafficClass]
) -> list[float]:
    """Per period, the background rate the interactive pool can take besides its interactive load.

    The pool (the interactive classes' plan at their peak) carries background work up to the
    utilisation it runs at in its peak period, never hotter: ρ_I(p) + ρ_B(p) ≤ ρ_peak, each ρ the
    rate over the pool's saturation rate for that mix (planner/queueing.py), so
    b(p) = (ρ_peak − λ_I(p)/(r·sat_I)) · r·sat_B. Each period's pool is then checked as a priority
    pool (`_trial`: the interactive classes at that period's rates, the background at b(p) below
    them, ρ ≤ RELIABLE_MAX_UTILISATION); where an interactive class would miss its target, a
    smaller share of the idle capacity is tried (SPARE_STEPS), then none."""
    periods = len(interactive_rps)
    if len(interactive_plan.rows) != 1:
        return [0.0] * periods  # a mixed fleet: which row would take the work is not modelled
    row = interactive_plan.row
    if ctx.priority_options is None:
        ctx.priority_options = _priority_options(ctx)
    option = next((o for o in ctx.priority_options if o.id == candidate_id_of(row)), None)
    if option is None:
        return [0.0] * periods  # the configuration cannot hold the merged p99 request
    interactive = [k for k in ctx.classes if k.slo is not None]
    serving = Serving(replicas=1, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
    group = option.group
    sat_i = _saturation(group.step_model, merged_workload(interactive).at_rate(1.0), serving, group.kv_capacity_tokens)
    sat_b = _saturation(group.step_model, merged_workload(background).at_rate(1.0), serving, group.kv_capacity_tokens)
    replicas = row.replicas
    peak_rho = interactive_plan.target_rho
    background_total = sum(k.arrival_rate_rps for k in background)
    checked: dict[tuple[float, ...], float] = {}
    spare = []
    for p in range(periods):
        rates = tuple(k.day_rps(periods)[p] for k in interactive)
        if rates in checked:
            spare.append(checked[rates])
            continue
        idle = max(0.0, peak_rho - sum(rates) / (replicas * sat_i)) * replicas * sat_b
        found = 0.0
        for step in SPARE_STEPS:
            b = idle * step
            if b <= 0.0:
                break
            period_classes = [
                replace(k, arrival_rate_rps=rate, demand_rps=None) for k, rate in zip(interactive, rates, strict=True) if rate > 0
            ]
            period_classes += [
                replace(k, arrival_rate_rps=b * k.arrival_rate_rps / background_total, demand_rps=None) for k in background
            ]
            if _trial(ctx, option, replicas, shedding=False, classes=period_classes) is not None:
                found = b
                break
        checked[rates] = found
        spare.append(found)
    return spare


def _deferred(ctx: _Context, *, verify: bool) -> _Candidate:
    """The interactive classes' pool sized for their peak all day; the background classes' work
    deferred within its deadline into that pool's idle capacity and, where that is not enough,
    into extra background replicas rented per period (planner/plan_deferral.py).

    Its pools are simulated whenever the request verifies, whatever `verify` says: a simulated
    interactive pool may have more idle capacity than the unsimulated one, so the unsimulated
    cost is no lower bound here."""
    del verify
    classes = ctx.classes
    periods = _day_periods(classes)
    if periods is None:
        raise _NotComparable("the classes carry no day profile (demand_rps), so there are no off-peak hours to defer to")
    interactive = [k for k in classes if k.slo is not None]
    background = [k for k in classes if k.slo is None]
    if not interactive or not background:
        raise _NotComparable("deferral needs at least one latency class and one deadline class")
    plan_i, prediction_i, final_i = _plan_one(ctx, interactive, tightest_slo(interactive), verify=True)
    plan_b, prediction_b, final_b = _plan_one(ctx, background, tightest_slo(background), verify=True)
    interactive_rps = [sum(k.day_rps(periods)[p] for k in interactive) for p in range(periods)]
    background_rps = [sum(k.day_rps(periods)[p] for k in background) for p in range(periods)]
    deadline_h = min(k.deadline_h for k in background if k.deadline_h is not None)
    schedule = deferral_schedule(
        arrivals_rps=background_rps,
        spare_rps=_spare_rps(ctx, plan_i, interactive_rps, background),
        deadline_h=deadline_h,
        # an extra replica carries what the background pool's plan verified per replica at its peak
        extra_replica_rps=sum(k.arrival_rate_rps for k in background) / plan_b.replicas,
        extra_replica_usd_per_hour=plan_b.cost_usd_per_hour / plan_b.replicas,
    )
    pools = [replace(_pool("interactive", interactive, plan_i), classes=tuple(k.name for k in classes))]
    if any(schedule.extra_replicas):
        row_b = plan_b.row
        pools.append(
            PoolPlan(
                name="deferred",
                classes=tuple(k.name for k in background),
                gpu=row_b.gpu,
                tp=row_b.tp,
                replicas=max(schedule.extra_replicas),  # the most rented in any period
                batch_limit=row_b.batch_limit,
                chunk_tokens=row_b.chunk_tokens,
                cost_usd_per_hour=schedule.extra_cost_usd_per_hour,  # averaged over the day
                utilisation=plan_b.target_rho,
                weights_precision=row_b.weights_precision,
                kv_precision=row_b.kv_precision,
            )
        )
    completion_s = schedule.completion_h * S_PER_H
    figures = [_figures(k, "interactive", plan_i, prediction_i) for k in interactive]
    figures += [
        replace(
            _figures(k, "deferred", plan_b, prediction_b),
            ttft_s=completion_s,  # a deferred request's first token may come as late as its last
            e2e_s=completion_s,
            meets_target=k.deadline_h is not None and completion_s <= k.deadline_h * S_PER_H,
        )
        for k in background
    ]
    by_name = {f.name: f for f in figures}
    return _Candidate(
        name="deferred",
        cost_usd_per_hour=plan_i.cost_usd_per_hour + schedule.extra_cost_usd_per_hour,
        pools=tuple(pools),
        classes=tuple(by_name[k.name] for k in classes),
        final=final_i and final_b,
    )


_ARRANGEMENTS: tuple[tuple[str, Callable[..., _Candidate], str], ...] = (
    ("shared_fcfs", _shared_fcfs, "one FCFS pool planned at the tightest target of any class"),
    ("shared_priority", _shared_priority, "one pool, interactive first, background fills idle slots"),
    (
        "shared_priority_shedding",
        _shared_priority_shedding,
        "the priority pool refusing the lowest class when no slot is free, within its max_shed_fraction",
    ),
    ("segregated", _segregated, "one pool per class, each at its own target"),
    (
        "deferred",
        _deferred,
        (
            "the interactive pool sized for its peak; background work deferred within its deadline into its idle "
            "hours, and extra background replicas only in the periods that need them"
        ),
    ),
)
#: Appended to the reason of an arrangement whose single-class plans were never simulated.
NOT_SIMULATED = (
    "; queueing model only, not simulated: before simulation it already cost no less than the chosen "
    "arrangement, and simulation only raises a cost"
)


def plan_classes(classes: Sequence[TrafficClass], inputs: PlanningInputs, base: PlanningRequest) -> ClassesPlan:
    """Compare the arrangements for `classes` and choose the cheapest feasible one.

    `base` carries the search grids, constraints and verification settings; its workload and SLO
    are replaced per pool.

    With `base.verify`, only what the choice needs is simulated: every arrangement is first priced
    with its single-class plans unsimulated (lower bounds, except the priority pool, whose seed is
    simulated up front), then the cheapest whose cost is not final is simulated, until the cheapest
    is final. That is the arrangement simulating every plan would choose, at the same cost; an
    arrangement left unsimulated is reported at its lower bound, saying so.
    """
    if not classes:
        raise PlannerInputError("at least one class is needed", field="classes")
    if len({k.name for k in classes}) != len(classes):
        raise PlannerInputError("class names must be unique", field="classes")
    _day_periods(classes)  # profiles of different lengths are the request's error, not an arrangement's
    ctx = _Context(classes=classes, inputs=inputs, base=base)
    builds = {name: build for name, build, _ in _ARRANGEMENTS}
    order = {name: i for i, (name, _, _) in enumerate(_ARRANGEMENTS)}
    priced: dict[str, _Candidate] = {}
    refused: dict[str, str] = {}
    # the deferred arrangement first: its pools are simulated up front (with verify), and the
    # segregated arrangement then takes those plans instead of planning them again unsimulated
    for name in sorted(order, key=lambda n: (n != "deferred", order[n])):
        try:
            priced[name] = builds[name](ctx, verify=False)
        except InfeasiblePlanError as error:
            refused[name] = f"infeasible: {error.detail}"
        except _NotComparable as error:
            refused[name] = f"not comparable: {error}"
    while priced:
        best = min(priced.values(), key=lambda c: (c.cost_usd_per_hour, order[c.name]))  # ties: listed first
        if best.final:
            break
        try:
            priced[best.name] = builds[best.name](ctx, verify=True)
        except InfeasiblePlanError as error:
            del priced[best.name]
            refused[best.name] = f"infeasible: {error.detail}"
    else:
        raise InfeasiblePlanError("no arrangement serves every class", constraint="classes")
    compared = []
    for name, _, reason in _ARRANGEMENTS:
        if name in refused:
            compared.append(ArrangementCost(name=name, cost_usd_per_hour=None, reason=refused[name]))
            continue
        candidate = priced[name]
        note = "" if candidate.final else NOT_SIMULATED
        compared.append(ArrangementCost(name=name, cost_usd_per_hour=candidate.cost_usd_per_hour, reason=reason + note))
    return ClassesPlan(
        chosen=best.name,
        compared=tuple(compared),
        pools=best.pools,
        classes=best.classes,
        verification=best.verification,
    )
