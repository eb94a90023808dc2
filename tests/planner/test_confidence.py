"""The calibration grading rule (planner/confidence.py), case by case and as properties."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.fidelity import FIT_F_SCALE, FIT_PARAMETERS
from planner.candidates import enumerate_groups
from planner.confidence import (
    FITTED_PARAMETERS,
    GRADES,
    NOISE_ERROR,
    OUTLIER_ERROR,
    CalibrationEvidence,
    calibration_grade,
    grade_rank,
    meets,
)
from planner.errors import PlannerInputError
from planner.optimizer import PlanConstraints
from planner.workload import FixedLength, Slo, Workload
from tests.planner.performance_specs import (
    A100_SXM,
    FP8_PRECISION,
    FP16_PRECISION,
    H100_SXM,
    LLAMA_2_70B,
)


def evidence(**overrides: object) -> CalibrationEvidence:
    fields: dict[str, object] = {"points": 30, "sources": 2, "out_of_sample_error": 0.05}
    return CalibrationEvidence(**(fields | overrides))


def test_thresholds_are_the_fits_own() -> None:
    """The noise scale is the calibration fit's soft-L1 f_scale and the parameter count its own."""
    assert NOISE_ERROR == FIT_F_SCALE
    assert OUTLIER_ERROR == pytest.approx(2 * FIT_F_SCALE)
    assert FITTED_PARAMETERS == len(FIT_PARAMETERS)


def test_two_sources_within_the_noise_scale_are_high() -> None:
    assert calibration_grade(evidence()) == "high"
    assert calibration_grade(evidence(out_of_sample_error=NOISE_ERROR)) == "high"


def test_one_source_is_at_most_medium() -> None:
    """One publication cannot show its own method's bias, however well it predicts itself."""
    assert calibration_grade(evidence(sources=1, out_of_sample_error=0.01)) == "medium"


def test_between_noise_and_outlier_is_medium() -> None:
    assert calibration_grade(evidence(out_of_sample_error=0.15)) == "medium"
    assert calibration_grade(evidence(out_of_sample_error=OUTLIER_ERROR)) == "medium"


@pytest.mark.parametrize(
    "overrides",
    [
        {"out_of_sample_error": 0.21},  # typical held-out point an outlier for the fit
        {"below_usual_range": True},  # LOW CONFIDENCE: η below every other GPU's
        {"points": FITTED_PARAMETERS, "sources": 2},  # the fit interpolates
        {"points": 0, "sources": 0, "out_of_sample_error": None, "carried_over_from": "h100-sxm"},
    ],
)
def test_low(overrides: dict[str, object]) -> None:
    assert calibration_grade(evidence(**overrides)) == "low"


def test_carried_over_is_low_whatever_the_donor_had() -> None:
    assert calibration_grade(evidence(carried_over_from="a100-80gb-sxm")) == "low"


@pytest.mark.parametrize(
    "overrides",
    [
        {"points": -1},
        {"sources": 31},
        {"out_of_sample_error": -0.1},
        {"out_of_sample_error": float("nan")},
        {"out_of_sample_error": None},
    ],
)
def test_impossible_evidence_is_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(PlannerInputError):
        evidence(**overrides)


@given(
    points=st.integers(0, 200),
    extra_points=st.integers(0, 50),
    sources=st.integers(0, 5),
    error=st.floats(0, 2),
    worse=st.floats(0, 1),
)
def test_more_evidence_never_lowers_a_grade(points: int, extra_points: int, sources: int, error: float, worse: float) -> None:
    """More points or sources never lower the grade; a larger out-of-sample error never raises it."""
    sources = min(sources, points)
    base = calibration_grade(CalibrationEvidence(points=points, sources=sources, out_of_sample_error=error))
    more = calibration_grade(
        CalibrationEvidence(
            points=points + extra_points, sources=min(sources + 1, points + extra_points), out_of_sample_error=error
        )
    )
    larger_error = calibration_grade(CalibrationEvidence(points=points, sources=sources, out_of_sample_error=error + worse))
    assert grade_rank(more) >= grade_rank(base) >= grade_rank(larger_error)


def test_meets_orders_the_grades() -> None:
    assert GRADES == ("low", "medium", "high")
    assert meets("low", None) and meets("high", "medium") and meets("medium", "medium")
    assert not meets("low", "medium") and not meets("medium", "high")
    with pytest.raises(PlannerInputError):
        meets("low", "certain")


def test_min_confidence_drops_a_whole_gpu_with_its_grade_in_the_reason() -> None:
    """A100 graded low, H100 medium: asking for medium leaves one drop per A100 precision and
    every H100 group; asking for nothing keeps both GPUs' groups."""
    h100 = dataclasses.replace(H100_SXM, price_usd_per_hour_on_demand=6.155, calibration_grade="medium")
    a100 = dataclasses.replace(A100_SXM, price_usd_per_hour_on_demand=2.7, calibration_grade="low")
    workload = Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=1000), output_tokens=FixedLength(tokens=200))
    kwargs = {
        "model": LLAMA_2_70B,
        "gpus": (h100, a100),
        "precisions": (FP16_PRECISION, FP8_PRECISION),
        "workload": workload,
        "slo": Slo(ttft_s=2.0, tpot_s=0.08),
    }
    everything, _ = enumerate_groups(**kwargs)
    groups, drops = enumerate_groups(**kwargs, min_confidence="medium")
    assert {g.gpu.slug for g in everything} == {"h100-sxm", "a100-80gb-sxm"}
    assert {g.gpu.slug for g in groups} == {"h100-sxm"}
    confidence_drops = [d for d in drops if d.constraint == "min_confidence"]
    assert [(d.gpu, d.weights_precision) for d in confidence_drops] == [("a100-80gb-sxm", "fp16"), ("a100-80gb-sxm", "fp8")]
    assert all("graded low, below the minimum confidence medium" in d.reason for d in confidence_drops)
    assert PlanConstraints(min_confidence="high").min_confidence == "high"
    with pytest.raises(PlannerInputError):
        PlanConstraints(min_confidence="certain")
