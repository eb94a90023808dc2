"""The priority pool of planner/plan_classes.py (arrangements `shared_priority` and
`shared_priority_shedding`): its configuration searched by branch and bound over the single-class
planner's candidates for the merged stream, each accepted by the queueing model
(planner/queueing_priority.py) and, with verification, by the class simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from planner.candidates import Group, Option, enumerate_all_options, enumerate_groups, packed_groups
from planner.errors import ConvergenceError, InfeasiblePlanError, PlannerInputError, UnstableLoadError
from planner.pins import apply_pins
from planner.pipeline import replica_parallel_section
from planner.plan_classes_base import (
    ClassFigures,
    ClassVerified,
    PoolPlan,
    Verified,
    _Candidate,
    _Context,
    _NotComparable,
    meets_slo,
)
from planner.plan_predict import cached_prediction, cached_saturation_rps
from planner.plan_verify import MAX_VERIFY_ROUNDS
from planner.queueing import RELIABLE_MAX_UTILISATION, Prediction, predict
from planner.queueing_priority import ClassLoad, priority_waits, shed_probabilities
from planner.simulator_classes_step import StepClass, StepClassSimulated, simulate_classes_step
from planner.step_model import StepModel
from planner.traffic_classes import TrafficClass, merged_workload, tightest_slo
from planner.workload import Serving, Slo, Workload

#: Largest number of replicas the priority pool search adds, on one configuration, above the
#: fewest its utilisation cap allows, while no cheaper pool has been found.
MAX_EXTRA_REPLICAS = 64
#: The share of the verifying class simulation not measured (the simulator's default).
WARMUP_FRACTION = 0.1


def shed_fractions(
    classes: Sequence[TrafficClass], replicas: int, service_s: float, slots: int, limit: int, dispersion: float = 1.0
) -> dict[str, float]:
    """Refusal fraction per class when the lowest-priority classes that may be shed are admitted only
    while a replica has fewer than `limit` requests in it (running + waiting; `limit` = `slots`: into
    a free slot, never to queue; below: some slots kept for the classes above): the birth–death
    chain of planner/queueing_priority.py."""
    lowest = max(k.priority for k in classes)
    loads = [
        ClassLoad(
            name=k.name,
            arrival_rate_rps=k.arrival_rate_rps / replicas,
            service_s=service_s,
            priority=k.priority,
            admission_limit=limit if _sheddable(k, lowest) else None,
        )
        for k in classes
    ]
    return {r.name: r.shed_probability for r in shed_probabilities(loads, slots=slots, dispersion=dispersion)}


def _sheddable(k: TrafficClass, lowest: int) -> bool:
    """Whether the shedding arrangement gives `k` an admission limit: the lowest priority, allowed to be shed."""
    return k.priority == lowest and k.max_shed_fraction > 0


def _admission_limit(
    classes: Sequence[TrafficClass], replicas: int, service_s: float, slots: int, limit: int | None, dispersion: float = 1.0
) -> tuple[int, dict[str, float]] | None:
    """The admission limit K of the shed classes and every class's refusal fraction: `limit` if given,
    else the smallest K in [1, slots] whose refusals stay within every class's `max_shed_fraction`
    (the least load a replica must then carry; refusals only fall as K grows, so it is bisected).
    None when even K = slots (admitted only into a free slot) refuses more than allowed."""

    def within(shed: dict[str, float]) -> bool:
        return all(shed[k.name] <= k.max_shed_fraction for k in classes)

    if limit is not None:
        shed = shed_fractions(classes, replicas, service_s, slots, limit, dispersion)
        return (limit, shed) if within(shed) else None
    shed = shed_fractions(classes, replicas, service_s, slots, slots, dispersion)
    if not within(shed):
        return None
    low, high = 0, slots  # low refuses too much (K = 0 refuses all), high is within
    while high - low > 1:
        middle = (low + high) // 2
        trial = shed_fractions(classes, replicas, service_s, slots, middle, dispersion)
        if within(trial):
            high, shed = middle, trial
        else:
            low = middle
    return high, shed


def _shared_priority_shedding(ctx: _Context, *, verify: bool) -> _Candidate:
    if not any(k.max_shed_fraction > 0 for k in ctx.classes):
        raise _NotComparable("no class may be shed (every max_shed_fraction is 0)")
    return _shared_priority(ctx, verify=verify, shedding=True)


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
    mean_occupancy: float  # running sequences per replica, the merged (admitted) stream FCFS
    #: The shed classes' admission limit per replica (running + waiting); None without shedding.
    admission_limit: int | None = None


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

    def groups(workload: Workload, slo: Slo) -> list[Group]:
        return enumerate_groups(
            model=inputs.model,
            gpus=inputs.gpus,
            precisions=inputs.precisions,
            workload=workload,
            slo=slo,
            tp_degrees=request.tp_degrees,
            min_confidence=request.constraints.min_confidence,
            pp_degrees=request.pp_degrees,  # stages where no in-node tp holds the model, as a single plan searches
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
        return cached_prediction(
            group.step_model,
            workload.at_rate(1.0),
            serving,
            group.kv_capacity_tokens,
            workload.arrival_rate_rps / replicas,
            percentile,
        )
    serving = Serving(replicas=replicas, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
    return predict(group.step_model, workload, serving, kv_capacity_tokens=group.kv_capacity_tokens, percentile=percentile)


def with_wait(fcfs_s: float, fcfs_wait_s: float, class_wait_s: float) -> float:
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
    ctx: _Context,
    option: Option,
    replicas: int,
    *,
    shedding: bool,
    classes: Sequence[TrafficClass] | None = None,
    limit: int | None = None,
) -> _Trial | None:
    """`replicas` of `option` as one priority pool, if the queueing model finds every class on target
    with ρ ≤ RELIABLE_MAX_UTILISATION; None otherwise. Each class's TTFT and
    E2E are the merged stream's, plus what the class's Cobham wait at the percentile adds to the
    merged stream's FCFS slot wait there, never less (`with_wait`); TPOT is the merged stream's
    (everyone shares the batch). `classes`: the
    request's classes, or others at other rates (a period of the day profile).

    With `shedding`, the lowest class where its `max_shed_fraction` allows gets an admission limit K
    (`_admission_limit`: `limit`, or the smallest whose refusals stay within what each class
    allows) and the pool is predicted for the admitted load."""
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
            # the occupancy's spread as the single-class model finds it at the full load (a
            # continuous batch's occupancy is overdispersed: its steps slow as it fills)
            found = _admission_limit(classes, replicas, q.service_s, q.slots, limit, q.occupancy_dispersion)
            if found is None:
                return None
            limit, shed = found
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
    lowest = max(k.priority for k in classes)
    figures = []
    for k in classes:
        ttft = with_wait(prediction.ttft.at_percentile_s, fcfs_wait, waits[k.name])
        e2e = with_wait(prediction.e2e.at_percentile_s, fcfs_wait, waits[k.name])
        figures.append(
            ClassFigures(
                name=k.name,
                arrangement_pool="shared",
                percentile=percentile,
                ttft_s=ttft,
                tpot_s=tpot,
                e2e_s=e2e,
                deadline_h=k.deadline_h,
                meets_target=meets_slo(k.own_slo, ttft, tpot, e2e),
                shed_fraction=shed[k.name],
                admission_limit=limit if shedding and _sheddable(k, lowest) else None,
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
        mean_occupancy=q.mean_occupancy,
        admission_limit=limit if shedding else None,
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
    # the load a pool must carry at the least: a shed class at most its max_shed_fraction less, and
    # the saturation rate of that admitted mix (shedding a class of longer requests than the others
    # lightens the mix as well as thinning it, so the full mix's saturation would overstate the bound)
    carried = [
        replace(k, arrival_rate_rps=k.arrival_rate_rps * (1.0 - (k.max_shed_fraction if shedding else 0.0))) for k in classes
    ]
    carried_rps = sum(k.arrival_rate_rps for k in carried)
    mix = merged_workload(carried).at_rate(1.0)
    starts: list[tuple[float, int, Option]] = []
    for option in options:
        serving = Serving(replicas=1, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
        try:
            saturation = cached_saturation_rps(option.group.step_model, mix, serving, option.group.kv_capacity_tokens)
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


def _largest_limit(ctx: _Context, trial: _Trial) -> _Trial:
    """The shedding pool `trial` with the largest admission limit the model still accepts on it: the
    search sized the pool at the smallest limit allowed (the least load to carry); on that pool the
    classes are then refused no more than it needs. Acceptance only falls as the limit grows (more
    admitted load), so the limit is bisected between the search's and the slots."""
    if trial.admission_limit is None:
        return trial

    def accepted(limit: int) -> _Trial | None:
        found = _trial(ctx, trial.option, trial.replicas, shedding=True, limit=limit)
        if found is None or not ctx.base.constraints.n_plus_one:
            return found
        lost_one = trial.replicas > 1 and _trial(ctx, trial.option, trial.replicas - 1, shedding=True, limit=limit) is not None
        return found if lost_one else None

    best, low, high = trial, trial.admission_limit, trial.slots + 1  # low accepted, high not tried (beyond the slots)
    while high - low > 1:
        middle = (low + high) // 2
        found = accepted(middle)
        if found is None:
            high = middle
        else:
            low, best = middle, found
    return best


def simulate_priority_pool(
    step_model: StepModel,
    classes: Sequence[TrafficClass],
    replicas: int,
    *,
    batch_limit: int,
    chunk_tokens: int | None,
    kv_capacity_tokens: int,
    admission_limits: Mapping[str, int | None],
    requests: int,
    seed: int,
    percentile: float,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, StepClassSimulated]:
    """One replica of a priority pool of `replicas` by the step-level class simulator
    (planner/simulator_classes_step.py): each class's own arrivals at its per-replica rate and
    lengths, priority admission, each class's admission limit (`admission_limits`, None or absent:
    always admitted); `requests` measured requests after a WARMUP_FRACTION warm-up. The check of
    a priority pool the search accepted (`_simulated`) and of a deployed one (planner/class_check.py)."""
    rate = sum(k.arrival_rate_rps for k in classes) / replicas
    duration_s = requests / rate / (1.0 - WARMUP_FRACTION)  # the first tenth is warm-up
    return {
        s.name: s
        for s in simulate_classes_step(
            step_model,
            [
                StepClass(
                    name=k.name,
                    workload=k.workload.at_rate(k.arrival_rate_rps / replicas),
                    priority=k.priority,
                    admission_limit=admission_limits.get(k.name),
                )
                for k in classes
            ],
            batch_limit=batch_limit,
            chunk_tokens=chunk_tokens,
            kv_capacity_tokens=kv_capacity_tokens,
            duration_s=duration_s,
            seed=seed,
            warmup_fraction=WARMUP_FRACTION,
            percentile=percentile,
            checkpoint=checkpoint,
        )
    }


def _simulated(ctx: _Context, trial: _Trial) -> tuple[ClassVerified, ...]:
    """Every class on one replica of `trial` by the step-level class simulator
    (`simulate_priority_pool`), with as many measured requests as the single-class planner
    verifies with (`verify_requests`). A class meets its target when its
    simulated TTFT, TPOT and E2E at the plan's percentile do and it is refused no more than its
    `max_shed_fraction`."""
    base = ctx.base
    group, option = trial.option.group, trial.option
    simulated = simulate_priority_pool(
        group.step_model,
        ctx.classes,
        trial.replicas,
        batch_limit=option.batch_limit,
        chunk_tokens=option.chunk_tokens,
        kv_capacity_tokens=group.kv_capacity_tokens,
        admission_limits={f.name: f.admission_limit for f in trial.figures},
        requests=base.verify_requests,
        seed=base.seed,
        percentile=trial.figures[0].percentile,
        checkpoint=ctx.checkpoint,
    )
    checks = []
    for k in ctx.classes:
        sim = simulated[k.name]
        checks.append(
            ClassVerified(
                name=k.name,
                wait_model_s=trial.waits_s[k.name],
                wait_simulated_s=sim.wait_s,
                ttft_simulated_s=sim.ttft_s,
                e2e_simulated_s=sim.e2e_s,
                shed_fraction_simulated=sim.shed_fraction,
                meets_target=meets_slo(k.own_slo, sim.ttft_s, sim.tpot_s, sim.e2e_s) and sim.shed_fraction <= k.max_shed_fraction,
                tpot_simulated_s=sim.tpot_s,
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
        trial = _largest_limit(ctx, trial)
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
                method="step-level class simulator (planner/simulator_classes_step.py), one replica",
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
            pp=group.pp,
            ep=group.ep,
            parallel=replica_parallel_section(
                group.gpu,
                ctx.inputs.model,
                group.precision.weights,
                group.step_model,
                tp=group.tp,
                pp=group.pp,
                ep=group.ep,
                batch=trial.mean_occupancy,
                workload=merged_workload(classes),
            ),
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
