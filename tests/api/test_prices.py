"""GPU prices by provider through the real app on the reference catalog: /v1/prices CRUD, and
plans, fleet plans and what-if sweeps priced at one provider (the request's or the default),
with the request's overrides on top and unpriced GPUs left out with a note."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api.settings import Settings, SettingsError
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem

CHAT: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 15, "prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm", "a100-80gb-sxm"]},
    "verify": False,
}

#: catalog/data/prices.json: CoreWeave's HGX instance prices ÷ 8 GPUs.
COREWEAVE_ON_DEMAND = {"h100-sxm": 6.155, "a100-80gb-sxm": 2.7}
#: Responses may serve money rounded to the cent.
CENT = 0.01


def plan(client: ApiClient, **changes: Any) -> Any:
    return client.post("/v1/plans", json={**copy.deepcopy(CHAT), **changes}, headers=ADMIN_HEADERS)


def gpus_by_type(response: dict[str, Any]) -> dict[str, int]:
    decision = response["plan"]
    rows = decision["fleet"] or [{"gpu": decision["gpu"], "gpus": decision["gpus_total"]}]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["gpu"]] = counts.get(row["gpu"], 0) + row["gpus"]
    return counts


# ---- /v1/prices ----------------------------------------------------------------------------------


def test_the_default_provider_is_one_setting() -> None:
    assert Settings().default_price_provider == "runpod"
    assert Settings.from_env({"HEADROOM_DEFAULT_PRICE_PROVIDER": " CoreWeave"}).default_price_provider == "coreweave"
    with pytest.raises(SettingsError, match="HEADROOM_DEFAULT_PRICE_PROVIDER"):
        Settings.from_env({"HEADROOM_DEFAULT_PRICE_PROVIDER": "no/such"})


def test_the_reference_prices_are_listed_by_provider_and_gpu(seeded: ApiClient) -> None:
    aws = seeded.get("/v1/prices", params={"provider": "aws"}).json()
    assert aws["total"] == 3 and {p["gpu"] for p in aws["items"]} == {"a10g", "l4", "l40s"}
    assert all(p["region"] == "us-east-1" and p["as_of"] and p["source"] for p in aws["items"])
    h100 = seeded.get("/v1/prices", params={"gpu": "h100-sxm"}).json()
    assert {p["provider"] for p in h100["items"]} == {"coreweave", "runpod"}
    everything = seeded.get("/v1/prices", params={"limit": 500}).json()
    assert len({p["provider"] for p in everything["items"]}) >= 3


def test_a_price_is_created_read_changed_with_if_match_and_deleted(seeded: ApiClient) -> None:
    price = {
        "provider": "acme",
        "gpu": "h100-sxm",
        "on_demand": 2.5,
        "spot": 1.1,
        "as_of": "2026-11-01",
        "source": "acme price list, 2026-11-01",
    }
    assert_problem(seeded.post("/v1/prices", json=price), 401)
    created = seeded.post("/v1/prices", json=price, headers=ADMIN_HEADERS)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/prices/acme/h100-sxm"
    assert created.json()["region"] is None and created.json()["reserved_3y"] is None
    assert_problem(seeded.post("/v1/prices", json=price, headers=ADMIN_HEADERS), 409, "already-exists")
    regional = seeded.post("/v1/prices", json={**price, "region": "eu-west", "on_demand": 2.9}, headers=ADMIN_HEADERS)
    assert regional.headers["location"] == "/v1/prices/acme/h100-sxm?region=eu-west"
    read = seeded.get("/v1/prices/acme/h100-sxm")
    assert read.headers["etag"] == '"1"' and read.json()["on_demand"] == 2.5
    assert seeded.get("/v1/prices/acme/h100-sxm", params={"region": "eu-west"}).json()["on_demand"] == 2.9

    stale = {**ADMIN_HEADERS, "If-Match": '"7"'}
    assert_problem(seeded.patch("/v1/prices/acme/h100-sxm", json={"on_demand": 2.0}, headers=stale), 412)
    patched = seeded.patch("/v1/prices/acme/h100-sxm", json={"on_demand": 2.0}, headers={**ADMIN_HEADERS, "If-Match": '"1"'})
    assert patched.status_code == 200 and patched.json()["on_demand"] == 2.0 and patched.json()["spot"] == 1.1
    replaced = seeded.put(
        "/v1/prices/acme/h100-sxm", json={"on_demand": 2.2, "as_of": "2026-11-02", "source": "acme, again"}, headers=ADMIN_HEADERS
    )
    assert replaced.json()["spot"] is None and replaced.json()["version"] == 3

    assert seeded.delete("/v1/prices/acme/h100-sxm", headers=ADMIN_HEADERS).status_code == 204
    assert_problem(seeded.get("/v1/prices/acme/h100-sxm"), 404, "not-found")
    assert seeded.get("/v1/prices/acme/h100-sxm", params={"region": "eu-west"}).status_code == 200


def test_a_price_of_an_unknown_gpu_or_with_a_bad_field_is_refused(seeded: ApiClient) -> None:
    price = {"provider": "acme", "gpu": "no-such-gpu", "on_demand": 2.5, "as_of": "2026-11-01", "source": "acme"}
    problem = assert_problem(seeded.post("/v1/prices", json=price, headers=ADMIN_HEADERS), 422)
    assert problem["errors"][0]["field"] == "gpu"
    assert_problem(seeded.post("/v1/prices", json={**price, "gpu": "h100-sxm", "on_demand": -1}, headers=ADMIN_HEADERS), 422)


# ---- plans at one provider -----------------------------------------------------------------------


def test_a_plan_at_a_named_provider_is_costed_at_its_prices_and_says_so(seeded: ApiClient) -> None:
    """cost.usd_per_hour = Σ over GPU types of GPUs × CoreWeave's on-demand price."""
    response = plan(seeded, provider="coreweave")
    assert response.status_code == 201, response.text
    answer = response.json()
    counts = gpus_by_type(answer)
    assert answer["cost"]["usd_per_hour"] == pytest.approx(
        sum(n * COREWEAVE_ON_DEMAND[gpu] for gpu, n in counts.items()), abs=CENT / 2
    )
    prices = {p["gpu"]: p for p in answer["cost"]["prices"]}
    assert prices.keys() == counts.keys()
    for gpu, price in prices.items():
        assert price["provider"] == "coreweave" and price["kind"] == "on_demand" and not price["override"]
        assert price["price_usd_per_hour"] == pytest.approx(COREWEAVE_ON_DEMAND[gpu], abs=CENT / 2)
        assert price["as_of"] == "2026-02-01" and "CoreWeave" in price["source"]
    assert answer["cost"]["notes"] == []


def test_without_a_provider_the_default_providers_prices_are_used(seeded: ApiClient, make_client: Any) -> None:
    answer = plan(seeded).json()
    assert {p["provider"] for p in answer["cost"]["prices"]} == {"runpod"}
    other = make_client(default_price_provider="coreweave")
    assert {p["provider"] for p in plan(other).json()["cost"]["prices"]} == {"coreweave"}


def test_an_override_wins_and_is_reported(seeded: ApiClient) -> None:
    response = plan(seeded, provider="coreweave", constraints={"gpus": ["h100-sxm"]}, prices={"h100-sxm": {"on_demand": 1.25}})
    answer = response.json()
    assert answer["cost"]["usd_per_hour"] == pytest.approx(answer["plan"]["gpus_total"] * 1.25)
    [price] = answer["cost"]["prices"]
    assert price["override"] is True and price["price_usd_per_hour"] == 1.25 and price["provider"] == "coreweave"
    assert price["source"].startswith("request (on_demand) over coreweave's price")


def test_a_gpu_the_provider_does_not_price_is_left_out_with_a_note(seeded: ApiClient) -> None:
    answer = plan(seeded, provider="tensorwave", constraints={"gpus": ["h100-sxm", "mi300x"]}).json()
    assert gpus_by_type(answer).keys() == {"mi300x"}
    assert [p["provider"] for p in answer["cost"]["prices"]] == ["tensorwave"]
    assert len(answer["cost"]["notes"]) == 1 and "h100-sxm has no price at tensorwave" in answer["cost"]["notes"][0]
    priced = plan(
        seeded, provider="tensorwave", constraints={"gpus": ["h100-sxm"]}, prices={"h100-sxm": {"on_demand": 3.0}}
    ).json()
    assert priced["cost"]["prices"][0]["source"] == "request" and priced["cost"]["prices"][0]["as_of"] is None


def test_nothing_priced_at_the_provider_is_a_422_naming_it_and_an_unknown_provider_a_404(seeded: ApiClient) -> None:
    problem = assert_problem(plan(seeded, provider="tensorwave", constraints={"gpus": ["h100-sxm"]}), 422)
    assert "tensorwave" in problem["detail"] and problem["unpriced_gpus"] == ["h100-sxm"]
    unknown = assert_problem(plan(seeded, provider="nobody"), 404, "not-found")
    assert unknown["known_providers"] == ["aws", "coreweave", "lambda", "runpod", "tensorwave"]
    assert "runpod" in unknown["detail"]


# ---- fleet plans and what-if ---------------------------------------------------------------------


def test_a_fleet_plan_reports_the_provider_of_each_price(seeded: ApiClient) -> None:
    fleet = {
        "workloads": [{"name": "chat", "model": "llama-3.1-8b", "prompt_tokens": {"mean": 1000, "p99": 4000},
                       "output_tokens": {"mean": 250, "p99": 1000}, "slo": {"ttft_ms": 2000, "tpot_ms": 60},
                       "demand_rps": [4, 4]}],
        "constraints": {"gpus": ["h100-sxm", "l40s"], "precisions": [{"weights": "fp8", "kv_cache": "fp8"}]},
        "search": {"tp_degrees": [1], "batch_limits": [64], "chunk_budgets": [None]},
        "provider": "coreweave",
    }  # fmt: skip
    response = seeded.post("/v1/fleet-plans", json=fleet, headers=ADMIN_HEADERS)
    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer["prices"].keys() == {"h100-sxm"}, "CoreWeave does not price the l40s"
    assert answer["prices"]["h100-sxm"]["provider"] == "coreweave"
    assert answer["prices"]["h100-sxm"]["on_demand_usd_per_hour"] == pytest.approx(COREWEAVE_ON_DEMAND["h100-sxm"], abs=CENT / 2)
    assert any("l40s has no price at coreweave" in note for note in answer["notes"])


def test_what_if_points_say_the_provider(seeded: ApiClient) -> None:
    sweep = {"model": "llama-3.1-8b", "workload": {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
             "slo": {"ttft_ms": 1000, "tpot_ms": 60}, "constraints": {"gpus": ["h100-sxm"]},
             "sweep": {"arrival_rates_rps": [5]}, "provider": "coreweave"}  # fmt: skip
    response = seeded.post("/v1/what-if", json=sweep, headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["provider"] == "coreweave"
    [point] = answer["points"]
    assert point["provider"] == "coreweave"
    assert point["price_usd_per_gpu_hour"] == pytest.approx(COREWEAVE_ON_DEMAND["h100-sxm"], abs=CENT / 2)
    assert point["cost_usd_per_hour"] == pytest.approx(point["gpus_total"] * COREWEAVE_ON_DEMAND["h100-sxm"], abs=CENT / 2)
