"""POST /v1/fleet-plans for a model no node holds: Llama-3.1-405B in BF16 on H100 is served in pipeline stages
(tp 8 × pp 2, 16 GPUs a replica), and the fleet's candidates, rows, GPU counts and schedule CSV carry the pp."""

from __future__ import annotations

import csv
import io

from tests.api.client import ApiClient
from tests.api.test_fleet_plans import ADMIN_HEADERS, api, body, post, seeded_sqlite_template, workload

__all__ = ["api", "seeded_sqlite_template"]  # the fixtures this module uses


def test_a_fleet_of_405b_bf16_on_h100_runs_tp_8_by_pp_2_rows(api: ApiClient) -> None:
    """810 GB of BF16 weights exceed one H100 node (8 × 80 GB), so without stages the fleet had no candidate (a 422).
    At 0.2 req/s one 16-GPU tp 8 × pp 2 replica covers the demand, while a tp 8 × pp 4 replica or a cross-node tp 16
    or 32 takes 16 GPUs or more for no less cost: the rows are tp 8 × pp 2 and count tp × pp GPUs a replica."""
    payload = body(
        workload(
            "big",
            [0.2, 0.2],
            model="llama-3.1-405b",
            output_tokens={"mean": 200, "p99": 800},
            slo={"ttft_ms": 5000, "tpot_ms": 100, "percentile": 99},
        ),
        constraints={"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
        search={"tp_degrees": [8], "batch_limits": [32, 128], "chunk_budgets": [2048]},
        include_candidates=True,
    )
    response = post(api, payload)
    assert response.status_code == 201, response.text
    plan = response.json()
    rows = [row for period in plan["periods"] for row in period["workloads"]]
    assert rows and all((row["tp"], row["pp"], row["ep"]) == (8, 2, 1) for row in rows), rows
    assert all(row["gpus"] == row["replicas"] * 16 for row in rows), rows
    candidates = plan["candidates"]["big"] if isinstance(plan["candidates"], dict) else plan["candidates"]
    staged = [c for c in candidates if c["pp"] > 1]
    assert staged and all(c["gpus_per_replica"] == c["tp"] * c["pp"] for c in candidates), candidates
    assert all("/pp" in c["id"] for c in staged), staged
    # the schedule CSV carries the stages: its gpus column is replicas × tp × pp
    table = api.get(f"/v1/fleet-plans/{plan['id']}/csv", headers=ADMIN_HEADERS)
    assert table.status_code == 200, table.text
    csv_rows = list(csv.DictReader(io.StringIO(table.text)))
    assert csv_rows and all((r["tp"], r["pp"], r["ep"]) == ("8", "2", "1") for r in csv_rows), csv_rows
    assert all(int(r["gpus"]) == int(r["replicas"]) * 16 for r in csv_rows), csv_rows


def test_a_fleet_of_405b_classes_counts_its_staged_pools_gpus(api: ApiClient) -> None:
    """A class workload of 405B BF16 on H100: its arrangements' pools span 16 GPUs or more (the single-class planner's
    stages or tp over whole nodes, and the priority pool's candidates in stages), so a staged pool is tp × pp GPUs a
    replica, counted so in the period's GPUs, its `gpus` and the schedule CSV (they were counted as tp alone)."""
    classes = [
        {
            "name": "chat",
            "arrival_rate_rps": 1,
            "demand_rps": [1, 1],
            "prompt_tokens": {"mean": 1000, "p99": 4000},
            "output_tokens": {"mean": 200, "p99": 800},
            "slo": {"ttft_ms": 5000, "tpot_ms": 60},
            "priority": 0,
        },
        {
            "name": "summarise",
            "arrival_rate_rps": 0.5,
            "demand_rps": [0.5, 0.5],
            "prompt_tokens": {"mean": 3000, "p99": 8000},
            "output_tokens": {"mean": 300, "p99": 800},
            "deadline_h": 6,
            "priority": 1,
        },
    ]
    payload = body(
        {"name": "big", "model": "llama-3.1-405b", "classes": classes},
        constraints={"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
        search={"tp_degrees": [8], "batch_limits": [32, 128], "chunk_budgets": [2048]},
        period_hours=12.0,
    )
    response = post(api, payload)
    assert response.status_code == 201, response.text
    plan = response.json()
    for period in plan["periods"]:
        pools = [pool for arranged in period["class_pools"] for pool in arranged["pools"]]
        assert pools and all(pool["tp"] * pool["pp"] >= 16 for pool in pools), pools  # stages, or tp over 2 nodes
        assert any(pool["pp"] >= 2 for pool in pools), pools
        assert all(pool["gpus"] == pool["replicas"] * pool["tp"] * pool["pp"] for pool in pools), pools
        assert period["gpus_used"]["h100-sxm"] == sum(pool["gpus"] for pool in pools)
    table = api.get(f"/v1/fleet-plans/{plan['id']}/csv", headers=ADMIN_HEADERS)
    rows = [r for r in csv.DictReader(io.StringIO(table.text)) if r["class_name"]]
    assert any(int(r["pp"]) >= 2 for r in rows), rows
    assert all(int(r["gpus"]) in (0, int(r["replicas"]) * int(r["tp"]) * int(r["pp"])) for r in rows), rows


def test_a_fleet_of_405b_pools_runs_them_in_stages(api: ApiClient) -> None:
    """A disaggregated 405B BF16 workload in a fleet: its prefill and decode pools are 16-GPU pipelines (as a single
    plan's, tests/api/test_disagg_pipeline.py), where no pool option existed before; the period's GPUs count them."""
    payload = body(
        workload(
            "big",
            [1, 1],
            model="llama-3.1-405b",
            topology="disaggregated",
            output_tokens={"mean": 200, "p99": 800},
            slo={"ttft_ms": 5000, "tpot_ms": 60, "percentile": 99},
        ),
        constraints={"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
        search={"tp_degrees": [1, 2, 4, 8], "batch_limits": [32, 128], "chunk_budgets": [2048]},
    )
    response = post(api, payload)
    assert response.status_code == 201, response.text
    plan = response.json()
    for period in plan["periods"]:
        [pair] = period["pools"]
        for pool in (pair["prefill"], pair["decode"]):
            assert pool["pp"] >= 2 and pool["tp"] * pool["pp"] == 16, pool
            assert pool["gpus"] == 16 * pool["replicas"], pool
        assert period["gpus_used"]["h100-sxm"] == pair["prefill"]["gpus"] + pair["decode"]["gpus"]
