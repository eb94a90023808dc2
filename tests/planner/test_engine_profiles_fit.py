"""bench/engine_profiles.py reproduces the profile it shipped in catalog/data/engine_profiles.json
(one pair refitted: MI300X × SGLang, 18 points, no low-precision factor on CDNA3), MLPerf checks stay out."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench.engine_profiles import MIN_POINTS, PROFILES_JSON, fit_pair, fit_points
from bench.fidelity import FIT_BASE, open_reference_catalog


def test_the_shipped_profile_is_the_fit_of_its_points(tmp_path: Path) -> None:
    shipped = {(p["gpu"], p["engine"]): p for p in json.loads(PROFILES_JSON.read_text(encoding="utf-8"))["profiles"]}
    catalog = open_reference_catalog(tmp_path)
    try:
        groups = fit_points(catalog)
        assert all(m.record.get("role", "evidence") != "check" for ms in groups.values() for m in ms)
        # every pair with enough points has a profile, and no other pair does
        assert {k for k, ms in groups.items() if len(ms) >= MIN_POINTS} == set(shipped)
        ms = groups[("mi300x", "sglang")]
        fit = fit_pair(ms, FIT_BASE)
    finally:
        catalog.session.close()
    record = shipped[("mi300x", "sglang")]
    assert record["points"] == len(ms)
    assert fit.efficiency.memory == pytest.approx(record["memory"], abs=1e-4)
    assert fit.efficiency.compute == pytest.approx(record["compute"], abs=1e-4)
    assert fit.efficiency.step_overhead_s * 1e3 == pytest.approx(record["step_overhead_ms"], abs=1e-4)


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
