"""What a capacity answer reports about its configuration (planner/capacity.py): μ as the plan search narrows
it, the SLO metric that binds at μ, and the per-replica latency curve at the plan's fixed utilisations."""

from __future__ import annotations

from dataclasses import dataclass

from planner.candidates import Option
from planner.errors import ConvergenceError
from planner.plan_predict import cached_prediction, option_serving, predicted_at, prediction_meets_slo, slo_targets
from planner.plan_search import Planner
from planner.planning import CURVE_UTILISATIONS, SATURATION_BINDS
from planner.workload import Slo


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePoint:
    """Per-replica latencies at the SLO's percentile at one utilisation (None where unstable)."""

    utilisation: float
    arrival_rate_rps: float  # per replica
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    meets_slo: bool


def capacity_mu(planner: Planner, option: Option, slo: Slo) -> float | tuple[str, str, float | None]:
    """μ as the plan search narrows it (planner/rate_search.py: regula falsi on the slacks, to 1 %
    from below, every probe a rate the queueing model verified), or why no rate meets the SLOs: a
    miss at a millionth of saturation settles that with one prediction."""
    facts = planner._facts(option, slo)
    vanishing = planner.saturation(option) * 1e-6
    # drop is read again after meets, which records one when the queueing model does not converge
    if facts.met_rps <= 0 and facts.drop is None and not planner.meets(option, slo, vanishing) and facts.drop is None:
        facts.drop = planner._why_never(option, slo, vanishing)
    if facts.drop is not None:
        return facts.drop
    if facts.met_rps <= 0:
        facts.met_rps = vanishing
    return planner.max_rate(option, slo)[0]


def where(option: Option) -> str:
    g = option.group
    precision = (
        g.precision.weights.slug
        if g.precision.weights.slug == g.precision.kv_cache.slug
        else (f"{g.precision.weights.slug} weights, {g.precision.kv_cache.slug} KV")
    )
    return f"{g.gpu.slug}, {precision}, tp {g.tp}{'' if g.pp == 1 else f' × pp {g.pp}'}, batch {option.batch_limit}"


def binding_metric(planner: Planner, option: Option, slo: Slo, mu_rps: float, saturation_rps: float) -> str:
    """The SLO metric closest to its target at μ; saturation when every SLO holds up to 99 % of it."""
    if mu_rps >= SATURATION_BINDS * saturation_rps:
        return "saturation"
    prediction = cached_prediction(
        option.group.step_model, planner.mix, option_serving(option), option.group.kv_capacity_tokens, mu_rps, slo.percentile
    )
    targets = slo_targets(slo)
    return max(targets, key=lambda metric: predicted_at(prediction, metric) / targets[metric])


def latency_curve(planner: Planner, option: Option, slo: Slo, mu_rps: float, saturation_rps: float) -> tuple[CurvePoint, ...]:
    """Per-replica percentiles at the plan's fixed utilisations below μ, and at μ itself."""
    rates = sorted({u * saturation_rps for u in CURVE_UTILISATIONS if u * saturation_rps < mu_rps} | {mu_rps})
    points: list[CurvePoint] = []
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
            continue  # a point the queueing model cannot solve is left out, not guessed
        stable = not p.unstable
        points.append(
            CurvePoint(
                utilisation=rate / saturation_rps,
                arrival_rate_rps=rate,
                ttft_s=predicted_at(p, "ttft") if stable else None,
                tpot_s=predicted_at(p, "tpot") if stable else None,
                e2e_s=predicted_at(p, "e2e") if stable else None,
                meets_slo=prediction_meets_slo(p, slo),
            )
        )
    return tuple(points)
