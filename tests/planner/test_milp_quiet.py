"""Planning prints nothing to stdout: the API's stdout carries its own log lines only.

HiGHS writes its copyright banner to the process's stdout the first time any instance is used,
once per process, so each check runs in a fresh interpreter (in this one an earlier test may
already have used HiGHS) and reads the child's stdout at the file-descriptor level, where the
solver's C++ writes land."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from planner.milp import HIGHS, default_solver_name

ROOT = Path(__file__).resolve().parents[2]

PLAN = """
from planner.optimizer import PlanConstraints
from planner.planning import plan_capacity
from tests.planner.test_planning import CHAT, INPUTS, request
result = plan_capacity(request(CHAT.at_rate(40.0), constraints=PlanConstraints(mixed_fleet=True)), INPUTS)
assert result.provenance is not None and result.provenance.status == "optimal", result.provenance
"""

RELAXATION = """
import pulp
from planner.milp import Relaxation
problem = pulp.LpProblem("quiet", pulp.LpMinimize)
x = pulp.LpVariable("x", lowBound=0, upBound=4)
problem += x
problem += x >= 1, "floor"
outcome = Relaxation(problem).solve(time_limit_s=5.0)
assert outcome.status == "optimal" and abs(x.varValue - 1.0) < 1e-9, outcome
"""


def _stdout_of(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_default_solver_is_highs() -> None:
    """The checks below are about HiGHS's banner: they mean something only where HiGHS is the solver."""
    assert default_solver_name() == HIGHS


def test_a_plan_prints_nothing_to_stdout() -> None:
    assert _stdout_of(PLAN) == ""


def test_a_relaxation_solved_first_prints_nothing_to_stdout() -> None:
    assert _stdout_of(RELAXATION) == ""
