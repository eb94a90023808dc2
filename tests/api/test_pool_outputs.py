"""Everything downstream of a disaggregated plan understands its pools, through the real app: CSV rows per
pool, launch commands and manifests per pool with the engines' P/D flags, what-if and re-planning diffs per
pool, and the explorer and charts showing the pools table."""

from __future__ import annotations

import csv
import io
import itertools
import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from api.csv_export import PLAN_CSV_COLUMNS
from api.deploy import engine_cli
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem
from tests.api.test_charts import _has, _ids, _svg
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
    assert "# requires NIXL" in script and "nixl_connector_usage.md" in script  # the connector's prerequisite, cited
    router = next(line for line in script.splitlines() if "toy_proxy_server.py" in line)
    assert router.startswith("# ") and router.count("<prefill-host-") == pools[0]["replicas"]
    assert router.count("<decode-host-") == pools[1]["replicas"]


def test_sglang_renders_disaggregation_mode_per_pool_and_its_router(seeded: ApiClient, pools_plan: dict[str, Any]) -> None:
    script = deploy(seeded, pools_plan["id"], "sglang")
    prefill, decode = (flags(argv) for argv in commands(script))
    assert (prefill["--disaggregation-mode"], decode["--disaggregation-mode"]) == ("prefill", "decode")
    assert prefill["--disaggregation-transfer-backend"] == decode["--disaggregation-transfer-backend"] == "nixl"
    assert "--max-running-requests" not in prefill and "# requires NIXL" in script
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


# --- what-if ----------------------------------------------------------------------------------------------


def pools_sweep(topology: str, rates: list[float]) -> dict[str, Any]:
    """The rag-70b question swept over rates with constraints.topology `topology`."""
    body = rag(topology)
    shape = {k: v for k, v in body.pop("workload").items() if k != "arrival_rate_rps"}
    return {**body, "workload": shape, "sweep": {"arrival_rates_rps": rates}}


def test_a_disaggregated_what_if_replans_pools_at_each_point(seeded: ApiClient) -> None:
    rates = [2.0, 4.0, 8.0]
    table = seeded.post("/v1/what-if", json=pools_sweep("disaggregated", rates), headers=ADMIN_HEADERS)
    assert table.status_code == 200, table.text
    points = table.json()["points"]
    assert all(p["feasible"] and p["topology"] == "disaggregated" for p in points)
    # each point is the plan POST /v1/plans answers at its rate: the same pools and cost
    at_four = seeded.post("/v1/plans", json={**rag("disaggregated"), "verify": False}, headers=ADMIN_HEADERS).json()
    prefill, decode = at_four["plan"]["pools"]
    point = points[1]
    assert (point["prefill_gpu"], point["prefill_tp"], point["prefill_replicas"]) == (
        prefill["gpu"],
        prefill["tp"],
        prefill["replicas"],
    )
    assert (point["decode_gpu"], point["decode_tp"], point["decode_replicas"], point["decode_batch_limit"]) == (
        decode["gpu"],
        decode["tp"],
        decode["replicas"],
        decode["batch_limit"],
    )
    assert point["prefill_chunk_tokens"] == prefill["chunk_tokens"]
    assert point["cost_usd_per_hour"] == at_four["cost"]["usd_per_hour"] and point["fleet_rows"] == 2
    assert point["prefill_cost_usd_per_hour"] + point["decode_cost_usd_per_hour"] == pytest.approx(
        point["cost_usd_per_hour"], abs=0.011
    )
    assert point["replicas"] == point["prefill_replicas"] + point["decode_replicas"]
    assert point["ttft_p99_ms"] == at_four["disaggregation"]["predicted_ttft_ms"] <= 3000
    # more traffic needs more prefill replicas; the change is reported pool by pool
    assert points[2]["prefill_replicas"] > points[0]["prefill_replicas"]
    assert points[0]["pool_changes"] is None
    for before, after in itertools.pairwise(points):
        if before["prefill_replicas"] != after["prefill_replicas"]:
            assert f"prefill: replicas {before['prefill_replicas']} → {after['prefill_replicas']}" in after["pool_changes"]
        if before["decode_gpu"] != after["decode_gpu"]:
            assert f"gpu {before['decode_gpu']} → {after['decode_gpu']}" in after["pool_changes"]


def test_an_any_what_if_reports_the_topology_switch_per_pool(seeded: ApiClient) -> None:
    table = seeded.post("/v1/what-if", json=pools_sweep("any", [2.0, 4.0, 8.0, 16.0]), headers=ADMIN_HEADERS).json()
    points = table["points"]
    topologies = [p["topology"] for p in points]
    assert set(topologies) == {"aggregated", "disaggregated"}  # this question crosses over between 2 and 16 req/s
    switches = [(b, a) for b, a in itertools.pairwise(points) if b["topology"] != a["topology"]]
    assert switches
    for before, after in switches:
        assert after["pool_changes"].startswith(f"topology {before['topology']} → {after['topology']}")
        if after["topology"] == "disaggregated":
            assert "mixed: removed" in after["pool_changes"]
            assert "prefill: added" in after["pool_changes"] and "decode: added" in after["pool_changes"]
    for point in points:
        if point["topology"] == "aggregated":
            assert point["prefill_gpu"] is None and point["decode_replicas"] is None
    csv_rows = parse_csv(
        seeded.post("/v1/what-if", params={"format": "csv"}, json=pools_sweep("any", [2.0, 16.0]), headers=ADMIN_HEADERS).text
    )
    assert [r["topology"] for r in csv_rows] == [topologies[0], topologies[-1]]


def test_a_what_if_with_pools_refuses_what_pools_do_not_plan(seeded: ApiClient) -> None:
    body = pools_sweep("disaggregated", [4.0])
    body["workload"]["prefix_reuse"] = {"hit_rate": 0.5}
    problem = assert_problem(seeded.post("/v1/what-if", json=body, headers=ADMIN_HEADERS), 422)
    assert "prefix_reuse" in json.dumps(problem)
    assert (
        seeded.post("/v1/what-if", json={**body, "constraints": {"topology": "aggregated"}}, headers=ADMIN_HEADERS).status_code
        == 200
    )
    # `any` (the default) plans the points aggregated, as POST /v1/plans does with prefix_reuse
    anyway = seeded.post("/v1/what-if", json={**body, "constraints": {}}, headers=ADMIN_HEADERS)
    assert anyway.status_code == 200, anyway.text
    assert [p["topology"] for p in anyway.json()["points"]] == ["aggregated"]
    reused = seeded.post(
        "/v1/plans",
        json={**rag("any"), "verify": False, "workload": {**rag()["workload"], "prefix_reuse": {"hit_rate": 0.5}}},
        headers=ADMIN_HEADERS,
    ).json()
    assert "prefix_reuse" in reused["disaggregation"]["alternative"]["reason"]
    (point,) = anyway.json()["points"]
    assert point["cost_usd_per_hour"] == reused["cost"]["usd_per_hour"]  # the plans route's answer: the cache kept


# --- re-planning diffs --------------------------------------------------------------------------------------


def test_replanning_from_aggregated_to_disaggregated_diffs_the_pools(seeded: ApiClient) -> None:
    first = seeded.post("/v1/plans", json={**rag(), "name": "rag"}, headers=ADMIN_HEADERS).json()
    assert first["plan"]["topology"] == "aggregated"
    result = seeded.post("/v1/deployments/rag/replan", json={"constraints": {"topology": "disaggregated"}}, headers=ADMIN_HEADERS)
    assert result.status_code == 200, result.text
    answer = result.json()
    diff = answer["diff"]
    assert diff["topology"] == {"before": "aggregated", "after": "disaggregated", "changed": True}
    assert [(p["pool"], p["status"]) for p in diff["pools"]] == [("mixed", "removed"), ("prefill", "added"), ("decode", "added")]
    mixed, prefill, decode = diff["pools"]
    assert mixed["replicas"] == {"before": first["plan"]["replicas"], "after": None, "changed": True}
    new_pools = answer["plan"]["plan"]["pools"]
    assert (prefill["gpu"]["after"], prefill["replicas"]["after"]) == (new_pools[0]["gpu"], new_pools[0]["replicas"])
    assert (decode["batch_limit"]["after"], decode["summary"]) == (new_pools[1]["batch_limit"], "decode: added")
    assert diff["same_configuration"] is False
    assert diff["gpus_total"]["after"] == answer["plan"]["plan"]["gpus_total"]


def test_replanning_a_disaggregated_deployment_diffs_and_checks_each_pool(seeded: ApiClient) -> None:
    first = seeded.post("/v1/plans", json={**rag("disaggregated"), "name": "rag-pd"}, headers=ADMIN_HEADERS).json()
    # the stored pools re-checked at their own workload hold, pool by pool, under the planner's own model
    recheck = seeded.get(f"/v1/plans/{first['id']}/recheck").json()
    assert recheck["holds"] is True and [r["role"] for r in recheck["check"]["rows"]] == ["prefill", "decode"]
    rhos = [p["rho"] for p in first["disaggregation"]["pools"]]
    assert [r["utilisation"] for r in recheck["check"]["rows"]] == pytest.approx(rhos, abs=1e-3)
    assert recheck["check"]["rows"][0]["predicted"]["ttft_ms"] == pytest.approx(
        first["disaggregation"]["predicted_ttft_ms"], abs=0.1
    )
    assert recheck["cost"]["now_usd_per_hour"] == pytest.approx(first["cost"]["usd_per_hour"], abs=0.011)

    answer = seeded.post("/v1/deployments/rag-pd/replan", json={"arrival_rate_rps": 12}, headers=ADMIN_HEADERS).json()
    check = answer["current_check"]["at_new_rate"]
    assert check["meets_slo"] is False and len(check["rows"]) == 2  # 3x the traffic on the same pools
    assert answer["changed"] is True and answer["adopted"] == answer["plan"]["id"]
    diff = answer["diff"]
    assert diff["topology"]["changed"] is False and [p["pool"] for p in diff["pools"]] == ["prefill", "decode"]
    prefill = diff["pools"][0]
    before = first["plan"]["pools"][0]["replicas"]
    after = answer["plan"]["plan"]["pools"][0]["replicas"]
    assert prefill["replicas"] == {"before": before, "after": after, "changed": True} and after > before
    assert prefill["status"] == "changed" and f"replicas {before} → {after}" in prefill["summary"]
    [listed] = [d for d in seeded.get("/v1/deployments").json()["items"] if d["name"] == "rag-pd"]
    assert listed["topology"] == "disaggregated" and listed["gpus_total"] == answer["plan"]["plan"]["gpus_total"]
    history = seeded.get("/v1/deployments/rag-pd/plans").json()["items"]
    assert [h["topology"] for h in history] == ["disaggregated", "disaggregated"]
    assert history[0]["pools"] == answer["plan"]["plan"]["pools"] and history[1]["pools"] == first["plan"]["pools"]


# --- explorer and charts ------------------------------------------------------------------------------------


def test_the_pools_chart_draws_each_pool_of_a_disaggregated_plan(seeded: ApiClient, pools_plan: dict[str, Any]) -> None:
    root, series, texts = _svg(seeded.get(f"/v1/plans/{pools_plan['id']}/charts/pools.svg"))
    why = {p["role"]: p for p in pools_plan["disaggregation"]["pools"]}
    assert series["topology"] == "disaggregated"
    drawn = series["pools"]
    assert [p["role"] for p in drawn] == ["prefill", "decode"]
    for pool, plan_pool in zip(drawn, pools_plan["plan"]["pools"], strict=True):
        assert (pool["gpu"], pool["tp"], pool["replicas"]) == (plan_pool["gpu"], plan_pool["tp"], plan_pool["replicas"])
        assert pool["gpus"] == plan_pool["tp"] * plan_pool["replicas"]
        assert (pool["rho"], pool["binding"], pool["cost_usd_per_hour"]) == (
            why[pool["role"]]["rho"],
            why[pool["role"]]["binding"],
            why[pool["role"]]["cost_usd_per_hour"],
        )
    assert {"gpus-0", "gpus-1", "cost-0", "cost-1", "legend"} <= _ids(root)
    _has(texts, f"prefill: {drawn[0]['gpu']}", f"decode: {drawn[1]['gpu']}", f"({drawn[0]['binding']})")
    png = seeded.get(f"/v1/plans/{pools_plan['id']}/charts/pools.png")
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_queue_charts_of_a_disaggregated_plan_are_422_pointing_at_the_pools_chart(
    seeded: ApiClient, pools_plan: dict[str, Any]
) -> None:
    for name in ("wall", "knee", "cost", "alternatives"):
        problem = assert_problem(seeded.get(f"/v1/plans/{pools_plan['id']}/charts/{name}.svg"), 422)
        assert "disaggregated" in problem["detail"] and "pools chart" in problem["detail"]


def test_an_aggregated_plans_pools_chart_is_its_one_mixed_pool(seeded: ApiClient) -> None:
    plan = seeded.post("/v1/plans", json=rag(), headers=ADMIN_HEADERS).json()
    _, series, _ = _svg(seeded.get(f"/v1/plans/{plan['id']}/charts/pools.svg"))
    [pool] = series["pools"]
    assert (pool["role"], pool["gpu"], pool["replicas"], pool["rho"]) == (
        "mixed",
        plan["plan"]["gpu"],
        plan["plan"]["replicas"],
        plan["plan"]["target_rho"],
    )
    assert pool["cost_usd_per_hour"] == plan["cost"]["usd_per_hour"]


def test_the_explorer_page_has_a_place_for_the_pools(seeded: ApiClient) -> None:
    page = seeded.get("/")
    assert page.status_code == 200
    assert 'id="pools-chart"' in page.text and 'id="chart-pools"' in page.text
    script = seeded.get("/static/explorer/explorer.js")
    assert script.status_code == 200
    assert "answer-pools" in script.text and "/charts/pools.svg" in script.text
