"""GET /v1/plans through the real app on the reference catalog: stored plans newest first, paged
like the other list routes, each summarised from its stored request and answer; dry runs are not
listed; filters by deployment name and model; 401 without a key where reads need one, 422 for a bad
page. Interactive plans are Llama 3.1 8B chat on H100 bf16, unverified (tests/api/test_deployments.py);
the batch job is unverified too, so the file runs in seconds."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from catalog.db import make_engine
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_auth_health import issue_key
from tests.api.test_batch_jobs import job
from tests.api.test_deployments import chat, plan


@pytest.fixture
def stored(seeded: ApiClient, admin: dict[str, str]) -> list[dict[str, Any]]:
    """Three stored plans, oldest first (a named chat plan, an unnamed one, a batch job), after a dry run."""
    dry = seeded.post("/v1/plans", json=chat(25, store=False), headers=admin)
    assert dry.status_code == 200, dry.text
    named = plan(seeded, admin, chat(15, name="chat"))
    unnamed = plan(seeded, admin, chat(40))
    batch = plan(seeded, admin, job(requests=100_000, deadline_h=24) | {"verify": False})
    assert dry.json()["id"] not in {named["id"], unnamed["id"], batch["id"]}
    return [named, unnamed, batch]


def test_stored_plans_are_listed_newest_first_with_their_summary(seeded: ApiClient, stored: list[dict[str, Any]]) -> None:
    named, unnamed, batch = stored
    page = seeded.get("/v1/plans").json()
    assert page["total"] == 3 and page["limit"] == 50 and page["offset"] == 0
    assert [item["id"] for item in page["items"]] == [batch["id"], unnamed["id"], named["id"]]  # the dry run is absent
    by_id = {item["id"]: item for item in page["items"]}

    chat_item = by_id[named["id"]]
    assert chat_item["name"] == "chat" and chat_item["model"] == "llama-3.1-8b"
    assert chat_item["workload"] == "interactive" and chat_item["arrival_rate_rps"] == 15
    assert chat_item["requests"] is None and chat_item["job_cost_usd"] is None and chat_item["deadline_h"] is None
    for key in ("gpu", "tp", "replicas", "gpus_total"):
        assert chat_item[key] == named["plan"][key]
    assert chat_item["gpu"] == "h100-sxm" and chat_item["precision"] == "bf16/bf16"
    assert chat_item["topology"] == "aggregated"
    replicas = named["plan"]["replicas"]
    assert chat_item["shape"] == (
        f"{named['plan']['gpus_total']} × h100-sxm (tp {named['plan']['tp']}, {replicas} replica{'' if replicas == 1 else 's'})"
    )
    assert chat_item["cost_usd_per_hour"] == named["cost"]["usd_per_hour"]
    assert chat_item["cost_usd_per_month"] == named["cost"]["usd_per_month"]
    assert datetime.fromisoformat(chat_item["created_at"]) == datetime.fromisoformat(named["provenance"]["created_at"])
    assert by_id[unnamed["id"]]["name"] is None and by_id[unnamed["id"]]["arrival_rate_rps"] == 40
    assert by_id[unnamed["id"]]["replicas"] > chat_item["replicas"]  # 40 rps needs more than 15

    job_item = by_id[batch["id"]]
    assert job_item["workload"] == "batch" and job_item["model"] == "llama-3.1-70b"
    assert job_item["arrival_rate_rps"] is None and job_item["requests"] == 100_000 and job_item["deadline_h"] == 24
    assert job_item["job_cost_usd"] == batch["batch_job"]["cost_usd"]
    assert job_item["gpus_total"] == batch["plan"]["gpus_total"] == job_item["replicas"] * job_item["tp"]
    assert job_item["cost_usd_per_hour"] == batch["cost"]["usd_per_hour"]


def test_pages_split_the_list_without_overlap(seeded: ApiClient, stored: list[dict[str, Any]]) -> None:
    newest_first = [plan["id"] for plan in reversed(stored)]
    first = seeded.get("/v1/plans?limit=2").json()
    second = seeded.get("/v1/plans?limit=2&offset=2").json()
    beyond = seeded.get("/v1/plans?limit=2&offset=5").json()
    assert [item["id"] for item in first["items"]] == newest_first[:2]
    assert [item["id"] for item in second["items"]] == newest_first[2:]
    assert first["total"] == second["total"] == beyond["total"] == 3
    assert beyond["items"] == [] and beyond["offset"] == 5 and beyond["limit"] == 2


def test_filters_by_deployment_name_and_model(seeded: ApiClient, stored: list[dict[str, Any]]) -> None:
    named, unnamed, batch = stored
    by_name = seeded.get("/v1/plans", params={"name": "chat"}).json()
    assert [item["id"] for item in by_name["items"]] == [named["id"]] and by_name["total"] == 1
    by_model = seeded.get("/v1/plans", params={"model": "llama-3.1-8b"}).json()
    assert [item["id"] for item in by_model["items"]] == [unnamed["id"], named["id"]] and by_model["total"] == 2
    assert [item["id"] for item in seeded.get("/v1/plans?model=llama-3.1-70b").json()["items"]] == [batch["id"]]
    both = seeded.get("/v1/plans", params={"model": "llama-3.1-70b", "name": "chat"}).json()
    assert both == {"items": [], "total": 0, "limit": 50, "offset": 0}
    assert seeded.get("/v1/plans", params={"model": "no-such-model"}).json()["total"] == 0


def test_an_empty_store_lists_nothing(seeded: ApiClient) -> None:
    assert seeded.get("/v1/plans").json() == {"items": [], "total": 0, "limit": 50, "offset": 0}


@pytest.mark.parametrize("query", ["limit=0", "limit=501", "offset=-1", "limit=ten", f"offset={2**31}", "model=" + "x" * 65])
def test_a_bad_page_or_filter_is_422(seeded: ApiClient, query: str) -> None:
    assert_problem(seeded.get(f"/v1/plans?{query}"), 422, "invalid-request")


def test_reads_need_a_key_when_the_service_requires_one(make_client: Any, migrated_database_url: str) -> None:
    engine = make_engine(migrated_database_url)
    try:
        reader = issue_key(engine, "reader")
    finally:
        engine.dispose()
    strict = make_client(require_auth=True)
    assert_problem(strict.get("/v1/plans"), 401)
    assert_problem(strict.get("/v1/plans", headers={"Authorization": "Bearer not-a-key"}), 401)
    listed = strict.get("/v1/plans", headers=reader)
    assert listed.status_code == 200 and listed.json()["total"] == 0


def test_a_disaggregated_plan_is_listed_with_its_pools(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The list says the pools (xPyD and each pool's GPUs, role, tp, replicas), not one aggregated shape."""
    from tests.api.test_plan_pools import rag

    stored = plan(seeded, admin, {**rag("disaggregated"), "verify": False})
    prefill, decode = stored["plan"]["pools"]
    item = seeded.get("/v1/plans").json()["items"][0]
    assert item["id"] == stored["id"] and item["topology"] == "disaggregated"
    assert item["shape"].startswith(f"{prefill['replicas']}P{decode['replicas']}D: ")
    for pool in (prefill, decode):
        count = pool["tp"] * pool["replicas"]
        assert f"{count} × {pool['gpu']} {pool['role']} (tp {pool['tp']}, {pool['replicas']} replica" in item["shape"]
    assert item["shape"].index(" prefill ") < item["shape"].index(" decode ")
    assert item["gpus_total"] == stored["plan"]["gpus_total"] == sum(p["tp"] * p["replicas"] for p in (prefill, decode))


LEVERS = (
    "prefix_cache_hit_rate",
    "prefix_cache_tokens",
    "prefix_cache_routing",
    "speculative_method",
    "speculative_draft_tokens",
    "speculative_draft_model",
)


def test_the_levers_a_plan_pulls_are_listed(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Each list item says the prefix cache (hit rate, cache tokens, routing) and the speculative decoding
    (method, draft tokens, the drafting catalog model) its plan deploys, as plan.prefix_caching and
    plan.speculative say them; null for a plan pulling neither."""
    from tests.api.test_prefix_caching import REUSE, _body
    from tests.api.test_speculative_draft_model import BODY as DRAFTED

    cached = plan(seeded, admin, _body(REUSE))
    drafted = plan(seeded, admin, DRAFTED)
    plain = plan(seeded, admin, chat(15, constraints={"speculative": "off"}))
    by_id = {item["id"]: item for item in seeded.get("/v1/plans").json()["items"]}

    prefix = cached["plan"]["prefix_caching"]
    assert prefix is not None and prefix["cache_tokens"] > 0  # the reuse is high enough that a cache pays
    item = by_id[cached["id"]]
    assert item["prefix_cache_hit_rate"] == prefix["hit_rate"] and 0.0 < item["prefix_cache_hit_rate"] < 1.0
    assert item["prefix_cache_tokens"] == prefix["cache_tokens"]
    assert item["prefix_cache_routing"] == prefix["routing"]

    speculative = drafted["plan"]["speculative"]
    item = by_id[drafted["id"]]
    assert item["speculative_method"] == speculative["method"] == "draft_model"
    assert item["speculative_draft_tokens"] == speculative["draft_tokens"] >= 1
    assert item["speculative_draft_model"] == "llama-3.1-8b"
    assert item["prefix_cache_hit_rate"] is None and item["prefix_cache_routing"] is None

    assert plain["plan"]["prefix_caching"] is None and plain["plan"]["speculative"] is None
    assert all(by_id[plain["id"]][key] is None for key in LEVERS)


def test_a_head_speculating_plan_lists_no_draft_model(seeded: ApiClient, stored: list[dict[str, Any]]) -> None:
    """The stored chat plans (constraints.speculative auto) draft with Llama 3.1 8B's EAGLE head: listed with the
    method and k, no catalog draft model and no cache; the batch job (which never speculates) lists none."""
    named, unnamed, batch = stored
    by_id = {item["id"]: item for item in seeded.get("/v1/plans").json()["items"]}
    heads = 0
    for chat_plan in (named, unnamed):
        speculative = chat_plan["plan"]["speculative"]
        item = by_id[chat_plan["id"]]
        assert item["speculative_method"] == (None if speculative is None else speculative["method"])
        assert item["speculative_draft_tokens"] == (None if speculative is None else speculative["draft_tokens"])
        assert item["speculative_draft_model"] is None and item["prefix_cache_tokens"] is None
        heads += speculative is not None and speculative["method"] in {"eagle", "mtp", "medusa"}
    assert heads >= 1  # at least one of them does speculate, so the fields are exercised
    assert all(by_id[batch["id"]][key] is None for key in LEVERS)


def test_a_plan_stored_before_the_levers_lists_them_null() -> None:
    """Plans stored before either lever existed have neither plan.prefix_caching nor plan.speculative: null, not a 500."""
    from api.plan_list import lever_summary

    assert lever_summary({}, {"gpu": "h100-sxm"}) == dict.fromkeys(LEVERS)
    assert lever_summary({}, {"speculative": None, "prefix_caching": None}) == dict.fromkeys(LEVERS)
