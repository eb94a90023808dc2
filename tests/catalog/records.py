"""The small fixture catalog in tests/catalog/data/, as fresh copies per call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURE_DATA_DIR = Path(__file__).resolve().parent / "data"


def fixture_records(plural: str) -> list[dict[str, Any]]:
    return json.loads((FIXTURE_DATA_DIR / f"{plural}.json").read_text(encoding="utf-8"))


def fixture_record(plural: str, slug: str) -> dict[str, Any]:
    return next(record for record in fixture_records(plural) if record["slug"] == slug)


def h100() -> dict[str, Any]:
    return fixture_record("gpus", "h100-sxm")


def mi300x() -> dict[str, Any]:
    return fixture_record("gpus", "mi300x")


def llama_70b() -> dict[str, Any]:
    return fixture_record("models", "llama-2-70b")


def deepseek_v3() -> dict[str, Any]:
    return fixture_record("models", "deepseek-v3")


def quantization(slug: str) -> dict[str, Any]:
    return fixture_record("quantizations", slug)


def profile(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "vllm-fit",
        "gpu_slug": "h100-sxm",
        "model_slug": "llama-2-70b",
        "weights_slug": "fp16",
        "memory": 0.85,
        "compute": 0.7,
        "step_overhead_ms": 3.0,
        "memory_reserve_fraction": 0.08,
        "include_comm": True,
        "memory_compute_overlap": 1.0,
        "source": "test fixture fit",
        "fit": {"residuals_ms": [0.1, -0.2, 0.05], "points": 3},
        **overrides,
    }
