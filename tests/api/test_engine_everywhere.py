"""`engine@generation` on every route that takes an engine (issue 14 §1): evaluate, simulate, capacity, what-if and
fleet plans price the named release generation's profile and echo it (`engine.profile.generation`); a generation no
profile of the engine has is a 422 naming the known ones, on plans too; a bare pinned engine matches every generation
of it; and a profile pinned on its bounds lowers the GPU's calibration grade one step (docs/engines.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from catalog.engine_profiles import REFERENCE_PATH
from planner.engines import lowers_grade, parameters_at_bounds
from planner.specs import Efficiency
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem, bad_fields
from tests.api.test_operations import ASYNC, wait_for, without_timings, working
from tests.api.test_plans import body
from tests.api.test_what_if_classes import MIX

__all__ = ["working"]  # the fixture of tests/api/test_operations.py: an app with an embedded worker

REFERENCE = json.loads(REFERENCE_PATH.read_text(encoding="utf-8"))["profiles"]
#: A generation TensorRT-LLM was never profiled on (its releases in the evidence start at 0.12).
UNKNOWN = "trt-llm@0.1"


def _shipped(gpu: str, engine: str, generation: str) -> dict[str, Any]:
    (record,) = [p for p in REFERENCE if (p["gpu"], p["engine"], p["engine_generation"]) == (gpu, engine, generation)]
    return record


def _evaluate(**changes: Any) -> dict[str, Any]:
    return {
        "model": "llama-3.1-8b",
        "gpu": "l40s",
        "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "context_tokens": 2048,
        "batch_sizes": [1, 64],
        **changes,
    }


def _simulate(**changes: Any) -> dict[str, Any]:
    return {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "serving": {"replicas": 1, "batch_limit": 32},
        "workload": {"arrival_rate_rps": 2.0, "prompt_tokens": {"mean": 500, "p99": 2000}, "output_tokens": 100},
        "requests": 400,
        "seed": 7,
        **changes,
    }


def _capacity(**changes: Any) -> dict[str, Any]:
    return {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "gpus": 8,
        "workload": {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
        "slo": {"ttft_ms": 1000, "tpot_ms": 60},
        **changes,
    }


def _sweep(**changes: Any) -> dict[str, Any]:
    request = body(constraints__gpus=["h100-sxm"])
    return {
        "model": request["model"],
        "workload": {k: v for k, v in request["workload"].items() if k != "arrival_rate_rps"},
        "slo": request["slo"],
        "constraints": request["constraints"],
        "sweep": {"arrival_rates_rps": [15]},
        **changes,
    }


def _fleet(**changes: Any) -> dict[str, Any]:
    return {
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
        **changes,
    }


def _plan(client: ApiClient, headers: dict[str, str], **changes: Any) -> Any:
    return client.post("/v1/plans", json={**body(**changes), "store": False, "verify": False}, headers=headers)


def test_evaluate_prices_the_named_generation_and_echoes_it(seeded: ApiClient) -> None:
    """l40s × trt-llm 0.12 against the newest (0.17): each answer carries its own generation's η_mem."""
    old, new = _shipped("l40s", "trt-llm", "0.12"), _shipped("l40s", "trt-llm", "0.17")
    assert old["memory"] != new["memory"], "the two releases' fits differ"
    named = seeded.post("/v1/evaluate", json=_evaluate(engine="trt-llm@0.12"))
    assert named.status_code == 200, named.text
    answer = named.json()
    assert answer["efficiency"]["memory"] == pytest.approx(old["memory"])
    assert answer["engine"]["chosen"] == "trt-llm@0.12"
    assert (answer["engine"]["profile"]["generation"], answer["engine"]["profile"]["fallback"]) == ("0.12", False)
    bare = seeded.post("/v1/evaluate", json=_evaluate(engine="trt-llm")).json()
    assert bare["efficiency"]["memory"] == pytest.approx(new["memory"]) and bare["engine"]["profile"]["generation"] == "0.17"
    assert seeded.post("/v1/evaluate", json=_evaluate()).json()["engine"] is None


def test_simulate_prices_the_named_generation_and_echoes_it(seeded: ApiClient) -> None:
    named = seeded.post("/v1/simulate", json=_simulate(engine="trt-llm@0.14"))
    assert named.status_code == 200, named.text
    answer = named.json()
    assert answer["efficiency"]["memory"] == pytest.approx(_shipped("h100-sxm", "trt-llm", "0.14")["memory"])
    assert answer["engine"]["profile"]["generation"] == "0.14" and answer["engine"]["profile"]["gpu"] == "h100-sxm"


def test_capacity_takes_an_engine_and_a_bare_pin_matches_its_generation(seeded: ApiClient) -> None:
    named = seeded.post("/v1/capacity", json=_capacity(engine="trt-llm@0.14"))
    assert named.status_code == 200, named.text
    answer = named.json()
    assert answer["engine"]["profile"]["generation"] == "0.14" and answer["configuration"]["engine"] == "trt-llm"
    pinned = seeded.post("/v1/capacity", json=_capacity(engine="trt-llm@0.14", constraints={"pin": {"engine": "trt-llm"}}))
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["max_arrival_rate_rps"] == answer["max_arrival_rate_rps"]
    assert pinned.json()["engine"] == answer["engine"]
    other = seeded.post("/v1/capacity", json=_capacity(engine="trt-llm@0.14", constraints={"pin": {"engine": "vllm"}}))
    assert assert_problem(other, 422)["field"] == "constraints.pin.engine"
    # the pin alone still prices the newest generation
    alone = seeded.post("/v1/capacity", json=_capacity(constraints={"pin": {"engine": "trt-llm"}})).json()
    assert alone["engine"]["profile"]["generation"] == "1.0" and alone["configuration"]["engine"] == "trt-llm"


def test_what_if_points_are_plans_on_the_named_generation(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/what-if", json=_sweep(engine="trt-llm@0.14"), headers=admin)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [(p["gpu"], p["generation"]) for p in answer["engine"]["profiles"]] == [("h100-sxm", "0.14")]
    (point,) = answer["points"]
    plan = _plan(seeded, admin, engine="trt-llm@0.14", constraints__gpus=["h100-sxm"]).json()
    assert (point["gpu"], point["replicas"]) == (plan["plan"]["gpu"], plan["plan"]["replicas"])
    assert point["cost_usd_per_hour"] == pytest.approx(plan["cost"]["usd_per_hour"], rel=1e-6)
    # a bare pin matches the generation; another engine's pin is refused
    pinned = _sweep(engine="trt-llm@0.14")
    pinned["constraints"] = {**pinned["constraints"], "pin": {"engine": "trt-llm"}}
    same = seeded.post("/v1/what-if", json=pinned, headers=admin)
    assert same.status_code == 200, same.text
    assert same.json()["points"][0]["cost_usd_per_hour"] == point["cost_usd_per_hour"]
    pinned["constraints"]["pin"] = {"engine": "sglang"}
    assert assert_problem(seeded.post("/v1/what-if", json=pinned, headers=admin), 422)["field"] == "constraints.pin.engine"


def test_an_async_sweep_carries_the_engine_it_was_planned_on(working: ApiClient) -> None:
    """A what-if run as an operation (task workers, api/tasks.py) answers the synchronous sweep, `engine` included."""
    request = _sweep(engine="trt-llm@0.14")
    accepted = working.post("/v1/what-if", json=request, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    done = wait_for(working, accepted.headers["Location"], states=("succeeded", "failed"))[-1]
    assert done["state"] == "succeeded", done
    assert done["result"]["engine"]["profiles"][0]["generation"] == "0.14"
    synchronous = working.post("/v1/what-if", json=request, headers=ADMIN_HEADERS)
    assert synchronous.status_code == 200, synchronous.text
    assert without_timings(done["result"]) == without_timings(synchronous.json())


def test_a_fleet_plan_prices_every_gpu_on_the_named_generation(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/fleet-plans", json=_fleet(engine="trt-llm@0.14"), headers=admin)
    assert response.status_code == 201, response.text
    engine = response.json()["engine"]
    assert engine["chosen"] == "trt-llm@0.14"
    assert {p["gpu"]: p["generation"] for p in engine["profiles"]} == {"l40s": "0.14", "h100-sxm": "0.14"}


def test_an_unknown_generation_is_422_naming_the_known_ones_on_every_route(seeded: ApiClient, admin: dict[str, str]) -> None:
    known = sorted({p["engine_generation"] for p in REFERENCE if p["engine"] == "trt-llm"})
    refusals = [
        seeded.post("/v1/evaluate", json=_evaluate(engine=UNKNOWN)),
        seeded.post("/v1/simulate", json=_simulate(engine=UNKNOWN)),
        seeded.post("/v1/capacity", json=_capacity(engine=UNKNOWN)),
        seeded.post("/v1/what-if", json=_sweep(engine=UNKNOWN), headers=admin),
        seeded.post("/v1/fleet-plans", json=_fleet(engine=UNKNOWN), headers=admin),
        _plan(seeded, admin, engine=UNKNOWN),
        _plan(seeded, admin, engine=["vllm", UNKNOWN]),  # refused, not taken for an engine that could not plan
    ]
    for response in refusals:
        problem = assert_problem(response, 422)
        assert problem["field"] == "engine" and problem["engine"] == UNKNOWN
        assert sorted(problem["known_generations"]) == known and "0.12" in problem["detail"]


def test_a_generation_one_gpu_lacks_falls_back_to_its_pooled_profile(seeded: ApiClient) -> None:
    """trt-llm 1.0 is profiled on H100 but not on L40S: L40S is priced on its pooled profile and says so."""
    assert _shipped("h100-sxm", "trt-llm", "1.0")
    answer = seeded.post("/v1/evaluate", json=_evaluate(engine="trt-llm@1.0"))
    assert answer.status_code == 200, answer.text
    profile = answer.json()["engine"]["profile"]
    assert (profile["generation"], profile["fallback"]) == ("all", True)
    assert "no l40s × trt-llm 1.0 profile" in profile["reason"]


def test_a_plan_with_a_bare_pin_prices_the_named_generation(seeded: ApiClient, admin: dict[str, str]) -> None:
    pinned = _plan(seeded, admin, engine="trt-llm@0.14", constraints__gpus=["h100-sxm"], constraints__pin={"engine": "trt-llm"})
    assert pinned.status_code == 200, pinned.text
    answer = pinned.json()
    assert answer["engine"]["chosen"] == "trt-llm@0.14" and answer["engine"]["profile"]["generation"] == "0.14"
    assert answer["plan"]["engine"] == "trt-llm"
    listed = _plan(
        seeded,
        admin,
        engine=["vllm@0.11", "trt-llm@0.14"],
        constraints__gpus=["h100-sxm"],
        constraints__pin={"engine": "trt-llm"},
    )
    assert listed.status_code == 200, listed.text
    assert listed.json()["engine"]["allowed"] == ["trt-llm@0.14"]
    assert listed.json()["cost"]["usd_per_hour"] == answer["cost"]["usd_per_hour"]
    other = _plan(seeded, admin, engine="trt-llm@0.14", constraints__pin={"engine": "vllm"})
    assert assert_problem(other, 422)["field"] == "constraints.pin.engine"


def test_a_profile_on_its_bounds_lowers_the_plans_confidence_grade_one_step(seeded: ApiClient, admin: dict[str, str]) -> None:
    """H100's catalog calibration is graded medium; its newest TensorRT-LLM profile (1.0) has parameters on the fit's
    bounds, which the plan names. Where one is an efficiency η (planner/engines.py lowers_grade) a plan priced on
    it is graded low, says why, warns, and a minimum confidence of medium leaves it out; where only the overhead or
    the overlap sit on the ends of their ranges the grade stays medium."""
    newest = _shipped("h100-sxm", "trt-llm", "1.0")
    pinned = parameters_at_bounds(
        Efficiency(
            memory=newest["memory"],
            compute=newest["compute"],
            step_overhead_s=newest["step_overhead_ms"] / 1e3,
            memory_compute_overlap=newest["memory_compute_overlap"],
        )
    )
    assert pinned, "the shipped H100 × TensorRT-LLM 1.0 fit sits on a bound"
    lowered = any(lowers_grade(name) for name in pinned)
    grade = seeded.get("/v1/gpus/h100-sxm").json()["efficiency"]["confidence"]["grade"]
    assert grade == "medium", "the reference catalog grades H100 medium"
    agnostic = _plan(seeded, admin, constraints__gpus=["h100-sxm"]).json()
    assert agnostic["calibration_grades"]["h100-sxm"] == "medium"
    on_engine = _plan(seeded, admin, engine="trt-llm", constraints__gpus=["h100-sxm"])
    assert on_engine.status_code == 200, on_engine.text
    answer = on_engine.json()
    profile = answer["engine"]["profile"]
    assert profile["at_bounds"] == list(pinned)
    assert all(name in profile["reason"] for name in pinned)
    warnings = [w for w in answer["warnings"] if w["code"] == "low_confidence_plan" and w["gpu"] == "h100-sxm"]
    if lowered:
        assert profile["calibration_grade"] == "low" and answer["calibration_grades"]["h100-sxm"] == "low"
        assert "lowered one step, medium → low" in profile["reason"]
        (warning,) = warnings
        assert "under-determined" in warning["message"] and "lowers its grade one step" in warning["message"]
        refused = _plan(seeded, admin, engine="trt-llm", constraints__gpus=["h100-sxm"], constraints__min_confidence="medium")
        assert refused.status_code == 422, refused.text
    else:
        assert profile["calibration_grade"] == "medium" and answer["calibration_grades"]["h100-sxm"] == "medium"
        assert "under-determined" not in profile["reason"] and not warnings


def test_a_class_mix_sweep_refuses_an_engine_rather_than_ignoring_it(seeded: ApiClient, admin: dict[str, str]) -> None:
    """A mix is planned as POST /v1/plans plans classes, which take no engine: the engine was silently dropped."""
    request = {**MIX, "engine": "trt-llm@0.14"}
    refused = assert_problem(seeded.post("/v1/what-if", json=request, headers=admin), 422)
    assert "engine" in " ".join(bad_fields(refused).values())
    assert seeded.post("/v1/what-if", json=MIX, headers=admin).status_code == 200
