"""Speculative decoding as a plan's decision: `constraints.speculative` auto, on or off.

Speculation is part of the search. With auto every (GPU, precision, tp) group is offered twice over:
as it is and verifying the model's search draft head at each of a few draft lengths
(planner/candidates.py `speculative_groups`, planner/speculative.py `SEARCH_DRAFT_TOKENS`); with on,
only the speculating variants. Each variant is a candidate like any other (its saturation bound,
its μ from the queueing model on the speculative step model, its KV cache less what the head
holds), so a TPOT-bound plan buys fewer replicas with speculation where it pays, and the simulator
verifies the winner with its accepted lengths drawn per sequence and step.

Only heads with a published checkpoint are offered where the caller says which
(`PlanningInputs.draft_methods`), and on a tie in cost the configuration without speculation wins
(planner/plan_search.py `_plain_on_a_tie`): speculation is bought for what it saves. Where the
cheapest plan does not speculate, speculation may still buy latency at the same cost: auto then
tries the winner's speculating variants at its per-replica load and takes the one with the lowest
TPOT below the plan's own that meets every SLO and that the simulator agrees with
(`latency_choice`). The plan's every section is then built on the configuration as chosen, and
`speculative_section` records what was tried, the crossover batches and what the plan would cost
without speculation. When the simulator refutes every plan the search proposed, auto plans again
without speculation (planner/planning.py `_planned_without`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.candidates import Group, Option, speculative_groups
from planner.errors import HeadroomError, InfeasiblePlanError, PlannerInputError
from planner.memory import kv_capacity_tokens
from planner.plan_predict import cached_prediction, option_serving, predicted_at, prediction_meets_slo
from planner.plan_result import QueueingSection, SpeculativeChoice, SpeculativeSection, SpeculativeTrial
from planner.plan_rows import FleetRow, _row, candidate_id_of
from planner.plan_search import Planner
from planner.plan_verify import _Fleet
from planner.queueing import Prediction
from planner.speculative import SEARCH_DRAFT_TOKENS, crossover_batch, default_acceptance
from planner.workload import Workload

if TYPE_CHECKING:
    from planner.planning import PlanningInputs, PlanningRequest, PlanResult


def search_groups(groups: Sequence[Group], request: PlanningRequest, inputs: PlanningInputs) -> list[Group]:
    """The groups the search is offered under `constraints.speculative`: as they are (off), with their
    speculating variants (auto), or the variants alone (on). A mixed fleet does not speculate."""
    constraints = request.constraints
    mode = constraints.speculative
    if mode == "off":
        if constraints.pin is not None and constraints.pin.draft_model is not None:
            raise PlannerInputError(
                "constraints.pin.draft_model needs constraints.speculative auto or on", constraint="speculative"
            )
        return list(groups)
    if constraints.mixed_fleet:
        if constraints.pin is not None and constraints.pin.draft_model is not None:
            raise PlannerInputError(
                "constraints.pin.draft_model with constraints.mixed_fleet: a mixed fleet does not speculate yet; "
                "leave out one of them",
                constraint="pin.draft_model",
            )
        if mode == "on":
            raise InfeasiblePlanError(
                "constraints.speculative is 'on' but the plan is a mixed fleet, which does not speculate yet; "
                "set it to 'auto' or 'off', or leave constraints.mixed_fleet off",
                constraint="speculative",
            )
        return list(groups)
    pin = constraints.pin
    if (
        pin is not None
        and pin.draft_model is not None
        and (inputs.draft_model is None or inputs.draft_model.slug != pin.draft_model)
    ):
        raise PlannerInputError(
            f"constraints.pin.draft_model {pin.draft_model!r} was not looked up: PlanningInputs.draft_model must be its spec",
            constraint="pin.draft_model",
        )
    lengths = SEARCH_DRAFT_TOKENS if pin is None or pin.draft_tokens is None else (pin.draft_tokens,)
    variants = speculative_groups(
        groups,
        inputs.model,
        request.workload,
        draft_tokens=lengths,
        published=inputs.draft_methods,
        acceptance_rate=None if pin is None else pin.acceptance_rate,
        draft_model=inputs.draft_model,
    )
    if mode == "on":
        if not variants:
            raise InfeasiblePlanError(
                f"constraints.speculative is 'on' but no draft head can be offered for {inputs.model.slug} on the allowed "
                "configurations (no published head for the model, no vocabulary to cost its LM head, or no KV cache left "
                "beside it); set it to 'auto' or 'off'",
                constraint="speculative",
            )
        return variants
    return [*groups, *variants]


def _mean_decode_context(request: PlanningRequest) -> float:
    """E[p] + E[o]/2: the context a decoding sequence reads on average, where the crossover is taken."""
    workload = request.workload
    return workload.prompt_tokens.mean + workload.output_tokens.mean / 2.0  # prompt + half the output


def _same_setting(a: Option, b: Option) -> bool:
    """Same (GPU, precision, tp, batch limit, chunk budget), the cheap comparisons first (a plan has thousands)."""
    return (
        a.batch_limit == b.batch_limit
        and a.chunk_tokens == b.chunk_tokens
        and a.group.tp == b.group.tp
        and a.group.gpu is b.group.gpu
        and a.group.key == b.group.key
    )


def _variants(option: Option, options: Sequence[Option]) -> list[Option]:
    """The speculating variants of `option`'s (GPU, precision, tp, batch, chunk) among the search's options."""
    return [o for o in options if _same_setting(o, option) and o.group.step_model.speculation is not None]


def _plain_of(option: Option, options: Sequence[Option], inputs: PlanningInputs) -> Option:
    """`option` without speculation: the search's own option where it has one, else (on) rebuilt."""
    for other in options:
        if _same_setting(other, option) and other.group.step_model.speculation is None:
            return other
    group = option.group
    if group.step_model.speculation is None:
        return option
    capacity = kv_capacity_tokens(group.gpu, inputs.model, group.precision, group.tp, group.gpu.efficiency)
    plain = replace(group, step_model=replace(group.step_model, speculation=None), kv_capacity_tokens=capacity)
    return option._replace(group=plain, id=option.id.removesuffix(group.draft))


def _predict(planner: Planner, option: Option, rate_rps: float, percentile: float) -> Prediction | None:
    try:
        prediction = cached_prediction(
            option.group.step_model, planner.mix, option_serving(option), option.group.kv_capacity_tokens, rate_rps, percentile
        )
    except HeadroomError:
        return None  # not convergent with this draft: not a candidate
    return None if prediction.unstable else prediction


def _trial(option: Option, prediction: Prediction | None, request: PlanningRequest) -> SpeculativeTrial:
    sm = option.group.step_model
    method, k = option.group.draft.removeprefix("/").rsplit("-k", 1)  # a variant's draft: "/eagle-k3"
    return SpeculativeTrial(
        method=method,
        draft_tokens=int(k),
        tokens_per_step=sm.tokens_per_step,
        crossover_batch=crossover_batch(sm, context_tokens=_mean_decode_context(request)),
        tpot_s=None if prediction is None else predicted_at(prediction, "tpot"),
        meets_slo=prediction is not None and prediction_meets_slo(prediction, request.slo),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyChoice:
    """What `latency_choice` decided: the fleet (its row swapped to another draft, or as it was) and why."""

    fleet: _Fleet
    reason: str | None  # None: the search's own choice stands and needs no other reason


def latency_choice(planner: Planner, fleet: _Fleet, request: PlanningRequest) -> LatencyChoice | None:
    """On a single configuration, among its speculating variants at the plan's per-replica load: the one
    with the lowest TPOT that meets every SLO, when that TPOT is below the configuration's as chosen
    and the simulator agrees; the row then runs that variant (same replicas and cost). Under auto a
    plan the search left without speculation gets it only this way; under on (and auto) a tie on cost
    between draft lengths goes to the fastest. None when there is nothing to decide (off, a mixed fleet)."""
    if request.constraints.speculative == "off" or len(fleet.rows) != 1:
        return None
    row = fleet.rows[0]
    option = planner.by_id[candidate_id_of(row)]
    variants = [v for v in _variants(option, planner.options) if v.id != option.id]
    searched = option.group.draft.removeprefix("/")
    if not variants:
        return LatencyChoice(
            fleet=fleet, reason=None if searched else "no draft head is offered for this model (none with a published checkpoint)"
        )
    rate_rps = row.offered_rps / row.replicas
    percentile = request.slo.percentile
    base = _predict(planner, option, rate_rps, percentile)
    now = math.inf if base is None else predicted_at(base, "tpot")
    tried = [(v, _predict(planner, v, rate_rps, percentile)) for v in variants]
    meeting = [(v, p) for v, p in tried if p is not None and prediction_meets_slo(p, request.slo)]
    if not meeting:
        return LatencyChoice(fleet=fleet, reason=None if searched else "no draft length meets every SLO at this load")
    variant, prediction = min(meeting, key=lambda t: (predicted_at(t[1], "tpot"), t[0].id))
    draft = variant.group.draft.removeprefix("/")
    if predicted_at(prediction, "tpot") >= now:
        reason = None if searched else f"the best draft ({draft}) does not lower the TPOT at this load"
        return LatencyChoice(fleet=fleet, reason=reason)
    verification = fleet.verification
    if request.verify:
        agrees, report = planner.simulator_agrees(variant, request.workload, row.offered_rps, row.replicas, request.slo, request)
        if not agrees:
            return LatencyChoice(fleet=fleet, reason=None if searched else f"the simulator finds {draft} missing an SLO")
        report = report or planner.simulated(variant, request.workload, row.offered_rps, row.replicas, request.slo, request)
        verification = dict(report)
        verification["rows"] = [{"gpu": row.gpu, "replicas": row.replicas, "meets_slo": report["meets_slo"]}]
    planner.meets(variant, request.slo, rate_rps)  # the variant's facts start from the rate it was chosen at (μ ≥ it)
    swapped: FleetRow = _row(variant, row.replicas, rate_rps, planner.saturation(variant), row.offered_rps)
    instead = f"than {searched}, " if searched else ""
    reason = f"{draft}: a lower TPOT {instead}meeting every SLO on the cheapest configuration, at its replicas and cost"
    return LatencyChoice(fleet=replace(fleet, rows=[swapped], verification=verification), reason=reason)


def speculative_choice(option: Option, workload: Workload) -> SpeculativeChoice | None:
    """`plan.speculative` for a configuration `option` serving `workload`; None when it does not speculate."""
    spec = option.group.step_model.speculation
    if spec is None:
        return None
    # a draft model's default α is its published pair's, carried on the speculation (None: the request gave it)
    default = None if spec.method == "draft_model" else default_acceptance(spec.method, workload.task)
    given = spec.acceptance_source is None and (default is None or spec.acceptance_rate != default.acceptance_rate)
    source = spec.acceptance_source or (None if default is None else default.source)
    return SpeculativeChoice(
        method=spec.method,
        draft_tokens=spec.draft_tokens,
        acceptance_rate=spec.acceptance_rate,
        acceptance_source="given by the request (constraints.pin.acceptance_rate)" if given or source is None else source,
        tokens_per_step=spec.tokens_per_step,
        crossover_batch=crossover_batch(
            option.group.step_model,
            context_tokens=workload.prompt_tokens.mean + workload.output_tokens.mean / 2.0,  # E[p] + E[o]/2
        ),
    )


def speculative_section(
    result: PlanResult,
    option: Option,
    planner: Planner,
    request: PlanningRequest,
    inputs: PlanningInputs,
    *,
    reason: str | None,
    without: tuple[float, int] | None,
) -> SpeculativeSection:
    """How `constraints.speculative` was decided for the plan's configuration `option`: every speculating
    variant of it predicted at the plan's per-replica load, the TPOT without speculation, and (when the
    search chose speculation) the cost and replicas of the cheapest plan without it."""
    row = result.rows[0]
    rate_rps = row.offered_rps / row.replicas
    percentile = request.slo.percentile
    plain = _plain_of(option, planner.options, inputs)
    base = _predict(planner, plain, rate_rps, percentile)
    variants = _variants(plain, planner.options)
    trials = tuple(_trial(v, _predict(planner, v, rate_rps, percentile), request) for v in variants)
    chosen = speculative_choice(option, request.workload)
    queueing = result.justification.queueing if result.justification is not None else None
    if chosen is not None and without is not None and without[0] > result.cost_usd_per_hour:
        cheaper = (
            f"the cheapest plan speculates: {result.replicas} replicas at {result.cost_usd_per_hour:.4g} $/h against "
            f"{without[1]} at {without[0]:.4g} $/h without speculation"
        )
        reason = cheaper if reason is None else f"{cheaper}; {reason}"
    elif reason is None:
        reason = (
            "the cheapest plan does not speculate"
            if chosen is None
            else f"{option.group.draft.removeprefix('/')}: the cheapest plan with speculation"
        )
    return SpeculativeSection(
        mode=request.constraints.speculative,
        context_tokens=_mean_decode_context(request),
        mean_running_sequences=queueing.littles_law.occupancy if isinstance(queueing, QueueingSection) else 0.0,
        tpot_s_without=None if base is None else predicted_at(base, "tpot"),
        trials=trials,
        chosen=chosen,
        reason=reason,
        cost_usd_per_hour_without=None if without is None else without[0],
        replicas_without=None if without is None else without[1],
    )


def cheapest_without(planner: Planner, request: PlanningRequest) -> tuple[float, int] | None:
    """The cost and replicas of the cheapest single configuration without speculation (the search's
    caches make it cheap); None when none meets the SLOs within the limits, or under on (not offered)."""
    if request.constraints.speculative != "auto":
        return None
    outcome = planner.search(
        request.slo, request.workload.arrival_rate_rps, request.constraints, only=lambda o: o.group.step_model.speculation is None
    )
    best = outcome.best
    return None if best is None else (best.cost_usd_per_hour, best.replicas)
