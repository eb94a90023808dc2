"""`engine` on POST /v1/plans (issue 14 §1): each allowed engine is priced on its own profiles, the
cheapest answers with `engine` saying why and which profile, the others are `engine` alternatives,
and an engine nobody knows, or one the pin contradicts, is a 422."""

from __future__ import annotations

import json
from typing import Any

import pytest

from catalog.engine_profiles import REFERENCE_PATH
from planner.engines import generation_order, is_generation
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_plans import body


def _priced(profiles: list[dict[str, Any]], gpu: str, engine: str) -> dict[str, Any]:
    """The shipped profile a bare `engine` prices `gpu` with: its newest generation's (docs/engines.md)."""
    mine = [p for p in profiles if (p["gpu"], p["engine"]) == (gpu, engine) and is_generation(p["engine_generation"])]
    return max(mine, key=lambda p: generation_order(p["engine_generation"]))


def _plan(client: ApiClient, headers: dict[str, str], **changes: Any) -> Any:
    return client.post("/v1/plans", json={**body(**changes), "store": False}, headers=headers)


def test_an_engine_list_picks_the_cheaper_engine_and_lists_the_other(seeded: ApiClient, admin: dict[str, str]) -> None:
    both = _plan(seeded, admin, engine=["vllm", "trt-llm"], constraints__gpus=["h100-sxm", "l40s"])
    assert both.status_code == 200, both.text
    answer = both.json()
    chosen = answer["engine"]["chosen"]
    other = "trt-llm" if chosen == "vllm" else "vllm"
    assert answer["plan"]["engine"] == chosen and answer["engine"]["allowed"] == ["vllm", "trt-llm"]
    (alternative,) = [a for a in answer["justification"]["alternatives"] if a["kind"] == "engine"]
    assert alternative["name"] == other
    assert alternative["cost_usd_per_hour"] >= answer["cost"]["usd_per_hour"]
    # the alternative is exactly the plan that engine alone gives
    alone = _plan(seeded, admin, engine=other, constraints__gpus=["h100-sxm", "l40s"]).json()
    assert alone["cost"]["usd_per_hour"] == alternative["cost_usd_per_hour"]
    assert alone["engine"]["reason"] == f"the only engine allowed ({other})"
    assert (alone["plan"]["gpu"], alone["plan"]["replicas"]) == (alternative["gpu"], alternative["replicas"])


def test_the_plan_names_its_profile_and_its_fallback(seeded: ApiClient, admin: dict[str, str]) -> None:
    trt = _plan(seeded, admin, engine="trt-llm", constraints__gpus=["l40s"]).json()["engine"]["profile"]
    assert (trt["gpu"], trt["engine"], trt["fallback"]) == ("l40s", "trt-llm", False)
    assert "bench/engine_profiles.py" in trt["source"] and trt["generation"]
    vllm = _plan(seeded, admin, engine="vllm", constraints__gpus=["l40s"]).json()["engine"]["profile"]
    assert vllm["fallback"] and "no l40s × vllm measurements" in vllm["reason"]


def test_no_engine_keeps_todays_answer(seeded: ApiClient, admin: dict[str, str]) -> None:
    answer = _plan(seeded, admin).json()
    assert answer["engine"] is None and answer["plan"]["engine"] is None
    assert all(a["kind"] != "engine" for a in answer["justification"]["alternatives"])


def test_bad_engines_are_422(seeded: ApiClient, admin: dict[str, str]) -> None:
    assert "engine" in bad_fields(assert_problem(_plan(seeded, admin, engine="tgi"), 422))
    assert "engine" in bad_fields(assert_problem(_plan(seeded, admin, engine=[]), 422))
    pinned = _plan(seeded, admin, engine=["vllm"], constraints__pin={"engine": "sglang"})
    assert assert_problem(pinned, 422)["field"] == "constraints.pin.engine"
    amd = assert_problem(_plan(seeded, admin, engine="trt-llm", constraints__gpus=["mi300x"], provider="tensorwave"), 422)
    assert "trt-llm runs on none of the GPUs" in amd["detail"]


def test_evaluate_on_an_engine_uses_its_profile_and_low_precision_factor(seeded: ApiClient) -> None:
    """F = tp · peak_fp8 · factor(ada, trt-llm, fp8) · η_compute(l40s, trt-llm), from the shipped JSON and gpus.json."""
    shipped = json.loads(REFERENCE_PATH.read_text(encoding="utf-8"))
    profile = _priced(shipped["profiles"], "l40s", "trt-llm")
    (factor,) = [
        f for f in shipped["low_precision"] if (f["architecture"], f["engine"], f["datatype"]) == ("ada", "trt-llm", "fp8")
    ]
    (l40s,) = [g for g in json.loads((REFERENCE_PATH.parent / "gpus.json").read_text(encoding="utf-8")) if g["slug"] == "l40s"]
    request = {
        "model": "llama-3.1-8b",
        "gpu": "l40s",
        "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "context_tokens": 2048,
        "batch_sizes": [1, 64],
    }
    on_trt = seeded.post("/v1/evaluate", json={**request, "engine": "trt-llm"})
    assert on_trt.status_code == 200, on_trt.text
    step = on_trt.json()["step_model"]
    expected = l40s["peak_tflops"]["fp8"] * 1e12 * factor["factor"] * profile["compute"]
    assert step["compute_flops_per_s"] == pytest.approx(expected, rel=1e-3)
    assert on_trt.json()["efficiency"]["memory"] == pytest.approx(profile["memory"])
    agnostic = seeded.post("/v1/evaluate", json=request).json()["step_model"]
    assert agnostic["compute_flops_per_s"] == pytest.approx(
        l40s["peak_tflops"]["fp8"] * 1e12 * l40s["efficiency"]["compute"], rel=1e-3
    )
    assert "engine" in bad_fields(assert_problem(seeded.post("/v1/evaluate", json={**request, "engine": "tgi"}), 422))


def test_what_if_points_are_plans_on_the_engine(seeded: ApiClient, admin: dict[str, str]) -> None:
    request = body()
    sweep = {
        "model": request["model"],
        "workload": {k: v for k, v in request["workload"].items() if k != "arrival_rate_rps"},
        "slo": request["slo"],
        "constraints": request["constraints"],
        "sweep": {"arrival_rates_rps": [15]},
        "engine": "trt-llm",
    }
    response = seeded.post("/v1/what-if", json=sweep, headers=admin)
    assert response.status_code == 200, response.text
    (point,) = response.json()["points"]
    plan = _plan(seeded, admin, engine="trt-llm").json()
    assert (point["gpu"], point["replicas"]) == (plan["plan"]["gpu"], plan["plan"]["replicas"])
    assert point["cost_usd_per_hour"] == pytest.approx(plan["cost"]["usd_per_hour"], rel=1e-6)
    assert "engine" in bad_fields(assert_problem(seeded.post("/v1/what-if", json={**sweep, "engine": "tgi"}, headers=admin), 422))


def test_a_fleet_plan_takes_an_engine(seeded: ApiClient, admin: dict[str, str]) -> None:
    fleet = {
        "workloads": [
            {
                "name": "chat",
                "model": "llama-3.1-8b",
                "demand_rps": [6, 6],
                "prompt_tokens": {"mean": 800, "p99": 3000},
                "output_tokens": {"mean": 200, "p99": 700},
                "slo": {"ttft_ms": 1000, "tpot_ms": 60},
            }
        ],
        "constraints": {"gpus": ["l40s", "h100-sxm"], "precisions": [{"weights": "fp8", "kv_cache": "fp8"}]},
        "search": {"tp_degrees": [1], "batch_limits": [32, 128], "chunk_budgets": [None]},
        "engine": "vllm",
    }
    response = seeded.post("/v1/fleet-plans", json=fleet, headers=admin)
    assert response.status_code == 201, response.text
    assert "engine" in bad_fields(
        assert_problem(seeded.post("/v1/fleet-plans", json={**fleet, "engine": "tgi"}, headers=admin), 422)
    )


def test_capacity_prices_the_pinned_engine(seeded: ApiClient) -> None:
    request = {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "gpus": 8,
        "workload": {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
        "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    }
    pinned = {"constraints": {"pin": {"engine": "trt-llm"}}}
    on_trt = seeded.post("/v1/capacity", json={**request, **pinned})
    assert on_trt.status_code == 200, on_trt.text
    assert on_trt.json()["configuration"]["engine"] == "trt-llm"
    amd = assert_problem(seeded.post("/v1/capacity", json={**request, **pinned, "gpu": "mi300x"}), 422)
    assert "trt-llm does not run on amd GPUs" in amd["detail"]


def test_a_plan_priced_on_an_engine_deploys_as_that_engine_by_default(seeded: ApiClient, admin: dict[str, str]) -> None:
    on_vllm = seeded.post("/v1/plans", json=body(engine="vllm"), headers=admin)
    assert on_vllm.status_code == 201, on_vllm.text
    default = seeded.get(f"/v1/plans/{on_vllm.json()['id']}/deploy", headers=admin)
    assert default.status_code == 200, default.text
    named = seeded.get(f"/v1/plans/{on_vllm.json()['id']}/deploy", params={"target": "vllm"}, headers=admin)
    assert default.text == named.text and "vllm serve" in default.text
    agnostic = seeded.post("/v1/plans", json=body(name="chat-8b-agnostic"), headers=admin).json()
    problem = assert_problem(seeded.get(f"/v1/plans/{agnostic['id']}/deploy", headers=admin), 422)
    assert "priced on no engine" in problem["detail"]


def test_simulate_runs_the_gpu_at_its_engine_profile(seeded: ApiClient) -> None:
    request = {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "serving": {"replicas": 1, "batch_limit": 32},
        "workload": {"arrival_rate_rps": 2.0, "prompt_tokens": {"mean": 500, "p99": 2000}, "output_tokens": 100},
        "requests": 400,
        "seed": 7,
    }
    profile = _priced(json.loads(REFERENCE_PATH.read_text(encoding="utf-8"))["profiles"], "h100-sxm", "trt-llm")
    on_trt = seeded.post("/v1/simulate", json={**request, "engine": "trt-llm"})
    assert on_trt.status_code == 200, on_trt.text
    efficiency = on_trt.json()["efficiency"]
    assert efficiency["memory"] == pytest.approx(profile["memory"]) and efficiency["source"].startswith("engine trt-llm: ")
    amd = assert_problem(seeded.post("/v1/simulate", json={**request, "gpu": "mi300x", "engine": "trt-llm"}), 422)
    assert "does not run on amd GPUs" in amd["detail"]


def test_a_plan_priced_on_an_engine_rechecks_on_that_engine(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Re-checking re-reads the plan's GPUs at their engine profile: nothing changed when nothing did, and an edit
    elsewhere in the catalog is not taken for a change of the plan's GPU efficiencies."""
    stored = seeded.post("/v1/plans", json=body(engine="trt-llm", constraints__gpus=["l40s"]), headers=admin)
    assert stored.status_code == 201, stored.text
    fresh = seeded.get(f"/v1/plans/{stored.json()['id']}/recheck").json()
    assert fresh["holds"] is True and fresh["changes"] == []
    assert fresh["cost"]["now_usd_per_hour"] == pytest.approx(stored.json()["cost"]["usd_per_hour"])
    # another GPU's record moves the catalog version: the l40s efficiencies, re-read on trt-llm, are unchanged
    efficiency = seeded.get("/v1/gpus/h100-sxm").json()["efficiency"]
    changed = {"efficiency": efficiency | {"compute": efficiency["compute"] * 0.99}}
    assert seeded.patch("/v1/gpus/h100-sxm", json=changed, headers=admin).status_code == 200
    later = seeded.get(f"/v1/plans/{stored.json()['id']}/recheck").json()
    assert [c["kind"] for c in later["changes"]] == ["catalog"]
    assert "other records changed" in later["changes"][0]["detail"] and "l40s" not in later["changes"][0]["detail"]


def test_a_plan_priced_on_an_older_generation_rechecks_on_that_generation(seeded: ApiClient, admin: dict[str, str]) -> None:
    """A plan priced on `trt-llm@0.14` is re-read on 0.14's profile, not on the newest generation's: with nothing
    changed in the catalog the recheck finds nothing changed (it used to report the newest profile's efficiencies
    as a change of the plan's GPU)."""
    profiles = json.loads(REFERENCE_PATH.read_text())["profiles"]
    own = {p["engine_generation"] for p in profiles if (p["gpu"], p["engine"]) == ("h100-sxm", "trt-llm")}
    newest = _priced(profiles, "h100-sxm", "trt-llm")["engine_generation"]
    assert "0.14" in own and newest != "0.14"  # the premise: 0.14 has its own profile and is not the default
    stored = seeded.post("/v1/plans", json=body(engine="trt-llm@0.14", constraints__gpus=["h100-sxm"]), headers=admin)
    assert stored.status_code == 201, stored.text
    assert stored.json()["engine"]["profile"]["generation"] == "0.14"
    fresh = seeded.get(f"/v1/plans/{stored.json()['id']}/recheck").json()
    assert fresh["changes"] == [] and fresh["holds"] is True
    assert fresh["cost"]["now_usd_per_hour"] == pytest.approx(stored.json()["cost"]["usd_per_hour"])
    # another GPU's edit moves the catalog version: h100-sxm, re-read on 0.14, is not reported as changed
    efficiency = seeded.get("/v1/gpus/l40s").json()["efficiency"]
    changed = {"efficiency": efficiency | {"compute": efficiency["compute"] * 0.99}}
    assert seeded.patch("/v1/gpus/l40s", json=changed, headers=admin).status_code == 200
    later = seeded.get(f"/v1/plans/{stored.json()['id']}/recheck").json()
    assert [c["kind"] for c in later["changes"]] == ["catalog"]
    assert "h100-sxm" not in later["changes"][0]["detail"]
