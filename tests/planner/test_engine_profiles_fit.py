"""bench/engine_profiles.py reproduces the profile it shipped in catalog/data/engine_profiles.json
(one pair refitted: MI300X × SGLang, 18 points, no low-precision factor on CDNA3), MLPerf checks stay out."""

from __future__ import annotations

import json
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
