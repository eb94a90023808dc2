"""Engine profiles: which profile a GPU × engine pair is priced with, the fallbacks, and the
low-precision factor in the step model's peak (planner/engines.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.engines import (
    EngineProfile,
    LowPrecisionFactor,
    allowed_engines,
    choose_profile,
    low_precision_factor,
    parameters_at_bounds,
    parse_engine,
    priced_on,
    runs_on,
)
from planner.errors import PlannerInputError
from planner.performance import build_step_model
from planner.specs import Efficiency, Precision, QuantSpec
from tests.planner.performance_specs import H100_SXM, LLAMA_2_70B, MI300X

CATALOG = Efficiency(name="calibrated", memory=0.7, compute=0.5, include_comm=True, source="catalog per-GPU fit")
H100 = replace(H100_SXM, efficiency=CATALOG)
AMD = replace(MI300X, efficiency=CATALOG)
TRT = EngineProfile(
    gpu="h100-sxm",
    engine="trt-llm",
    generation="0.17",
    efficiency=Efficiency(name="calibrated", memory=0.6, compute=0.55, include_comm=True, source="trt fit"),
    points=400,
    sources=6,
    source="trt fit",
)
VLLM = replace(TRT, engine="vllm", efficiency=replace(TRT.efficiency, memory=0.5), points=20, sources=1, source="vllm fit")
HOPPER_FP8 = LowPrecisionFactor(architecture="hopper", engine="trt-llm", datatype="fp8", factor=0.8, source="fit")
FP8 = QuantSpec(slug="fp8", weight_bytes_per_param=1.0, element_bytes=1.0, compute_dtype="fp8")


def test_a_pair_with_its_own_profile_is_priced_with_it() -> None:
    choice = choose_profile(H100, "vllm", [TRT, VLLM], [HOPPER_FP8])
    assert (choice.fallback, choice.generation, choice.efficiency.memory) == (False, "0.17", 0.5)
    # the Hopper FP8 factor measured under TensorRT-LLM stands in for vLLM's (same tensor cores)
    assert choice.efficiency.peak_factor("fp8") == 0.8
    assert choice.efficiency.peak_factor("bf16") == 1.0


def test_a_pair_without_data_takes_the_gpus_best_measured_engine_and_says_so() -> None:
    choice = choose_profile(H100, "sglang", [TRT, VLLM], [])
    assert choice.fallback
    assert choice.efficiency.memory == TRT.efficiency.memory  # 400 points beat 20
    assert "no h100-sxm × sglang measurements" in choice.reason and "trt-llm" in choice.reason


def test_a_gpu_without_any_engine_profile_keeps_its_catalog_calibration_without_factors() -> None:
    choice = choose_profile(AMD, "vllm", [TRT], [HOPPER_FP8])
    assert choice.fallback and choice.generation is None
    assert choice.efficiency == CATALOG
    assert "engine-agnostic catalog calibration" in choice.reason


def test_trt_llm_is_not_offered_on_amd() -> None:
    with pytest.raises(PlannerInputError, match="does not run on"):
        choose_profile(AMD, "trt-llm", [], [])
    specs, choices = priced_on([H100, AMD], "trt-llm", [TRT], [])
    assert [g.slug for g in specs] == ["h100-sxm"] and list(choices) == ["h100-sxm"]


def test_factor_lookup_order() -> None:
    """(arch, engine, dtype) → same arch and dtype under another engine → datasheet (1)."""
    vllm_own = replace(HOPPER_FP8, engine="vllm", factor=0.6)
    assert low_precision_factor("hopper", "vllm", "fp8", [HOPPER_FP8, vllm_own])[0] == 0.6
    assert low_precision_factor("hopper", "sglang", "fp8", [HOPPER_FP8, vllm_own])[0] == pytest.approx(0.7)
    value, why = low_precision_factor("ada", "vllm", "fp8", [HOPPER_FP8])
    assert value == 1.0 and "datasheet" in why


def test_the_factor_scales_the_low_precision_peak_in_the_step_model() -> None:
    """F = tp · peak(fp8) · factor · η_compute: H100 FP8 1,979 TFLOP/s × 0.8 × 0.5 = 791.6 TFLOP/s per GPU."""
    precision = Precision(weights=FP8, kv_cache=FP8)
    plain = build_step_model(H100, LLAMA_2_70B, precision, 4, CATALOG)
    scaled = build_step_model(H100, LLAMA_2_70B, precision, 4, replace(CATALOG, low_precision_factors=(("fp8", 0.8),)))
    assert plain.compute_flops_per_s == pytest.approx(4 * 1979e12 * 0.5)
    assert scaled.compute_flops_per_s == pytest.approx(4 * 1979e12 * 0.8 * 0.5)
    assert scaled.memory_bandwidth_bytes_per_s == plain.memory_bandwidth_bytes_per_s


def test_a_factor_outside_0_1_is_refused() -> None:
    with pytest.raises(PlannerInputError):
        replace(HOPPER_FP8, factor=1.5)
    with pytest.raises(PlannerInputError):
        Efficiency(low_precision_factors=(("fp8", 0.0),))


def test_allowed_engines() -> None:
    assert allowed_engines(None) is None
    assert allowed_engines("any") == ("vllm", "sglang", "trt-llm")
    assert allowed_engines(["vllm", "vllm", "sglang"]) == ("vllm", "sglang")
    with pytest.raises(PlannerInputError, match="unknown engine 'tgi'"):
        allowed_engines(["tgi"])
    with pytest.raises(PlannerInputError):
        allowed_engines([])


def test_factors_read_back_from_json_equal_the_planned_ones() -> None:
    """A stored plan's provenance gives the pairs back as lists; the efficiency rebuilt from it is the same."""
    planned = replace(CATALOG, low_precision_factors=(("fp8", 0.8),))
    assert Efficiency(**{**_fields(planned), "low_precision_factors": [["fp8", 0.8]]}) == planned
    assert Efficiency(**{**_fields(CATALOG), "low_precision_factors": []}) == CATALOG


def _fields(efficiency: Efficiency) -> dict[str, object]:
    return {name: getattr(efficiency, name) for name in Efficiency.__dataclass_fields__}


# Release generations: the newest by default, a named one on request, the pooled profile as its fallback.
_POOLED = replace(TRT, generation="all", points=400, efficiency=replace(TRT.efficiency, memory=0.61))
_GEN = {
    g: replace(TRT, generation=g, points=60, efficiency=replace(TRT.efficiency, memory=m))
    for g, m in (("0.9", 0.62), ("0.10", 0.63))
}
GENERATIONS = [_POOLED, *_GEN.values()]


def test_the_newest_generation_is_priced_by_default_in_version_order() -> None:
    """ "0.10" is newer than "0.9" (version order, not string order, where "0.9" > "0.10")."""
    choice = choose_profile(H100, "trt-llm", GENERATIONS, [])
    assert (choice.generation, choice.fallback, choice.efficiency.memory) == ("0.10", False, 0.63)
    assert "newest generation" in choice.reason and "0.9, 0.10" in choice.reason


def test_a_named_generation_is_priced_with_its_own_profile() -> None:
    choice = choose_profile(H100, "trt-llm@0.9", GENERATIONS, [])
    assert (choice.generation, choice.fallback, choice.efficiency.memory) == ("0.9", False, 0.62)
    pooled = choose_profile(H100, "trt-llm@all", GENERATIONS, [])
    assert (pooled.generation, pooled.fallback, pooled.efficiency.memory) == ("all", False, 0.61)


def test_a_generation_without_a_profile_falls_back_to_the_pooled_one_and_says_so() -> None:
    choice = choose_profile(H100, "trt-llm@0.8", GENERATIONS, [])
    assert (choice.generation, choice.fallback, choice.efficiency.memory) == ("all", True, 0.61)
    assert "no h100-sxm × trt-llm 0.8 profile" in choice.reason and "pooled" in choice.reason


def test_a_pair_with_only_a_pooled_profile_prices_it_by_default() -> None:
    choice = choose_profile(H100, "trt-llm", [_POOLED], [])
    assert (choice.generation, choice.fallback) == ("all", False)
    assert "no release has enough points" in choice.reason


def test_generations_are_parsed_and_malformed_ones_refused() -> None:
    assert parse_engine("vllm") == ("vllm", None)
    assert parse_engine("vllm@0.11") == ("vllm", "0.11")
    assert parse_engine("sglang@all") == ("sglang", "all")
    assert allowed_engines(["vllm@0.11", "vllm", "vllm@0.11"]) == ("vllm@0.11", "vllm")
    for bad in ("vllm@", "vllm@latest", "vllm@0.11.1", "tgi@1.0"):
        with pytest.raises(PlannerInputError):
            allowed_engines(bad)
    assert not runs_on("trt-llm@1.0", MI300X) and runs_on("vllm@0.11", MI300X)


def test_parameters_on_their_bounds_make_the_profile_under_determined() -> None:
    """MI300X × SGLang's shipped fit: η_compute 1 and overlap 1 (two DeepSeek-R1 posts, one publisher): the bounds,
    not the points, set them. The choice names them and its reason says so; an interior fit names none."""
    pinned = replace(
        VLLM,
        gpu="mi300x",
        engine="sglang",
        efficiency=replace(VLLM.efficiency, memory=0.204, compute=1.0, memory_compute_overlap=1.0),
    )
    choice = choose_profile(AMD, "sglang", [pinned], [])
    assert choice.at_bounds == ("η_compute = 1", "overhead ms = 0", "overlap = 1")
    assert "under-determined" in choice.reason and "low confidence" in choice.reason
    interior = replace(
        pinned, efficiency=replace(pinned.efficiency, compute=0.4, memory_compute_overlap=0.5, step_overhead_s=1e-3)
    )
    clean = choose_profile(AMD, "sglang", [interior], [])
    assert clean.at_bounds == () and "under-determined" not in clean.reason
    # the fallback to another engine's profile carries its bounds too
    assert choose_profile(AMD, "vllm", [pinned], []).at_bounds == choice.at_bounds
    assert parameters_at_bounds(replace(CATALOG, step_overhead_s=2e-3, memory_compute_overlap=0.3)) == ("overhead ms = 2",)
