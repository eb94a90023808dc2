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


def test_excluded_points_say_why_and_continuous_points_state_their_lengths():
    """Never delete silently: a point out of the fit carries its reason; a continuous-batching point
    has the prompt and output lengths its mixed step needs; computed concurrencies name their rule."""
    for record in MEASUREMENTS["points"]:
        if record.get("fit", True) is False:
            assert record.get("note", "").startswith("excluded from the fit"), record["id"]
        if record.get("batching") == "continuous":
            assert record["prompt_tokens"] >= 1 and record["output_tokens"] >= 1, record["id"]
        if "concurrency" in record:
            assert record["concurrency"] == "trtllm-bench-kv-limited" and "batch" not in record, record["id"]


def test_trtllm_bench_concurrency_is_its_kv_sizing_rule_worked_by_hand():
    """Llama 2 70B, fp8 weights / fp16 KV, tp2 on H100 (80 GB each), ISL + OSL = 2176:
    0.95 · (160e9 − 70e9) B / (327,680 B/token · 2176) = 119.9 → 119 requests; capped at 4096."""
    from bench.fidelity import trtllm_bench_concurrency
    from tests.planner.performance_specs import FP8_PRECISION, H100_SXM, LLAMA_2_70B

    assert trtllm_bench_concurrency(H100_SXM, LLAMA_2_70B, FP8_PRECISION, 2, 2176) == int(0.95 * 90e9 / (327_680 * 2176))
    assert trtllm_bench_concurrency(H100_SXM, LLAMA_2_70B, FP8_PRECISION, 2, 2176) == 119
    assert trtllm_bench_concurrency(H100_SXM, LLAMA_2_70B, FP8_PRECISION, 8, 2) == 4096
