"""POST /v1/fleet-plans for an MoE model searches expert parallelism as a single plan does: Mixtral-8x7B with long
prompts on 8 H100 runs ep 8 rows (attention data-parallel, experts sharded), its candidates name the ep, and the
schedule CSV carries pp and ep."""

from __future__ import annotations

import csv
import io

from tests.api.client import ApiClient
from tests.api.test_fleet_plans import ADMIN_HEADERS, api, body, post, seeded_sqlite_template, workload

__all__ = ["api", "seeded_sqlite_template"]  # the fixtures this module uses


def _mixtral(**search: object) -> dict[str, object]:
    # Long prompts, loose latency (tests/api/test_expert_parallel_plans.py's single plan): prefill chunks dominate
    # the steps, where ep's all-to-all is cheaper per token than tp 8's all-reduces (tests/planner/test_expert_parallel.py)
    return body(
        workload(
            "moe",
            [60, 60],
            model="mixtral-8x7b",
            prompt_tokens={"mean": 4000, "p99": 8000},
            output_tokens={"mean": 100, "p99": 300},
            slo={"ttft_ms": 10000, "tpot_ms": 200, "percentile": 99},
        ),
        constraints={"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
        search={"tp_degrees": [8], "batch_limits": [64, 256], "chunk_budgets": [8192], **search},
        include_candidates=True,
    )


def test_a_fleet_of_mixtral_long_prompts_runs_ep_8_rows(api: ApiClient) -> None:
    """Both tp 8 groups are searched, ep 1 and ep 8, at the same 8 GPUs and price a replica: the one with the larger
    μ survives (planner/fleet_candidates.py), and on 4,000-token prompts that is ep 8 (the single plan's choice)."""
    response = post(api, _mixtral())
    assert response.status_code == 201, response.text
    plan = response.json()
    candidates = plan["candidates"]["moe"] if isinstance(plan["candidates"], dict) else plan["candidates"]
    assert candidates and all(c["tp"] == 8 and c["gpus_per_replica"] == 8 for c in candidates), candidates
    assert any(c["ep"] == 8 and "/ep8/" in c["id"] for c in candidates), candidates
    rows = [row for period in plan["periods"] for row in period["workloads"]]
    assert rows and all((row["tp"], row["pp"], row["ep"]) == (8, 1, 8) for row in rows), rows
    assert all(row["gpus"] == row["replicas"] * 8 for row in rows), rows
    # the schedule CSV names the layout too
    table = api.get(f"/v1/fleet-plans/{plan['id']}/csv", headers=ADMIN_HEADERS)
    assert table.status_code == 200, table.text
    csv_rows = list(csv.DictReader(io.StringIO(table.text)))
    assert csv_rows and all((r["tp"], r["pp"], r["ep"]) == ("8", "1", "8") for r in csv_rows), csv_rows
