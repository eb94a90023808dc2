"""The planner's exceptions: expected, user-actionable outcomes apart from bugs.

    HeadroomError
    ├── PlannerInputError            a spec or request that breaks a physical invariant (bug in the caller's data)
    ├── UnsupportedConfigurationError  a combination the hardware or model cannot run (fp8 on Ampere, tp not dividing heads)
    ├── ModelDoesNotFitError         weights (+ reserve) exceed the replica's memory; carries the shortfall and what would fit
    ├── UnstableLoadError            offered load at or above saturation (ρ ≥ 1)
    │   └── OccupancySaturatedError  (also a ConvergenceError) no occupancy below a full batch completes λ
    ├── InfeasiblePlanError          no candidate meets the SLOs/constraints; names the constraint and the smallest relaxation
    ├── CalibrationError             too few or inconsistent measured points to fit efficiencies
    ├── SimulationLimitError         a simulation request larger than the configured bound
    ├── ConvergenceError             a root-find or fixed point that did not converge (a planner bug or a pathological input)
    └── SolverError                  the MILP solver ended without a usable answer (time limit with no incumbent, error)

Every error carries `detail` (a sentence a person can act on) and `extensions`
(machine-readable members the API copies into its RFC 9457 problem document).
"""

from __future__ import annotations

from typing import Any


class HeadroomError(Exception):
    """Base of every expected planner outcome that is not a result."""

    title: str = "Planner error"

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extensions: dict[str, Any] = extensions


class PlannerInputError(HeadroomError, ValueError):
    title = "Invalid planner input"


class UnsupportedConfigurationError(HeadroomError):
    title = "Unsupported configuration"


class ModelDoesNotFitError(HeadroomError):
    title = "Model does not fit"


class UnstableLoadError(HeadroomError):
    title = "Unstable load"


class InfeasiblePlanError(HeadroomError):
    title = "No feasible plan"


class CalibrationError(HeadroomError):
    title = "Calibration failed"


class SimulationLimitError(HeadroomError):
    title = "Simulation too large"


class ConvergenceError(HeadroomError):
    title = "Numerical method did not converge"


class SolverError(HeadroomError):
    title = "Solver failed"


class OccupancySaturatedError(UnstableLoadError, ConvergenceError):
    """The queueing model's occupancy fixed point has no root below a full batch: at this rate even
    a full batch completes fewer requests per second than arrive, though the saturation estimate
    put ρ below 1 (extreme hardware, vanishing throughput). An unstable load to the caller (422);
    a configuration the planner's searches drop, as they drop any that does not converge."""

    title = "Unstable load"
