"""Everything downstream of a disaggregated plan understands its pools, through the real app: CSV rows per
pool, launch commands and manifests per pool with the engines' P/D flags, what-if and re-planning diffs per
pool, and the explorer and charts showing the pools table."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from api.csv_export import PLAN_CSV_COLUMNS
from api.deploy import engine_cli
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem
from tests.api.test_deploy import K8S_VERSION, commands, flags
from tests.api.test_plan_pools import rag


@pytest.fixture
def pools_plan(seeded: ApiClient) -> dict[str, Any]:
    """The rag-70b question planned as separate prefill and decode pools (stored)."""
    answer = seeded.post("/v1/plans", json=rag("disaggregated"), headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    plan: dict[str, Any] = answer.json()
    assert [p["role"] for p in plan["plan"]["pools"]] == ["prefill", "decode"]
    return plan


def parse_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


# --- CSV --------------------------------------------------------------------------------------------------


def test_a_disaggregated_plan_exports_one_csv_row_per_pool(seeded: ApiClient, pools_plan: dict[str, Any]) -> None:
    response = seeded.get(f"/v1/plans/{pools_plan['id']}", params={"format": "csv"})
    assert response.status_code == 200, response.text
    assert response.text.startswith(",".join(PLAN_CSV_COLUMNS) + "\r\n")
    rows = parse_csv(response.text)
    assert seeded.get(f"/v1/plans/{pools_plan['id']}/csv").text == response.text
    pools = pools_plan["plan"]["pools"]
    why = {p["role"]: p for p in pools_plan["disaggregation"]["pools"]}
    assert [r["pool_role"] for r in rows] == ["prefill", "decode"]
    assert [(r["fleet_row"], r["fleet_rows"]) for r in rows] == [("1", "2"), ("2", "2")]
    for row, pool in zip(rows, pools, strict=True):
        assert (row["gpu"], int(row["tp"]), int(row["replicas"])) == (pool["gpu"], pool["tp"], pool["replicas"])
        assert int(row["gpus_total"]) == pool["tp"] * pool["replicas"]
        assert (row["weights_precision"], row["kv_cache_precision"]) == (
            pool["precision"]["weights"],
            pool["precision"]["kv_cache"],
        )
        assert row["batch_limit"] == ("" if pool["batch_limit"] is None else str(pool["batch_limit"]))
        assert row["chunk_tokens"] == ("" if pool["chunk_tokens"] is None else str(pool["chunk_tokens"]))
        assert float(row["cost_usd_per_hour"]) == why[pool["role"]]["cost_usd_per_hour"]
        assert float(row["pool_rho"]) == why[pool["role"]]["rho"] and row["pool_binding"] == why[pool["role"]]["binding"]
        assert float(row["ttft_p99_ms"]) == pools_plan["disaggregation"]["predicted_ttft_ms"]
        assert row["verified"] == "true" and row["plan_id"] == pools_plan["id"]
    assert rows[0]["batch_limit"] == "" and rows[0]["chunk_tokens"] != ""  # a prefill pool runs a token budget
    # the rows add up to the plan: GPUs, cost per hour and per million output tokens
    assert sum(int(r["gpus_total"]) for r in rows) == pools_plan["plan"]["gpus_total"]
    assert sum(float(r["cost_usd_per_hour"]) for r in rows) == pytest.approx(pools_plan["cost"]["usd_per_hour"], abs=0.011)
    assert sum(float(r["cost_usd_per_million_output_tokens"]) for r in rows) == pytest.approx(
        pools_plan["cost"]["usd_per_million_output_tokens"], abs=0.011
    )


def test_an_aggregated_plans_csv_row_is_one_mixed_pool(seeded: ApiClient) -> None:
    plan = seeded.post("/v1/plans", json=rag(), headers=ADMIN_HEADERS).json()
    [row] = parse_csv(seeded.get(f"/v1/plans/{plan['id']}", params={"format": "csv"}).text)
    assert (row["pool_role"], row["pool_rho"], row["pool_binding"]) == ("mixed", "", "")
    assert (row["gpu"], int(row["replicas"])) == (plan["plan"]["gpu"], plan["plan"]["replicas"])


# --- deploy -----------------------------------------------------------------------------------------------


def deploy(client: ApiClient, plan_id: str, target: str) -> str:
    response = client.get(f"/v1/plans/{plan_id}/deploy", params={"target": target})
    assert response.status_code == 200, response.text
    return response.text


def test_vllm_renders_a_prefill_and_a_decode_command_with_nixl(seeded: ApiClient, pools_plan: dict[str, Any]) -> None:
    script = deploy(seeded, pools_plan["id"], "vllm")
    prefill, decode = (flags(argv) for argv in commands(script))
    pools = pools_plan["plan"]["pools"]
    for got, pool, role in ((prefill, pools[0], "kv_producer"), (decode, pools[1], "kv_consumer")):
        assert json.loads(got["--kv-transfer-config"] or "") == {"kv_connector": "NixlConnector", "kv_role": role}
        assert got["--tensor-parallel-size"] == str(pool["tp"])
        assert set(got) <= set(engine_cli()["vllm"]["flags"])
    assert "--max-num-seqs" not in prefill and prefill["--max-num-batched-tokens"] == str(pools[0]["chunk_tokens"])
    assert decode["--max-num-seqs"] == str(pools[1]["batch_limit"])
    assert f"prefill pool: {pools[0]['replicas']} replica(s)" in script and "decode pool:" in script
    router = next(line for line in script.splitlines() if "toy_proxy_server.py" in line)
    assert router.startswith("# ") and router.count("<prefill-host-") == pools[0]["replicas"]
    assert router.count("<decode-host-") == pools[1]["replicas"]


def test_sglang_renders_disaggregation_mode_per_pool_and_its_router(seeded: ApiClient, pools_plan: dict[str, Any]) -> None:
    script = deploy(seeded, pools_plan["id"], "sglang")
    prefill, decode = (flags(argv) for argv in commands(script))
    assert (prefill["--disaggregation-mode"], decode["--disaggregation-mode"]) == ("prefill", "decode")
    assert prefill["--disaggregation-transfer-backend"] == decode["--disaggregation-transfer-backend"] == "nixl"
    assert "--max-running-requests" not in prefill
    assert decode["--max-running-requests"] == str(pools_plan["plan"]["pools"][1]["batch_limit"])
    assert set(prefill) | set(decode) <= set(engine_cli()["sglang"]["flags"])
    router = next(line for line in script.splitlines() if "sglang_router" in line)
    assert "--pd-disaggregation" in router and router.count("--prefill http://") == pools_plan["plan"]["pools"][0]["replicas"]


def test_k8s_renders_a_deployment_and_a_headless_service_per_pool(seeded: ApiClient, pools_plan: dict[str, Any]) -> None:
    documents = list(yaml.safe_load_all(deploy(seeded, pools_plan["id"], "k8s")))
    assert [d["kind"] for d in documents] == ["Deployment", "Service", "Deployment", "Service"]
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    for deployment, service, pool, role in (
        (documents[0], documents[1], pools_plan["plan"]["pools"][0], "kv_producer"),
        (documents[2], documents[3], pools_plan["plan"]["pools"][1], "kv_consumer"),
    ):
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert deployment["spec"]["replicas"] == pool["replicas"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": pool["tp"]}
        assert json.loads(flags(container["args"])["--kv-transfer-config"] or "")["kv_role"] == role
        assert deployment["metadata"]["labels"]["app.kubernetes.io/component"] == pool["role"]
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"] == {"app.kubernetes.io/name": deployment["metadata"]["name"]}


def test_trtllm_answers_422_naming_the_targets_that_render_pools(seeded: ApiClient, pools_plan: dict[str, Any]) -> None:
    problem = assert_problem(seeded.get(f"/v1/plans/{pools_plan['id']}/deploy", params={"target": "trt-llm"}), 422)
    assert "disaggregated" in problem["detail"] and "vllm, sglang, k8s" in problem["detail"]
