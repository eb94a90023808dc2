"""`engine` on POST /v1/plans (issue 14 §1): each allowed engine is priced on its own profiles, the
cheapest answers with `engine` saying why and which profile, the others are `engine` alternatives,
and an engine nobody knows, or one the pin contradicts, is a 422."""

from __future__ import annotations

from typing import Any

from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_plans import body


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
