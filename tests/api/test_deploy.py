"""GET /v1/plans/{id}/deploy on the shipped reference catalog (SQLite and PostgreSQL): each engine's
launch command carries the stored plan's tp, batch limit, chunk budget, precision and memory
fraction on flags the engine documents (api/data/engine_cli.json), and the Kubernetes manifests
validate against the Kubernetes OpenAPI schema; plus the pure renderer on hand-built plans for what a
real plan on this catalog does not reach (no chunking, mixed fleets, AMD GPUs, unnamed schemes)."""

from __future__ import annotations

import copy
import json
import shlex
from typing import Any

import kubernetes_validate
import pytest
import yaml

from api.deploy import ENGINES, DeployInputs, NotDeployableError, engine_cli
from api.deploy_render import render
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem

#: The Kubernetes release whose OpenAPI schema the manifests are checked against (bundled by kubernetes-validate).
K8S_VERSION = "1.30.0"

CHAT: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 15, "prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    # off: these tests render a plain plan's flags (at 15 requests/s auto would add an EAGLE head, tests/api/test_speculative.py)
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "fp8", "kv_cache": "fp8"}], "speculative": "off"},
    "verify": False,
}


@pytest.fixture
def fp8_plan(seeded: ApiClient, admin: dict[str, str]) -> dict[str, Any]:
    response = seeded.post("/v1/plans", json=CHAT, headers=admin)
    assert response.status_code == 201, response.text
    return response.json()


def commands(script: str) -> list[list[str]]:
    """The commands of a rendered script (comments and heredocs dropped), each as argv."""
    script = script.replace("\\\n", " ")
    found, in_heredoc = [], False
    for line in script.splitlines():
        if in_heredoc:
            in_heredoc = line != "EOF"
        elif line.startswith("cat > "):
            in_heredoc = True
        elif line and not line.startswith("#"):
            found.append(shlex.split(line))
    return found


def flags(argv: list[str]) -> dict[str, str | None]:
    """--flag → its value (None for a switch)."""
    out: dict[str, str | None] = {}
    for index, word in enumerate(argv):
        if word.startswith("--"):
            following = argv[index + 1] if index + 1 < len(argv) else None
            out[word] = None if following is None or following.startswith("--") else following
    return out


def deploy(client: ApiClient, plan_id: str, target: str) -> str:
    response = client.get(f"/v1/plans/{plan_id}/deploy", params={"target": target})
    assert response.status_code == 200, response.text
    return response.text


def test_vllm_command_carries_every_planned_knob(seeded: ApiClient, fp8_plan: dict[str, Any]) -> None:
    plan = fp8_plan["plan"]
    [argv] = commands(deploy(seeded, fp8_plan["id"], "vllm"))
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B"]
    got = flags(argv)
    assert got["--tensor-parallel-size"] == str(plan["tp"]) and got["--pipeline-parallel-size"] == "1"
    assert got["--max-num-seqs"] == str(plan["batch_limit"])
    assert got["--max-num-batched-tokens"] == str(plan["chunk_tokens"]) and "--enable-chunked-prefill" in got
    assert got["--quantization"] == "fp8" and got["--kv-cache-dtype"] == "fp8_e4m3"
    assert got["--served-model-name"] == "llama-3.1-8b" and got["--port"] == "8000"
    # The memory fraction the plan's KV budget assumed: usable_bytes = tp × HBM × fraction (H100: 80 GB).
    usable = fp8_plan["justification"]["memory"]["usable_bytes"]
    assert float(got["--gpu-memory-utilization"]) == pytest.approx(usable / (plan["tp"] * 80e9), abs=1e-4)
    reserve = fp8_plan["provenance"]["efficiencies"]["h100-sxm"]["memory_reserve_fraction"]
    assert float(got["--gpu-memory-utilization"]) == pytest.approx(1 - reserve)


def test_sglang_and_trtllm_commands_carry_the_same_knobs(seeded: ApiClient, fp8_plan: dict[str, Any]) -> None:
    plan, memory = fp8_plan["plan"], fp8_plan["justification"]["memory"]
    [sglang] = commands(deploy(seeded, fp8_plan["id"], "sglang"))
    got = flags(sglang)
    assert (got["--tp-size"], got["--pp-size"], got["--max-running-requests"], got["--chunked-prefill-size"]) == (
        str(plan["tp"]),
        "1",
        str(plan["batch_limit"]),
        str(plan["chunk_tokens"]),
    )
    assert (got["--quantization"], got["--kv-cache-dtype"], got["--model-path"]) == ("fp8", "fp8_e4m3", "meta-llama/Llama-3.1-8B")

    script = deploy(seeded, fp8_plan["id"], "trt-llm")
    [trt] = commands(script)
    got = flags(trt)
    assert (got["--tp_size"], got["--pp_size"], got["--max_batch_size"], got["--max_num_tokens"]) == (
        str(plan["tp"]),
        "1",
        str(plan["batch_limit"]),
        str(plan["chunk_tokens"]),
    )
    # KV share of the memory free after the weights: (usable − weights) / (total − weights).
    total = plan["tp"] * 80e9
    expected = (memory["usable_bytes"] - memory["weights_bytes"]) / (total - memory["weights_bytes"])
    assert float(got["--kv_cache_free_gpu_memory_fraction"]) == pytest.approx(expected, abs=1e-4)
    options = yaml.safe_load(script.split("<<'EOF'\n")[1].split("\nEOF")[0])
    assert options == {"quant_config": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}


@pytest.mark.parametrize("target", ENGINES)
def test_every_rendered_flag_is_one_the_engine_documents(seeded: ApiClient, fp8_plan: dict[str, Any], target: str) -> None:
    documented = set(engine_cli()[target]["flags"])
    for argv in commands(deploy(seeded, fp8_plan["id"], target)):
        assert set(flags(argv)) <= documented, set(flags(argv)) - documented
        assert flags(argv).get("--quantization") in (None, *engine_cli()[target]["quantization_choices"])


def test_k8s_manifests_validate_and_follow_the_plan(seeded: ApiClient, fp8_plan: dict[str, Any]) -> None:
    response = seeded.get(f"/v1/plans/{fp8_plan['id']}/deploy", params={"target": "k8s"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/yaml")
    documents = list(yaml.safe_load_all(response.text))
    assert [d["kind"] for d in documents] == ["Deployment", "HorizontalPodAutoscaler", "Service"]
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    deployment, hpa, service = documents
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == fp8_plan["plan"]["replicas"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": fp8_plan["plan"]["tp"]}
    assert set(flags(container["args"])) <= set(engine_cli()["vllm"]["flags"])
    assert flags(container["args"])["--max-num-seqs"] == str(fp8_plan["plan"]["batch_limit"])
    # HPA target: L = λ·W per replica at the planned rate (the plan's own Little's-law check), in milli-units.
    occupancy = fp8_plan["justification"]["queueing"]["littles_law"]["occupancy"]
    target = hpa["spec"]["metrics"][0]["pods"]["target"]
    assert target["averageValue"] == f"{round(occupancy * 1000)}m"
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "vllm:num_requests_running"
    assert hpa["spec"]["minReplicas"] == fp8_plan["plan"]["replicas"]
    assert service["spec"]["selector"] == {
        "app.kubernetes.io/part-of": deployment["metadata"]["labels"]["app.kubernetes.io/part-of"]
    }


def test_unknown_plan_is_404_and_unknown_target_is_422(seeded: ApiClient, fp8_plan: dict[str, Any]) -> None:
    assert_problem(seeded.get("/v1/plans/" + "0" * 32 + "/deploy", params={"target": "vllm"}), 404)
    assert_problem(seeded.get(f"/v1/plans/{fp8_plan['id']}/deploy", params={"target": "ollama"}), 422)
    assert_problem(seeded.get(f"/v1/plans/{fp8_plan['id']}/deploy"), 422)


def test_a_model_without_checkpoint_is_422_saying_to_set_it(
    seeded: ApiClient, admin: dict[str, str], fp8_plan: dict[str, Any]
) -> None:
    cleared = seeded.patch("/v1/models/llama-3.1-8b", json={"checkpoint": None}, headers=admin)
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["checkpoint"] is None
    problem = assert_problem(seeded.get(f"/v1/plans/{fp8_plan['id']}/deploy", params={"target": "k8s"}), 422)
    assert "`checkpoint`" in problem["detail"]


# --- the pure renderer on hand-built plans ---------------------------------------------------------------

FP8 = {
    "slug": "fp8",
    "weight_bytes_per_param": 1.0,
    "element_bytes": 1.0,
    "engine_names": {"vllm": "fp8", "sglang": "fp8", "trt-llm": "FP8"},
}
BF16 = {"slug": "bf16", "weight_bytes_per_param": 2.0, "element_bytes": 2.0, "engine_names": None}
INT8 = {"slug": "int8", "weight_bytes_per_param": 1.0, "element_bytes": 1.0, "engine_names": None}


def row(gpu: str, tp: int, replicas: int, weights: str, kv: str, batch: int, chunk: int | None) -> dict[str, Any]:
    return {
        "gpu": gpu,
        "tp": tp,
        "replicas": replicas,
        "precision": {"weights": weights, "kv_cache": kv},
        "batch_limit": batch,
        "chunk_tokens": chunk,
    }


def inputs(rows: list[dict[str, Any]], *, vendor: str = "nvidia") -> DeployInputs:
    """A plan (the first row is the headline) whose justification says L = 12.5 requests per replica."""
    plan = copy.deepcopy(rows[0]) | {"fleet": copy.deepcopy(rows) if len(rows) > 1 else None}
    response = {
        "plan": plan,
        "justification": {"queueing": {"littles_law": {"occupancy": 12.5}}},
        "provenance": {"efficiencies": {"g1": {"memory_reserve_fraction": 0.2}, "g2": {"memory_reserve_fraction": 0.1}}},
    }
    gpus = {"g1": {"vendor": vendor, "memory_gb": 100.0}, "g2": {"vendor": vendor, "memory_gb": 50.0}}
    model = {"slug": "m-7b", "params_total": 10_000_000_000, "checkpoint": "org/m-7b"}
    return DeployInputs(
        plan_id="ab" * 16, response=response, model=model, quantizations={"fp8": FP8, "bf16": BF16, "int8": INT8}, gpus=gpus
    )


def test_no_chunking_switches_chunked_prefill_off_the_way_each_engine_documents() -> None:
    plan = inputs([row("g1", 2, 3, "bf16", "bf16", 64, None)])
    [vllm] = commands(render(plan, "vllm")[0])
    assert "--no-enable-chunked-prefill" in vllm and "--max-num-batched-tokens" not in vllm
    assert flags(vllm)["--dtype"] == "bfloat16" and flags(vllm)["--kv-cache-dtype"] == "auto"
    assert flags(vllm)["--gpu-memory-utilization"] == "0.8"
    [sglang] = commands(render(plan, "sglang")[0])
    assert flags(sglang)["--chunked-prefill-size"] == "-1"
    [trt] = commands(render(plan, "trt-llm")[0])
    assert "--enable_chunked_prefill" not in trt and "--max_num_tokens" not in trt
    # Hand-computed: total 2 × 100 GB = 200e9, usable 160e9, bf16 weights 20e9 → (160 − 20) / (200 − 20) = 0.7778.
    assert flags(trt)["--kv_cache_free_gpu_memory_fraction"] == "0.7778"


def test_a_mixed_fleet_renders_one_command_and_one_deployment_per_row() -> None:
    plan = inputs([row("g1", 2, 3, "fp8", "fp8", 64, 2048), row("g2", 1, 2, "bf16", "bf16", 32, None)])
    vllm = commands(render(plan, "vllm")[0])
    assert [(flags(a)["--tensor-parallel-size"], flags(a)["--max-num-seqs"]) for a in vllm] == [("2", "64"), ("1", "32")]
    assert [flags(a)["--gpu-memory-utilization"] for a in vllm] == ["0.8", "0.9"]
    documents = list(yaml.safe_load_all(render(plan, "k8s")[0]))
    assert [d["kind"] for d in documents] == ["Deployment", "HorizontalPodAutoscaler", "Deployment", "Service"]
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
    assert [d["spec"]["replicas"] for d in documents if d["kind"] == "Deployment"] == [3, 2]
    assert documents[1]["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "12500m"  # L = 12.5 for the headline row


def test_amd_gpus_are_requested_as_amd_com_gpu() -> None:
    documents = list(yaml.safe_load_all(render(inputs([row("g1", 4, 1, "fp8", "fp8", 64, 2048)], vendor="amd"), "k8s")[0]))
    container = documents[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"amd.com/gpu": 4}


def test_schemes_an_engine_cannot_name_are_422_not_a_guess() -> None:
    with pytest.raises(NotDeployableError, match="engine_names.vllm"):
        render(inputs([row("g1", 1, 1, "int8", "bf16", 64, 2048)]), "vllm")  # int8 weights, no engine name recorded
    with pytest.raises(NotDeployableError, match="cannot hold the KV cache as 'int8'"):
        render(inputs([row("g1", 1, 1, "bf16", "int8", 64, 2048)]), "sglang")
    no_checkpoint = inputs([row("g1", 1, 1, "bf16", "bf16", 64, 2048)])
    with pytest.raises(NotDeployableError, match="`checkpoint`"):
        render(
            DeployInputs(**{**_fields(no_checkpoint), "model": {"slug": "m-7b", "params_total": 1, "checkpoint": None}}), "vllm"
        )


def _fields(value: DeployInputs) -> dict[str, Any]:
    return {name: getattr(value, name) for name in DeployInputs.__slots__}


def speculating(method: str, draft_tokens: int, slug: str) -> DeployInputs:
    """A one-row plan whose `plan.speculative` is `method` with k = `draft_tokens`, for model `slug`."""
    plan = inputs([row("g1", 1, 2, "bf16", "bf16", 64, 2048)])
    response = copy.deepcopy(dict(plan.response))
    response["plan"]["speculative"] = {"method": method, "draft_tokens": draft_tokens, "tokens_per_step": 2.952}
    return DeployInputs(
        plan_id=plan.plan_id,
        response=response,
        model={**plan.model, "slug": slug},
        quantizations=plan.quantizations,
        gpus=plan.gpus,
    )


def test_an_eagle_plan_renders_each_engines_speculative_flags() -> None:
    """vLLM's --speculative-config JSON, SGLang's chain of k (topk 1, k + 1 draft tokens) and TensorRT-LLM's
    speculative_config, each with the published EAGLE head engine_cli.json lists for Llama 3.1 8B."""
    plan = speculating("eagle", 3, "llama-3.1-8b")
    head = engine_cli()["draft_heads"]["llama-3.1-8b"]["eagle"]["checkpoint"]
    [vllm] = commands(render(plan, "vllm")[0])
    assert json.loads(flags(vllm)["--speculative-config"] or "") == {
        "method": "eagle",
        "model": head,
        "num_speculative_tokens": 3,
    }
    [sglang] = commands(render(plan, "sglang")[0])
    got = flags(sglang)
    assert (got["--speculative-algorithm"], got["--speculative-draft-model-path"]) == ("EAGLE", head)
    assert (got["--speculative-num-steps"], got["--speculative-eagle-topk"], got["--speculative-num-draft-tokens"]) == (
        "3",
        "1",
        "4",
    )
    script = render(plan, "trt-llm")[0]
    options = yaml.safe_load(script.split("<<'EOF'\n")[1].split("\nEOF")[0])
    assert options["speculative_config"] == {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": head}
    assert {"speculative_config." + key for key in options["speculative_config"]} <= set(
        engine_cli()["trt-llm"]["llm_api_options"]
    )
    for engine in ENGINES:
        for argv in commands(render(plan, engine)[0]):
            assert set(flags(argv)) <= set(engine_cli()[engine]["flags"])
    documents = list(yaml.safe_load_all(render(plan, "k8s")[0]))
    assert "--speculative-config" in documents[0]["spec"]["template"]["spec"]["containers"][0]["args"]


def test_mtp_needs_no_draft_checkpoint_and_medusa_is_vllm_only() -> None:
    plan = speculating("mtp", 1, "deepseek-v3")
    [vllm] = commands(render(plan, "vllm")[0])
    assert json.loads(flags(vllm)["--speculative-config"] or "") == {"method": "deepseek_mtp", "num_speculative_tokens": 1}
    [sglang] = commands(render(plan, "sglang")[0])
    assert "--speculative-draft-model-path" not in flags(sglang)
    with pytest.raises(NotDeployableError, match="sglang has no medusa"):
        render(speculating("medusa", 2, "llama-3.1-8b"), "sglang")
    with pytest.raises(NotDeployableError, match="no published eagle head"):
        render(speculating("eagle", 2, "m-7b"), "vllm")


def test_a_plan_without_speculation_renders_no_speculative_flag(seeded: ApiClient, fp8_plan: dict[str, Any]) -> None:
    assert fp8_plan["plan"]["speculative"] is None
    for target in ENGINES:
        assert "speculative" not in deploy(seeded, fp8_plan["id"], target)


def test_a_prefix_caching_plan_renders_vllms_flag_and_sglang_keeps_its_default() -> None:
    """vLLM gets --enable-prefix-caching (in engine_cli.json's list); SGLang's radix cache is on by default
    (its server arguments list --disable-radix-cache to turn it off), so its command is unchanged."""
    plain = speculating("eagle", 3, "llama-3.1-8b")
    plain.response["plan"]["speculative"] = None
    cached = copy.deepcopy(dict(plain.response))
    cached["plan"]["prefix_caching"] = {
        "hit_rate": 0.8,
        "cache_tokens": 37440,
        "routing": "random",
        "prefill_tokens_saved_fraction": 0.6,
    }
    with_cache = DeployInputs(
        plan_id=plain.plan_id, response=cached, model=plain.model, quantizations=plain.quantizations, gpus=plain.gpus
    )
    [vllm] = commands(render(with_cache, "vllm")[0])
    assert "--enable-prefix-caching" in vllm
    assert set(flags(vllm)) <= set(engine_cli()["vllm"]["flags"])
    [without] = commands(render(plain, "vllm")[0])
    assert "--enable-prefix-caching" not in without
    assert commands(render(with_cache, "sglang")[0]) == commands(render(plain, "sglang")[0])
