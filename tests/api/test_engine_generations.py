"""`engine` on POST /v1/plans naming a release generation (issue 14 §1, docs/engines.md): the plan prices that
generation's profile, or says it fell back to the pooled one; the bare engine prices the newest generation;
`plan.engine` stays the bare engine (the deploy target); a malformed generation is a 422."""

from __future__ import annotations

import json
from typing import Any

from catalog.engine_profiles import REFERENCE_PATH
from planner.engines import generation_order, is_generation, parameters_at_bounds
from planner.specs import Efficiency
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_plans import body

REFERENCE = json.loads(REFERENCE_PATH.read_text(encoding="utf-8"))["profiles"]
L40S_GENERATIONS = sorted(
    (
        p["engine_generation"]
        for p in REFERENCE
        if (p["gpu"], p["engine"]) == ("l40s", "trt-llm") and is_generation(p["engine_generation"])
    ),
    key=generation_order,
)


def _plan(client: ApiClient, headers: dict[str, str], **changes: Any) -> Any:
    return client.post("/v1/plans", json={**body(**changes), "store": False, "verify": False}, headers=headers)


def test_a_named_generation_is_priced_and_stated(seeded: ApiClient, admin: dict[str, str]) -> None:
    assert len(L40S_GENERATIONS) >= 2, "the reference data fits several TensorRT-LLM releases on L40S"
    oldest, newest = L40S_GENERATIONS[0], L40S_GENERATIONS[-1]
    named = _plan(seeded, admin, engine=f"trt-llm@{oldest}", constraints__gpus=["l40s"], constraints__topology="aggregated")
    assert named.status_code == 200, named.text
    answer = named.json()
    assert answer["plan"]["engine"] == "trt-llm" and answer["engine"]["chosen"] == f"trt-llm@{oldest}"
    profile = answer["engine"]["profile"]
    assert (profile["generation"], profile["fallback"]) == (oldest, False)
    default = _plan(seeded, admin, engine="trt-llm", constraints__gpus=["l40s"]).json()["engine"]["profile"]
    assert (default["generation"], default["fallback"]) == (newest, False) and "newest generation" in default["reason"]
    assert isinstance(default["at_bounds"], list)


def test_a_generation_without_a_profile_falls_back_to_the_pooled_one(seeded: ApiClient, admin: dict[str, str]) -> None:
    """trt-llm 1.0 is profiled on other GPUs (a known generation) but not on L40S: L40S falls back to its pooled
    profile. A generation no GPU has a profile of is a 422 (tests/api/test_engine_everywhere.py)."""
    assert "1.0" not in L40S_GENERATIONS
    answer = _plan(seeded, admin, engine="trt-llm@1.0", constraints__gpus=["l40s"])
    assert answer.status_code == 200, answer.text
    profile = answer.json()["engine"]["profile"]
    assert (profile["generation"], profile["fallback"]) == ("all", True)
    assert "no l40s × trt-llm 1.0 profile" in profile["reason"]


def test_a_malformed_generation_is_422(seeded: ApiClient, admin: dict[str, str]) -> None:
    for bad in ("vllm@latest", "vllm@", ["vllm@0.11.1"]):
        assert "engine" in bad_fields(assert_problem(_plan(seeded, admin, engine=bad), 422))


def test_a_profile_pinned_on_its_bounds_says_it_is_under_determined(seeded: ApiClient, admin: dict[str, str]) -> None:
    """MI300X × SGLang: what the shipped fit left on a bound is named in the plan, with the reason saying so."""
    (record,) = [p for p in REFERENCE if (p["gpu"], p["engine"], p["engine_generation"]) == ("mi300x", "sglang", "all")]
    expected = parameters_at_bounds(
        Efficiency(
            memory=record["memory"],
            compute=record["compute"],
            step_overhead_s=record["step_overhead_ms"] / 1e3,
            memory_compute_overlap=record["memory_compute_overlap"],
        )
    )
    assert expected, "the shipped MI300X × SGLang fit sits on a bound"
    answer = _plan(seeded, admin, engine="sglang", constraints__gpus=["mi300x"], provider="tensorwave")
    assert answer.status_code == 200, answer.text
    profile = answer.json()["engine"]["profile"]
    assert profile["at_bounds"] == list(expected)
    assert "under-determined" in profile["reason"]
