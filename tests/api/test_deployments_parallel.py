"""The recheck and re-plan of stored plans whose replicas span pipeline stages or run expert-parallel, through the
real app: a plan made a moment ago, rechecked on the unchanged catalog, holds at the cost and GPU count it was made
with and reports no change; a price edit is then the one change named and priced on every GPU of the replica
(tp × pp of them); a re-plan at the same rate plans the same configuration and changes nothing.

Three layouts (the requests of tests/api/test_pipeline_plans.py, test_expert_parallel_plans.py and
test_disagg_pipeline.py): Llama-3.1-405B in BF16 on H100, which no node holds (tp 8 × pp 2, 16 GPUs a replica),
aggregated and in separate pools, and Mixtral with 4,000-token prompts on tp 8, which runs ep 8.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.test_classes_pipeline import CLASSES_405B
from tests.api.test_cli_plan import local_url, run, write  # noqa: F401  (local_url is a fixture)
from tests.api.test_deployments import plan, replan
from tests.api.test_disagg_pipeline import DISAGG_405B
from tests.api.test_expert_parallel_plans import REQUEST as MIXTRAL_EP
from tests.api.test_pipeline_plans import REQUEST_405B


def _named(body: dict[str, Any], name: str) -> dict[str, Any]:
    return copy.deepcopy(body) | {"name": name}


def _recheck(client: ApiClient, plan_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/plans/{plan_id}/recheck")
    assert response.status_code == 200, response.text
    return dict(response.json())


def _raise_price(client: ApiClient, admin: dict[str, str], stored: dict[str, Any], factor: float) -> None:
    [used] = stored["cost"]["prices"]
    url = f"/v1/prices/{used['provider']}/{used['gpu']}"
    old = client.get(url).json()["on_demand"]
    assert client.patch(url, json={"on_demand": old * factor}, headers=admin).status_code == 200


def _holds_unchanged_then_reprices(client: ApiClient, admin: dict[str, str], stored: dict[str, Any]) -> dict[str, Any]:
    """The stored plan rechecked on the unchanged catalog (holds, no change, the same cost and one check row per
    row or pool), then after a 1.5× price edit (holds, costs 1.5×, the price named as the one change)."""
    fresh = _recheck(client, stored["id"])
    assert fresh["holds"] is True, fresh["summary"]
    assert fresh["changes"] == []
    assert fresh["cost"]["now_usd_per_hour"] == pytest.approx(stored["cost"]["usd_per_hour"])
    assert "costs $" not in fresh["summary"]
    assert all(row["problem"] is None and row["meets_slo"] for row in fresh["check"]["rows"]), fresh["check"]

    _raise_price(client, admin, stored, 1.5)
    checked = _recheck(client, stored["id"])
    assert checked["holds"] is True
    assert checked["cost"]["now_usd_per_hour"] == pytest.approx(1.5 * stored["cost"]["usd_per_hour"])
    assert checked["cost"]["change_usd_per_hour"] == pytest.approx(0.5 * stored["cost"]["usd_per_hour"])
    assert [c["kind"] for c in checked["changes"]] == ["prices"]
    assert "h100-sxm" in checked["changes"][0]["detail"]
    return fresh


def test_a_405b_pipeline_plan_rechecks_unchanged_at_its_16_gpu_replicas(seeded: ApiClient, admin: dict[str, str]) -> None:
    """tp 8 × pp 2: the plan's cost is replicas × 16 GPUs × the price; rebuilt at tp 8 alone the replica would hold
    576 GB of the 810 GB of weights and the recheck said it cannot be evaluated at half that cost."""
    stored = plan(seeded, admin, _named(REQUEST_405B, "big"))
    decision = stored["plan"]
    assert (decision["tp"], decision["pp"]) == (8, 2)
    [price] = stored["cost"]["prices"]
    assert stored["cost"]["usd_per_hour"] == pytest.approx(decision["replicas"] * 16 * price["price_usd_per_hour"])
    _holds_unchanged_then_reprices(seeded, admin, stored)

    # the re-plan at the new price plans the same configuration, names the price, and the deployment keeps its plan
    result = replan(seeded, admin, "big", {"arrival_rate_rps": REQUEST_405B["workload"]["arrival_rate_rps"]})
    assert (result["plan"]["plan"]["tp"], result["plan"]["plan"]["pp"]) == (8, 2)
    assert result["diff"]["same_configuration"] is True and result["changed"] is False
    assert result["current_check"]["at_new_rate"]["meets_slo"] is True
    assert result["diff"]["gpus_total"]["before"] == result["diff"]["gpus_total"]["after"] == decision["gpus_total"]
    assert [r["kind"] for r in result["diff"]["why"]] == ["prices"]
    summary = seeded.get("/v1/deployments").json()["items"][0]
    assert summary["gpus_total"] == decision["gpus_total"] == decision["replicas"] * 16


def test_an_ep_plan_rechecks_unchanged_at_its_expert_parallel_step(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Mixtral ep 8: rebuilt as a tensor-split tp 8 replica, the same replicas run the prefill-heavy steps slower
    (tests/planner/test_expert_parallel.py: 11.3 against 7.6 ms for a 2,048-token chunk) and hold less at the SLO;
    rebuilt at its ep it predicts what the plan predicted."""
    stored = plan(seeded, admin, _named(MIXTRAL_EP, "moe"))
    assert (stored["plan"]["tp"], stored["plan"]["ep"]) == (8, 8)
    fresh = _holds_unchanged_then_reprices(seeded, admin, stored)
    [row] = fresh["check"]["rows"]
    assert row["utilisation"] == pytest.approx(stored["plan"]["target_rho"], rel=0.02)

    result = replan(seeded, admin, "moe", {"arrival_rate_rps": MIXTRAL_EP["workload"]["arrival_rate_rps"]})
    assert result["plan"]["plan"]["ep"] == 8
    assert result["diff"]["same_configuration"] is True and result["changed"] is False


def test_an_ep_plan_replanned_without_ep_reports_the_change(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The same configuration but ep 1 (pinned) is a different deployment (another engine layout): the diff says so
    in the pool's ep and does not call it the same configuration."""
    plan(seeded, admin, _named(MIXTRAL_EP, "moe"))
    pinned = {**MIXTRAL_EP["constraints"], "pin": {"tp": 8, "ep": 1}}
    result = replan(seeded, admin, "moe", {"constraints": pinned})
    assert result["plan"]["plan"]["ep"] == 1
    assert result["diff"]["same_configuration"] is False
    [pool] = result["diff"]["pools"]
    assert pool["status"] == "changed" and (pool["ep"]["before"], pool["ep"]["after"]) == (8, 1)


def test_a_405b_disaggregated_plan_rechecks_its_pools_in_stages(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Prefill and decode pools of 16 GPUs a replica (tp × pp): the recheck predicts each pool as the plan did (a
    prefill replica of pp stages serving pp prompts at once, the decode pool's folded step, the KV over 16 links)
    and prices (prefill + decode replicas) × 16 GPUs; rebuilt at tp alone neither pool holds the weights."""
    stored = plan(seeded, admin, _named(DISAGG_405B, "pools"))
    pools = {pool["role"]: pool for pool in stored["plan"]["pools"]}
    assert all(pool["tp"] * pool["pp"] == 16 for pool in pools.values()), pools
    fresh = _holds_unchanged_then_reprices(seeded, admin, stored)
    rows = {row["role"]: row for row in fresh["check"]["rows"]}
    assert set(rows) == {"prefill", "decode"}
    planned = {pool["role"]: pool for pool in stored["disaggregation"]["pools"]}
    for role in ("prefill", "decode"):  # ρ as the plan predicted it (no spare replicas without n_plus_one; rounded)
        assert rows[role]["utilisation"] == pytest.approx(planned[role]["rho"], rel=1e-4), role
    predicted = stored["disaggregation"]
    assert rows["decode"]["predicted"]["ttft_ms"] == pytest.approx(predicted["predicted_ttft_ms"], rel=1e-3)
    assert rows["decode"]["predicted"]["tpot_ms"] == pytest.approx(predicted["predicted_tpot_ms"], rel=1e-3)

    result = replan(seeded, admin, "pools", {"arrival_rate_rps": DISAGG_405B["workload"]["arrival_rate_rps"]})
    assert result["diff"]["same_configuration"] is True and result["changed"] is False
    assert {p["pool"]: p["status"] for p in result["diff"]["pools"]} == {"prefill": "same", "decode": "same"}


def test_the_cli_counts_ep_alone_as_a_change_of_the_plan_in_force(
    local_url: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Mixtral at 20 req/s on tp 8 is one replica of 8 GPUs whether ep is pinned 8 or 1 (same GPUs, batch and chunk):
    `headroom plan --deployment moe --detailed-exitcode` with ep 1 after ep 8 exits 5, since the engine's command
    changes (data-parallel attention and an all-to-all, or tensor-split experts); the same request again exits 0."""

    def pinned(ep: int) -> str:
        body = copy.deepcopy(MIXTRAL_EP)
        body["workload"]["arrival_rate_rps"] = 20
        body["constraints"]["pin"] = {"tp": 8, "ep": ep}
        return write(tmp_path / f"ep{ep}.json", body)

    first = run(capsys, "--database-url", local_url, "plan", pinned(8), "--deployment", "moe")
    assert first[0] == 0, first[2]
    before = json.loads(first[1])["plan"]
    argv = ("--database-url", local_url, "plan", pinned(1), "--deployment", "moe", "--detailed-exitcode")
    code, out, err = run(capsys, *argv)
    after = json.loads(out)["plan"]
    assert [after[f] for f in ("gpu", "tp", "replicas", "gpus_total", "batch_limit", "chunk_tokens")] == [
        before[f] for f in ("gpu", "tp", "replicas", "gpus_total", "batch_limit", "chunk_tokens")
    ], "only ep differs here"
    assert (before["ep"], after["ep"]) == (8, 1)
    assert code == 5, err
    assert run(capsys, *argv)[0] == 0


def test_a_405b_class_deployment_counts_its_staged_pools_gpus(seeded: ApiClient, admin: dict[str, str]) -> None:
    """A class plan's pools of tp 8 × pp 2 (tests/api/test_classes_pipeline.py): the deployment's summary and the
    re-plan's diff count replicas × tp × pp GPUs a pool (they counted replicas × tp: half the GPUs bought)."""
    stored = plan(seeded, admin, _named(CLASSES_405B, "classes"))
    gpus = sum(pool["replicas"] * pool["tp"] * pool["pp"] for pool in stored["pools"])
    assert all(pool["pp"] >= 2 for pool in stored["pools"])
    summary = seeded.get("/v1/deployments").json()["items"][0]
    assert summary["gpus_total"] == gpus
    [item] = seeded.get("/v1/deployments/classes/plans").json()["items"]
    assert item["gpus_total"] == gpus

    rates = {k["name"]: k["arrival_rate_rps"] for k in CLASSES_405B["classes"]}
    result = replan(seeded, admin, "classes", {"class_rates_rps": rates})
    assert result["diff"]["gpus_total"]["before"] == gpus
    assert result["diff"]["gpus_total"]["after"] == sum(p["replicas"] * p["tp"] * p["pp"] for p in result["plan"]["pools"])
