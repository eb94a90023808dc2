"""How far a GPU's calibrated efficiencies can be trusted, graded from the evidence behind them.

The grade is one of GRADES, lowest first; `calibration_grade(evidence)` is the one rule that sets it
and `meets(grade, minimum)` compares two. The evidence is computed by `bench/confidence.py` from the
published points in bench/measurements.json and shipped in each GPU's efficiency block.

The rule, first match wins:

- **low** when the GPU has no published point of its own (its efficiencies are carried over from
  another GPU: an assumption, not a measurement), when its fit wants efficiencies below the range
  every other GPU fits (the points pay a cost the step model has no term for, so η absorbs it),
  when it has no more points than the fit has parameters (the fit interpolates; its residuals say
  nothing), or when its out-of-sample error exceeds OUTLIER_ERROR.
- **high** when at least two independent sources agree (one source cannot reveal its own method's
  bias: leaving it out leaves nothing of this GPU to predict from) and the out-of-sample error is
  within NOISE_ERROR.
- **medium** otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlannerInputError

#: Grades, lowest first.
GRADES: tuple[str, ...] = ("low", "medium", "high")
#: The grade of a calibration with no evidence recorded (a GPU created without a `confidence`
#: block): nothing says its efficiencies hold, which is what "low" means.
UNGRADED = "low"
#: Parameters each GPU's calibration fits: η_mem, η_compute, per-step overhead, memory/compute overlap.
FITTED_PARAMETERS = 4
#: The calibration fit's noise scale: its soft-L1 loss is quadratic (residuals treated as scatter
#: between sources that differ in engine version and unstated settings) below a 10 % relative error
#: and linear (residuals treated as outliers) above it (bench/fidelity.py FIT_F_SCALE). Points of
#: sources the fit never saw predicted within it are predicted as well as the fit's own noise.
NOISE_ERROR = 0.10
#: Twice the noise scale: soft-L1 at twice f_scale already grows linearly, so a GPU whose typical
#: out-of-sample point misses by more is, for the fit's own loss, an outlier.
OUTLIER_ERROR = 2 * NOISE_ERROR
#: Sources needed before one source's bias can show in a leave-one-source-out prediction.
INDEPENDENT_SOURCES = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationEvidence:
    """What one GPU's shipped efficiencies rest on.

    `points` and `sources`: published points and distinct sources in the fit of this GPU (0 when
    carried over). `out_of_sample_error`: median |predicted / measured − 1| of this GPU's fitted
    points predicted by fits that never saw the point's source or its model, the worse of the two
    (None without points). `carried_over_from`: the GPU whose fit is shipped instead of one's own.
    `below_usual_range`: the fitted η lie below the range the other GPUs fit (LOW CONFIDENCE).
    """

    points: int
    sources: int
    out_of_sample_error: float | None
    carried_over_from: str | None = None
    below_usual_range: bool = False

    def __post_init__(self) -> None:
        if self.points < 0 or self.sources < 0 or self.sources > self.points:
            raise PlannerInputError(
                f"calibration evidence needs 0 <= sources <= points, got {self.sources} sources, {self.points} points"
            )
        if self.out_of_sample_error is not None and not self.out_of_sample_error >= 0:
            raise PlannerInputError(f"out-of-sample error must be >= 0, got {self.out_of_sample_error}")
        if self.points > 0 and self.out_of_sample_error is None:
            raise PlannerInputError("a calibration fitted on points has an out-of-sample error")


def calibration_grade(evidence: CalibrationEvidence) -> str:
    """The grade of a calibration (module docstring for the rule and its thresholds)."""
    error = evidence.out_of_sample_error
    if (
        evidence.carried_over_from is not None
        or evidence.below_usual_range
        or evidence.points <= FITTED_PARAMETERS
        or error is None
        or error > OUTLIER_ERROR
    ):
        return "low"
    if evidence.sources >= INDEPENDENT_SOURCES and error <= NOISE_ERROR:
        return "high"
    return "medium"


def grade_rank(grade: str) -> int:
    """Position of `grade` in GRADES (0 = low); PlannerInputError for an unknown grade."""
    try:
        return GRADES.index(grade)
    except ValueError:
        raise PlannerInputError(
            f"unknown calibration grade {grade!r}: one of {', '.join(GRADES)}", field="min_confidence"
        ) from None


def meets(grade: str, minimum: str | None) -> bool:
    """Whether a calibration graded `grade` satisfies `minimum` (None: anything does)."""
    return minimum is None or grade_rank(grade) >= grade_rank(minimum)
