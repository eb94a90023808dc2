"""The plan's justification (planner/plan_result.py records): the step model, memory, roofline and
queueing sections that explain the chosen configuration, and the re-planned sections — which
constraint binds, the best alternative per GPU type and precision, and the sensitivity to traffic.

Each SLO relaxed by 10 % re-runs the same search (verified as the plan was) against the final
cost — re-solved, not scaled — reusing what is known (a rate that meets a stricter SLO meets the
looser one). Traffic +10/+25/+50 % is re-planned with what the simulator taught the search, and
each level takes the cheaper of its own plan and the next level's (a plan for more traffic serves
less), so the sensitivity is monotone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from planner.candidates import (
    Drop,
    Group,
    Option,
)
from planner.errors import (
    ConvergenceError,
)
from planner.memory import kv_bytes_per_request, weight_bytes
from planner.optimizer import PlanConstraints, PlanSolution
from planner.performance import decode_step, prefill
from planner.pins import without_replicas
from planner.plan_predict import cached_prediction, option_serving, predicted_at, prediction_meets_slo, slo_targets
from planner.plan_result import (
    Alternative,
    BindingEntry,
    CapacityBinding,
    ConstraintBinding,
    ConstraintFamily,
    ConstraintUnit,
    DecodeRoofline,
    FigureOfRecord,
    FiguresOfRecord,
    LittlesLaw,
    MemorySection,
    Metric,
    Percentiles,
    Predicted,
    PrefillRoofline,
    QueueingSection,
    RhoPoint,
    RooflineSection,
    SameConfiguration,
    Sensitivity,
    SensitivityEntry,
    SloBinding,
    StepModelSection,
    UnstableQueueing,
    Verification,
)
from planner.plan_rows import FleetRow, _config, candidate_id_of
from planner.plan_search import _COST_TOLERANCE, CURVE_UTILISATIONS, Planner, SinglePlan, _Outcome, _refused_by, single_plan
from planner.plan_verify import _verified_search
from planner.queueing import Prediction
from planner.specs import ModelSpec
from planner.step_model import StepModel
from planner.workload import Slo, Workload

if TYPE_CHECKING:
    from planner.planning import PlanningInputs, PlanningRequest

TRAFFIC_FACTORS: tuple[float, ...] = (1.10, 1.25, 1.50)
SLO_RELAXATION = 1.10
#: The fraction of saturation up to which every SLO must hold for capacity, not an SLO, to be the
#: binding constraint of a plan.
SATURATION_BINDS = 0.99
#: Each SLO metric's binding-entry name.
_SLO_CONSTRAINTS: dict[Metric, Literal["slo_ttft", "slo_tpot", "slo_e2e"]] = {
    "ttft": "slo_ttft",
    "tpot": "slo_tpot",
    "e2e": "slo_e2e",
}
#: The MILP's constraint families and units (planner/optimizer.py names them as plain strings): a
#: name the records do not know fails here, by name, rather than in a record's validation.
_FAMILIES: dict[str, ConstraintFamily] = {f: f for f in get_args(ConstraintFamily)}
_UNITS: dict[str, ConstraintUnit] = {u: u for u in get_args(ConstraintUnit)}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Context:
    """What the justification sections share: the request's caches, its inputs and the final cost."""

    planner: Planner
    request: PlanningRequest
    inputs: PlanningInputs
    by_id: Mapping[str, Option]
    drops: Sequence[Drop]
    cost: float


def _predicted_section(
    prediction: Prediction, slo: Slo, main: FleetRow, output_tokens_per_s: float, verification: Verification | None
) -> Predicted:
    """The analytic percentiles at the plan's load and, per metric, the figure of record: the
    simulator's where the analytic model marks the point outside its validated region and the
    simulator ran, the queueing model's otherwise."""

    def analytic(metric: str) -> Percentiles:
        latency = getattr(prediction, metric)
        return Percentiles(
            p50=latency.p50_s if latency else None,
            p99=latency.p99_s if latency else None,
            at_percentile=predicted_at(prediction, metric),
        )

    use_simulator = verification is not None and not prediction.reliable

    def of_record(metric: str) -> FigureOfRecord:
        if verification is not None and use_simulator:
            simulated: Percentiles = getattr(verification.simulated, f"{metric}_s")
            low, high = getattr(verification.simulated.p99_ci_s, metric) if slo.percentile == 99.0 else (None, None)
            return FigureOfRecord(value=simulated.at_percentile, method="simulated", ci_low=low, ci_high=high)
        return FigureOfRecord(value=predicted_at(prediction, metric), method="analytic")

    note = prediction.fidelity_note
    if verification is not None and use_simulator:
        reason = (note or "").removesuffix(" — use the simulator").removeprefix("outside the analytic model's validated region: ")
        note = (
            f"the analytic model is outside its validated region here ({reason}); the figures of record are the "
            f"simulator's ({verification.requests_simulated} requests)"
        )
    return Predicted(
        percentile=slo.percentile,
        per_replica_rate_rps=main.offered_rps / main.replicas,
        ttft_s=analytic("ttft"),
        tpot_s=analytic("tpot"),
        e2e_s=analytic("e2e"),
        output_tokens_per_s=output_tokens_per_s,
        reliable=prediction.reliable,
        fidelity_note=note,
        of_record=FiguresOfRecord(ttft_s=of_record("ttft"), tpot_s=of_record("tpot"), e2e_s=of_record("e2e")),
    )


def _step_model_section(sm: StepModel) -> StepModelSection:
    return StepModelSection.of(sm, formula=STEP_FORMULA)


STEP_FORMULA = (
    "t_step = max(t_mem, t_compute) + (1 - overlap) * min(t_mem, t_compute) + t_comm + step_overhead_s; "
    "t_mem = (weight_bytes_read(n) + kv_tokens_read * kv_bytes_per_token) / memory_bandwidth_bytes_per_s; "
    "t_compute = (n * flops_per_token + attended_tokens * attention_flops_per_context_token) / compute_flops_per_s; "
    "t_comm = n * comm_s_per_token + comm_latency_s"
)


def _memory_section(option: Option, model: ModelSpec, workload: Workload, prediction: Prediction) -> MemorySection:
    g = option.group
    request_tokens = workload.prompt_tokens.mean + workload.output_tokens.mean
    detail = prediction.queueing
    return MemorySection(
        usable_bytes=g.gpus_per_replica * g.gpu.memory_bytes * (1 - g.gpu.efficiency.memory_reserve_fraction),
        weights_bytes=weight_bytes(model, g.precision.weights),
        kv_bytes_per_token=g.step_model.kv_bytes_per_token,
        kv_bytes_per_request=kv_bytes_per_request(model, g.precision.kv_cache, g.tp, math.ceil(request_tokens)),
        mean_request_tokens=request_tokens,
        kv_capacity_tokens=g.kv_capacity_tokens,
        concurrency_limit_by_kv=g.kv_slots,
        batch_limit=option.batch_limit,
        concurrency_limit=option.slots,
        batch_limited_by=detail.slots_limited_by
        if detail
        else ("batch_limit" if option.batch_limit <= g.kv_slots else "kv_cache"),
    )


def _roofline_section(option: Option, workload: Workload, prediction: Prediction) -> RooflineSection:
    sm = option.group.step_model
    context = max(1, round(workload.prompt_tokens.mean + workload.output_tokens.mean / 2))
    occupancy = prediction.queueing.mean_occupancy if prediction.queueing else 1.0
    rows: list[DecodeRoofline] = []
    points: tuple[tuple[Literal["batch_1", "at_plan_occupancy", "at_concurrency_limit"], int], ...] = (
        ("batch_1", 1),
        ("at_plan_occupancy", max(1, round(occupancy))),
        ("at_concurrency_limit", option.slots),
    )
    for label, batch in points:
        d = decode_step(sm, batch=batch, context_tokens=context)
        rows.append(
            DecodeRoofline(
                at=label,
                batch=batch,
                context_tokens=context,
                step_s=d.step_s,
                memory_s=d.memory_s,
                compute_s=d.compute_s,
                comm_s=d.comm_s,
                flops_per_byte=d.flops_per_byte_with_attention,
                bound=d.bound,
                output_tokens_per_s=d.output_tokens_per_s,
            )
        )
    p = prefill(sm, max(1, round(workload.prompt_tokens.mean)))
    return RooflineSection(
        decode=tuple(rows),
        prefill=PrefillRoofline(
            prompt_tokens=p.tokens,
            time_s=p.time_s,
            linear_time_s=p.linear_time_s,
            attention_time_s=p.attention_time_s,
            weight_read_s=p.weight_read_s,
            bound=p.bound,
        ),
        break_even_flops_per_byte=sm.break_even_flops_per_byte,
    )


def _rho_curve(planner: Planner, option: Option, slo: Slo, plan_rate_rps: float, mu_rps: float) -> list[RhoPoint]:
    """p-percentile latencies against ρ around the plan: fixed utilisations plus the plan's and μ's."""
    saturation = planner.saturation(option)
    rates = sorted({u * saturation for u in CURVE_UTILISATIONS} | {plan_rate_rps, mu_rps})
    points: list[RhoPoint] = []
    for rate in rates:
        try:
            p = cached_prediction(
                option.group.step_model,
                planner.mix,
                option_serving(option),
                option.group.kv_capacity_tokens,
                rate,
                slo.percentile,
            )
        except ConvergenceError:
            continue  # a point the queueing model cannot solve is left out of the drawing, not guessed
        points.append(
            RhoPoint(
                utilisation=rate / saturation,
                arrival_rate_rps=rate,
                ttft_s=predicted_at(p, "ttft") if not p.unstable else None,
                tpot_s=predicted_at(p, "tpot") if not p.unstable else None,
                e2e_s=predicted_at(p, "e2e") if not p.unstable else None,
                meets_slo=prediction_meets_slo(p, slo),
                at="plan" if rate == plan_rate_rps else ("max_rps_at_slo" if rate == mu_rps else None),
            )
        )
    return points


def _queueing_section(prediction: Prediction, slo: Slo, curve: list[RhoPoint]) -> QueueingSection | UnstableQueueing:
    q = prediction.queueing
    if q is None:
        return UnstableQueueing()
    L, lam, W = q.littles_law
    return QueueingSection(
        arrival_rate_rps=q.arrival_rate_rps,
        arrival_cv=q.arrival_cv,
        service_s=q.service_s,
        steps_per_request=q.steps_per_request,
        mean_step_s=q.mean_step_s,
        utilisation=q.utilisation,
        saturation_rps=q.saturation_rps,
        slots=q.slots,
        slots_limited_by=q.slots_limited_by,
        littles_law=LittlesLaw(
            occupancy=L, arrival_rate_rps=lam, time_in_service_s=W, check=f"L = λ·W: {L:.4g} = {lam:.4g} × {W:.4g}"
        ),
        wait_probability=q.wait_probability,
        mean_wait_s=q.mean_wait_s,
        wait_at_percentile_s=q.wait_at_percentile_s,
        formula=q.formula,
        rho_curve=tuple(curve),
        slo_lines_s=slo_targets(slo),
        percentile=slo.percentile,
    )


def _binding_section(
    ctx: _Context, solution: PlanSolution, main_option: Option, main: FleetRow, prediction: Prediction, mu_rps: float
) -> tuple[BindingEntry, ...]:
    planner, request = ctx.planner, ctx.request
    workload, slo, constraints = request.workload, request.slo, request.constraints
    lam = workload.arrival_rate_rps
    cost = ctx.cost  # the plan as returned, after verification
    at_mu = cached_prediction(
        main_option.group.step_model,
        planner.mix,
        option_serving(main_option),
        main_option.group.kv_capacity_tokens,
        mu_rps,
        slo.percentile,
    )
    ratios = {m: predicted_at(at_mu, m) / t for m, t in slo_targets(slo).items()}
    setting = max(ratios, key=ratios.__getitem__, default=None)
    # Capacity, not latency, sets the replica rate when every SLO still holds at 99 % of saturation:
    # decided by the prediction at that rate (usually already known from μ's bracket), not by μ's
    # estimate, which sits up to 1 % below μ and would make the answer depend on how μ was narrowed.
    at_saturation = planner.meets(main_option, slo, SATURATION_BINDS * planner.saturation(main_option))
    binding: list[BindingEntry] = []
    for metric, target in slo_targets(slo).items():
        relaxed = replace(slo, **{f"{metric}_s": target * SLO_RELAXATION})
        relaxed_cost: float | None
        if constraints.mixed_fleet:
            saving = relaxed_cost = None
        else:
            # re-planned (and verified, as the plan was) at the looser target: only a plan strictly
            # cheaper than this one counts, and this plan itself still meets the looser target
            better = _verified_search(
                planner, workload, relaxed, lam, constraints, request, below_usd_per_hour=cost, infer=True
            ).best
            relaxed_cost = better.cost_usd_per_hour if better is not None else cost
            saving = cost - relaxed_cost
        predicted = predicted_at(prediction, metric)
        binding.append(
            SloBinding(
                constraint=_SLO_CONSTRAINTS[metric],
                binding=metric == setting and not at_saturation,
                target_s=target,
                predicted_at_plan_s=predicted,
                slack_s=target - predicted,
                predicted_at_max_rps_s=predicted_at(at_mu, metric),
                relax_by=SLO_RELAXATION - 1.0,
                relaxed_cost_usd_per_hour=relaxed_cost,
                relaxed_saving_usd_per_hour=saving,
                note=None if saving is not None else "mixed fleet: relaxation not re-solved",
            )
        )
    limited_by = prediction.queueing.slots_limited_by if prediction.queueing else "batch_limit"
    binding.append(
        CapacityBinding(
            constraint="saturation" if at_saturation else "concurrency",
            binding=at_saturation,
            limited_by=limited_by,
            concurrency_limit=main_option.slots,
            detail=(
                f"every SLO holds up to saturation, so capacity ({limited_by}) sets the replica rate"
                if at_saturation
                else f"concurrency is capped by {limited_by} at {main_option.slots} sequences"
            ),
        )
    )
    for slack in solution.constraints:
        binding.append(
            ConstraintBinding(
                constraint=slack.name,
                kind=_FAMILIES[slack.family],
                binding=slack.binding,
                value=slack.value,
                limit=slack.limit,
                slack=slack.slack,
                unit=_UNITS[slack.unit],
            )
        )
    return tuple(binding)


def _alternatives_section(ctx: _Context, outcome: _Outcome, main: FleetRow) -> tuple[Alternative, ...]:
    """The best plan for each other GPU type and each other precision, with why it lost.

    A group the final search left unpriced has a lower bound on its cost; where that bound does not
    exceed the plan's cost (a tie, or a mixed fleet's verified cost above its search's), the group is
    priced exactly by the same search restricted to it, so no entry claims less than it would cost."""
    alternatives: list[Alternative] = []
    bounds = _unpriced_bounds(outcome, ctx.by_id)
    gpu_key: Callable[[Group], Any] = lambda g: g.gpu.slug
    by_gpu = _Grouped.of(outcome, ctx.by_id, bounds, gpu_key)
    for gpu in ctx.inputs.gpus:
        if gpu.slug != main.gpu:
            alternatives.append(_alternative(ctx, "gpu", gpu.slug, gpu.slug, by_gpu))
    precision_key: Callable[[Group], Any] = lambda g: (g.precision.weights.slug, g.precision.kv_cache.slug)
    by_precision = _Grouped.of(outcome, ctx.by_id, bounds, precision_key)
    for precision in ctx.inputs.precisions:
        pair = (precision.weights.slug, precision.kv_cache.slug)
        if pair != (main.weights_precision, main.kv_precision):
            alternatives.append(_alternative(ctx, "precision", f"{pair[0]}/{pair[1]}", pair, by_precision))
    return tuple(alternatives)


def _unpriced_bounds(outcome: _Outcome, by_id: Mapping[str, Option]) -> dict[Group, float]:
    """The least cost bound of what the search left unpriced, per (GPU, precision, tp) group: ~2,000
    queued options fold into ~80 groups once, before the two groupings (GPU type, precision) of those."""
    group_bounds: dict[Group, float] = {}
    for bound, option_id in [(b, i) for i, b in outcome.skipped.items()] + [(b, i) for b, _, i, _ in outcome.left_queued]:
        group = by_id[option_id].group
        if bound < group_bounds.get(group, math.inf):
            group_bounds[group] = bound
    return group_bounds


@dataclass(frozen=True, slots=True, kw_only=True)
class _Grouped:
    """What the search learned, grouped by `key` of a group (GPU type or precision pair): the plans
    it priced, the least cost bound of what it left unpriced, the first SLO refusal and the limits broken."""

    key: Callable[[Group], Any]
    priced: Mapping[Any, list[SinglePlan]]
    bounds: Mapping[Any, float]
    slo_fail: Mapping[Any, tuple[str, str, float | None]]
    limit_fail: Mapping[Any, set[str]]

    @staticmethod
    def of(
        outcome: _Outcome, by_id: Mapping[str, Option], group_bounds: Mapping[Group, float], key: Callable[[Group], Any]
    ) -> _Grouped:
        """One pass over what the search learned."""
        priced: dict[Any, list[SinglePlan]] = {}
        bounds: dict[Any, float] = {}
        slo_fail: dict[Any, tuple[str, str, float | None]] = {}
        limit_fail: dict[Any, set[str]] = {}
        for plan in outcome.priced:
            priced.setdefault(key(plan.option.group), []).append(plan)
        for group, bound in group_bounds.items():
            k = key(group)
            bounds[k] = min(bound, bounds.get(k, math.inf))
        for option_id, why in outcome.slo_drops.items():
            slo_fail.setdefault(key(by_id[option_id].group), why)  # the first refused, as the search met them
        for option_id, family in outcome.limit_drops.items():
            limit_fail.setdefault(key(by_id[option_id].group), set()).add(family)
        return _Grouped(key=key, priced=priced, bounds=bounds, slo_fail=slo_fail, limit_fail=limit_fail)


def _alternative(ctx: _Context, kind: str, label: str, k: Any, grouped: _Grouped) -> Alternative:
    """The entry for one GPU type or precision pair `k`: its cheapest plan, a bound on its cost, or why it has none."""
    feasible, bound = _cheapest(ctx, k, grouped)
    # A plan the simulator refuted at this load does not serve it, whatever the queueing model priced
    # it at: it is no alternative (the property suite found one listed at half the plan's cost).
    refuted = [p for p in feasible if _verified_flag(ctx, p) is False]
    feasible = [p for p in feasible if _verified_flag(ctx, p) is not False]
    entry: dict[str, Any] = {"kind": kind, "name": label}
    if refuted and not feasible and (bound is None or bound <= ctx.cost * (1 + _COST_TOLERANCE)):
        worst = refuted[0]
        entry.update(
            cost_usd_per_hour=None,
            exact=True,
            verified=False,
            reason=(
                f"its cheapest configuration ({worst.replicas} × {worst.option.group.gpu.slug} tp {worst.option.group.tp}, "
                f"${worst.cost_usd_per_hour:.2f}/h) misses the SLO in the simulator at this load; the search priced "
                "nothing else there that the simulator accepted"
            ),
        )
        return Alternative(**entry)
    if feasible and (bound is None or feasible[0].cost_usd_per_hour <= bound * (1 + _COST_TOLERANCE)):
        best = feasible[0]
        delta = best.cost_usd_per_hour - ctx.cost
        entry.update(
            _config(best.option),
            replicas=best.replicas,
            gpus=best.gpus,
            cost_usd_per_hour=best.cost_usd_per_hour,
            exact=True,
            verified=_verified_flag(ctx, best),
            reason=(
                f"needs ${best.cost_usd_per_hour:.2f}/h, ${delta:.2f}/h more than this plan"
                if delta > 0.005
                else "same cost to the cent, more GPUs or a later tie-break"
            ),
        )
    elif bound is not None:
        entry.update(
            cost_usd_per_hour=None,
            cost_at_least_usd_per_hour=bound,
            exact=False,
            verified=None,
            reason=(
                f"even with every replica at its saturation rate it needs at least ${bound:.2f}/h, "
                f"${bound - ctx.cost:.2f}/h more than this plan"
            ),
        )
    else:
        entry.update(cost_usd_per_hour=None, exact=True, verified=None, reason=_why_none(ctx, kind, label, k, grouped))
    return Alternative(**entry)


def _cheapest(ctx: _Context, k: Any, grouped: _Grouped) -> tuple[list[SinglePlan], float | None]:
    """`k`'s feasible priced plans, cheapest first, and the bound on what was left unpriced; a bound
    at or below the plan's cost that no priced plan meets is replaced by an exact search of `k`."""
    request = ctx.request
    feasible = sorted((p for p in grouped.priced.get(k, []) if p.feasible), key=lambda p: (p.cost_usd_per_hour, p.gpus))
    bound = grouped.bounds.get(k)
    if (
        bound is not None
        and bound <= ctx.cost * (1 + _COST_TOLERANCE)
        and not (feasible and feasible[0].cost_usd_per_hour <= bound)
    ):
        key = grouped.key
        exact = ctx.planner.search(
            request.slo, request.workload.arrival_rate_rps, request.constraints, only=lambda o: key(o.group) == k
        ).best
        bound = None
        if exact is not None:
            feasible = [exact]
    return feasible, bound


def _verified_flag(ctx: _Context, plan: SinglePlan) -> bool | None:
    """Whether the simulator accepted `plan` at the plan's load (None when it was never simulated)."""
    if not ctx.request.verify:
        return None
    request = ctx.request
    report = ctx.planner.report_of(plan.option.id, request.workload.arrival_rate_rps, plan.replicas, request.slo)
    return None if report is None else bool(report["meets_slo"])


def _why_none(ctx: _Context, kind: str, label: str, k: Any, grouped: _Grouped) -> str:
    """Why `k` has no plan: the limits it breaks, else the SLO it misses, else why enumeration dropped it."""
    slo_fail = grouped.slo_fail.get(k)
    limit_fail = sorted(grouped.limit_fail.get(k, set()) | {p.refused for p in grouped.priced.get(k, []) if p.refused})
    group_drops = [
        d
        for d in ctx.drops
        if (kind == "gpu" and d.gpu == label) or (kind == "precision" and f"{d.weights_precision}/{d.kv_precision}" == label)
    ]
    if limit_fail:
        return f"breaks {', '.join(x for x in limit_fail if x)} at the replicas it would need"
    if slo_fail is not None:
        return slo_fail[1]
    if group_drops:
        return group_drops[0].reason
    return "not among the allowed configurations"


def _sensitivity_section(ctx: _Context, rows: Sequence[FleetRow], mu_bracket: tuple[float, float]) -> Sensitivity:
    """How the plan grows with traffic: each traffic level re-planned (by the queueing model, with
    what the simulator taught the search about the configurations it checked) within the limits, or
    without them when the limits leave nothing, saying which limit it breaks. More traffic never
    costs less: a level's plan also serves every lower level, so each level takes the cheaper of its
    own plan and the next level's (and never less than this plan)."""
    lam = ctx.request.workload.arrival_rate_rps
    single = len(rows) == 1
    holds, holds_below = _rate_held(rows, ctx.request.constraints, mu_bracket)
    if single:
        traffic = _replanned_traffic(ctx, ctx.by_id[candidate_id_of(rows[0])])
        method = "re-planned by the queueing model at each level, with the rates the simulator found missed excluded"
    else:
        traffic = _scaled_traffic(rows, lam, ctx.cost)
        method = "mixed fleet: every row scaled by the traffic factor"
    entries = tuple(
        SensitivityEntry(
            **{
                **entry,
                "same_configuration": SameConfiguration(**entry["same_configuration"]) if "same_configuration" in entry else None,
            }
        )
        for entry in traffic
    )
    return Sensitivity(
        traffic=entries,
        max_arrival_rate_rps_within_slo=holds,
        fails_by_arrival_rate_rps=holds_below,
        headroom_fraction=holds / lam - 1.0,
        method=method,
    )


def _rate_held(
    rows: Sequence[FleetRow], constraints: PlanConstraints, mu_bracket: tuple[float, float]
) -> tuple[float, float | None]:
    """The total rate the plan is known to hold within its SLOs (with one replica lost under N+1),
    and for a single configuration the rate known to miss them."""
    if len(rows) == 1:
        row = rows[0]
        lost = 1 if constraints.n_plus_one else 0
        holds = (row.replicas - lost) * mu_bracket[0]  # replicas still serving × the largest per-replica rate known to meet
        return holds, (row.replicas - lost) * mu_bracket[1]
    capacity = sum(r.replicas * r.max_rps_at_slo for r in rows)
    return capacity - (max(r.max_rps_at_slo for r in rows) if constraints.n_plus_one else 0.0), None


def _replanned_traffic(ctx: _Context, option: Option) -> list[dict[str, Any]]:
    """Each traffic level re-planned, made monotone, and never cheaper than the plan itself."""
    constraints = ctx.request.constraints
    unlimited = replace(constraints, max_gpus=None, budget_usd_per_hour=None, inventory={}, pin=without_replicas(constraints.pin))
    # Each level is re-planned by the queueing model with what the simulator taught the search
    # (rates it found missed stay excluded); the levels themselves are not simulated (`method`).
    model_only = replace(ctx.request, verify=False)
    traffic = [_traffic_level(ctx, option, factor, unlimited, model_only) for factor in TRAFFIC_FACTORS]
    _carry_cheaper_levels(traffic)
    for entry in traffic:
        if "cost_usd_per_hour" in entry:
            if entry["cost_usd_per_hour"] < ctx.cost:
                # never below the plan itself: this level's traffic needs at least what the plan's does
                entry.update(cost_usd_per_hour=ctx.cost, note="no cheaper than the plan at 1× traffic")
            entry["cost_increase_usd_per_hour"] = entry["cost_usd_per_hour"] - ctx.cost
    return traffic


def _traffic_level(
    ctx: _Context, option: Option, factor: float, unlimited: PlanConstraints, model_only: PlanningRequest
) -> dict[str, Any]:
    """One traffic level: the plan's configuration grown, and the cheapest plan the search finds
    within the limits (or, when none, without them, naming the limit it breaks)."""
    planner, slo, constraints = ctx.planner, ctx.request.slo, ctx.request.constraints
    workload = ctx.request.workload
    rate = workload.arrival_rate_rps * factor
    entry: dict[str, Any] = {"traffic_factor": factor, "arrival_rate_rps": rate}
    needed = planner.fewest_replicas(option, slo, rate)
    ceiling = math.inf
    same: SinglePlan | None = None
    if not isinstance(needed, tuple):
        replicas = max(constraints.min_replicas, needed + (1 if constraints.n_plus_one else 0), 1)
        entry["same_configuration"] = {
            "replicas": replicas,
            "gpus": replicas * option.group.tp,
            "cost_usd_per_hour": option.group.cost_usd_per_hour(replicas),
        }
        same = single_plan(option, rate / needed, planner.saturation(option), rate, constraints)
        if same.feasible:
            ceiling = same.cost_usd_per_hour
    # only what could undercut the plan's own configuration grown is searched
    found = _verified_search(
        planner, workload.at_rate(rate), slo, rate, constraints, model_only, below_usd_per_hour=ceiling * (1 + _COST_TOLERANCE)
    ).best
    if found is None and math.isfinite(ceiling):
        found = same
    within = found is not None
    if found is None and unlimited != constraints:
        found = _verified_search(planner, workload.at_rate(rate), slo, rate, unlimited, model_only).best
    if found is not None:
        entry.update(
            _config(found.option),
            replicas=found.replicas,
            gpus=found.gpus,
            cost_usd_per_hour=found.cost_usd_per_hour,
            within_limits=within,
            breaks=None
            if within
            else _refused_by(found.option.group.gpu.slug, found.gpus, found.cost_usd_per_hour, constraints, found.replicas),
        )
    return entry


#: What a traffic level takes from the next level's plan when that plan costs less.
_CARRIED = (
    "gpu",
    "tp",
    "weights_precision",
    "kv_precision",
    "batch_limit",
    "chunk_tokens",
    "replicas",
    "gpus",
    "cost_usd_per_hour",
    "within_limits",
    "breaks",
)


def _carry_cheaper_levels(traffic: list[dict[str, Any]]) -> None:
    """Monotone: a plan for more traffic serves less, so each level is at most the next level's."""
    for lower, higher in zip(reversed(traffic[:-1]), reversed(traffic[1:]), strict=True):
        if (
            "cost_usd_per_hour" in higher
            and higher.get("within_limits")
            and ("cost_usd_per_hour" not in lower or higher["cost_usd_per_hour"] < lower["cost_usd_per_hour"])
        ):
            carried = {k: higher[k] for k in _CARRIED}
            lower.update(
                carried, note=f"the plan for {higher['traffic_factor']:g}× traffic, which costs less than this level's own"
            )


def _scaled_traffic(rows: Sequence[FleetRow], lam: float, cost: float) -> list[dict[str, Any]]:
    """A mixed fleet's traffic levels: every row scaled by the factor, not re-planned."""
    traffic: list[dict[str, Any]] = []
    for factor in TRAFFIC_FACTORS:
        scaled = [(r, math.ceil(r.replicas * factor * (1 - 1e-12))) for r in rows]  # a mixed fleet scaled row by row
        scaled_cost = sum(n * r.cost_usd_per_hour / r.replicas for r, n in scaled)
        traffic.append(
            {
                "traffic_factor": factor,
                "arrival_rate_rps": lam * factor,
                "replicas": sum(n for _, n in scaled),
                "gpus": sum(n * r.tp for r, n in scaled),
                "cost_usd_per_hour": scaled_cost,
                "cost_increase_usd_per_hour": scaled_cost - cost,
                "note": "mixed fleet: every row scaled by the traffic factor, not re-planned",
            }
        )
    return traffic
