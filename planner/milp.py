"""Solver plumbing shared by the plan and fleet MILPs: names, solver choice, status → typed outcome.

Both MILPs are PuLP problems. This module picks the solver (HiGHS through `highspy` when it is
installed, else CBC, which ships with PuLP), always with a time limit, and turns the solver's
status into a `SolveOutcome` (optimal, or feasible at the time limit with its MIP gap), an
"infeasible" outcome the caller diagnoses, or a `SolverError`. Nothing here prints.
"""

from __future__ import annotations

import functools
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pulp

from planner.errors import PlannerInputError, SolverError

#: Solver names reported in every result.
HIGHS = "HiGHS"
CBC = "CBC"

SolveStatus = Literal["optimal", "feasible", "infeasible", "no_solution"]

#: HiGHS's `primal_solution_status` for a feasible primal solution (kSolutionStatusFeasible).
_HIGHS_SOLUTION_FEASIBLE = 2

#: A solve that ran this share of its time limit and found nothing hit the limit (not an error).
_TIME_LIMIT_SHARE = 0.9

_NAME_PART = re.compile(r"[^a-z0-9]+")


def constraint_name(*parts: object) -> str:
    """A constraint or variable name in the grammar `[a-z0-9_]`, parts joined by `__`.

    `constraint_name("meet_demand", "chat", "h14")` → `meet_demand__chat__h14`;
    `constraint_name("gpu_inventory", "h100-sxm", "h14")` → `gpu_inventory__h100_sxm__h14`.
    """
    return "__".join([_name_part(str(part)) for part in parts])


@functools.lru_cache(maxsize=4096)
def _name_part(part: str) -> str:
    # Cached: a fleet model names ~10 000 variables from a few hundred distinct parts
    # (workloads, candidate ids, period labels), and the regex was a fifth of its build time.
    return _NAME_PART.sub("_", part.lower()).strip("_") or "x"


def period_label(period: int) -> str:
    """`h0`, `h1`, … — the period index as it appears in constraint names."""
    return f"h{period}"


def highs_available() -> bool:
    """True when PuLP can drive HiGHS through its Python API (`highspy` installed)."""
    return bool(pulp.HiGHS(msg=False).available())


def default_solver_name() -> str:
    """HiGHS when installed (faster, reports its MIP gap), else CBC."""
    return HIGHS if highs_available() else CBC


@dataclass(frozen=True, slots=True, kw_only=True)
class SolverReport:
    """How the solver ended: which one, its status, the wall time and the relative MIP gap.

    `status` is "optimal" (proved within the solver's default gap tolerance) or "feasible"
    (the time limit stopped it with an incumbent; `mip_gap` then says how far from proved).
    `mip_gap` is None when the solver does not report one (CBC through PuLP reports none;
    an "optimal" CBC result is reported with gap 0).
    """

    name: str
    status: Literal["optimal", "feasible"]
    solve_s: float
    mip_gap: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSize:
    """Size of the MILP as built: candidates offered, variables and constraints."""

    candidates: int
    variables: int
    constraints: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SolveOutcome:
    """The result of one solve before the caller reads variable values off the problem."""

    status: SolveStatus
    solver_name: str
    solve_s: float
    mip_gap: float | None
    objective: float | None
    #: The best proved lower bound on the objective (None when the solver does not report one).
    dual_bound: float | None

    def report(self) -> SolverReport:
        if self.status not in ("optimal", "feasible"):
            raise SolverError(f"a solve ending {self.status} has no solver report to give (planner bug)")
        return SolverReport(name=self.solver_name, status=self.status, solve_s=self.solve_s, mip_gap=self.mip_gap)


def _interrupt_after(deadline: float, stop_at_objective: float | None = None) -> Callable[..., None]:
    """A HiGHS callback that interrupts the solve once `deadline` (perf_counter) has passed, or
    once the MIP's incumbent costs at most `stop_at_objective`.

    HiGHS checks its own time limit only between phases; under load one round of root cuts
    on a fleet-sized MILP can overrun it by tens of seconds. The simplex and MIP interrupt
    callbacks are polled inside those phases, so the limit holds to within one poll.
    """
    import highspy  # installed whenever HiGHS is the solver (`highs_available()`)

    mip_interrupt = highspy.cb.HighsCallbackType.kCallbackMipInterrupt

    def callback(callback_type: object, message: str, data_out: Any, data_in: Any, user_data: object) -> None:
        if (
            time.perf_counter() > deadline
            or stop_at_objective is not None
            and callback_type == mip_interrupt
            and data_out.mip_primal_bound <= stop_at_objective
        ):
            data_in.user_interrupt = True

    return callback


@functools.cache
def _silence_highs_banner() -> None:
    """Keep HiGHS's copyright banner off stdout, once per process.

    HiGHS prints "Running HiGHS …: Copyright …" the first time any instance in the process is
    used with `output_flag` on, and `highspy.Highs()` uses the new instance inside its own
    constructor (it installs its callback trampoline) before PuLP can pass `msg=False`, so every
    plan printed the banner to the API's stdout (seen on `headroom serve`, highspy 1.16). The
    banner is written once per process: writing it here on an instance whose console logging is
    off marks it written without printing it.
    """
    from highspy import _core  # installed whenever HiGHS is the solver (`highs_available()`)

    quiet = _core._Highs()
    quiet.setOptionValue("log_to_console", False)
    quiet.setCallback(lambda *_args: None, None)


def _make_solver(
    name: str, time_limit_s: float, relative_gap: float | None, *, mip: bool, stop_at_objective: float | None = None
) -> pulp.LpSolver:
    if name == HIGHS:
        import highspy  # installed whenever HiGHS is the solver (`highs_available()`)

        _silence_highs_banner()
        kinds = highspy.cb.HighsCallbackType
        return pulp.HiGHS(
            mip=mip,
            msg=False,
            timeLimit=time_limit_s,
            gapRel=relative_gap,
            callbackTuple=(_interrupt_after(time.perf_counter() + time_limit_s, stop_at_objective), None),
            callbacksToActivate=[kinds.kCallbackMipInterrupt, kinds.kCallbackSimplexInterrupt],
        )
    if name == CBC:
        # The CBC binary bundled with PuLP, driven through COIN_CMD (PULP_CBC_CMD is deprecated in PuLP 3.3).
        bundled = pulp.PULP_CBC_CMD.pulp_cbc_path
        return pulp.COIN_CMD(
            path=bundled if os.path.exists(bundled) else None,
            mip=mip,
            msg=False,
            timeLimit=time_limit_s,
            gapRel=relative_gap,
        )
    raise PlannerInputError(f"unknown solver {name!r}; expected {HIGHS!r} or {CBC!r}")


#: Largest |coefficient| or |right-hand side| a problem may hand the solver: HiGHS's own
#: `large_matrix_value` (1e15), above which it calls a model badly scaled and may fail inside the
#: library. Planner inputs inside planner/specs.py's bounds stay far below it (a GPU-hour costs at
#: most $1,000; demand is at most 1e7 req/s).
MAX_COEFFICIENT = 1e15


def check_coefficients(problem: pulp.LpProblem) -> None:
    """PlannerInputError naming the row when a coefficient, constant or variable bound of `problem`
    is larger than MAX_COEFFICIENT (PuLP itself refuses inf and NaN coefficients as they are
    written): nothing absurd enters the MILP."""
    rows = [("objective", problem.objective), *((constraint.name, constraint) for constraint in problem.constraints())]
    for row, expression in rows:
        if expression is None:
            continue
        for value in (expression.constant, *expression.values()):
            if not (abs(value) <= MAX_COEFFICIENT):  # false for NaN too
                raise PlannerInputError(
                    f"{problem.name}: row {row} has a coefficient {value:g}, outside ±{MAX_COEFFICIENT:g}: "
                    "an input is too large for the solver to plan with",
                    row=str(row),
                )
    for variable in problem.variables():
        for bound in (variable.lowBound, variable.upBound):
            if bound is not None and not (abs(bound) <= MAX_COEFFICIENT):
                raise PlannerInputError(
                    f"{problem.name}: variable {variable.name} has a bound {bound:g}, outside ±{MAX_COEFFICIENT:g}: "
                    "an input is too large for the solver to plan with",
                    variable=variable.name,
                )


def _highs_has_solution(problem: pulp.LpProblem) -> bool:
    model = getattr(problem, "solverModel", None)
    if model is None:
        return False
    return int(model.getInfo().primal_solution_status) == _HIGHS_SOLUTION_FEASIBLE


def _highs_gap_and_bound(problem: pulp.LpProblem) -> tuple[float | None, float | None]:
    model = getattr(problem, "solverModel", None)
    if model is None:
        return None, None
    info = model.getInfo()
    gap, bound = float(info.mip_gap), float(info.mip_dual_bound)
    return (gap if math.isfinite(gap) else None), (bound if math.isfinite(bound) else None)


def solve(
    problem: pulp.LpProblem,
    *,
    time_limit_s: float,
    solver_name: str | None = None,
    relative_gap: float | None = None,
    relaxed: bool = False,
    stop_at_objective: float | None = None,
) -> SolveOutcome:
    """Solve `problem` within `time_limit_s`; map the status to a typed outcome.

    `relative_gap` stops the search once the incumbent is proved within that fraction of the
    optimum (solver default, 1e-4 for HiGHS, when None). `stop_at_objective` (HiGHS only) stops
    it once an incumbent costs at most that much — for a caller holding a better bound than the
    solver's own; the outcome is then "feasible" with the solver's gap. `relaxed` solves the LP relaxation
    (integrality ignored), whose row duals the caller may then read as shadow prices.

    "no_solution" means the time limit came before any feasible solution.

    Returns "optimal", "feasible" (time limit reached with an incumbent) or "infeasible";
    raises `SolverError` for anything else (unbounded — a modelling bug here, since every
    variable is bounded — or a time limit without any feasible solution, or a solver error).
    """
    if not (math.isfinite(time_limit_s) and time_limit_s > 0):
        raise PlannerInputError(f"solver time limit must be a positive number of seconds, got {time_limit_s}")
    check_coefficients(problem)
    name = solver_name or default_solver_name()
    solver = _make_solver(name, time_limit_s, relative_gap, mip=not relaxed, stop_at_objective=stop_at_objective)
    started = time.perf_counter()
    try:
        status = problem.solve(solver)
    except pulp.PulpSolverError as error:
        raise SolverError(f"{name} failed on {problem.name}: {error}", solver=name) from error
    solve_s = time.perf_counter() - started
    solution_status = problem.sol_status
    if status == pulp.LpStatusInfeasible:
        return SolveOutcome(status="infeasible", solver_name=name, solve_s=solve_s, mip_gap=None, objective=None, dual_bound=None)
    if name == HIGHS and not _highs_has_solution(problem):
        # PuLP reads an interrupted HiGHS run without an incumbent as "integer feasible".
        status = pulp.LpStatusNotSolved
    if status == pulp.LpStatusOptimal and solution_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        proved = solution_status == pulp.LpSolutionOptimal
        objective = float(pulp.value(problem.objective) or 0.0)
        gap, bound = _highs_gap_and_bound(problem) if name == HIGHS else (None, None)
        if proved:
            gap = 0.0 if gap is None else gap
            bound = objective if bound is None else bound
        return SolveOutcome(
            status="optimal" if proved else "feasible",
            solver_name=name,
            solve_s=solve_s,
            mip_gap=gap,
            objective=objective,
            dual_bound=bound,
        )
    if status == pulp.LpStatusNotSolved and solve_s >= _TIME_LIMIT_SHARE * time_limit_s:
        return SolveOutcome(
            status="no_solution", solver_name=name, solve_s=solve_s, mip_gap=None, objective=None, dual_bound=None
        )
    if status == pulp.LpStatusUnbounded:
        raise SolverError(f"{problem.name} is unbounded (planner bug: every decision should be bounded)", solver=name)
    raise SolverError(
        f"{name} ended without a usable solution for {problem.name} within {time_limit_s} s "
        f"(status {pulp.LpStatus.get(status, status)}); raise the time limit or shrink the candidate table",
        solver=name,
        time_limit_s=time_limit_s,
    )


class Relaxation:
    """The LP relaxation of one PuLP problem, solved again after rows are added to it (cuts).

    With HiGHS the model is handed over once and stays loaded: a later solve hands over only the
    rows added since (plus every bound, cost and row limit, in bulk) and starts from the last
    basis. Handing the 10 140-column `shared` fleet model over through PuLP took ≈ 0.14 s per
    solve and reading the answer back ≈ 0.05 s, more than HiGHS's own ≈ 0.1 s LP (measured
    2026-12-01 on the 2-core bench machine, load ≈ 1.5). Rows may be added between solves; rows may not be
    removed or have their coefficients changed, and no variable may be added. With CBC each
    solve is a fresh `solve(problem, relaxed=True)`.

    After a solve the problem's variables hold their values (`varValue`) and its constraints
    their duals (`pi`), as after `solve`.
    """

    def __init__(self, problem: pulp.LpProblem, *, solver_name: str | None = None) -> None:
        self.problem = problem
        self.solver_name = solver_name or default_solver_name()
        self._highs: Any = None
        if self.solver_name != HIGHS:
            return
        import highspy  # installed whenever HiGHS is the solver (`highs_available()`)

        _silence_highs_banner()
        self._highs = highspy.Highs()  # type: ignore[no-untyped-call]  # highspy's Highs.__init__ has no annotations
        self._highs.setOptionValue("output_flag", False)
        self._columns = list(problem.variables())
        self._index = {variable.name: i for i, variable in enumerate(self._columns)}
        self._rows: list[pulp.LpConstraint] = []
        count = len(self._columns)
        empty_index, empty_value = np.zeros(0, dtype=np.int32), np.zeros(0)
        self._highs.addCols(count, np.zeros(count), np.zeros(count), np.zeros(count), 0, empty_index, empty_index, empty_value)
        self._highs.startCallback(highspy.cb.HighsCallbackType.kCallbackSimplexInterrupt)

    def solve(self, *, time_limit_s: float) -> SolveOutcome:
        """The relaxation of the problem as it is now; "optimal", "infeasible" or "no_solution"
        (stopped by `time_limit_s`), or `SolverError`."""
        if not (math.isfinite(time_limit_s) and time_limit_s > 0):
            raise PlannerInputError(f"solver time limit must be a positive number of seconds, got {time_limit_s}")
        if self._highs is None:
            return solve(self.problem, time_limit_s=time_limit_s, solver_name=self.solver_name, relaxed=True)
        import highspy  # installed whenever HiGHS is the solver (`highs_available()`)

        highs = self._highs
        started = time.perf_counter()  # the hand-over counts, as in `solve`
        self._hand_over()
        highs.setOptionValue("time_limit", float(time_limit_s))
        highs.setCallback(_interrupt_after(started + time_limit_s), None)
        highs.run()
        solve_s = time.perf_counter() - started
        status = highs.getModelStatus()
        kinds = highspy.HighsModelStatus
        if status in (kinds.kInfeasible, kinds.kUnboundedOrInfeasible):
            return SolveOutcome(
                status="infeasible", solver_name=HIGHS, solve_s=solve_s, mip_gap=None, objective=None, dual_bound=None
            )
        if status in (kinds.kTimeLimit, kinds.kInterrupt, kinds.kIterationLimit):  # stopped by the limit: no usable LP
            return SolveOutcome(
                status="no_solution", solver_name=HIGHS, solve_s=solve_s, mip_gap=None, objective=None, dual_bound=None
            )
        if status == kinds.kUnbounded:
            raise SolverError(f"{self.problem.name} is unbounded (planner bug: every decision should be bounded)", solver=HIGHS)
        if status != kinds.kOptimal:
            raise SolverError(
                f"{HIGHS} ended the relaxation of {self.problem.name} {highs.modelStatusToString(status)}", solver=HIGHS
            )
        solution = highs.getSolution()
        for variable, value, reduced_cost in zip(self._columns, solution.col_value, solution.col_dual, strict=True):
            variable.varValue, variable.dj = value, reduced_cost
        for constraint, activity, dual in zip(self._rows, solution.row_value, solution.row_dual, strict=True):
            slack = constraint.constant + activity  # PuLP's sign conventions, as its HiGHS interface sets them
            constraint.slack = -slack if constraint.sense == pulp.LpConstraintLE else slack
            constraint.pi = dual
        objective = float(highs.getInfo().objective_function_value) * (-1.0 if self.problem.sense == pulp.LpMaximize else 1.0)
        self.problem.assignStatus(pulp.LpStatusOptimal, pulp.LpSolutionOptimal)
        return SolveOutcome(
            status="optimal", solver_name=HIGHS, solve_s=solve_s, mip_gap=0.0, objective=objective, dual_bound=objective
        )

    def _hand_over(self) -> None:
        """Rows added since the last solve, then every column's bounds and cost and every row's limits."""
        highs, problem = self._highs, self.problem
        constraints = problem.constraints()
        if any(old is not new for old, new in zip(self._rows, constraints)) or len(constraints) < len(self._rows):
            raise PlannerInputError(f"rows of {problem.name} were removed or replaced between solves (planner bug)")
        added = constraints[len(self._rows) :]
        if added:
            starts: list[int] = []  # where each added row's entries begin in indices/values
            indices: list[int] = []  # column of each nonzero coefficient
            values: list[float] = []
            for constraint in added:
                starts.append(len(indices))
                for variable, coefficient in constraint.items():
                    if coefficient != 0:
                        if variable.name not in self._index:
                            raise PlannerInputError(
                                f"{variable.name} was added to {problem.name} after its relaxation was built (planner bug)"
                            )
                        indices.append(self._index[variable.name])
                        values.append(coefficient)
            lower, upper = _row_limits(added)
            highs.addRows(
                len(added),
                lower,
                upper,
                len(indices),
                np.array(starts, dtype=np.int32),
                np.array(indices, dtype=np.int32),
                np.array(values, dtype=np.float64),
            )
            self._rows.extend(added)
        if self._rows:
            lower, upper = _row_limits(self._rows)
            highs.changeRowsBounds(len(self._rows), np.arange(len(self._rows), dtype=np.int32), lower, upper)
        count = len(self._columns)
        lower = np.array([-math.inf if v.lowBound is None else v.lowBound for v in self._columns], dtype=np.float64)
        upper = np.array([math.inf if v.upBound is None else v.upBound for v in self._columns], dtype=np.float64)
        highs.changeColsBounds(count, np.arange(count, dtype=np.int32), lower, upper)
        objective = problem.objective
        cost = np.zeros(count)
        for variable, coefficient in objective.items():
            cost[self._index[variable.name]] = coefficient
        sign = -1.0 if problem.sense == pulp.LpMaximize else 1.0
        highs.changeColsCost(count, np.arange(count, dtype=np.int32), sign * cost)
        highs.changeObjectiveOffset(sign * float(objective.constant))


def _row_limits(constraints: list[pulp.LpConstraint]) -> tuple[Any, Any]:
    lower = np.array([-math.inf if (lb := c.getLb()) is None else lb for c in constraints], dtype=np.float64)
    upper = np.array([math.inf if (ub := c.getUb()) is None else ub for c in constraints], dtype=np.float64)
    return lower, upper


def integer_value(variable: pulp.LpVariable) -> int:
    """The solved value of an integer variable, rounded (solvers return 2.9999999 for 3)."""
    value: float = variable.varValue or 0.0  # pulp is untyped; the value is a float (or None before a solve)
    return round(value)


def model_size(problem: pulp.LpProblem, *, candidates: int) -> ModelSize:
    return ModelSize(
        candidates=candidates,
        variables=problem.numVariables(),
        constraints=problem.numConstraints(),
    )
