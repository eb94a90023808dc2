"""The rules that make `engine@generation` consistent on every route (planner/engines.py, issue 14 §1): a generation
no profile of the engine has is refused naming the known ones, a bare pinned engine matches every generation of it,
and a profile with parameters pinned on the fit's bounds lowers the GPU's calibration grade one step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.confidence import GRADES
from planner.engines import (
    EngineProfile,
    check_generation,
    choose_profile,
    known_generations,
    lowered_grade,
    narrowed_by_pin,
    priced_on,
)
from planner.errors import PlannerInputError
from planner.specs import Efficiency
from tests.planner.performance_specs import H100_SXM, MI300X

#: An interior fit: no parameter within AT_BOUND_TOLERANCE of its PROFILE_BOUNDS range.
INTERIOR = Efficiency(name="calibrated", memory=0.6, compute=0.5, step_overhead_s=1e-3, memory_compute_overlap=0.4, source="fit")
#: The same fit with the overhead on its 2 ms ceiling: under-determined.
ON_BOUND = replace(INTERIOR, memory=1.0, step_overhead_s=2e-3)
OVERHEAD_CAPPED = replace(INTERIOR, step_overhead_s=2e-3)
H100 = replace(H100_SXM, efficiency=replace(INTERIOR, memory=0.7), calibration_grade="medium")


def _profile(gpu: str, engine: str, generation: str, efficiency: Efficiency = INTERIOR) -> EngineProfile:
    return EngineProfile(gpu=gpu, engine=engine, generation=generation, efficiency=efficiency, points=40, sources=2, source="fit")


PROFILES = (
    _profile("h100-sxm", "trt-llm", "0.12"),
    _profile("h100-sxm", "trt-llm", "0.17"),
    _profile("b200", "trt-llm", "1.0"),
    _profile("h100-sxm", "trt-llm", "all"),
    _profile("mi300x", "vllm", "0.11"),
)


def test_known_generations_are_every_gpus_in_version_order_then_all() -> None:
    assert known_generations("trt-llm", PROFILES) == ("0.12", "0.17", "1.0", "all")
    assert known_generations("sglang", PROFILES) == ("all",)


def test_a_generation_no_profile_has_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(PlannerInputError) as refused:
        check_generation("trt-llm@0.1", PROFILES)
    assert refused.value.extensions["known_generations"] == ["0.12", "0.17", "1.0", "all"]
    assert refused.value.extensions["field"] == "engine" and "0.12, 0.17, 1.0, all" in str(refused.value.detail)
    # known somewhere (b200), the bare engine and the pooled label pass; the GPU lacking 1.0 falls back
    for fine in ("trt-llm@1.0", "trt-llm", "trt-llm@all", "sglang@all"):
        check_generation(fine, PROFILES)
    fallback = choose_profile(H100, "trt-llm@1.0", PROFILES, [])
    assert (fallback.generation, fallback.fallback) == ("all", True)


def test_a_bare_pin_matches_every_generation_of_its_engine() -> None:
    assert narrowed_by_pin(("vllm@0.11", "trt-llm"), "vllm") == ("vllm@0.11",)
    assert narrowed_by_pin(("vllm@0.10", "vllm@0.11", "sglang"), "vllm") == ("vllm@0.10", "vllm@0.11")
    assert narrowed_by_pin(None, "vllm") == ("vllm",)
    assert narrowed_by_pin(("vllm@0.11",), None) == ("vllm@0.11",)
    assert narrowed_by_pin(None, None) is None
    for allowed, pin in ((("vllm@0.11",), "sglang"), (("vllm@0.11",), "vllm@0.10"), (("vllm",), "vllm@0.11")):
        with pytest.raises(PlannerInputError) as refused:
            narrowed_by_pin(allowed, pin)
        assert refused.value.extensions["field"] == "constraints.pin.engine"


def test_grades_step_down_once_and_low_stays_low() -> None:
    assert [lowered_grade(g) for g in GRADES] == ["low", "low", "medium"]


def test_a_profile_on_its_bounds_lowers_the_priced_gpus_grade_one_step_and_says_why() -> None:
    """H100 graded medium: its interior 0.17 profile keeps medium; the 0.12 profile with η_mem on its ceiling of 1
    prices it at low, and the reason says the grade was lowered and from what; a profile whose only bound is the
    overhead's 2 ms cap names it and keeps the grade."""
    profiles = (_profile("h100-sxm", "trt-llm", "0.17"), _profile("h100-sxm", "trt-llm", "0.12", ON_BOUND))
    interior = choose_profile(H100, "trt-llm@0.17", profiles, [])
    assert (interior.at_bounds, interior.calibration_grade) == ((), "medium")
    bounded = choose_profile(H100, "trt-llm@0.12", profiles, [])
    assert bounded.at_bounds == ("η_mem = 1", "overhead ms = 2") and bounded.calibration_grade == "low"
    assert "lowered one step, medium → low" in bounded.reason
    capped = choose_profile(H100, "trt-llm@0.12", (_profile("h100-sxm", "trt-llm", "0.12", OVERHEAD_CAPPED),), [])
    assert capped.at_bounds == ("overhead ms = 2",) and capped.calibration_grade == "medium"
    assert "overhead ms = 2" in capped.reason and "under-determined" not in capped.reason
    (spec,), choices = priced_on([H100], "trt-llm@0.12", profiles, [])
    assert spec.calibration_grade == "low" and spec.efficiency.step_overhead_s == pytest.approx(2e-3)
    assert choices["h100-sxm"] == bounded
    # the other-engine fallback carries the donor's bounds, and so lowers the grade too
    donor = choose_profile(H100, "vllm", [_profile("h100-sxm", "trt-llm", "all", ON_BOUND)], [])
    assert donor.fallback and donor.calibration_grade == "low"
    # no profile at all: the catalog calibration and its own grade
    agnostic = choose_profile(replace(MI300X, calibration_grade="medium"), "sglang", [], [])
    assert (agnostic.at_bounds, agnostic.calibration_grade) == ((), "medium")
