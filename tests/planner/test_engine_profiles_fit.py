"""bench/engine_profiles.py reproduces the profiles it shipped in catalog/data/engine_profiles.json
(one pair refitted: MI300X × SGLang, 22 points, no low-precision factor on CDNA3), keeps MLPerf checks out,
splits releases into generations by its stated rule, and names the parameters a fit left on a bound."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench.engine_profiles import (
    MIN_GENERATION_MODELS,
    MIN_GENERATION_POINTS,
    MIN_POINTS,
    MIN_SOURCES,
    PROFILES_JSON,
    fit_points,
    generation_groups,
    generation_of,
    low_precision_factors,
    pair_base,
    pair_profiles,
)
from bench.fidelity import open_reference_catalog
from planner.engines import POOLED_GENERATION, parameters_at_bounds

SHIPPED = {
    (p["gpu"], p["engine"], p["engine_generation"]): p for p in json.loads(PROFILES_JSON.read_text(encoding="utf-8"))["profiles"]
}


def test_releases_read_as_generations() -> None:
    assert generation_of("vllm", "0.11.1rc (ROCm 7.0.0, rocm/vllm)") == "0.11"
    assert generation_of("sglang", "0.4.2.post4 (ROCm 6.3)") == "0.4"
    assert generation_of("vllm", "not stated (vLLM on ROCm, 2024)") is None
    assert generation_of("trt-llm", "2023-12") is None
    # measurements.json names the release inside its source's engine text; NIM's own version is not TensorRT-LLM's
    assert generation_of("trt-llm", "TensorRT-LLM 1.0 (PyTorch backend, in-flight batching)", source_text=True) == "1.0"
    assert generation_of("trt-llm", "NVIDIA NIM 1.8.0 (TensorRT-LLM backend)", source_text=True) is None
    assert generation_of("trt-llm", "TensorRT-LLM 0.5/0.6.1 (gptSessionBenchmark)", source_text=True) is None


def test_the_shipped_profiles_are_the_fits_of_their_points_by_the_rule(tmp_path: Path) -> None:
    catalog = open_reference_catalog(tmp_path)
    try:
        groups = fit_points(catalog)
        assert all(m.record.get("role", "evidence") != "check" for ms in groups.values() for m in ms)
        # every pair with enough points from enough sources has a pooled profile, and no other pair does
        earning = {
            k for k, ms in groups.items() if len(ms) >= MIN_POINTS and len({m.record["source"] for m in ms}) >= MIN_SOURCES
        }
        assert earning == {(gpu, engine) for gpu, engine, generation in SHIPPED if generation == POOLED_GENERATION}
        # a generation has its own profile exactly when it has the rule's points and models
        for (gpu, engine), ms in groups.items():
            if (gpu, engine) not in earning:
                continue
            for generation, gms in generation_groups(ms).items():
                earns = len(gms) >= MIN_GENERATION_POINTS and len({m.record["model"] for m in gms}) >= MIN_GENERATION_MODELS
                assert ((gpu, engine, generation) in SHIPPED) == earns, (gpu, engine, generation)
        factors, _ = low_precision_factors(catalog, groups)
        ms = groups[("mi300x", "sglang")]
        (pooled, fit), *_ = pair_profiles("mi300x", "sglang", ms, pair_base("cdna3", "sglang", factors))
    finally:
        catalog.session.close()
    record = SHIPPED[("mi300x", "sglang", POOLED_GENERATION)]
    assert pooled.generation == POOLED_GENERATION and record["points"] == len(ms)
    assert fit.efficiency.memory == pytest.approx(record["memory"], abs=1e-4)
    assert fit.efficiency.compute == pytest.approx(record["compute"], abs=1e-4)
    assert fit.efficiency.step_overhead_s * 1e3 == pytest.approx(record["step_overhead_ms"], abs=1e-4)
    # its parameters on a bound are named in the profile's source, as a plan's reason names them
    pinned = parameters_at_bounds(fit.efficiency)
    assert pinned and f"at bounds: {', '.join(pinned)}" in record["source"]


def test_l40s_fp8_on_vllm_is_no_longer_far_optimistic_against_the_l40s_evidence(tmp_path: Path) -> None:
    """The L40S FP8 evidence (TensorRT-LLM; no L40S vLLM point is expressible) predicted with the profile a vLLM
    plan gets on L40S (the fallback to L40S × trt-llm with the Ada FP8 factor) against the per-GPU calibration:
    the median optimism at least halves (docs/serving-evidence.md: +42.7 % before, +17.1 % after, in-sample)."""
    from bench.serving_evidence import evaluate, load
    from catalog.engine_profiles import EngineProfiles
    from planner.engines import choose_profile

    catalog = open_reference_catalog(tmp_path)
    try:
        store = EngineProfiles(catalog.session)
        choice = choose_profile(catalog.gpu_spec("l40s"), "vllm", store.profiles(), store.factors())
        points = [e for e in evaluate(catalog, load()) if e.reason is None and e.record["gpu"] == "l40s"]
    finally:
        catalog.session.close()
    assert choice.fallback and choice.efficiency.peak_factor("fp8") < 1.0
    assert len(points) >= 100 and all(e.record["weights"] == "fp8" for e in points)
    before, after = [], []
    for e in points:
        assert e.measurement is not None and e.predicted is not None
        measured = e.measurement.point.value
        before.append(e.predicted / measured - 1.0)  # the per-GPU calibration shipped before engine profiles
        after.append(e.measurement.predict_with(choice.efficiency) / measured - 1.0)
    assert statistics.median(after) < statistics.median(before)
    assert abs(statistics.median(after)) < 0.5 * abs(statistics.median(before))
