"""`headroom plan FILE` with a class request (POST /v1/plans' `classes` body) in process: the same
arrangement and cost the route answers, stored, a named one made the deployment's plan in force,
the table output per pool and class, and a bad class request as exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.api.client import ApiClient  # over the same database local_url seeded
from tests.api.test_classes_plans import WORKED
from tests.api.test_cli_plan import local_url, run, write

__all__ = ["local_url"]  # the fixture, imported for these tests


def test_a_class_request_file_plans_in_process_as_the_route_does(
    local_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], client: ApiClient, admin: dict[str, str]
) -> None:
    request = write(tmp_path / "classes.json", WORKED)
    code, out, err = run(capsys, "--database-url", local_url, "plan", request, "--deployment", "mix")
    assert code == 0, err
    planned = json.loads(out)
    route = client.post("/v1/plans", json={**WORKED, "store": False}, headers=admin).json()
    assert planned["arrangement"] == route["arrangement"]
    assert planned["cost_usd_per_hour"] == pytest.approx(route["cost_usd_per_hour"])
    assert [k["name"] for k in planned["classes"]] == ["chat", "summarise"]
    assert planned["name"] == "mix"

    # the named class plan is the deployment's plan in force: re-planned as a class deployment
    code, out, err = run(capsys, "--database-url", local_url, "replan", "mix", "--demand", write(tmp_path / "r.json", {}))
    assert code == 0, err
    replanned = json.loads(out)
    assert replanned["current"] == planned["id"] and replanned["changed"] is False

    code, out, err = run(capsys, "--database-url", local_url, "plan", request, "--format", "table")
    assert code == 0, err
    table = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in out.splitlines()}
    assert table["arrangement"] == route["arrangement"]["chosen"]
    assert table["class chat"].startswith("p99 TTFT") and "meets its target" in table["class chat"]
    assert {label for label in table if label.startswith("pool ")} == {f"pool {p['name']}" for p in route["pools"]}


def test_a_bad_class_request_file_is_exit_2(local_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = {**WORKED, "classes": [{**WORKED["classes"][0], "deadline_h": 6}]}  # both slo and deadline_h
    code, _, err = run(capsys, "--database-url", local_url, "plan", write(tmp_path / "bad.json", bad))
    assert code == 2 and "classes" in err and "exactly one of slo and deadline_h" in err
