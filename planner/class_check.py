"""A stored class plan's pools judged at given traffic classes: the forward model of a class plan.

`plan_classes` (planner/plan_classes.py) searches pools; this module takes pools as they are deployed
(GPU, tp, replicas, precision, batch limit, chunk budget, scheduling, admission limits) and predicts each class's
latencies on them at the classes' rates, scaled by `load_factor`:

- an FCFS pool (`segregated`, `shared_fcfs`, a deferred plan's interactive pool) is the single-class
  queueing model (planner/queueing.py `predict`) of the merged stream of its classes on its replicas,
  each class taking the merged stream's figures at the pool's percentile (the highest of its classes'),
  as `plan_classes` reports them;
- a priority pool (`shared_priority`, `shared_priority_shedding`) as planner/plan_classes_priority.py
  `_trial` predicts one: the merged stream's FCFS figures plus what each class's Cobham wait adds
  over the FCFS slot wait (`with_wait`), with the shedding arrangement's refusal fractions from the
  birth–death chain at the plan's stored admission limit K and the occupancy's overdispersion
  (`shed_fractions`), except that the ρ ≤ RELIABLE_MAX_UTILISATION cap of its search is not a
  target: a deployed pool above it is reported, flagged by `utilisation`;
- a deferred plan's background classes are served by a day schedule (planner/plan_deferral.py) on
  capacities the stored plan does not keep: they are reported `checked: false` (`NO_DAY_RUN`).

With `simulate`, each FCFS pool is also run in the step-level simulator (planner/simulator.py, the
single-class planner's VERIFY_REQUESTS requests, its seed) and each priority pool by the function
the plan's own verification calls (plan_classes_priority.py `simulate_priority_pool`: the
step-level class simulator, one replica, the stored admission limits, VERIFY_REQUESTS requests);
a class whose simulated figures miss its target does not meet it (an FCFS pool's at a p99 target,
the simulator's percentile; a priority pool's at the pool's percentile, with its simulated
refusals within `max_shed_fraction`). Given a deferred plan's day run (the background work it
served on the interactive pool per period), its interactive classes are simulated period by period
as that day run did (`_day_periods`).

Used by the recheck of a stored class plan and by a class deployment's re-plan, which keeps the plan
in force while it still meets every class's target at (1 + headroom_margin) × the new rates
(planner/class_diff.py `decide_classes`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from planner.errors import ConvergenceError, HeadroomError, UnstableLoadError
from planner.plan_classes_base import meets_slo, pool_step_model
from planner.plan_classes_priority import shed_fractions, simulate_priority_pool, with_wait
from planner.planning import VERIFY_REQUESTS, PlanningInputs
from planner.queueing import Prediction, predict
from planner.queueing_priority import ClassLoad, priority_waits
from planner.simulator import simulate
from planner.simulator_classes_step import StepClassSimulated
from planner.step_model import StepModel
from planner.traffic_classes import TrafficClass, merged_workload
from planner.workload import Serving

__all__ = ["ClassCheck", "ClassPlanCheck", "DeployedClassPool", "check_class_plan"]

#: The percentile a simulated figure is reported at: the simulators report p50/p90/p99.
SIMULATED_PERCENTILE = 99.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployedClassPool:
    """One pool of a stored class plan, as deployed."""

    name: str
    classes: tuple[str, ...]
    scheduling: str  # "fcfs" or "priority"
    gpu: str
    tp: int
    replicas: int
    batch_limit: int
    chunk_tokens: int | None
    weights_precision: str
    kv_precision: str
    #: The shedding arrangement's admission limit K per shed class (the stored plan's
    #: classes[].admission_limit); empty for other pools, or a plan stored without it.
    admission_limits: Mapping[str, int] = field(default_factory=dict)
    #: Pipeline stages and expert-parallel degree of a replica (a plan stored before pools carried them: 1).
    pp: int = 1
    ep: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassCheck:
    """One class on the deployed pools: the queueing model's figures at its percentile and, when
    simulated, the simulator's (p99 for an FCFS pool; a priority pool's at its percentile; a deferred
    plan's interactive class's: its day run's worst period). `checked` is false for a deferred
    background class (`NO_DAY_RUN`) and for a class whose pool cannot be evaluated (`problem` says why)."""

    name: str
    pool: str
    arrival_rate_rps: float  # × load_factor
    percentile: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    shed_fraction: float
    utilisation: float  # the pool's ρ per replica (NaN when not evaluated)
    simulated_ttft_p99_s: float | None = None
    simulated_tpot_p99_s: float | None = None
    simulated_e2e_p99_s: float | None = None
    #: A priority pool's simulated refusal fraction (the step-level class simulator); None otherwise.
    simulated_shed_fraction: float | None = None
    meets_target: bool
    checked: bool = True
    problem: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassPlanCheck:
    load_factor: float
    simulated: bool
    classes: tuple[ClassCheck, ...]

    @property
    def meets_targets(self) -> bool:
        """Every class that could be checked meets its target, and at least one could."""
        checked = [k for k in self.classes if k.checked]
        return bool(checked) and all(k.meets_target for k in checked)

    @property
    def summary(self) -> str:
        misses = [k for k in self.classes if k.checked and not k.meets_target]
        unchecked = [k.name for k in self.classes if not k.checked]
        at = "" if self.load_factor == 1.0 else f" at {self.load_factor:g}× the rates"
        if not any(k.checked for k in self.classes):
            text = "no class could be checked"
        elif misses:
            text = "misses " + ", ".join(f"{k.name} ({k.problem or _figures(k)})" for k in misses) + at
        else:
            text = "every class meets its target" + at
        if unchecked:
            text += f"; not checked: {', '.join(unchecked)} (deferred to a day schedule, or its pool cannot be evaluated)"
        return text


def _figures(k: ClassCheck) -> str:
    """The model's figures, and the simulator's p99s where it ran: a class can miss on the simulated
    p99 alone (the model is optimistic past its plan's utilisation), and a miss quoting only figures
    under the target would not say why."""
    text = f"p{k.percentile:g} TTFT {k.ttft_s * 1e3:.4g} ms, TPOT {k.tpot_s * 1e3:.4g} ms, E2E {k.e2e_s:.4g} s"
    if k.simulated_ttft_p99_s is not None and k.simulated_tpot_p99_s is not None and k.simulated_e2e_p99_s is not None:
        text += (
            f"; simulated p99 TTFT {k.simulated_ttft_p99_s * 1e3:.4g} ms, TPOT {k.simulated_tpot_p99_s * 1e3:.4g} ms, "
            f"E2E {k.simulated_e2e_p99_s:.4g} s"
        )
    return text


def _model(pool: DeployedClassPool, inputs: PlanningInputs) -> tuple[StepModel, int]:
    """The pool's step model and KV capacity, as enumeration builds them (planner/candidates.py)."""
    gpu = next((g for g in inputs.gpus if g.slug == pool.gpu), None)
    if gpu is None:
        raise LookupError(f"GPU {pool.gpu} is not in today's catalog (or not priced by the provider)")
    precision = next(
        (p for p in inputs.precisions if p.weights.slug == pool.weights_precision and p.kv_cache.slug == pool.kv_precision),
        None,
    )
    if precision is None:
        raise LookupError(f"precision {pool.weights_precision}/{pool.kv_precision} is not in today's catalog")
    return pool_step_model(gpu, inputs.model, precision, tp=pool.tp, pp=pool.pp, ep=pool.ep)


def _unchecked(k: TrafficClass, pool: str, problem: str) -> ClassCheck:
    nan = math.nan
    return ClassCheck(
        name=k.name, pool=pool, arrival_rate_rps=k.arrival_rate_rps, percentile=k.own_slo.percentile, ttft_s=nan,
        tpot_s=nan, e2e_s=nan, shed_fraction=0.0, utilisation=nan, meets_target=False, checked=False, problem=problem,
    )  # fmt: skip


def _missed(k: TrafficClass, pool: str, problem: str) -> ClassCheck:
    return replace(_unchecked(k, pool, problem), checked=True)


def _fcfs(
    pool: DeployedClassPool, classes: Sequence[TrafficClass], inputs: PlanningInputs, *, simulated: bool, seed: int
) -> list[ClassCheck]:
    step_model, capacity = _model(pool, inputs)
    workload = merged_workload(classes)
    percentile = max(k.own_slo.percentile for k in classes)
    serving = Serving(replicas=pool.replicas, batch_limit=pool.batch_limit, chunk_tokens=pool.chunk_tokens)
    try:
        prediction = predict(step_model, workload, serving, kv_capacity_tokens=capacity, percentile=percentile)
    except (UnstableLoadError, ConvergenceError) as exc:
        return [_missed(k, pool.name, f"the queueing model has no steady state: {exc}") for k in classes]
    if prediction.unstable or prediction.ttft is None or prediction.tpot is None or prediction.e2e is None:
        return [_missed(k, pool.name, f"unstable: ρ {prediction.utilisation:.2f} per replica") for k in classes]
    sim: tuple[float, float, float] | None = None
    if simulated:
        result = simulate(step_model, workload, serving, kv_capacity_tokens=capacity, requests=VERIFY_REQUESTS, seed=seed)
        sim = (result.ttft_s.p99, result.tpot_s.p99, result.e2e_s.p99)
    out = []
    for k in classes:
        ttft, tpot, e2e = (prediction.ttft.at_percentile_s, prediction.tpot.at_percentile_s, prediction.e2e.at_percentile_s)
        meets = meets_slo(k.own_slo, ttft, tpot, e2e)
        if sim is not None and k.own_slo.percentile == SIMULATED_PERCENTILE:
            meets = meets and meets_slo(k.own_slo, *sim)
        out.append(
            ClassCheck(
                name=k.name, pool=pool.name, arrival_rate_rps=k.arrival_rate_rps, percentile=percentile, ttft_s=ttft,
                tpot_s=tpot, e2e_s=e2e, shed_fraction=0.0, utilisation=prediction.utilisation,
                simulated_ttft_p99_s=None if sim is None else sim[0], simulated_tpot_p99_s=None if sim is None else sim[1],
                simulated_e2e_p99_s=None if sim is None else sim[2], meets_target=meets,
            )
        )  # fmt: skip
    return out


def _priority(
    pool: DeployedClassPool,
    classes: Sequence[TrafficClass],
    inputs: PlanningInputs,
    *,
    shedding: bool,
    simulated: bool,
    seed: int,
) -> list[ClassCheck]:
    """The pool's classes as plan_classes_priority.py `_trial` predicts a priority pool (without its
    ρ cap and its all-on-target acceptance), the shed classes at the pool's stored admission limit,
    and with `simulated` its `simulate_priority_pool` at the planner's verification length."""
    step_model, capacity = _model(pool, inputs)
    replicas = pool.replicas
    percentile = max(k.own_slo.percentile for k in classes)
    interactive = [k for k in classes if k.slo is not None]

    def replica_prediction(ks: Sequence[TrafficClass]) -> Prediction:
        # as plan_classes_priority.py `_replica_prediction`: a random split of Poisson arrivals is
        # Poisson (one replica at λ/r); other arrivals as the pool's replicas sharing the stream
        workload = merged_workload(ks)
        if workload.arrival_cv == 1.0:
            one = Serving(replicas=1, batch_limit=pool.batch_limit, chunk_tokens=pool.chunk_tokens)
            return predict(step_model, workload.at_rate(workload.arrival_rate_rps / replicas), one,
                           kv_capacity_tokens=capacity, percentile=percentile)  # fmt: skip
        serving = Serving(replicas=replicas, batch_limit=pool.batch_limit, chunk_tokens=pool.chunk_tokens)
        return predict(step_model, workload, serving, kv_capacity_tokens=capacity, percentile=percentile)

    limits: dict[str, int | None] = dict.fromkeys((k.name for k in classes), None)
    try:
        prediction = replica_prediction(classes)
        q = prediction.queueing
        shed = dict.fromkeys((k.name for k in classes), 0.0)
        if shedding and q is None and interactive:
            # as `_trial`: the full load does not fit, the slot holding time of the interactive load alone
            q = replica_prediction(interactive).queueing
        if shedding and q is not None:
            # the shed classes admitted below the plan's admission limit K (stored per class); a plan
            # stored without one is checked at K = slots (admitted only into a free slot)
            limit = next((pool.admission_limits[k.name] for k in classes if k.name in pool.admission_limits), q.slots)
            shed = shed_fractions(classes, replicas, q.service_s, q.slots, limit, q.occupancy_dispersion)
            limits.update((k.name, limit) for k in classes if k.name in pool.admission_limits)
            if not pool.admission_limits:
                lowest = max(k.priority for k in classes)
                limits.update((k.name, limit) for k in classes if k.priority == lowest and k.max_shed_fraction > 0)
            prediction = replica_prediction(
                [replace(k, arrival_rate_rps=k.arrival_rate_rps * (1.0 - shed[k.name])) for k in classes]
            )
            q = prediction.queueing
        if prediction.unstable or q is None or prediction.ttft is None or prediction.tpot is None or prediction.e2e is None:
            return [_missed(k, pool.name, f"unstable: ρ {prediction.utilisation:.2f} per replica") for k in classes]
        loads = tuple(
            ClassLoad(name=k.name, arrival_rate_rps=k.arrival_rate_rps * (1.0 - shed[k.name]) / replicas,
                      service_s=q.service_s, priority=k.priority)
            for k in classes
        )  # fmt: skip
        waits = {w.name: w.wait_at_percentile_s(percentile) for w in priority_waits(loads, slots=q.slots)}
    except (UnstableLoadError, ConvergenceError) as exc:
        return [_missed(k, pool.name, f"the queueing model has no steady state: {exc}") for k in classes]
    sims: dict[str, StepClassSimulated] = {}
    if simulated:
        sims = simulate_priority_pool(
            step_model, classes, replicas, batch_limit=pool.batch_limit, chunk_tokens=pool.chunk_tokens,
            kv_capacity_tokens=capacity, admission_limits=limits, requests=VERIFY_REQUESTS, seed=seed,
            percentile=percentile,
        )  # fmt: skip
    ttft_fcfs, e2e_fcfs, tpot = prediction.ttft.at_percentile_s, prediction.e2e.at_percentile_s, prediction.tpot.at_percentile_s
    fcfs_wait = q.wait_at_percentile_s
    out = []
    for k in classes:
        ttft, e2e = with_wait(ttft_fcfs, fcfs_wait, waits[k.name]), with_wait(e2e_fcfs, fcfs_wait, waits[k.name])
        meets = meets_slo(k.own_slo, ttft, tpot, e2e) and shed[k.name] <= k.max_shed_fraction
        sim = sims.get(k.name)
        if sim is not None:
            # as the planner's verification (`_simulated`): the simulated figures at the plan's percentile
            # and the simulated refusals
            meets = meets and meets_slo(k.own_slo, sim.ttft_s, sim.tpot_s, sim.e2e_s) and sim.shed_fraction <= k.max_shed_fraction
        out.append(
            ClassCheck(
                name=k.name, pool=pool.name, arrival_rate_rps=k.arrival_rate_rps, percentile=percentile, ttft_s=ttft,
                tpot_s=tpot, e2e_s=e2e, shed_fraction=shed[k.name], utilisation=q.utilisation,
                simulated_ttft_p99_s=None if sim is None else sim.ttft_s,
                simulated_tpot_p99_s=None if sim is None else sim.tpot_s,
                simulated_e2e_p99_s=None if sim is None else sim.e2e_s,
                simulated_shed_fraction=None if sim is None else sim.shed_fraction, meets_target=meets,
            )
        )  # fmt: skip
    return out


#: Why a deferred plan's background classes are not re-run: the day run (planner/simulator_classes_day.py)
#: serves them on each period's spare capacity of the interactive pool plus the rented replicas, each at the
#: background plan's per-replica rate, and a stored plan keeps neither (only what the day run served on the
#: interactive pool, and the replicas rented).
NO_DAY_RUN = (
    "deferred to a day schedule (planner/plan_deferral.py), not re-run: the day run needs each period's spare "
    "capacity on the interactive pool and an extra replica's rate, which the stored plan does not carry"
)


def _day_periods(
    pool: DeployedClassPool,
    interactive: Sequence[TrafficClass],
    background: Sequence[TrafficClass],
    in_pool_rps: Sequence[float],
    inputs: PlanningInputs,
    *,
    load_factor: float,
    seed: int,
) -> dict[str, tuple[tuple[float, float, float], list[str]]]:
    """Each period of a deferred plan's day on its interactive pool, as its day run
    (plan_classes_deferred.py `_day_run`) simulated it: one replica at step level
    (`simulate_priority_pool`), the interactive classes at that period's rates (× `load_factor`) and the
    background work the plan's day run served on the pool then (`in_pool_rps`, as stored), at its
    priority. Per interactive class: its worst simulated (TTFT, TPOT, E2E) over the periods and the
    periods where it misses its target."""
    step_model, capacity = _model(pool, inputs)
    periods = len(in_pool_rps)
    percentile = max(k.own_slo.percentile for k in [*interactive, *background])
    background_total = sum(k.arrival_rate_rps for k in background)
    worst = {k.name: (0.0, 0.0, 0.0) for k in interactive}
    misses: dict[str, list[str]] = {k.name: [] for k in interactive}
    for p, in_pool in enumerate(in_pool_rps):
        rates = [k.day_rps(periods)[p] * load_factor for k in interactive]
        if sum(rates) + in_pool <= 0:
            continue
        shares = [*rates, *(in_pool * k.arrival_rate_rps / background_total for k in background)]
        # a class with no traffic in the period is left out: the simulator draws nothing for it, so the
        # others' arrivals (one seeded stream, class by class) are those of the plan's day run
        period = [
            replace(k, arrival_rate_rps=rate, demand_rps=None)
            for k, rate in zip([*interactive, *background], shares, strict=True)
            if rate > 0
        ]
        sims = simulate_priority_pool(
            step_model, period, pool.replicas, batch_limit=pool.batch_limit, chunk_tokens=pool.chunk_tokens,
            kv_capacity_tokens=capacity, admission_limits={}, requests=VERIFY_REQUESTS, seed=seed, percentile=percentile,
        )  # fmt: skip
        for k in interactive:
            sim = sims.get(k.name)
            if sim is None or sim.arrivals == 0:
                continue
            figures = (sim.ttft_s, sim.tpot_s, sim.e2e_s)
            worst[k.name] = (
                max(worst[k.name][0], figures[0]),
                max(worst[k.name][1], figures[1]),
                max(worst[k.name][2], figures[2]),
            )
            if not meets_slo(k.own_slo, *figures):
                misses[k.name].append(str(p))
    return {name: (worst[name], misses[name]) for name in worst}


def check_class_plan(
    arrangement: str,
    pools: Sequence[DeployedClassPool],
    classes: Sequence[TrafficClass],
    inputs: PlanningInputs,
    *,
    load_factor: float = 1.0,
    simulated: bool = False,
    seed: int = 0,
    background_in_pool_rps: Sequence[float] | None = None,
) -> ClassPlanCheck:
    """Each class of `classes` (rates × `load_factor`) on the deployed `pools` of a class plan whose
    chosen arrangement is `arrangement` (module docstring). A class no pool lists is a miss.

    A deferred plan's interactive classes, `simulated` and given its day run's background work on the
    interactive pool per period (`background_in_pool_rps`, the stored verification.periods), are also
    simulated period by period as its day run did (`_day_periods`): the worst period's figures are
    reported and a period where a class misses its target is a miss."""
    scaled = [replace(k, arrival_rate_rps=k.arrival_rate_rps * load_factor) for k in classes]
    by_name = {k.name: k for k in scaled}
    deferred = arrangement == "deferred"
    interactive_names = {k.name for k in scaled if k.slo is not None}
    found: dict[str, ClassCheck] = {}
    for pool in pools:
        if deferred and pool.name == "deferred":
            continue
        served = [by_name[n] for n in pool.classes if n in by_name and (not deferred or n in interactive_names)]
        if not served:
            continue
        try:
            if pool.scheduling == "priority":
                shedding = arrangement == "shared_priority_shedding"
                checks = _priority(pool, served, inputs, shedding=shedding, simulated=simulated, seed=seed)
            else:
                checks = _fcfs(pool, served, inputs, simulated=simulated, seed=seed)
                if deferred and simulated and background_in_pool_rps:
                    # the day run's classes at their own rates: its background is the share of what it served
                    background = [k for k in classes if k.slo is None]
                    day = _day_periods(pool, [k for k in classes if k.name in {c.name for c in served}], background,
                                       background_in_pool_rps, inputs, load_factor=load_factor, seed=seed)  # fmt: skip
                    checks = [_with_day(c, *day[c.name]) for c in checks]
        except (LookupError, HeadroomError) as exc:
            detail = exc.detail if isinstance(exc, HeadroomError) else str(exc.args[0])
            checks = [_unchecked(k, pool.name, detail) for k in served]
        found.update((c.name, c) for c in checks)
    out = []
    for k in scaled:
        if k.name in found:
            out.append(found[k.name])
        elif deferred and k.slo is None:
            out.append(_unchecked(k, "deferred", NO_DAY_RUN))
        else:
            out.append(_missed(k, "-", "no pool of the plan serves this class"))
    return ClassPlanCheck(load_factor=load_factor, simulated=simulated, classes=tuple(out))


def _with_day(check: ClassCheck, worst: tuple[float, float, float], misses: Sequence[str]) -> ClassCheck:
    """`check` with the day run's worst period as its simulated figures, missing where a period misses."""
    problem = check.problem
    if misses and problem is None:
        problem = f"the day run misses in period {', '.join(misses)} (simulated with the background in the pool)"
    return replace(
        check, simulated_ttft_p99_s=worst[0], simulated_tpot_p99_s=worst[1], simulated_e2e_p99_s=worst[2],
        meets_target=check.meets_target and not misses, problem=problem,
    )  # fmt: skip
