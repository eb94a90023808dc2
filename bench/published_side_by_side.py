"""A capacity answer beside a published serving measurement of the same question (issue 14 §5).

    .venv/bin/python -m bench.published_side_by_side        # prints the table in docs/serving-evidence.md's last section

For ten (model, GPU, engine, parallelism, precision) pairs the published row is chosen by a fixed
rule, not by its error: among bench/serving_evidence.json's throughput rows of that pair (one node,
no pipeline or expert parallelism), the one whose prompt/output lengths are closest to 2,000/2,000
tokens (log distance), then the newest engine release, then the lowest id. Each is published as
the engine's maximum throughput (trtllm-bench or vLLM's benchmark at a concurrency the KV cache
allows). Headroom is asked through POST /v1/capacity: the same GPU, GPU count = tp, tp pinned, the
published precision, fixed lengths, an SLO so loose that saturation binds (p50 end-to-end under a
day): the largest request rate the configuration sustains × output tokens = its output tokens/s.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from pathlib import Path
from typing import Any

from api.app import create_app
from api.settings import Settings
from bench.fleet_api_benchmark import seeded_database

EVIDENCE = Path(__file__).with_name("serving_evidence.json")
KEY = "bench-admin-key-0123456789"
#: (model, GPU, engine, tp, weights precision): one published row each, by the rule above.
PAIRS: tuple[tuple[str, str, str, int, str], ...] = (
    ("llama-3.1-8b", "h100-sxm", "trt-llm", 1, "fp8"),
    ("llama-3.1-8b", "h200", "trt-llm", 1, "fp8"),
    ("llama-3.1-8b", "a100-80gb-sxm", "trt-llm", 1, "fp16"),
    ("llama-3.1-8b", "l40s", "trt-llm", 1, "fp8"),
    ("llama-3.1-70b", "h100-sxm", "trt-llm", 4, "fp8"),
    ("llama-3.1-70b", "h200", "trt-llm", 2, "fp8"),
    ("llama-3.1-70b", "l40s", "trt-llm", 4, "fp8"),
    ("llama-3.1-70b", "mi300x", "vllm", 8, "fp8"),
    ("mixtral-8x7b", "h100-sxm", "trt-llm", 2, "fp8"),
    ("qwen3-30b-a3b", "b200", "trt-llm", 1, "nvfp4"),
)
TARGET_TOKENS = 2000


def _release_key(release: str) -> tuple[int, ...]:
    parts = []
    for piece in release.replace("-", ".").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def published_row(points: list[dict[str, Any]], pair: tuple[str, str, str, int, str]) -> dict[str, Any] | None:
    model, gpu, engine, tp, weights = pair
    rows = [
        p
        for p in points
        if (p["model"], p["gpu"], p["engine"], p["tp"], p["weights"]) == (model, gpu, engine, tp, weights)
        and p["kind"] == "throughput"
        and (p["pp"], p["ep"], p["nodes"]) == (1, 1, 1)
        and isinstance(p["prompt_tokens"], int)
        and isinstance(p["output_tokens"], int)
        and p.get("output_tokens_per_s")
    ]
    if not rows:
        return None

    def distance(p: dict[str, Any]) -> float:
        return abs(math.log(p["prompt_tokens"] / TARGET_TOKENS)) + abs(math.log(p["output_tokens"] / TARGET_TOKENS))

    best = min(distance(p) for p in rows)
    closest = [p for p in rows if distance(p) == best]
    newest = max(_release_key(p["engine_release"]) for p in closest)
    return min((p for p in closest if _release_key(p["engine_release"]) == newest), key=lambda p: p["id"])


def capacity_request(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": row["model"],
        "gpu": row["gpu"],
        "gpus": row["tp"],
        "tp": row["tp"],
        "precision": {"weights": row["weights"], "kv_cache": row["kv_cache"]},
        "workload": {"prompt_tokens": row["prompt_tokens"], "output_tokens": row["output_tokens"]},
        "slo": {"e2e_s": 86_400, "percentile": 50},
    }


def main() -> None:
    logging.disable(logging.CRITICAL)
    from tests.api.client import ApiClient

    points = json.loads(EVIDENCE.read_text())["points"]
    with tempfile.TemporaryDirectory() as folder:
        url = seeded_database(Path(folder))
        app = create_app(Settings(database_url=url, admin_key=KEY))
        client = ApiClient(app)
        print(
            "| question (model, GPU × tp, precision, prompt/output) | engine, release | published output tok/s | "
            "Headroom output tok/s (batch) | Headroom ÷ published | source (point) |"
        )
        print("|---|---|---|---|---|---|")
        ratios = []
        try:
            for pair in PAIRS:
                row = published_row(points, pair)
                if row is None:
                    print(f"| {pair} | no published row | | | | |")
                    continue
                response = client.post("/v1/capacity", json=capacity_request(row), headers={"Authorization": f"Bearer {KEY}"})
                question = (
                    f"{row['model']}, {row['gpu']} × {row['tp']}, {row['weights']}/{row['kv_cache']}, "
                    f"{row['prompt_tokens']}/{row['output_tokens']}"
                )
                published = float(row["output_tokens_per_s"])
                if response.status_code != 200:
                    answer = response.json()
                    print(f"| {question} | {row['engine']} {row['engine_release']} | {published:,.0f} | {response.status_code}: "
                          f"{answer.get('title')} | | {row['source']} ({row['id']}) |")  # fmt: skip
                    continue
                found = response.json()
                ours = found["output_tokens_per_s"]
                ratios.append(ours / published)
                print(
                    f"| {question} | {row['engine']} {row['engine_release']} | {published:,.0f} | "
                    f"{ours:,.0f} ({found['configuration']['batch_limit']}) | {ours / published:.2f} | {row['source']} ({row['id']}) |"
                )
        finally:
            client.close()
            app.state.engine.dispose()
    if ratios:
        ratios.sort()
        middle = len(ratios) // 2
        median = ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
        print(f"\n{len(ratios)} rows; Headroom ÷ published: median {median:.2f}, range {ratios[0]:.2f}–{ratios[-1]:.2f}")


if __name__ == "__main__":
    main()
