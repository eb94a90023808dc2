"""Speculative decoding as a plan's decision: `constraints.speculative` auto, on or off.

The search chooses the cheapest configuration without speculation; this step then predicts that
configuration at the plan's per-replica load with every draft method the model offers and every
draft length (planner/speculative.py), each with the queueing model on the speculative step model.
"on" takes the (method, k) with the lowest TPOT at the SLO's percentile among those meeting every
SLO; "auto" takes it only where that TPOT is below the plan's own. The simulator then verifies the
choice at the same load (its accepted lengths drawn per sequence and step) and a choice it finds
missing an SLO is not deployed ("auto" keeps the plan without it, "on" is an impossible request).
The replicas and the cost are the plan's: speculation here buys latency, not fewer GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.candidates import Option
from planner.errors import HeadroomError, InfeasiblePlanError
from planner.plan_explain import _predicted_section
from planner.plan_predict import _cached_prediction, _meets, _predicted_at, _serving, _verify
from planner.plan_result import QueueingSection, SpeculativeChoice, SpeculativeSection, SpeculativeTrial, Verification
from planner.plan_verify import _verification_record
from planner.queueing import Prediction
from planner.speculative import (
    DRAFT_TOKENS,
    METHOD_DEFAULTS,
    available_methods,
    crossover_batch,
    head_speculation,
    speculative_kv_capacity_tokens,
    speculative_step_model,
)
from planner.workload import Workload

if TYPE_CHECKING:
    from planner.planning import PlanningInputs, PlanningRequest, PlanResult


def _trial_option(option: Option, inputs: PlanningInputs, method: str, draft_tokens: int) -> Option:
    """`option` with its group's step model verifying `method`'s drafts of `draft_tokens` tokens,
    and its KV capacity less what the draft head holds."""
    group = option.group
    default = METHOD_DEFAULTS[method]
    spec = head_speculation(
        inputs.model,
        group.precision,
        group.tp,
        method=default.method,
        draft_tokens=draft_tokens,
        acceptance_rate=default.acceptance_rate,
    )
    capacity = speculative_kv_capacity_tokens(group.gpu, inputs.model, group.precision, group.tp, group.gpu.efficiency, spec)
    sped = replace(group, step_model=speculative_step_model(group.step_model, spec), kv_capacity_tokens=capacity)
    return option._replace(group=sped)


def _occupancy(result: PlanResult) -> float:
    """The plan's mean running sequences per replica (Little's L) without speculation; 0 when unstable."""
    queueing = result.justification.queueing if result.justification is not None else None
    return queueing.littles_law.occupancy if isinstance(queueing, QueueingSection) else 0.0


def _mean_decode_context(request: PlanningRequest) -> float:
    """E[p] + E[o]/2: the context a decoding sequence reads on average, where the crossover is taken."""
    workload = request.workload
    return workload.prompt_tokens.mean + workload.output_tokens.mean / 2.0  # prompt + half the output


def _trials(
    option: Option, request: PlanningRequest, inputs: PlanningInputs, rate_rps: float, planner_mix: Workload
) -> list[tuple[SpeculativeTrial, Option, Prediction | None]]:
    pin = request.constraints.pin
    lengths = DRAFT_TOKENS if pin is None or pin.draft_tokens is None else (pin.draft_tokens,)
    context = _mean_decode_context(request)
    trials = []
    for method in available_methods(inputs.model):
        for k in lengths:
            trial_option = _trial_option(option, inputs, method, k)
            sm = trial_option.group.step_model
            prediction: Prediction | None
            try:
                prediction = _cached_prediction(
                    sm,
                    planner_mix,
                    _serving(trial_option),
                    trial_option.group.kv_capacity_tokens,
                    rate_rps,
                    request.slo.percentile,
                )
            except HeadroomError:
                prediction = None  # unstable or not convergent with this draft: not a candidate
            usable = prediction is not None and not prediction.unstable
            trial = SpeculativeTrial(
                method=method,
                draft_tokens=k,
                tokens_per_step=sm.tokens_per_step,
                crossover_batch=crossover_batch(sm, context_tokens=context),
                tpot_s=_predicted_at(prediction, "tpot") if usable and prediction is not None else None,
                meets_slo=usable and prediction is not None and _meets(prediction, request.slo),
            )
            trials.append((trial, trial_option, prediction if usable else None))
    return trials


@dataclass(frozen=True, slots=True, kw_only=True)
class _Decision:
    trials: tuple[SpeculativeTrial, ...]
    tpot_s_without: float
    chosen: SpeculativeChoice | None
    reason: str
    prediction: Prediction | None  # the chosen speculation's, at the plan's load
    verification: Verification | None  # the simulator's on it


def speculative_plan(
    result: PlanResult, option: Option, request: PlanningRequest, inputs: PlanningInputs, planner_mix: Workload
) -> PlanResult:
    """`result` with the speculation `request.constraints.speculative` asks for decided (see the module docstring).
    An unexplained plan (the advice's trials) gets the same decision without the sections to rewrite."""
    mode = request.constraints.speculative
    if mode == "off":
        return result
    if len(result.rows) != 1:
        if mode == "on":
            raise InfeasiblePlanError(
                "constraints.speculative is 'on' but the plan is a mixed fleet, which does not speculate yet; "
                "set it to 'auto' or 'off', or leave constraints.mixed_fleet off",
                constraint="speculative",
            )
        return result
    decision = _decide(result, option, request, inputs, planner_mix)
    if decision.chosen is None and mode == "on":
        raise InfeasiblePlanError(
            f"constraints.speculative is 'on' but {decision.reason}; set it to 'auto' or 'off'", constraint="speculative"
        )
    if result.predicted is None or result.justification is None:
        return replace(result, speculative=decision.chosen)
    predicted, verification = result.predicted, result.verification
    if decision.chosen is not None and decision.prediction is not None:
        row = result.rows[0]
        output_tokens_per_s = request.workload.arrival_rate_rps * request.workload.output_tokens.mean
        predicted = _predicted_section(decision.prediction, request.slo, row, output_tokens_per_s, decision.verification)
        verification = decision.verification
    section = SpeculativeSection(
        mode=mode,
        context_tokens=_mean_decode_context(request),
        mean_running_sequences=_occupancy(result),
        tpot_s_without=decision.tpot_s_without,
        trials=decision.trials,
        chosen=decision.chosen,
        reason=decision.reason,
    )
    return replace(
        result,
        speculative=decision.chosen,
        predicted=predicted,
        verification=verification,
        justification=replace(result.justification, speculative=section),
    )


def _decide(
    result: PlanResult, option: Option, request: PlanningRequest, inputs: PlanningInputs, planner_mix: Workload
) -> _Decision:
    """Every trial at the plan's per-replica load, the best meeting the SLOs, and the simulator's word on it."""
    row = result.rows[0]
    rate_rps = row.offered_rps / row.replicas
    base = _cached_prediction(
        option.group.step_model, planner_mix, _serving(option), option.group.kv_capacity_tokens, rate_rps, request.slo.percentile
    )
    without = _predicted_at(base, "tpot")
    trials = _trials(option, request, inputs, rate_rps, planner_mix)
    records = tuple(t[0] for t in trials)
    meeting = [(trial, o, p) for trial, o, p in trials if trial.meets_slo and trial.tpot_s is not None and p is not None]
    if not meeting:
        return _Decision(
            trials=records,
            tpot_s_without=without,
            chosen=None,
            reason="no draft method and length meets every SLO at this load",
            prediction=None,
            verification=None,
        )
    trial, trial_option, prediction = min(meeting, key=lambda t: (t[0].tpot_s or 0.0, t[0].draft_tokens))
    if request.constraints.speculative == "auto" and (trial.tpot_s or 0.0) >= without:
        reason = f"the best draft ({trial.method}, k {trial.draft_tokens}) does not lower the TPOT at this load"
        return _Decision(trials=records, tpot_s_without=without, chosen=None, reason=reason, prediction=None, verification=None)
    record = None
    if request.verify:
        report = _verify(
            trial_option, request.workload, row.offered_rps, row.replicas, request.slo, request.verify_requests, request.seed
        )
        report["rows"] = [{"gpu": row.gpu, "replicas": row.replicas, "meets_slo": report["meets_slo"]}]
        adjustments = () if result.verification is None else result.verification.adjustments
        record = _verification_record(report, adjustments, request.seed)
        if not record.meets_slo:
            reason = f"the simulator finds {trial.method}, k {trial.draft_tokens} missing {', '.join(record.misses)}"
            return _Decision(
                trials=records, tpot_s_without=without, chosen=None, reason=reason, prediction=None, verification=None
            )
    default = METHOD_DEFAULTS[trial.method]
    chosen = SpeculativeChoice(
        method=trial.method,
        draft_tokens=trial.draft_tokens,
        acceptance_rate=default.acceptance_rate,
        acceptance_source=default.source,
        tokens_per_step=trial.tokens_per_step,
        crossover_batch=trial.crossover_batch,
    )
    reason = f"{trial.method}, k {trial.draft_tokens}: the lowest TPOT meeting every SLO"
    return _Decision(
        trials=records, tpot_s_without=without, chosen=chosen, reason=reason, prediction=prediction, verification=record
    )
