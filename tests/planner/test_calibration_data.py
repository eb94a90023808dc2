"""The published measurements behind the shipped efficiencies: every point is usable and traceable."""

from __future__ import annotations

import json
from pathlib import Path

from planner.calibration import points_from_records

ROOT = Path(__file__).resolve().parents[2]
MEASUREMENTS = json.loads((ROOT / "bench" / "measurements.json").read_text(encoding="utf-8"))
CATALOG = ROOT / "catalog" / "data"


def _slugs(name: str) -> set[str]:
    return {row["slug"] for row in json.loads((CATALOG / f"{name}.json").read_text(encoding="utf-8"))}


def test_every_point_parses_and_names_a_source_and_catalog_rows():
    gpus, models, quants = _slugs("gpus"), _slugs("models"), _slugs("quantizations")
    sources = MEASUREMENTS["sources"]
    for record in MEASUREMENTS["points"]:
        (point,) = points_from_records([record])
        assert point.value > 0
        assert record["source"] in sources, record["id"]
        assert sources[record["source"]]["url"].startswith("https://"), record["source"]
        assert record["gpu"] in gpus and record["model"] in models, record["id"]
        assert {record["weights"], record["kv_cache"]} <= quants, record["id"]


def test_the_set_covers_what_the_fidelity_check_needs():
    """Issue 3 §4: at least 3 GPU types, 4 models, one MoE, and all three metrics."""
    points = MEASUREMENTS["points"]
    assert len({p["gpu"] for p in points}) >= 3
    assert len({p["model"] for p in points}) >= 4
    assert "mixtral-8x7b" in {p["model"] for p in points}
    assert any(p["kind"] in ("tpot", "decode_step") and p["batch"] == 1 for p in points)
    assert any(p["kind"] in ("ttft", "prefill") for p in points)
    assert any(p["kind"] == "throughput" and p["batch"] >= 64 for p in points)
    assert len({p["id"] for p in points}) == len(points)
