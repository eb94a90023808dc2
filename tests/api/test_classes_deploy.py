"""GET /v1/plans/{id}/deploy for a stored class plan, through the real app: one command (vllm,
sglang, trt-llm) or one Deployment and Service (k8s) per pool of the chosen arrangement with each
pool's own knobs, and for a shared priority pool vLLM's `--scheduling-policy priority` with the
`priority` each class's requests must carry; the engines with no cited priority scheduling are 422
naming the targets that render it.

The worked example on any GPU of the reference catalog is segregated (a pool per class); no request on that catalog was found where the priority pool wins outright (it ties the FCFS pool
or loses to segregation), so the priority plan here is the worked example's stored plan with its
arrangement changed to one shared priority pool, saved in the plan store the way POST stores one."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
import pytest
import yaml
from sqlalchemy import Engine

from api.deploy import ENGINES, engine_cli
from catalog.db import make_session_factory
from catalog.plans import Plans, new_plan_id
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_classes_plans import WORKED
from tests.api.test_deploy import K8S_VERSION, commands, deploy, flags


@pytest.fixture
def class_plan(seeded: ApiClient, admin: dict[str, str]) -> dict[str, Any]:
    response = seeded.post("/v1/plans", json={**WORKED, "constraints": {}}, headers=admin)
    assert response.status_code == 201, response.text
    plan: dict[str, Any] = response.json()
    assert plan["arrangement"]["chosen"] == "segregated" and len(plan["pools"]) == 2  # a pool per class
    return plan


@pytest.fixture
def priority_plan(class_plan: dict[str, Any], engine: Engine) -> dict[str, Any]:
    """The worked example's plan with one shared priority pool (the chat pool's configuration) serving both classes."""
    plan = copy.deepcopy(class_plan)
    shared = plan["pools"][0] | {"name": "shared", "classes": ["chat", "summarise"], "scheduling": "priority"}
    plan |= {"id": new_plan_id(), "pools": [shared]}
    plan["arrangement"]["chosen"] = "shared_priority"
    for k in plan["classes"]:
        k["pool"] = "shared"
    with make_session_factory(engine)() as session, session.begin():
        stored = Plans(session).get(class_plan["id"])
        Plans(session).save(
            plan_id=plan["id"],
            name=None,
            request=stored.request,
            response=plan,
            catalog_version=stored.catalog_version,
            created_at=datetime.now(UTC),
        )
    return plan


def test_vllm_renders_a_command_per_pool_with_its_own_knobs(seeded: ApiClient, class_plan: dict[str, Any]) -> None:
    script = deploy(seeded, class_plan["id"], "vllm")
    argvs = commands(script)
    assert len(argvs) == len(class_plan["pools"])
    for argv, pool in zip(argvs, class_plan["pools"], strict=True):
        got = flags(argv)
        assert got["--tensor-parallel-size"] == str(pool["tp"])
        assert got["--max-num-seqs"] == str(pool["batch_limit"])
        reserve = class_plan["provenance"]["efficiencies"][pool["gpu"]]["memory_reserve_fraction"]
        assert float(got["--gpu-memory-utilization"]) == pytest.approx(1 - reserve, abs=1e-4)
        assert "--scheduling-policy" not in got  # segregated pools are FCFS
        assert set(got) <= set(engine_cli()["vllm"]["flags"])
        assert f"pool {pool['name']} (classes {', '.join(pool['classes'])})" in script
    assert f"arrangement {class_plan['arrangement']['chosen']}" in script


@pytest.mark.parametrize("target", ["sglang", "trt-llm"])
def test_the_other_engines_render_fcfs_pools(seeded: ApiClient, class_plan: dict[str, Any], target: str) -> None:
    argvs = commands(deploy(seeded, class_plan["id"], target))
    assert len(argvs) == len(class_plan["pools"])
    for argv in argvs:
        assert set(flags(argv)) <= set(engine_cli()[target]["flags"])


def test_k8s_renders_a_deployment_and_a_service_per_pool(seeded: ApiClient, class_plan: dict[str, Any]) -> None:
    documents = list(yaml.safe_load_all(deploy(seeded, class_plan["id"], "k8s")))
    assert [d["kind"] for d in documents] == ["Deployment", "Service"] * len(class_plan["pools"])
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    deployments = [d for d in documents if d["kind"] == "Deployment"]
    assert [d["spec"]["replicas"] for d in deployments] == [p["replicas"] for p in class_plan["pools"]]
    assert [d["metadata"]["annotations"]["headroom/pool"] for d in deployments] == [p["name"] for p in class_plan["pools"]]
    services = [d for d in documents if d["kind"] == "Service"]
    assert [s["spec"]["selector"] for s in services] == [{"app.kubernetes.io/name": d["metadata"]["name"]} for d in deployments]


def test_a_priority_pool_gets_vllms_priority_scheduling(seeded: ApiClient, priority_plan: dict[str, Any]) -> None:
    """`--scheduling-policy priority` on the shared pool, and each class's `priority` in the script:
    chat 0 (served first, as the plan's 0 is) and summarise 1."""
    script = deploy(seeded, priority_plan["id"], "vllm")
    [argv] = commands(script)
    got = flags(argv)
    assert got["--scheduling-policy"] == "priority"
    assert set(got) <= set(engine_cli()["vllm"]["flags"])
    assert '"priority" in its JSON body: chat 0, summarise 1' in script
    assert "SchedulerPolicy" not in script and "docs.vllm.ai" in script  # the cited source's address

    text = deploy(seeded, priority_plan["id"], "k8s")
    documents = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in documents] == ["Deployment", "Service"]
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    container = documents[0]["spec"]["template"]["spec"]["containers"][0]
    assert flags(container["args"])["--scheduling-policy"] == "priority"
    assert documents[0]["metadata"]["annotations"]["headroom/classes"] == "chat=0,summarise=1"
    assert "chat 0, summarise 1" in text


@pytest.mark.parametrize("target", [e for e in ENGINES if e != "vllm"])
def test_engines_without_cited_priority_scheduling_are_422(seeded: ApiClient, priority_plan: dict[str, Any], target: str) -> None:
    problem = assert_problem(seeded.get(f"/v1/plans/{priority_plan['id']}/deploy", params={"target": target}), 422)
    assert "priority pool shared" in problem["detail"] and "vllm, k8s" in problem["detail"]


def test_a_deferred_plan_renders_its_off_peak_pool(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The day-profile example of tests/api/test_classes_plans.py chooses deferral: the interactive pool
    at its peak and a deferred pool whose replicas are the most it rents in any period, said in its header."""
    office = [60 if 9 <= hour < 17 else 15 for hour in range(24)]
    chat, summarise = WORKED["classes"]
    body = {**WORKED, "constraints": {}, "classes": [{**chat, "demand_rps": office}, {**summarise, "deadline_h": 12}]}
    plan = seeded.post("/v1/plans", json=body, headers=admin).json()
    assert plan["arrangement"]["chosen"] == "deferred"
    assert [p["name"] for p in plan["pools"]] == ["interactive", "deferred"]
    script = deploy(seeded, plan["id"], "vllm")
    assert [flags(a)["--max-num-seqs"] for a in commands(script)] == [str(p["batch_limit"]) for p in plan["pools"]]
    deferred = plan["pools"][1]
    assert f"pool deferred (classes summarise): {deferred['replicas']} replica(s) (the most rented in any period" in script
