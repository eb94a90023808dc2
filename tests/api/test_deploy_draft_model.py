"""GET /v1/plans/{id}/deploy for a plan drafting with a separate catalog model (constraints.pin.draft_model):
each engine's documented draft-model flags carry the draft's checkpoint and the plan's k (api/data/engine_cli.json
names where each is documented), on hand-built plans and on a real plan of the shipped catalog."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from api.deploy import ENGINES, DeployInputs, NotDeployableError, engine_cli
from api.deploy_render import render
from tests.api.client import ApiClient
from tests.api.test_deploy import K8S_VERSION, _fields, commands, flags, speculating
from tests.api.test_speculative_draft_model import BODY

DRAFT = {"slug": "d-1b", "params_total": 1_000_000_000, "checkpoint": "org/d-1b"}


def drafting(k: int, draft: dict[str, Any] | None = DRAFT) -> DeployInputs:
    """A one-row plan speculating with a draft model at k = `k`, drafted by `draft`."""
    plan = speculating("draft_model", k, "m-7b")
    return DeployInputs(**{**_fields(plan), "draft_model": draft})


def trt_options(script: str) -> dict[str, Any]:
    options: dict[str, Any] = yaml.safe_load(script.split("<<'EOF'\n")[1].split("\nEOF")[0])
    return options


def test_each_engine_drafts_with_the_draft_models_checkpoint_at_the_plans_k() -> None:
    plan = drafting(4)
    [vllm] = commands(render(plan, "vllm")[0])
    assert json.loads(flags(vllm)["--speculative-config"] or "") == {
        "method": "draft_model",
        "model": "org/d-1b",
        "num_speculative_tokens": 4,
    }
    [sglang] = commands(render(plan, "sglang")[0])
    got = flags(sglang)
    assert (got["--speculative-algorithm"], got["--speculative-draft-model-path"]) == ("STANDALONE", "org/d-1b")
    assert (got["--speculative-num-steps"], got["--speculative-eagle-topk"], got["--speculative-num-draft-tokens"]) == (
        "4",
        "1",
        "5",
    )
    options = trt_options(render(plan, "trt-llm")[0])
    assert options["speculative_config"] == {
        "decoding_type": "DraftTarget",
        "max_draft_len": 4,
        "speculative_model_dir": "org/d-1b",
    }
    assert options["disable_overlap_scheduler"] is True
    documented = set(engine_cli()["trt-llm"]["llm_api_options"])
    assert {"speculative_config." + key for key in options["speculative_config"]} | (set(options) - {"dtype"}) <= documented
    for engine in ENGINES:
        for argv in commands(render(plan, engine)[0]):
            assert set(flags(argv)) <= set(engine_cli()[engine]["flags"])


def test_the_vllm_script_and_manifest_name_the_release_a_draft_model_needs() -> None:
    """vLLM's V1 engine at the table's v0.11 has no draft-model speculation: the script says so and the
    Deployment runs the image engine_cli.json names for it, not the table's v0.11.0."""
    plan = drafting(3)
    script = render(plan, "vllm")[0]
    assert "# requires a vLLM release whose V1 engine drafts with a separate model" in script
    assert "acceptance rate" in script
    body = render(plan, "k8s")[0]
    documents = list(yaml.safe_load_all(body))
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    container = documents[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == engine_cli()["vllm"]["draft_model"]["image"] != "vllm/vllm-openai:v0.11.0"
    assert '"method":"draft_model"' in container["args"][container["args"].index("--speculative-config") + 1]
    # a head plan keeps the table's image
    head = list(yaml.safe_load_all(render(speculating("eagle", 3, "llama-3.1-8b"), "k8s")[0]))
    assert head[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.11.0"


def test_a_draft_without_a_checkpoint_or_record_is_a_422_saying_what_to_set() -> None:
    with pytest.raises(NotDeployableError, match="`checkpoint`"):
        render(drafting(2, {**DRAFT, "checkpoint": None}), "sglang")
    with pytest.raises(NotDeployableError, match="pin.draft_model"):
        render(drafting(2, None), "vllm")


def test_a_stored_draft_model_plan_deploys_on_every_target(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Llama 3.1 70B drafted by Llama 3.1 8B (tests/api/test_speculative_draft_model.py): the router reads the
    draft's catalog record, so each command names its checkpoint."""
    response = seeded.post("/v1/plans", json=BODY, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    k = plan["plan"]["speculative"]["draft_tokens"]
    draft = seeded.get("/v1/models/llama-3.1-8b", headers=admin).json()["checkpoint"]
    for target in (*ENGINES, "k8s"):
        got = seeded.get(f"/v1/plans/{plan['id']}/deploy", params={"target": target}, headers=admin)
        assert got.status_code == 200, got.text
        assert draft in got.text
    [vllm] = commands(seeded.get(f"/v1/plans/{plan['id']}/deploy", params={"target": "vllm"}, headers=admin).text)
    assert json.loads(flags(vllm)["--speculative-config"] or "") == {
        "method": "draft_model",
        "model": draft,
        "num_speculative_tokens": k,
    }
