"""Every pool that runs in stages or expert-parallel shows its parallel section, as an aggregated plan's
justification.parallel does (issue 14 §2: "the plan's justification shows the per-stage and communication terms").

Through the real app: Llama-3.1-405B in BF16 on H100 disaggregated (both pools 16-GPU pipelines,
tests/api/test_disagg_pipeline.py) and arranged in traffic classes (tests/api/test_classes_pipeline.py), and a
Mixtral class pool at ep 8 (the single-class planner's ep choice for long prompts, tests/api/test_expert_parallel_plans.py).
Each section is compared with the planner's own builder (planner/pipeline.py `parallel_section` on `parallel_terms`)
over the pool's step model from the same catalog, at the batch, context and prompt the section states; the context
and prompt are checked against the workload's means. The app gets a long request timeout: the machine the suite runs
on is shared, and the timeout is not what these tests check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.inputs import planning_inputs
from api.schemas.classes import ClassesPlanRequest
from api.schemas.plans import PlanRequest
from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from planner.expert_parallel import expert_parallel_step_model
from planner.performance import build_step_model
from planner.pipeline import parallel_section, parallel_terms
from planner.planning import PlanningInputs
from planner.precision import activation_bytes
from planner.traffic_classes import merged_workload
from tests.api.client import ApiClient
from tests.api.test_classes_pipeline import CLASSES_405B
from tests.api.test_disagg_pipeline import DISAGG_405B
from tests.api.test_expert_parallel_plans import REQUEST as MIXTRAL_LONG_PROMPTS
from tests.api.test_pipeline_plans import REQUEST_405B

REL = 1e-3  # the plan response rounds to 4 significant digits (api/rounding.py)


@pytest.fixture
def unhurried(make_client: Callable[..., ApiClient], migrated_database_url: str) -> ApiClient:
    """A client over the reference catalog whose planning requests may take 10 minutes (a loaded machine)."""
    client = make_client(request_timeout_s=600.0)
    engine = make_engine(migrated_database_url)
    try:
        with make_session_factory(engine)() as session:
            assert Catalog(session).load_reference_catalog()
            session.commit()
    finally:
        engine.dispose()
    return client


@pytest.fixture
def inputs_of(migrated_database_url: str) -> Iterator[Callable[[dict[str, Any]], PlanningInputs]]:
    """The planner's inputs for a plan body, from the same catalog the app reads."""
    engine = make_engine(migrated_database_url)

    def build(body: dict[str, Any]) -> PlanningInputs:
        with make_session_factory(engine)() as session:
            return planning_inputs(PlanRequest.model_validate(body), Catalog(session))[0]

    yield build
    engine.dispose()


def _expected(section: dict[str, Any], pool: dict[str, Any], inputs: PlanningInputs) -> dict[str, Any]:
    """The planner's section for `pool` at the batch, context and prompt `section` states."""
    gpu = next(g for g in inputs.gpus if g.slug == pool["gpu"])
    precision = next(
        p
        for p in inputs.precisions
        if (p.weights.slug, p.kv_cache.slug) == (pool["precision"]["weights"], pool["precision"]["kv_cache"])
    )
    tp, pp, ep = pool["tp"], pool.get("pp", 1), pool.get("ep", 1)
    sm = (
        expert_parallel_step_model(gpu, inputs.model, precision, ep, gpu.efficiency)
        if ep > 1
        else build_step_model(gpu, inputs.model, precision, tp, gpu.efficiency, pp=pp)
    )
    terms = parallel_terms(gpu, inputs.model, tp, pp, ep, activation_bytes(precision.weights))
    built = parallel_section(
        terms,
        sm,
        batch=section["decode_batch"],
        context_tokens=section["context_tokens"],
        prompt_tokens=section["prompt_tokens"],
    )
    return {
        "tp": built.tp,
        "pp": built.pp,
        "ep": built.ep,
        "gpus_per_replica": built.gpus_per_replica,
        "nodes_per_replica": built.nodes_per_replica,
        "stage_layers": built.stage_layers,
        "hop_links": list(built.hop_links),
        "tp_link": built.tp_link,
        **{
            name: pytest.approx(getattr(built, name), rel=REL, abs=1e-12)
            for name in (
                "stage_imbalance",
                "tp_comm_s_per_token",
                "tp_comm_latency_s",
                "hop_s_per_token",
                "hop_latency_s",
                "ep_comm_s_per_token",
                "ep_comm_latency_s",
                "decode_step_s",
                "stage_s",
                "hops_s",
                "lone_prefill_s",
                "lone_bubble_fraction",
            )
        },
    }


def _shown(section: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    return {name: section[name] for name in expected}


def test_each_405b_disaggregated_pool_shows_its_stages(
    unhurried: ApiClient, admin: dict[str, str], inputs_of: Callable[[dict[str, Any]], PlanningInputs]
) -> None:
    """Both pools are 16 H100 in stages over 2 nodes (126 layers; tp 8 × pp 2 decode, a 16-GPU prefill pipeline), so
    each pool's `parallel` is the planner's section for its layout: the decode pool's step at its mean batch, the
    prefill pool's at one sequence (it batches no decodes), context = 1,000 + 200 / 2 = 1,100 tokens, the lone prompt
    1,000 tokens with bubble (pp − 1)/pp. The explanation names both pools' stages."""
    response = unhurried.post("/v1/plans", json=DISAGG_405B, headers=admin)
    assert response.status_code == 201, response.text
    body = response.json()
    pools = {pool["role"]: pool for pool in body["plan"]["pools"]}
    shown = {pool["role"]: pool["parallel"] for pool in body["disaggregation"]["pools"]}
    assert set(shown) == {"prefill", "decode"}
    inputs = inputs_of(DISAGG_405B)
    for role, section in shown.items():
        pool = pools[role]
        assert section is not None, role
        expected = _expected(section, pool, inputs)
        assert _shown(section, expected) == expected, role
        assert (section["tp"], section["pp"], section["gpus_per_replica"]) == (pool["tp"], pool["pp"], 16)
        assert section["nodes_per_replica"] == 2 and section["stage_layers"] == -(-126 // pool["pp"])  # ⌈126 / pp⌉
        assert (section["context_tokens"], section["prompt_tokens"]) == (1100, 1000)
        assert section["lone_bubble_fraction"] == pytest.approx((pool["pp"] - 1) / pool["pp"])
        assert section["decode_step_s"] == pytest.approx(pool["pp"] * section["stage_s"] + section["hops_s"], rel=REL)
    assert shown["prefill"]["decode_batch"] == 1
    assert shown["decode"]["decode_batch"] >= 1
    why = body["disaggregation"]["why"]
    assert "pools[].parallel" in why, why
    for role, pool in pools.items():
        assert f"{role} pool tp {pool['tp']} × pp {pool['pp']} = 16 GPUs over 2 node(s)" in why, why


def test_pools_at_pp_1_show_no_parallel_section(unhurried: ApiClient, admin: dict[str, str]) -> None:
    """An 8B model fits one GPU: its disaggregated pools run no stages, so `parallel` is null and the explanation adds
    nothing about stages."""
    body = {
        "model": "llama-3.1-8b",
        "workload": {
            "arrival_rate_rps": 2,
            "prompt_tokens": {"mean": 1000, "p99": 4000},
            "output_tokens": {"mean": 200, "p99": 800},
        },
        "slo": {"ttft_ms": 2000, "tpot_ms": 60},
        "constraints": {"gpus": ["h100-sxm"], "topology": "disaggregated"},
        "verify": False,
    }
    response = unhurried.post("/v1/plans", json=body, headers=admin)
    assert response.status_code == 201, response.text
    section = response.json()["disaggregation"]
    assert [pool["parallel"] for pool in section["pools"]] == [None, None]
    assert "pools[].parallel" not in section["why"]


def _class_sections(plan: dict[str, Any], request: dict[str, Any], inputs: PlanningInputs) -> None:
    """Each pool's section is the planner's for its layout, at its classes' merged mean context and prompt."""
    classes = {k.name: k.to_class() for k in ClassesPlanRequest.model_validate(request).classes}
    for pool in plan["pools"]:
        section = pool["parallel"]
        assert section is not None, pool
        expected = _expected(section, pool, inputs)
        assert _shown(section, expected) == expected, pool["name"]
        workload = merged_workload([classes[name] for name in pool["classes"]])
        context = round(workload.prompt_tokens.mean + workload.output_tokens.mean / 2)
        assert (section["context_tokens"], section["prompt_tokens"]) == (context, round(workload.prompt_tokens.mean))
        assert section["decode_batch"] >= 1


def test_each_405b_class_pool_shows_its_stages(
    unhurried: ApiClient, admin: dict[str, str], inputs_of: Callable[[dict[str, Any]], PlanningInputs]
) -> None:
    """Every pool of the chosen arrangement is a 16-GPU pipeline, and each shows the planner's section for it; the
    chosen arrangement's reason names the stages."""
    response = unhurried.post("/v1/plans", json=CLASSES_405B, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["pools"] and all(pool["pp"] >= 2 for pool in plan["pools"]), plan["pools"]
    assert (REQUEST_405B["model"], REQUEST_405B["constraints"]) == (CLASSES_405B["model"], CLASSES_405B["constraints"])
    _class_sections(plan, CLASSES_405B, inputs_of(REQUEST_405B))  # the same model, GPUs and precisions
    for pool in plan["pools"]:
        section = pool["parallel"]
        assert section["decode_step_s"] == pytest.approx(pool["pp"] * section["stage_s"] + section["hops_s"], rel=REL)
        assert section["lone_bubble_fraction"] == pytest.approx((pool["pp"] - 1) / pool["pp"])
    [chosen] = [c for c in plan["arrangement"]["compared"] if c["name"] == plan["arrangement"]["chosen"]]
    assert "pools[].parallel" in chosen["reason"], chosen
    assert all(f"{pool['name']} pool tp {pool['tp']} × pp {pool['pp']}" in chosen["reason"] for pool in plan["pools"])
    stored = unhurried.get(f"/v1/plans/{plan['id']}")
    assert stored.status_code == 200, stored.text
    assert [pool["parallel"] for pool in stored.json()["pools"]] == [pool["parallel"] for pool in plan["pools"]]


MIXTRAL_CLASSES: dict[str, Any] = {
    "model": MIXTRAL_LONG_PROMPTS["model"],
    "classes": [
        {
            "name": "documents",
            "arrival_rate_rps": 60,
            "prompt_tokens": {"mean": 4000, "p99": 8000},
            "output_tokens": {"mean": 100, "p99": 300},
            "slo": {"ttft_ms": 10000, "tpot_ms": 200},
        }
    ],
    "constraints": MIXTRAL_LONG_PROMPTS["constraints"],
    "verify": False,
}


def test_a_mixtral_ep_class_pool_shows_its_all_to_all(
    unhurried: ApiClient, admin: dict[str, str], inputs_of: Callable[[dict[str, Any]], PlanningInputs]
) -> None:
    """One class of Mixtral long prompts is planned by the single-class planner, which runs ep 8 on 8 H100 for them
    (tests/api/test_expert_parallel_plans.py): the pool's section shows the all-to-all and no all-reduce (attention
    data-parallel), one stage (no hops, no bubble), as the planner builds it for the ep group."""
    response = unhurried.post("/v1/plans", json=MIXTRAL_CLASSES, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    [pool] = plan["pools"]
    assert (pool["tp"], pool["pp"], pool["ep"]) == (8, 1, 8), pool
    _class_sections(plan, MIXTRAL_CLASSES, inputs_of(MIXTRAL_LONG_PROMPTS))
    section = pool["parallel"]
    assert section["tp_comm_s_per_token"] == 0.0 and section["ep_comm_s_per_token"] > 0
    assert section["hops_s"] == 0.0 and section["lone_bubble_fraction"] == 0.0
    [chosen] = [c for c in plan["arrangement"]["compared"] if c["name"] == plan["arrangement"]["chosen"]]
    assert "tp 8 × pp 1, ep 8" in chosen["reason"] and "all-to-all" in chosen["reason"], chosen
