"""Charts through the real API on the seeded reference catalog: each SVG parses as XML, carries its
title, axis titles and legend, and the series it drew (its `<metadata>` block) equal the numbers
of the JSON the same plan, fleet plan, sweep or capacity question answers; each PNG is a PNG of the
figure's size; unknown plans and charts are 404, a plan without the section a chart needs is 422."""

from __future__ import annotations

import json
import math
import struct
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from api.charts import DPI, METADATA_ID
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_batch_jobs import SUMMARIES
from tests.api.test_capacity import SIXTEEN_H100
from tests.api.test_fleet_plans import body as fleet_body
from tests.api.test_what_if import SWEEP

SVG = "{http://www.w3.org/2000/svg}"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: Chat on an 8B model over two GPU types, verified, so the wall has the simulator's point and the
#: alternatives chart has the other GPU type.
CHAT: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 15, "prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm", "a100-80gb-sxm"]},
    "verify": True,
}


def _plan(api: ApiClient, admin: dict[str, str], body: dict[str, Any] = CHAT) -> dict[str, Any]:
    response = api.post("/v1/plans", json=body, headers=admin)
    assert response.status_code == 201, response.text
    plan: dict[str, Any] = response.json()
    return plan


def _svg(response: Any) -> tuple[ET.Element, dict[str, Any], list[str]]:
    """The parsed SVG, its drawn series and every text it shows."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/svg+xml"
    root = ET.fromstring(response.content)
    assert root.tag == f"{SVG}svg"
    (block,) = [m for m in root.iter(f"{SVG}metadata") if m.get("id") == METADATA_ID]
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    return root, json.loads(block.text or ""), texts


def _ids(root: ET.Element) -> set[str]:
    return {e.get("id", "") for e in root.iter()}


def _png_size(response: Any) -> tuple[int, int]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    assert response.content[:8] == PNG_SIGNATURE
    assert response.content[12:16] == b"IHDR"
    width, height = struct.unpack(">II", response.content[16:24])
    return width, height


def _has(texts: list[str], *wanted: str) -> None:
    for text in wanted:
        assert any(text in shown for shown in texts), f"{text!r} not among {texts}"


def test_the_wall_draws_the_rho_curve_slo_lines_plan_and_simulator(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _plan(seeded, admin)
    root, drawn, texts = _svg(seeded.get(f"/v1/plans/{plan['id']}/charts/wall.svg"))
    queueing = plan["justification"]["queueing"]
    curve = queueing["rho_curve"]
    assert drawn["rate_rps"] == [p["arrival_rate_rps"] for p in curve]
    assert drawn["ttft_ms"] == pytest.approx([p["ttft_s"] * 1e3 for p in curve])
    assert drawn["tpot_ms"] == pytest.approx([p["tpot_s"] * 1e3 for p in curve])
    assert drawn["e2e_s"] == [p["e2e_s"] for p in curve]
    assert drawn["slo"] == {"ttft_ms": 1000, "tpot_ms": 60}  # the request's own numbers, exactly, not 60.00000000000001
    assert drawn["plan_rate_rps"] == plan["predicted"]["per_replica_rate_rps"] == 15.0 / plan["plan"]["replicas"]
    sensitivity = plan["justification"]["sensitivity"]
    assert drawn["max_rate_rps"] == pytest.approx(
        sensitivity["max_arrival_rate_rps_within_slo"] / plan["plan"]["replicas"], rel=1e-5
    )
    simulated = plan["verification"]["simulated"]
    assert drawn["simulated"]["rate_rps"] == plan["verification"]["per_replica_rate_rps"]
    assert drawn["simulated"]["ttft_ms"]["value"] == pytest.approx(simulated["ttft_s"]["at_percentile"] * 1e3)
    assert drawn["simulated"]["e2e_s"]["ci"] == simulated["p99_ci_s"]["e2e"]  # the SLO's percentile is the 99th
    record = plan["predicted"]["of_record"]["ttft_ms"]
    if record["method"] == "simulated":  # the analytic model flagged the point: the plan is held to the simulator's figure
        assert drawn["simulated"]["ttft_ms"]["value"] == pytest.approx(record["value"], rel=1e-3)
    else:
        assert plan["predicted"]["reliable"] and record["value"] == pytest.approx(plan["predicted"]["ttft_ms"]["at_percentile"])
    assert {"curve-ttft_ms", "slo-ttft_ms", "plan-ttft_ms", "max-rate-ttft_ms", "simulated-ttft_ms", "legend"} <= _ids(root)
    _has(texts, "Latency wall of llama-3.1-8b", "Arrival rate per replica, requests/s", "Time to first token (p99), ms",
         "Time per output token (p99), ms", "End-to-end latency (p99), s", "SLO 1000 ms", "SLO 60 ms", "p99, queueing model",
         "simulator, 95% CI of the p99", "headroom: +")  # fmt: skip
    headroom = sensitivity["headroom_fraction"]
    _has(texts, f"headroom: +{drawn['max_rate_rps'] / drawn['plan_rate_rps'] - 1:.1%}")
    assert math.isclose(drawn["max_rate_rps"] / drawn["plan_rate_rps"] - 1, headroom, rel_tol=1e-3)
    assert _png_size(seeded.get(f"/v1/plans/{plan['id']}/charts/wall.png")) == (10 * DPI, 9 * DPI)


def test_the_knee_is_the_stored_step_model_and_passes_through_the_roofline(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _plan(seeded, admin)
    root, drawn, texts = _svg(seeded.get(f"/v1/plans/{plan['id']}/charts/knee.svg"))
    justification = plan["justification"]
    for point in justification["roofline"]["decode"]:  # recomputed from the step model = what the plan stored
        at = drawn["batch"].index(point["batch"])
        assert drawn["output_tokens_per_s"][at] == pytest.approx(point["output_tokens_per_s"], rel=1e-4)
        assert drawn["flops_per_byte"][at] == pytest.approx(point["flops_per_byte"], rel=1e-4)
        assert drawn["bound"][at] == point["bound"]
    assert drawn["roofline"] == [
        {"at": d["at"], "batch": d["batch"], "output_tokens_per_s": d["output_tokens_per_s"]}
        for d in justification["roofline"]["decode"]
    ]
    break_even = justification["roofline"]["break_even_flops_per_byte"]
    assert drawn["break_even_flops_per_byte"] == break_even == justification["step_model"]["break_even_flops_per_byte"]
    # one token per sequence per step: per-replica = batch × per-user; compute-bound exactly past the break-even intensity
    for batch, total, per_user, intensity, bound in zip(
        drawn["batch"],
        drawn["output_tokens_per_s"],
        drawn["per_user_tokens_per_s"],
        drawn["flops_per_byte"],
        drawn["bound"],
        strict=True,
    ):
        assert total == pytest.approx(batch * per_user)
        assert bound == ("compute" if intensity > break_even else "memory")
    assert drawn["batch"] == sorted(set(drawn["batch"])) and drawn["batch"][0] == 1
    assert drawn["kv_limit"] == justification["memory"]["concurrency_limit_by_kv"]
    assert drawn["batch_limit"] == plan["plan"]["batch_limit"] == justification["memory"]["batch_limit"]
    assert max(drawn["batch"]) >= max(drawn["kv_limit"], drawn["batch_limit"])
    assert {"per-replica", "per-user", "roofline-points", "kv-limit", "batch-limit", "break-even", "intensity", "legend"} <= _ids(
        root
    )
    _has(texts, "Throughput knee of llama-3.1-8b", "Output tokens/s per replica", "Output tokens/s per user",
         "Batch size (sequences decoding together), log scale", "Arithmetic intensity, FLOP/byte",
         f"KV-cache limit: {drawn['kv_limit']} sequences", f"planned batch limit: {drawn['batch_limit']}",
         f"break-even: {break_even:.0f} FLOP/byte", "memory-bound")  # fmt: skip
    assert _png_size(seeded.get(f"/v1/plans/{plan['id']}/charts/knee.png")) == (10 * DPI, 8 * DPI)


def test_the_cost_staircase_meets_the_sensitivity_levels(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _plan(seeded, admin, {**CHAT, "verify": False, "workload": {**CHAT["workload"], "arrival_rate_rps": 40}})
    root, drawn, texts = _svg(seeded.get(f"/v1/plans/{plan['id']}/charts/cost.svg"))
    sensitivity = plan["justification"]["sensitivity"]
    assert drawn["arrival_rate_rps"] == 40
    assert drawn["cost_usd_per_hour"] == plan["cost"]["usd_per_hour"]
    assert drawn["max_arrival_rate_rps_within_slo"] == sensitivity["max_arrival_rate_rps_within_slo"]
    assert [(lv["arrival_rate_rps"], lv["cost_usd_per_hour"]) for lv in drawn["levels"]] == [
        (t["arrival_rate_rps"], t["cost_usd_per_hour"]) for t in sensitivity["traffic"]
    ]
    stair = drawn["staircase"]
    per_replica = plan["cost"]["usd_per_hour"] / plan["plan"]["replicas"]
    assert stair["usd_per_hour_per_replica"] == pytest.approx(per_replica)
    assert stair["cost_usd_per_hour"] == pytest.approx([n * per_replica for n in stair["replicas"]])

    def stair_cost(rate: float) -> float:  # drawn `where="pre"`: a step's cost holds up to and including its demand
        return next(c for d, c in zip(stair["demand_rps"], stair["cost_usd_per_hour"], strict=True) if d >= rate)

    assert stair_cost(40) == pytest.approx(plan["cost"]["usd_per_hour"], abs=0.01)  # the plan sits on its staircase
    for level in sensitivity["traffic"]:  # the configuration grown, as the planner priced it
        assert stair_cost(level["arrival_rate_rps"]) == pytest.approx(level["same_configuration"]["cost_usd_per_hour"], abs=0.01)
    assert {"staircase", "plan", "replanned", "same-configuration", "max-rate", "legend"} <= _ids(root)
    _has(texts, "Cost against demand", "Demand, requests/s", "Cost, USD per hour (on demand)", "Replicas (this configuration)",
         "re-planned at +10/25/50 % traffic", f"${plan['cost']['usd_per_hour']:.2f}/h")  # fmt: skip
    assert _png_size(seeded.get(f"/v1/plans/{plan['id']}/charts/cost.png")) == (10 * DPI, 6 * DPI)


def test_the_alternatives_chart_has_each_cost_and_reason(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _plan(seeded, admin, {**CHAT, "verify": False})
    root, drawn, texts = _svg(seeded.get(f"/v1/plans/{plan['id']}/charts/alternatives.svg"))
    alternatives = plan["justification"]["alternatives"]
    rows = drawn["rows"]
    assert len(rows) == 1 + len(alternatives) >= 2
    assert rows[0]["kind"] == "plan" and rows[0]["cost_usd_per_hour"] == plan["cost"]["usd_per_hour"]
    for row, alternative in zip(rows[1:], alternatives, strict=True):
        assert row["label"] == f"{alternative['kind']} {alternative['name']}"
        assert row["reason"] == alternative["reason"]
        assert row["exact"] == (alternative["cost_usd_per_hour"] is not None)
        assert row["cost_usd_per_hour"] == (alternative["cost_usd_per_hour"] or alternative["cost_at_least_usd_per_hour"])
    assert {f"bar-{i}" for i, row in enumerate(rows) if row["cost_usd_per_hour"] is not None} <= _ids(root)
    _has(texts, "Alternatives to the plan for llama-3.1-8b", "Cost, USD per hour (on demand)", "Why it lost", "exact cost",
         "at least (a proven lower bound)", *(row["label"] for row in rows))  # fmt: skip
    assert _png_size(seeded.get(f"/v1/plans/{plan['id']}/charts/alternatives.png")) == (
        12 * DPI,
        round((1.6 + 0.55 * len(rows)) * DPI),
    )


def test_a_chart_is_the_same_bytes_each_time(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _plan(seeded, admin, {**CHAT, "verify": False})
    first = seeded.get(f"/v1/plans/{plan['id']}/charts/cost.svg")
    assert first.content == seeded.get(f"/v1/plans/{plan['id']}/charts/cost.svg").content
    assert b"<dc:date>" not in first.content and b"http" not in first.content.split(b"<metadata id")[0].replace(
        b"http://www.w3.org", b""
    )


def test_unknown_plans_and_charts_are_404_and_a_batch_job_has_no_wall(seeded: ApiClient, admin: dict[str, str]) -> None:
    assert_problem(seeded.get("/v1/plans/" + "0" * 32 + "/charts/wall.svg"), 404, "not-found")
    assert_problem(seeded.get("/v1/fleet-plans/" + "0" * 32 + "/charts/day.png"), 404, "not-found")
    plan = _plan(seeded, admin, {**CHAT, "verify": False})
    problem = assert_problem(seeded.get(f"/v1/plans/{plan['id']}/charts/pie.svg"), 404, "not-found")
    assert "wall, knee, cost, alternatives" in problem["detail"]
    assert seeded.get(f"/v1/plans/{plan['id']}/charts/wall.gif").status_code == 404
    job = _plan(seeded, admin, {**SUMMARIES, "verify": False})
    for name in ("wall", "knee", "cost", "alternatives"):
        problem = assert_problem(seeded.get(f"/v1/plans/{job['id']}/charts/{name}.svg"), 422)
        assert problem["chart"] == name and problem["missing"] == "justification"
        assert "batch job" in problem["detail"]


def test_the_fleet_day_stacks_each_periods_gpus_against_demand(seeded: ApiClient, admin: dict[str, str]) -> None:
    created = seeded.post("/v1/fleet-plans", json=fleet_body(), headers=admin)
    assert created.status_code == 201, created.text
    fleet = created.json()
    root, drawn, texts = _svg(seeded.get(f"/v1/fleet-plans/{fleet['id']}/charts/day.svg"))
    periods = fleet["periods"]
    assert drawn["start_hour"] == [p["start_hour"] for p in periods]
    assert drawn["period_hours"] == fleet["period_hours"]
    for i, period in enumerate(periods):  # reserved + on demand + spot = what the period holds, per GPU type
        for gpu, held in period["gpus_held"].items():
            assert sum(counts[i] for name, counts in drawn["gpus"].items() if name.split(" ", 1)[0] == gpu) == held
        assert drawn["held"][i] == sum(period["gpus_held"].values())
        assert {w: drawn["demand_rps"][w][i] for w in period["demand_rps"]} == period["demand_rps"]
    for gpu, count in fleet["reserved_gpus"].items():
        assert drawn["gpus"][f"{gpu} reserved"] == [count] * len(periods)
    assert {f"demand-{w}" for w in periods[0]["demand_rps"]} <= _ids(root)
    _has(texts, "Fleet over the day", "Hour of the day", "GPUs held", "Demand, requests/s", "demand: chat", "l40s, reserved")
    assert _png_size(seeded.get(f"/v1/fleet-plans/{fleet['id']}/charts/day.png")) == (11 * DPI, 6 * DPI)


def test_the_sweep_chart_is_the_what_if_answer(seeded: ApiClient, admin: dict[str, str]) -> None:
    body = {**SWEEP, "sweep": {"arrival_rates_rps": [4, 20, 40]}}
    table = seeded.post("/v1/what-if", json=body, headers=admin).json()
    root, drawn, texts = _svg(seeded.post("/v1/what-if/charts/sweep.svg", json=body, headers=admin))
    assert drawn["x"] == "arrival_rate_rps"
    (group,) = drawn["groups"].values()
    assert group["x"] == [p["arrival_rate_rps"] for p in table["points"]] == [4, 20, 40]
    assert group["y"] == [p["cost_usd_per_hour"] for p in table["points"]]
    assert "sweep-0" in _ids(root)
    _has(texts, "What-if: cost of llama-3.1-8b against arrival rate", "Arrival rate, requests/s", "Cost, USD per hour (on demand)",
         "cheapest plan")  # fmt: skip
    assert _png_size(seeded.post("/v1/what-if/charts/sweep.png", json=body, headers=admin)) == (10 * DPI, 6 * DPI)
    assert_problem(seeded.post("/v1/what-if/charts/sweep.svg", json=body), 401)


def test_the_capacity_wall_is_the_capacity_curve(seeded: ApiClient) -> None:
    answer = seeded.post("/v1/capacity", json=SIXTEEN_H100).json()
    root, drawn, texts = _svg(seeded.post("/v1/capacity/charts/wall.svg", json=SIXTEEN_H100))
    curve = answer["curve"]
    assert drawn["rate_rps"] == [p["arrival_rate_rps"] for p in curve]
    assert drawn["ttft_ms"] == [p["ttft_ms"] for p in curve]
    assert drawn["tpot_ms"] == [p["tpot_ms"] for p in curve]
    assert drawn["e2e_s"] == [p["e2e_s"] for p in curve]
    assert drawn["slo"] == {"ttft_ms": 1000, "tpot_ms": 60}
    assert drawn["max_rate_rps"] == answer["max_rps_per_replica"] == curve[-1]["arrival_rate_rps"]
    assert drawn["plan_rate_rps"] is None and drawn["simulated"] is None
    assert {"curve-tpot_ms", "slo-tpot_ms", "max-rate-tpot_ms"} <= _ids(root)
    _has(texts, "Latency wall of llama-3.1-8b on 16 × h100-sxm", "Arrival rate per replica, requests/s", "SLO 60 ms")
    assert _png_size(seeded.post("/v1/capacity/charts/wall.png", json=SIXTEEN_H100)) == (10 * DPI, 9 * DPI)
    # a client that takes any binary (one generated from the OpenAPI document) gets the same bytes as such
    binary = seeded.post("/v1/capacity/charts/wall.svg", json=SIXTEEN_H100, headers={"Accept": "application/octet-stream"})
    assert binary.headers["content-type"] == "application/octet-stream"
    assert binary.content == seeded.post("/v1/capacity/charts/wall.svg", json=SIXTEEN_H100, headers={"Accept": "*/*"}).content
    assert_problem(seeded.post("/v1/capacity/charts/wall.svg", json={**SIXTEEN_H100, "gpu": "no-such-gpu"}), 404)
