"""The simulator in the loop. The queueing model's μ is an estimate; before a plan is built on a
configuration, one replica of it is simulated at its share of the traffic (planner/plan_predict.py
`_verify`). A miss is recorded against that option — its rates from there up are never used again
under that SLO — and the search (or, for a mixed fleet, the MILP) runs again, for at most
MAX_VERIFY_ROUNDS rounds. What verification did is reported as the plan's `verification` record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from planner.candidates import (
    Option,
)
from planner.errors import (
    InfeasiblePlanError,
)
from planner.optimizer import Candidate, PlanConstraints, PlanSolution, solve_plan
from planner.plan_result import (
    AddReplica,
    Adjustment,
    NextCandidate,
    P99Intervals,
    Percentiles,
    SimulatedFigures,
    SingleConfiguration,
    Verification,
    VerificationRow,
    as_dict,
)
from planner.plan_rows import FleetRow, _candidate, _configuration, _row, candidate_id_of
from planner.plan_search import Planner, SinglePlan, _Outcome
from planner.workload import Slo, Workload

if TYPE_CHECKING:
    from planner.planning import PlanningRequest


def _percentiles(block: Mapping[str, Any]) -> Percentiles:
    return Percentiles(p50=block["p50"], p99=block["p99"], at_percentile=block["at_percentile"])


def _verification_record(report: Mapping[str, Any], adjustments: Sequence[Adjustment], seed: int) -> Verification:
    """The simulator's report on the plan (as `_verify` writes it, with the plan's rows) as a record."""
    simulated = report["simulated"]
    ci = simulated["p99_ci_s"]
    return Verification(
        simulated=SimulatedFigures(
            percentile=simulated["percentile"],
            ttft_s=_percentiles(simulated["ttft_s"]),
            tpot_s=_percentiles(simulated["tpot_s"]),
            e2e_s=_percentiles(simulated["e2e_s"]),
            p99_ci_s=P99Intervals(ttft=tuple(ci["ttft"]), tpot=tuple(ci["tpot"]), e2e=tuple(ci["e2e"])),
            mean_occupancy=simulated["mean_occupancy"],
            stable=simulated["stable"],
        ),
        misses=tuple(report["misses"]),
        meets_slo=report["meets_slo"],
        requests_simulated=report["requests_simulated"],
        replicas_simulated=report["replicas_simulated"],
        per_replica_rate_rps=report["per_replica_rate_rps"],
        wall_time_s=report["wall_time_s"],
        rows=tuple(VerificationRow(**row) for row in report["rows"]),
        adjustments=tuple(adjustments),
        seed=seed,
    )


#: Rounds of search → simulate → correct before a plan is given up as unverifiable; each round either
#: verifies the search's cheapest plan or moves it (more replicas, or another configuration); a round is
#: one simulation, paid only while the simulator keeps refusing. Measured on the grid to 4,096 / 16,384:
#: bench/plan_latency.py's 70B request at TPOT 20 ms needs 9 rounds (eight H200 tp 2 settings refuted
#: one by one before H100 tp 4 verifies at $19.04/h), so 8 refused a request the coarser grid planned.
#: More is not free of side effects: at 16, the advice's verified bisection (planner/advice.py) met a
#: TPOT bracket where a plan exhausting its rounds at one target verified at a lower one (the search
#: path depends on what earlier trials refuted), and overstated a relaxation by 5.3 %. 12 holds both.
MAX_VERIFY_ROUNDS = 12


@dataclass(slots=True)
class _Verified:
    """The cheapest single plan the simulator agreed with (None when there is none), the search that
    found it, the moves verification made on the way, and the simulator's report on it."""

    best: SinglePlan | None
    outcome: _Outcome
    adjustments: list[Adjustment]
    report: dict[str, Any] | None
    exhausted: bool = False


def _verified_search(
    planner: Planner,
    workload: Workload,
    slo: Slo,
    arrival_rate_rps: float,
    constraints: PlanConstraints,
    request: PlanningRequest,
    *,
    below_usd_per_hour: float = math.inf,
    infer: bool = False,
) -> _Verified:
    """Branch and bound with the simulator in the loop: the search's cheapest plan is simulated at
    its load; a miss is recorded against that option (its rates from there up are never used again
    under this SLO) and the search runs again. Every other option's cost is a lower bound that the
    simulator can only raise, so the first winner the simulator agrees with is the cheapest plan
    that survives verification — no option left could undercut it. Without `request.verify` this is
    the plain search. With `infer`, a pass already simulated at a higher load under a stricter SLO
    stands for this one (`Planner.simulator_agrees`): the justification's re-plans use it; the plan
    itself is always simulated at its own load."""
    adjustments: list[Adjustment] = []
    outcome = planner.search(slo, arrival_rate_rps, constraints, below_usd_per_hour=below_usd_per_hour)
    for _ in range(MAX_VERIFY_ROUNDS):
        best = outcome.best
        if best is None or not request.verify:
            return _Verified(best=best, outcome=outcome, adjustments=adjustments, report=None)
        if infer:
            agrees, report = planner.simulator_agrees(best.option, workload, arrival_rate_rps, best.replicas, slo, request)
        else:
            report = planner.simulated(best.option, workload, arrival_rate_rps, best.replicas, slo, request)
            agrees = bool(report["meets_slo"])
            if agrees:
                planner.simulator_agrees(
                    best.option, workload, arrival_rate_rps, best.replicas, slo, request
                )  # remember the pass
        if agrees:
            return _Verified(best=best, outcome=outcome, adjustments=adjustments, report=report)
        misses = ", ".join(report["misses"]) if report is not None else "an SLO"
        planner.record_simulated_miss(
            best.option, slo, arrival_rate_rps / best.replicas, tuple(report["misses"]) if report is not None else ()
        )
        outcome = planner.search(slo, arrival_rate_rps, constraints, below_usd_per_hour=below_usd_per_hour)
        moved = outcome.best
        because = (
            f"simulated p{slo.percentile:g} missed ({misses}) at {best.replicas} "
            f"replica(s), {arrival_rate_rps / best.replicas:.4g} req/s each"
        )
        if moved is not None and moved.option.id == best.option.id:
            adjustments.append(
                AddReplica(
                    configuration=_configuration(best.option),
                    from_replicas=best.replicas,
                    to_replicas=moved.replicas,
                    because=because,
                )
            )
        else:
            adjustments.append(
                NextCandidate(
                    from_=_configuration(best.option), to=None if moved is None else _configuration(moved.option), because=because
                )
            )
    if outcome.best is None:
        return _Verified(best=None, outcome=outcome, adjustments=adjustments, report=None)
    return _Verified(best=None, outcome=outcome, adjustments=adjustments, report=None, exhausted=True)


def _row_slacks(
    rows: Sequence[FleetRow], candidates: Sequence[Candidate], arrival_rate_rps: float, constraints: PlanConstraints
) -> tuple[Any, ...]:
    """The plan's constraint slacks at the replica counts of `rows` (after verification moved them)."""
    from planner.optimizer import plan_constraint_slacks

    by_id = {c.id: c for c in candidates}
    chosen = [replace(by_id[candidate_id_of(r)], max_rps_at_slo=r.max_rps_at_slo) for r in rows if candidate_id_of(r) in by_id]
    replicas = {candidate_id_of(r): r.replicas for r in rows}
    others = [c for c in candidates if c.id not in replicas]
    return plan_constraint_slacks(chosen + others, arrival_rate_rps, constraints, replicas)


def _verified_fleet(
    planner: Planner,
    by_id: Mapping[str, Option],
    pool: Sequence[tuple[Option, float]],
    workload: Workload,
    slo: Slo,
    constraints: PlanConstraints,
    request: PlanningRequest,
) -> tuple[PlanSolution, list[Candidate], list[FleetRow], dict[str, Any], list[Adjustment]]:
    """A mixed fleet with the simulator in the loop, as `_verified_search` does for one configuration:
    every row is simulated at its share of the traffic; a row that misses has its rate recorded as
    missed, its μ narrowed below that rate with the queueing model, and the MILP solved again.
    Raises InfeasiblePlanError when no fleet is accepted within MAX_VERIFY_ROUNDS."""
    lam = workload.arrival_rate_rps
    mus = {option.id: mu for option, mu in pool}
    options = {option.id: option for option, _ in pool}
    adjustments: list[Adjustment] = []
    for _ in range(MAX_VERIFY_ROUNDS):
        candidates = [_candidate(options[i], mu, planner) for i, mu in mus.items() if mu > 0]
        if not candidates:
            break
        solution = solve_plan(candidates, lam, constraints, time_limit_s=request.solver_time_limit_s)
        rows = [
            _row(by_id[r.candidate.id], r.replicas, r.candidate.max_rps_at_slo, r.candidate.saturation_rps, r.offered_rps)
            for r in solution.rows
        ]
        reports = [planner.simulated(by_id[candidate_id_of(r)], workload, r.offered_rps, r.replicas, slo, request) for r in rows]
        failing = [(row, report) for row, report in zip(rows, reports, strict=True) if not report["meets_slo"]]
        if not failing:
            main = max(range(len(rows)), key=lambda i: rows[i].offered_rps)
            verification = dict(reports[main])
            verification["rows"] = [{"gpu": r.gpu, "replicas": r.replicas, "meets_slo": True} for r in rows]
            return solution, candidates, rows, verification, adjustments
        for row, report in failing:
            option = by_id[candidate_id_of(row)]
            planner.record_simulated_miss(option, slo, row.offered_rps / row.replicas, tuple(report["misses"]))
            mus[option.id] = _mu_below_miss(planner, option, slo)
            adjustments.append(
                NextCandidate(
                    from_=_configuration(option),
                    to=None,
                    because=(
                        f"simulated p{slo.percentile:g} missed ({', '.join(report['misses'])}) at {row.replicas} replica(s), "
                        f"{row.offered_rps / row.replicas:.4g} req/s each: the fleet is solved again below that rate"
                    ),
                )
            )
    raise InfeasiblePlanError(
        f"the simulator finds the SLOs missed at every mixed fleet tried ({len(adjustments)} misses)",
        constraint="verification",
        adjustments=[as_dict(a) for a in adjustments],
    )


def _mu_below_miss(planner: Planner, option: Option, slo: Slo) -> float:
    """μ of `option` again after the simulator found a rate missed: the queueing model's largest
    rate below that miss (0 when none down to a thousandth of it meets)."""
    facts = planner._facts(option, slo)
    rate = facts.missed_rps
    while facts.met_rps <= 0 and facts.drop is None and rate > facts.missed_rps * 1e-3:
        rate *= 0.8
        planner.meets(option, slo, rate)
    return planner.max_rate(option, slo)[0] if facts.met_rps > 0 and facts.drop is None else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class _Fleet:
    """The plan's rows as the MILP chose them and verification left them, the solution and the
    candidates they came from, the search outcome the justification reads, and the simulator's
    report (None when nothing was simulated) with the moves verification made."""

    solution: PlanSolution
    candidates: list[Candidate]
    rows: list[FleetRow]
    outcome: _Outcome
    verification: dict[str, Any] | None = None
    adjustments: list[Adjustment] = field(default_factory=list)


def _single_report(
    planner: Planner, by_id: Mapping[str, Option], verified: _Verified, fleet: _Fleet, request: PlanningRequest
) -> _Fleet:
    """A single configuration's rows with the simulator's report at the MILP's replica count (the
    run the search's verification made, reused), and the moves that verification made."""
    if verified.report is None:
        return replace(fleet, adjustments=verified.adjustments)
    main_row = max(fleet.rows, key=lambda r: r.offered_rps)
    report = planner.simulated(
        by_id[candidate_id_of(main_row)], request.workload, main_row.offered_rps, main_row.replicas, request.slo, request
    )
    verification = dict(report)
    verification["rows"] = [{"gpu": r.gpu, "replicas": r.replicas, "meets_slo": report["meets_slo"]} for r in fleet.rows]
    return replace(fleet, verification=verification, adjustments=verified.adjustments)


def _verified_mixed(
    planner: Planner,
    by_id: Mapping[str, Option],
    pool: Sequence[tuple[Option, float]],
    fleet: _Fleet,
    request: PlanningRequest,
) -> _Fleet:
    """A mixed fleet verified row by row (`_verified_fleet`), or the single configuration the
    simulator accepts when that is cheaper; raises InfeasiblePlanError when neither verifies."""
    workload, slo, constraints = request.workload, request.slo, request.constraints
    lam = workload.arrival_rate_rps
    fleet_verified: tuple[PlanSolution, list[Candidate], list[FleetRow], dict[str, Any], list[Adjustment]] | None
    try:
        fleet_verified = _verified_fleet(planner, by_id, pool, workload, slo, constraints, request)
    except InfeasiblePlanError:
        fleet_verified = None  # no fleet the simulator accepts within the rounds: a single configuration may still serve
    fleet_cost = math.inf
    if fleet_verified is not None:
        solution, candidates, rows, verification, adjustments = fleet_verified
        fleet = replace(
            fleet, solution=solution, candidates=candidates, rows=rows, verification=verification, adjustments=adjustments
        )
        fleet_cost = sum(r.cost_usd_per_hour for r in rows)
    # Verification may have made the mixed fleet dearer than a single configuration the simulator
    # also accepts: the cheaper verified plan is the answer, whatever its shape.
    single = _verified_search(planner, workload, slo, lam, constraints, request, below_usd_per_hour=fleet_cost)
    if single.best is not None and single.report is not None:
        fleet = _single_instead(planner, fleet, single.best, single.report, single, request)
    elif fleet_verified is None:
        raise InfeasiblePlanError(
            "the simulator finds the SLOs missed at every mixed fleet and single configuration the search proposed; "
            "the SLOs are too close to what these configurations reach at this load",
            constraint="verification",
            adjustments=[as_dict(a) for a in single.adjustments],
        )
    # the verified rows are the plan: the MILP's slacks are taken again at their replica counts
    slacks = _row_slacks(fleet.rows, fleet.candidates, lam, constraints)
    return replace(fleet, solution=replace(fleet.solution, constraints=slacks))


def _single_instead(
    planner: Planner, fleet: _Fleet, best: SinglePlan, report: dict[str, Any], single: _Verified, request: PlanningRequest
) -> _Fleet:
    """The verified single configuration `best` in place of the mixed fleet, which cost more."""
    slo, lam = request.slo, request.workload.arrival_rate_rps
    mu = planner.max_rate(best.option, slo)[0]
    rows = [_row(best.option, best.replicas, max(mu, lam / best.replicas), planner.saturation(best.option), lam)]
    adjustments = [
        *fleet.adjustments,
        *single.adjustments,
        SingleConfiguration(
            to=_configuration(best.option),
            replicas=best.replicas,
            because="after verification one configuration alone is cheaper than the mixed fleet",
        ),
    ]
    verification = dict(report)
    verification["rows"] = [{"gpu": rows[0].gpu, "replicas": rows[0].replicas, "meets_slo": True}]
    candidates = fleet.candidates
    if best.option.id not in {c.id for c in candidates}:
        candidates = [*candidates, _candidate(best.option, rows[0].max_rps_at_slo, planner)]
    return replace(
        fleet, rows=rows, candidates=candidates, verification=verification, adjustments=adjustments, outcome=single.outcome
    )
