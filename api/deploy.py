"""Deployable output of a stored plan: each serving engine's launch command, and
Kubernetes manifests, rendered from the plan's decisions with every planned knob on its flag.

Pure: functions of the stored plan (its response dict) and plain catalog records; the router
(api/routers/deploy.py) reads them from the database. The flags come from api/data/engine_cli.json,
which copies each engine's documented CLI at a named release; tests/api/test_deploy.py asserts
every flag rendered here is in that list.

Knob → flag, per engine (docs/design.md "Deployable output"):

    knob                  vLLM                         SGLang                   TensorRT-LLM trtllm-serve
    tp                    --tensor-parallel-size       --tp-size                --tp_size
    pp (pipeline stages)  --pipeline-parallel-size     --pp-size                --pp_size
    ep (MoE experts)      --enable-expert-parallel     (not rendered)           --ep_size
    replica over nodes    --distributed-executor-      (a comment: start one    --gpus_per_node
                          backend ray                   process per node)
    batch_limit           --max-num-seqs               --max-running-requests   --max_batch_size
    chunk_tokens          --max-num-batched-tokens     --chunked-prefill-size   --max_num_tokens
                          + --enable-chunked-prefill                            + --enable_chunked_prefill
    no chunking           --no-enable-chunked-prefill  --chunked-prefill-size -1 (flag left off: off by default)
    weights precision     --quantization or --dtype    --quantization or --dtype quant_config.quant_algo (YAML)
    KV-cache precision    --kv-cache-dtype             --kv-cache-dtype         quant_config.kv_cache_quant_algo
    memory budget         --gpu-memory-utilization     --mem-fraction-static    --kv_cache_free_gpu_memory_fraction
    served model name     --served-model-name          --served-model-name      (the MODEL argument; no flag)
    speculative decoding  --speculative-config JSON    --speculative-algorithm  speculative_config (YAML)
                          (method, model, k)           + -num-steps k, -eagle-topk 1, -num-draft-tokens k + 1
    draft model           method draft_model, model    STANDALONE + --speculative-draft-model-path
                          = the draft's checkpoint     = the draft's checkpoint  DraftTarget, speculative_model_dir
                          (a release past v0.11)                                 + disable_overlap_scheduler
    prefix cache          --enable-prefix-caching      (radix cache on by       (block reuse on by default
                          (plan.prefix_caching)         default: no flag)        in the PyTorch backend)

A disaggregated plan (plan.topology disaggregated) renders one command (vllm, sglang) or one Deployment
(k8s) per pool, with the engine's prefill/decode flags from engine_cli.json's `disaggregation` entries:

    pool role             vLLM                                          SGLang
    prefill               --kv-transfer-config {NixlConnector,          --disaggregation-mode prefill
                            kv_role kv_producer}                        + --disaggregation-transfer-backend nixl
    decode                --kv-transfer-config {NixlConnector,          --disaggregation-mode decode
                            kv_role kv_consumer}                        + --disaggregation-transfer-backend nixl
    router                vLLM's toy_proxy_server.py (a comment:        sglang_router --pd-disaggregation (a comment:
                            the hosts are the deployment's)               the hosts are the deployment's)

A prefill pool has no batch limit (its token budget is chunk_tokens), so no --max-num-seqs /
--max-running-requests is rendered for it. TensorRT-LLM's disaggregated serving needs a cluster
YAML of its own and is not rendered: 422 naming the targets that are.

A plan's `prefix_caching.routing` "prefix_aware" asks for a router in front of the replicas that
sends each prefix to one replica (llm-d's prefix-cache scorer, the SGLang router's cache_aware
policy, NVIDIA Dynamo's KV router); no engine flag sets it. Each engine's script states in a comment the
cache the plan assumed (hit rate, KV tokens per replica, routing) and, under prefix_aware routing, the
router to put in front (`prefix_cache_notes`).

A class plan (POST /v1/plans with `classes`) renders one command (or Deployment and Service) per pool
of its chosen arrangement; clients send each class to its pool. A pool whose classes share it by
priority (`scheduling: priority`) gets vLLM's `--scheduling-policy priority` (engine_cli.json
`priority_scheduling`: vLLM's SchedulerPolicy serves the lower `priority` value first), and the script
says which `priority` each class's requests must carry in their body: the class's own value, since a
plan's priority 0 is served first as vLLM's is. SGLang and TensorRT-LLM flags for priority scheduling
are not cited here, so a plan with a priority pool is 422 for them, naming the targets that render it.

A replica of tp × pp GPUs that exceeds one node (planner/pipeline.py nodes_per_replica) runs over
several nodes: vLLM through a Ray cluster (`--distributed-executor-backend ray`, docs.vllm.ai
"Distributed inference and serving"), SGLang with one launch per node (its --nnodes/--node-rank flags
are not in engine_cli.json, so the script says so in a comment), TensorRT-LLM under MPI with
--gpus_per_node. The k8s target renders one pod per replica, so it refuses such a plan with 422 (a
multi-node replica wants a LeaderWorkerSet, not rendered here).

The plan carries no context limit (it sizes the KV cache for the workload's mean request), so no
--max-model-len is rendered and each engine takes the model's own from its config.json.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from api.deploy_expert_parallel import (
    sglang_expert_parallel,
    trtllm_expert_parallel,
    vllm_expert_parallel,
    vllm_expert_parallel_env,
)
from api.schemas.classes import is_classes_plan
from planner.errors import UnsupportedConfigurationError

ENGINE_CLI_PATH = Path(__file__).resolve().parent / "data" / "engine_cli.json"
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trt-llm")
TARGETS: tuple[str, ...] = (*ENGINES, "k8s")
#: The targets that render a disaggregated plan's pools (engine_cli.json has their P/D flags).
DISAGGREGATED_TARGETS: tuple[str, ...] = ("vllm", "sglang", "k8s")
#: The targets that render a class plan's priority pool (engine_cli.json has vLLM's priority scheduling).
PRIORITY_TARGETS: tuple[str, ...] = ("vllm", "k8s")
#: The port every rendered server listens on and the Service targets: vLLM's and trtllm-serve's default.
PORT = 8000
#: Kubernetes extended-resource names of the GPU device plugins: NVIDIA k8s-device-plugin
#: (https://github.com/NVIDIA/k8s-device-plugin) and AMD k8s-device-plugin (https://github.com/ROCm/k8s-device-plugin).
GPU_RESOURCE: dict[str, str] = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
#: vLLM's OpenAI-server images (https://docs.vllm.ai/en/latest/deployment/docker.html), tagged with the release
#: engine_cli.json lists; AMD's is ROCm's build (https://hub.docker.com/r/rocm/vllm): pin a tag before production.
VLLM_IMAGE: dict[str, str] = {"nvidia": "vllm/vllm-openai:v0.11.0", "amd": "rocm/vllm:latest"}
#: Where the TensorRT-LLM command expects its --extra_llm_api_options file.
TRT_OPTIONS_FILE = "extra-llm-api-options.yaml"


class NotDeployableError(UnsupportedConfigurationError):
    """The plan cannot be rendered for this target: a catalog record lacks what the engine needs (422)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaGroup:
    """One configuration of the plan (a mixed fleet has one per fleet row, a disaggregated plan or a
    class plan one per pool): what each replica runs. `role` is the pool's: mixed (prefill and decode),
    prefill or decode. A class plan's pool has its `pool` name, its `classes` with their priorities and
    its `scheduling` (fcfs, or priority: the lower priority value served first)."""

    gpu: str
    tp: int
    replicas: int
    weights: str
    kv_cache: str
    batch_limit: int | None
    chunk_tokens: int | None
    role: str = "mixed"
    pool: str | None = None
    classes: tuple[tuple[str, int], ...] = ()
    scheduling: str = "fcfs"
    pp: int = 1
    ep: int = 1

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployInputs:
    """Everything rendering reads: the stored plan's response and the catalog records it names."""

    plan_id: str
    response: Mapping[str, Any]
    model: Mapping[str, Any]
    quantizations: Mapping[str, Mapping[str, Any]]
    gpus: Mapping[str, Mapping[str, Any]]
    #: The catalog record of the model the plan drafts with (the request's constraints.pin.draft_model), if any.
    draft_model: Mapping[str, Any] | None = None


@cache
def engine_cli() -> dict[str, Any]:
    """api/data/engine_cli.json: per engine its release, sources, documented flags and value maps."""
    table: dict[str, Any] = json.loads(ENGINE_CLI_PATH.read_text(encoding="utf-8"))  # a JSON object per engine
    return table


def _pool_group(row: Mapping[str, Any], **labels: Any) -> ReplicaGroup:
    """A pool of a class plan or a disaggregated plan as a replica group, with its labels (role, or
    pool name, classes and scheduling)."""
    return ReplicaGroup(
        gpu=row["gpu"],
        tp=row["tp"],
        replicas=row["replicas"],
        weights=row["precision"]["weights"],
        kv_cache=row["precision"]["kv_cache"],
        batch_limit=row["batch_limit"],
        chunk_tokens=row["chunk_tokens"],
        pp=row.get("pp", 1),
        ep=row.get("ep", 1),
        **labels,
    )


def replica_groups(response: Mapping[str, Any]) -> tuple[ReplicaGroup, ...]:
    """The plan's configurations: a class plan's or a disaggregated plan's pools, every fleet row of a
    mixed fleet, else the one `plan` block."""
    if is_classes_plan(response):
        priority = {k["name"]: k["priority"] for k in response["classes"]}
        return tuple(
            _pool_group(
                pool,
                pool=pool["name"],
                classes=tuple((name, priority[name]) for name in pool["classes"]),
                scheduling=pool["scheduling"],
            )
            for pool in response["pools"]
        )
    plan = response["plan"]
    if is_disaggregated(response):
        return tuple(_pool_group(pool, role=pool["role"]) for pool in plan["pools"])
    rows = plan.get("fleet") or [plan]
    return tuple(
        ReplicaGroup(
            gpu=row["gpu"],
            tp=row["tp"],
            replicas=row["replicas"],
            weights=row["precision"]["weights"],
            kv_cache=row["precision"]["kv_cache"],
            batch_limit=row["batch_limit"],
            chunk_tokens=row["chunk_tokens"],
            pp=row.get("pp", 1),
            ep=row.get("ep", 1),
        )
        for row in rows
    )


def nodes_per_replica(inputs: DeployInputs, group: ReplicaGroup) -> int:
    """Nodes one replica spans: tp × pp GPUs over the GPU's `gpus_per_node` (planner/pipeline.py's packing).
    A record without the figure is taken as one node for a pp = 1 replica (the search keeps tp within a node)."""
    per_node = inputs.gpus[group.gpu].get("gpus_per_node")
    if per_node is None:
        if group.pp == 1:
            return 1
        raise NotDeployableError(
            f"the catalog record of {group.gpu} lacks gpus_per_node, so its pipeline stages cannot be placed"
        )
    return math.ceil(group.gpus_per_replica / int(per_node))


def is_disaggregated(response: Mapping[str, Any]) -> bool:
    """Whether the plan runs prefill and decode in separate pools."""
    return bool((response.get("plan") or {}).get("topology") == "disaggregated")  # a class plan has no `plan` block


def slugs_needed(response: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """(GPU slugs, quantization slugs) the plan's configurations name, for the router to read."""
    groups = replica_groups(response)
    return {g.gpu for g in groups}, {g.weights for g in groups} | {g.kv_cache for g in groups}


def checkpoint(model: Mapping[str, Any]) -> str:
    """The model's public checkpoint id; 422 saying what to set when the catalog has none."""
    value: str | None = model.get("checkpoint")  # a checkpoint id or null (catalog/records.py CHECKPOINT_PATTERN)
    if not value:
        raise NotDeployableError(
            f"model {model['slug']!r} has no checkpoint id: set `checkpoint` on the model "
            f"(PATCH /v1/models/{model['slug']} with a Hugging Face repo id, e.g. meta-llama/Llama-3.1-8B-Instruct)",
            field="checkpoint",
        )
    return value


# --- memory ------------------------------------------------------------------------------------------


def memory_reserve_fraction(inputs: DeployInputs, gpu: str) -> float:
    """The share of each GPU's memory the plan kept back from weights + KV cache.

    Derived, not assumed: the plan sized its KV cache from `usable_bytes = tp × HBM × (1 − reserve)`
    (justification.memory), with `reserve` the GPU's efficiency profile's memory_reserve_fraction,
    which the plan records per GPU in provenance.efficiencies. A plan without it kept nothing back."""
    efficiency = (inputs.response.get("provenance") or {}).get("efficiencies", {}).get(gpu) or {}
    return float(efficiency.get("memory_reserve_fraction", 0.0))


def memory_utilization(inputs: DeployInputs, gpu: str) -> float:
    """vLLM --gpu-memory-utilization and SGLang --mem-fraction-static: 1 − reserve, the fraction of
    each GPU's memory the plan gave weights + KV cache (vLLM also counts the activation peak in it,
    so its KV pool is at most the planned one: the plan's slots are never overstated)."""
    return round(1.0 - memory_reserve_fraction(inputs, gpu), 4)


def weights_bytes(inputs: DeployInputs, group: ReplicaGroup) -> float:
    """Weight bytes of one replica: params_total × the scheme's bytes per parameter (planner/memory)."""
    params: int = inputs.model["params_total"]
    bytes_per_param: float = inputs.quantizations[group.weights]["weight_bytes_per_param"]
    return params * bytes_per_param


def kv_free_memory_fraction(inputs: DeployInputs, group: ReplicaGroup) -> float:
    """TensorRT-LLM --kv_cache_free_gpu_memory_fraction: the KV share of the memory left after the
    weights. The plan's KV budget is usable − weights out of total − weights free after loading,
    with total = tp × HBM and usable = total × (1 − reserve); per GPU the same ratio (weights are
    split evenly over tp)."""
    memory_gb: float = inputs.gpus[group.gpu]["memory_gb"]
    total = group.tp * memory_gb * 1e9
    usable = total * (1.0 - memory_reserve_fraction(inputs, group.gpu))
    weights = weights_bytes(inputs, group)
    return round(max(0.0, (usable - weights) / (total - weights)), 4)


# --- precision -------------------------------------------------------------------------------------------


def weights_flag(inputs: DeployInputs, engine: str, group: ReplicaGroup) -> tuple[str, str]:
    """("quantization", the engine's name) from the scheme's engine_names, or ("dtype", its
    16-bit dtype) for an unquantized 16-bit scheme; 422 when the catalog names none for the engine."""
    scheme = inputs.quantizations[group.weights]
    name = (scheme.get("engine_names") or {}).get(engine)
    if name is not None:
        return "quantization", name
    dtype = engine_cli()[engine]["dtype"].get(group.weights)
    if dtype is not None:
        return "dtype", dtype
    raise NotDeployableError(
        f"quantization {group.weights!r} has no {engine} name: set engine_names.{engine} on it "
        f"(PATCH /v1/quantizations/{group.weights})",
        field=f"engine_names.{engine}",
    )


def kv_cache_dtype(engine: str, group: ReplicaGroup) -> str | None:
    """The engine's KV-cache dtype choice for the plan's KV precision (None: the model's own dtype)."""
    choices = engine_cli()[engine]["kv_cache_dtype"]
    if group.kv_cache not in choices:
        raise NotDeployableError(f"{engine} cannot hold the KV cache as {group.kv_cache!r} (its choices: {sorted(choices)})")
    choice: str | None = choices[group.kv_cache]  # api/data/engine_cli.json maps a precision to a flag value or null
    return choice


# --- speculative decoding -------------------------------------------------------------------------------


def speculative(inputs: DeployInputs) -> Mapping[str, Any] | None:
    """The plan's speculative decoding (`plan.speculative`: method, draft_tokens, …); None without."""
    chosen: Mapping[str, Any] | None = (inputs.response.get("plan") or {}).get("speculative")  # a class plan's pools: none
    return chosen


def published_draft_methods(model_slug: str) -> frozenset[str]:
    """The draft methods with a published head for the model (engine_cli.json's draft_heads): what a plan
    may speculate with and still be deployed (MTP needs none; the planner offers it where the model ships it)."""
    heads: Mapping[str, Any] = engine_cli()["draft_heads"].get(model_slug, {})
    return frozenset(heads)


def draft_model_request(request: Mapping[str, Any], response: Mapping[str, Any]) -> str | None:
    """The catalog slug a stored plan drafts with (its request's constraints.pin.draft_model), for the router to
    read; None when the plan does not draft with a model (`auto` may have planned without speculation)."""
    chosen = (response.get("plan") or {}).get("speculative") or {}
    if chosen.get("method") != "draft_model":
        return None
    pin = (request.get("constraints") or {}).get("pin") or {}
    slug: str | None = pin.get("draft_model")
    return slug


def draft_head(inputs: DeployInputs, method: str) -> str | None:
    """The draft's checkpoint: a draft model's own (its catalog `checkpoint`), a head's from engine_cli.json's
    draft_heads; None for MTP, whose module is in the model's own checkpoint; 422 when no published head is
    listed for the model, or the draft model has no checkpoint id."""
    if method == "mtp":
        return None
    if method == "draft_model":
        if inputs.draft_model is None:
            raise NotDeployableError(
                "the plan drafts with a separate model and its request names none (constraints.pin.draft_model)",
                field="draft_model",
            )
        return checkpoint(inputs.draft_model)
    head = engine_cli()["draft_heads"].get(inputs.model["slug"], {}).get(method)
    if head is None:
        raise NotDeployableError(
            f"the plan speculates with a {method} draft head and no published {method} head is listed for "
            f"{inputs.model['slug']!r}: plan again with constraints.speculative off, or add the head's flags by hand",
            field="draft_heads",
        )
    checkpoint_id: str = head["checkpoint"]
    return checkpoint_id


def engine_method(engine: str, table: str, method: str) -> str:
    """The engine's name for a draft method; 422 when the engine has none (SGLang and TensorRT-LLM have no Medusa)."""
    name: str | None = engine_cli()[engine][table].get(method)
    if name is None:
        raise NotDeployableError(
            f"{engine} has no {method} speculative decoding: deploy this plan with another engine", field="speculative.method"
        )
    return name


def vllm_speculative_argv(inputs: DeployInputs) -> list[str]:
    """`--speculative-config` JSON: the method, the draft head (not for MTP) and k."""
    chosen = speculative(inputs)
    if chosen is None:
        return []
    config: dict[str, Any] = {"method": engine_method("vllm", "speculative_methods", chosen["method"])}
    head = draft_head(inputs, chosen["method"])
    if head is not None:
        config["model"] = head
    config["num_speculative_tokens"] = chosen["draft_tokens"]
    return ["--speculative-config", json.dumps(config, separators=(",", ":"))]


def sglang_speculative_argv(inputs: DeployInputs) -> list[str]:
    """A chain of k drafts: --speculative-num-steps k, --speculative-eagle-topk 1, --speculative-num-draft-tokens k + 1."""
    chosen = speculative(inputs)
    if chosen is None:
        return []
    k = chosen["draft_tokens"]
    argv = ["--speculative-algorithm", engine_method("sglang", "speculative_algorithms", chosen["method"])]
    head = draft_head(inputs, chosen["method"])
    if head is not None:
        argv += ["--speculative-draft-model-path", head]
    return [
        *argv,
        "--speculative-num-steps",
        str(k),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(k + 1),
    ]


def trtllm_speculative_options(inputs: DeployInputs) -> dict[str, Any]:
    """speculative_config for --extra_llm_api_options: Eagle (max_draft_len, speculative_model_dir) or MTP (num_nextn_predict_layers)."""
    chosen = speculative(inputs)
    if chosen is None:
        return {}
    kind = engine_method("trt-llm", "speculative_decoding_types", chosen["method"])
    head = draft_head(inputs, chosen["method"])
    if head is None:
        return {"speculative_config": {"decoding_type": kind, "num_nextn_predict_layers": chosen["draft_tokens"]}}
    options: dict[str, Any] = {
        "speculative_config": {"decoding_type": kind, "max_draft_len": chosen["draft_tokens"], "speculative_model_dir": head}
    }
    if chosen["method"] == "draft_model":  # the two-model path, as the engine's Draft/target example runs it
        options["disable_overlap_scheduler"] = True
    return options


def drafts_with_a_model(inputs: DeployInputs) -> bool:
    """Whether the plan speculates with a separate draft model (plan.speculative.method draft_model)."""
    chosen = speculative(inputs)
    return chosen is not None and chosen["method"] == "draft_model"


def draft_model_notes(inputs: DeployInputs, engine: str) -> list[str]:
    """Comment lines for a plan drafting with a separate model: where the engine documents it, the release it
    needs (vLLM: not the table's), and that α is the request's measured rate, the plan's only evidence for it."""
    if not drafts_with_a_model(inputs):
        return []
    cli = engine_cli()[engine]
    entry = cli.get("draft_model") or {}
    source = entry.get("source") or cli.get("draft_model_source", "")
    notes = [
        f"# draft model {inputs.draft_model['slug'] if inputs.draft_model else '?'}: as documented at {source.split(' ')[0]}"
    ]
    if "requires" in entry:
        notes.append(f"# requires {entry['requires']}")
    rate = (speculative(inputs) or {}).get("acceptance_rate")
    notes.append(
        f"# the plan assumed acceptance rate {rate}: check it on this traffic (the engine's accepted/draft token counters)"
    )
    return notes


#: How each engine keeps the prefix cache the plan counts on (the table in the module docstring).
PREFIX_CACHE_SWITCH = {
    "vllm": "--enable-prefix-caching (below)",
    "sglang": "its radix cache, on by default (do not pass --disable-radix-cache)",
    "trt-llm": "KV cache block reuse, on by default in the PyTorch backend (do not disable enable_block_reuse)",
}


def prefix_cache_notes(inputs: DeployInputs, engine: str) -> list[str]:
    """Comment lines for a plan counting on a prefix cache: what it assumed (hit rate, KV tokens per replica, routing),
    the engine's switch, and for prefix-aware routing the router it needs in front (no engine flag sets it)."""
    chosen = (inputs.response.get("plan") or {}).get("prefix_caching")
    if not chosen:
        return []
    assumed = (
        f"# prefix cache: the plan assumes hit rate {chosen['hit_rate']} with {chosen['cache_tokens']} KV tokens per "
        f"replica under {chosen['routing']} routing, kept by {PREFIX_CACHE_SWITCH[engine]}"
    )
    notes = [assumed]
    if chosen["routing"] == "prefix_aware":
        notes.append(
            "# routing prefix_aware: put a router that sends each prefix to one replica in front of them (llm-d's "
            "prefix-cache scorer, the SGLang router's cache_aware policy, NVIDIA Dynamo's KV router); a random load "
            "balancer gives each replica every prefix and a lower hit rate than planned"
        )
    return notes


# --- engine commands -----------------------------------------------------------------------------------


def vllm_argv(inputs: DeployInputs, group: ReplicaGroup) -> list[str]:
    """`vllm serve CHECKPOINT ...` for one replica of `group` (the model is vllm serve's positional)."""
    kind, name = weights_flag(inputs, "vllm", group)
    argv = [*engine_cli()["vllm"]["command"], checkpoint(inputs.model)]
    argv += ["--served-model-name", inputs.model["slug"], "--host", "0.0.0.0", "--port", str(PORT)]
    argv += ["--tensor-parallel-size", str(group.tp), "--pipeline-parallel-size", str(group.pp)]
    if nodes_per_replica(inputs, group) > 1:
        argv += ["--distributed-executor-backend", "ray"]  # a replica over several nodes runs on a Ray cluster
    if group.batch_limit is not None:  # a prefill pool has none: its token budget bounds a step
        argv += ["--max-num-seqs", str(group.batch_limit)]
    if group.chunk_tokens is None:
        argv += ["--no-enable-chunked-prefill"]
    else:
        argv += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(group.chunk_tokens)]
    argv += [f"--{kind}", name, "--kv-cache-dtype", kv_cache_dtype("vllm", group) or "auto"]
    if (inputs.response.get("plan") or {}).get("prefix_caching"):
        argv += ["--enable-prefix-caching"]  # on by default in vLLM's V1 engine; said explicitly when the plan counts on it
    argv += ["--gpu-memory-utilization", f"{memory_utilization(inputs, group.gpu):g}", *vllm_speculative_argv(inputs)]
    return vllm_expert_parallel([*argv, *vllm_pool_argv(group), *vllm_priority_argv(group)], group.ep)


def vllm_env(inputs: DeployInputs, group: ReplicaGroup) -> dict[str, str]:
    """Environment variables one replica of `group` is started with (the expert-parallel all-to-all backend)."""
    return vllm_expert_parallel_env(group.ep, nodes=nodes_per_replica(inputs, group), role=group.role)


def vllm_priority_argv(group: ReplicaGroup) -> list[str]:
    """`--scheduling-policy priority` for a class plan's priority pool; none for any other."""
    if group.scheduling != "priority":
        return []
    policy = engine_cli()["vllm"]["priority_scheduling"]
    return [policy["flag"], policy["value"]]


def priority_note(group: ReplicaGroup) -> str | None:
    """A comment saying the `priority` each class's requests to a priority pool must carry; None for another pool.
    The class's own value: the plan serves priority 0 first, as vLLM serves the lower value first."""
    if group.scheduling != "priority":
        return None
    policy = engine_cli()["vllm"]["priority_scheduling"]
    values = ", ".join(f"{name} {value}" for name, value in group.classes)
    return (
        f'# pool {group.pool}: each request carries "{policy["request_field"]}" in its JSON body: {values} '
        f"(vLLM serves the lower value first, ties by arrival; a request without it gets {policy['request_default']})"
    )


def vllm_pool_argv(group: ReplicaGroup) -> list[str]:
    """A pool's `--kv-transfer-config` JSON (NixlConnector, kv_producer on prefill, kv_consumer on decode); none for mixed."""
    if group.role == "mixed":
        return []
    pd = engine_cli()["vllm"]["disaggregation"]
    config = {"kv_connector": pd["kv_connector"], "kv_role": pd["kv_role"][group.role]}
    return ["--kv-transfer-config", json.dumps(config, separators=(",", ":"))]


def sglang_pool_argv(group: ReplicaGroup) -> list[str]:
    """A pool's `--disaggregation-mode prefill|decode --disaggregation-transfer-backend nixl`; none for mixed."""
    if group.role == "mixed":
        return []
    pd = engine_cli()["sglang"]["disaggregation"]
    return ["--disaggregation-mode", pd["mode"][group.role], "--disaggregation-transfer-backend", pd["transfer_backend"]]


def sglang_argv(inputs: DeployInputs, group: ReplicaGroup) -> list[str]:
    """`python3 -m sglang.launch_server --model-path CHECKPOINT ...` for one replica of `group`."""
    kind, name = weights_flag(inputs, "sglang", group)
    argv = [*engine_cli()["sglang"]["command"], "--model-path", checkpoint(inputs.model)]
    argv += ["--served-model-name", inputs.model["slug"], "--host", "0.0.0.0", "--port", str(PORT)]
    argv += ["--tp-size", str(group.tp), "--pp-size", str(group.pp), *sglang_expert_parallel(group.ep)]
    if group.batch_limit is not None:  # a prefill pool has none: its token budget bounds a step
        argv += ["--max-running-requests", str(group.batch_limit)]
    chunk = engine_cli()["sglang"]["chunked_prefill_disabled"] if group.chunk_tokens is None else str(group.chunk_tokens)
    argv += ["--chunked-prefill-size", chunk]
    argv += [f"--{kind}", name, "--kv-cache-dtype", kv_cache_dtype("sglang", group) or "auto"]
    argv += ["--mem-fraction-static", f"{memory_utilization(inputs, group.gpu):g}", "--enable-metrics"]
    return [*argv, *sglang_speculative_argv(inputs), *sglang_pool_argv(group)]


def trtllm_options(inputs: DeployInputs, group: ReplicaGroup) -> dict[str, Any]:
    """The --extra_llm_api_options YAML (LLM API arguments trtllm-serve has no flag for): the weights'
    dtype or quant_config.quant_algo, and the KV cache's kv_cache_quant_algo."""
    kind, name = weights_flag(inputs, "trt-llm", group)
    options: dict[str, Any] = {"dtype": name} if kind == "dtype" else {"quant_config": {"quant_algo": name}}
    kv = kv_cache_dtype("trt-llm", group)
    if kv is not None:
        options.setdefault("quant_config", {})["kv_cache_quant_algo"] = kv
    return options | trtllm_speculative_options(inputs) | trtllm_expert_parallel(group.ep)[1]


def trtllm_argv(inputs: DeployInputs, group: ReplicaGroup, options_file: str) -> list[str]:
    """`trtllm-serve serve CHECKPOINT ...` for one replica of `group` (PyTorch backend); the served
    model name is the MODEL argument itself, trtllm-serve has no flag to rename it."""
    argv = [*engine_cli()["trt-llm"]["command"], checkpoint(inputs.model), "--backend", "pytorch"]
    argv += ["--host", "0.0.0.0", "--port", str(PORT), "--tp_size", str(group.tp), "--pp_size", str(group.pp)]
    argv += trtllm_expert_parallel(group.ep)[0]
    if nodes_per_replica(inputs, group) > 1:
        argv += ["--gpus_per_node", str(inputs.gpus[group.gpu]["gpus_per_node"])]
    argv += ["--max_batch_size", str(group.batch_limit)]
    if group.chunk_tokens is not None:
        argv += ["--enable_chunked_prefill", "--max_num_tokens", str(group.chunk_tokens)]
    argv += ["--kv_cache_free_gpu_memory_fraction", f"{kv_free_memory_fraction(inputs, group):g}"]
    return [*argv, "--extra_llm_api_options", options_file]


def group_comment(inputs: DeployInputs, index: int, group: ReplicaGroup) -> str:
    """The header line of one configuration: what it is and how many replicas the plan runs."""
    count = len(replica_groups(inputs.response))
    if group.pool is not None:
        scheduling = ", priority scheduling" if group.scheduling == "priority" else ""
        classes = ", ".join(name for name, _ in group.classes)
        rented = " (the most rented in any period: run them off-peak as the plan rents them)" if group.pool == "deferred" else ""
        return (
            f"# plan {inputs.plan_id} pool {group.pool} (classes {classes}{scheduling}): {group.replicas} replica(s){rented} "
            f"of {group.tp}x {group.gpu}, weights {group.weights}, KV cache {group.kv_cache}; run this once per replica"
        )
    shape = (
        f"{group.tp}x {group.gpu}" if group.pp == 1 else f"{group.gpus_per_replica}x {group.gpu} (tp {group.tp} x pp {group.pp})"
    )
    if group.role != "mixed":
        return (
            f"# plan {inputs.plan_id} {group.role} pool: {group.replicas} replica(s) of {shape}, "
            f"weights {group.weights}, KV cache {group.kv_cache}; run this once per replica"
        )
    return (
        f"# plan {inputs.plan_id} configuration {index + 1} of {count}: {group.replicas} replica(s) of {shape}, "
        f"weights {group.weights}, KV cache {group.kv_cache}; run this once per replica"
    )


def shell_command(argv: Sequence[str]) -> str:
    """`argv` as one shell command, one flag (with its value) per continued line."""
    words = [shlex.quote(word) for word in argv]
    lines: list[str] = []
    for word in words:
        if word.startswith("--") or not lines:
            lines.append(word)
        else:
            lines[-1] += f" {word}"
    return " \\\n  ".join(lines)


def render_engine(inputs: DeployInputs, engine: str) -> str:
    """The launch command(s) for `engine` as a shell script: one command per configuration."""
    cli = engine_cli()[engine]
    parts = [f"# {cli['release']}: flags as documented at {cli['sources'][0]}"]
    groups = replica_groups(inputs.response)
    if is_disaggregated(inputs.response):
        parts.append(f"# prefill/decode flags as documented at {cli['disaggregation']['source'].split(' ')[0]}")
        parts.append(f"# requires {cli['disaggregation']['requires']}")
        if engine == "vllm":
            parts.append(
                "# pools on different nodes: set VLLM_NIXL_SIDE_CHANNEL_HOST to each replica's own address (NIXL handshake)"
            )
    if is_classes_plan(inputs.response):
        parts.append(classes_note(inputs))
        if any(g.scheduling == "priority" for g in groups):
            parts.append(f"# priority scheduling as documented at {cli['priority_scheduling']['source'].split(' ')[0]}")
    parts += draft_model_notes(inputs, engine)
    parts += prefix_cache_notes(inputs, engine)
    for index, group in enumerate(groups):
        parts.append(group_comment(inputs, index, group))
        nodes = nodes_per_replica(inputs, group)
        if nodes > 1:
            parts.append(multi_node_note(engine, group, nodes))
        note = priority_note(group)
        if note is not None:
            parts.append(note)
        if engine == "vllm":
            env = vllm_env(inputs, group)
            if env:
                parts.append(
                    f"# expert parallel: VLLM_ALL2ALL_BACKEND={env['VLLM_ALL2ALL_BACKEND']} as vLLM's expert-parallel "
                    "deployment guide selects it for this layout; it needs its kernels installed (vLLM tools/ep_kernels)"
                )
            parts.append(shell_command([*(f"{k}={v}" for k, v in env.items()), *vllm_argv(inputs, group)]))
        elif engine == "sglang":
            parts.append(shell_command(sglang_argv(inputs, group)))
        else:
            options_file = TRT_OPTIONS_FILE if index == 0 else f"extra-llm-api-options-{index + 1}.yaml"
            options = yaml.safe_dump(trtllm_options(inputs, group), sort_keys=False)
            parts.append(f"cat > {options_file} <<'EOF'\n{options}EOF")
            parts.append(shell_command(trtllm_argv(inputs, group, options_file)))
    if is_disaggregated(inputs.response):
        parts += router_note(engine, groups)
    return "\n".join(parts) + "\n"


def multi_node_note(engine: str, group: ReplicaGroup, nodes: int) -> str:
    """The comment over a replica that spans nodes: how the engine is started across them."""
    where = {
        "vllm": "start a Ray cluster over the nodes (ray start --head, then ray start --address on the others) and run "
        "this on the head node",
        "sglang": "run this on each node with its --nnodes, --node-rank and --dist-init-addr (not rendered)",
        "trt-llm": "launch it under MPI across the nodes (mpirun or srun)",
    }[engine]
    return (
        f"# each replica is tp {group.tp} x pp {group.pp} = {group.gpus_per_replica} GPUs over {nodes} nodes "
        f"(pipeline stages across nodes): {where}"
    )


def classes_note(inputs: DeployInputs) -> str:
    """The header line of a class plan: its arrangement, and that each class is sent to its own pool."""
    chosen = inputs.response["arrangement"]["chosen"]
    return f"# class plan, arrangement {chosen}: clients send each class's requests to the replicas of the pool that serves it"


def router_note(engine: str, groups: Sequence[ReplicaGroup]) -> list[str]:
    """Comment lines: the P/D router that sends each request to a prefill replica, then a decode replica,
    with one placeholder host per planned replica (the addresses are the deployment's, not the plan's)."""
    pd = engine_cli()[engine]["disaggregation"]
    hosts = {g.role: [f"<{g.role}-host-{i + 1}>" for i in range(g.replicas)] for g in groups if g.role in ("prefill", "decode")}
    if engine == "vllm":
        command = pd["router"].format(
            prefill_hosts=" ".join(hosts["prefill"]),
            prefill_ports=" ".join([str(PORT)] * len(hosts["prefill"])),
            decode_hosts=" ".join(hosts["decode"]),
            decode_ports=" ".join([str(PORT)] * len(hosts["decode"])),
        )
    else:
        command = pd["router"].format(
            prefill_urls=" ".join(f"--prefill http://{h}:{PORT}" for h in hosts["prefill"]),
            decode_urls=" ".join(f"--decode http://{h}:{PORT}" for h in hosts["decode"]),
        )
    return [
        f"# router: clients call a prefill/decode router, never a pool directly ({pd['router_note']}):",
        f"# {command}",
    ]


# --- Kubernetes --------------------------------------------------------------------------------------------

#: HPA ceiling as a multiple of the planned replicas: a policy default (room for traffic to double before
#: the autoscaler stops adding replicas), not physics; edit maxReplicas to the budget.
MAX_REPLICAS_FACTOR = 2
RUNNING_METRIC = "vllm:num_requests_running"


def k8s_name(inputs: DeployInputs, index: int | None = None) -> str:
    """A DNS-1035 label (Service names need one): hr-<model>-<plan id prefix>[-<configuration>]."""
    model = "".join(c if c.isalnum() else "-" for c in inputs.model["slug"].lower()).strip("-")
    suffix = f"-{inputs.plan_id[:8]}" + ("" if index is None else f"-{index + 1}")
    return f"hr-{model[: 63 - 3 - len(suffix)].rstrip('-')}{suffix}"


def is_headline(inputs: DeployInputs, group: ReplicaGroup) -> bool:
    """Whether `group` is the configuration the plan's justification describes (its `plan` block)."""
    plan = inputs.response["plan"]
    return (group.gpu, group.tp, group.weights, group.kv_cache, group.batch_limit, group.chunk_tokens) == (
        plan["gpu"],
        plan["tp"],
        plan["precision"]["weights"],
        plan["precision"]["kv_cache"],
        plan["batch_limit"],
        plan["chunk_tokens"],
    )


def running_target(inputs: DeployInputs, group: ReplicaGroup) -> float | None:
    """The HPA's target for the average of vllm:num_requests_running over a group's pods.

    Derivation: the plan runs each replica at ρ = λ_r / μ_sat, i.e. at the per-replica rate
    λ_r = ρ·μ_sat it found meets every SLO. By Little's law the mean number of requests a replica
    holds at that rate is L = λ_r · W, with W the mean time a request spends in service
    (justification.queueing.littles_law: L = occupancy, λ = arrival_rate_rps, W = time_in_service_s).
    The planned wait is ~0, so these requests are running, not waiting: vllm:num_requests_running
    averages L when traffic is as planned. L lies below the slots a replica has
    (min(batch_limit, KV-cache limit)), which it reaches only at saturation (ρ → 1). Holding the
    average at L keeps each replica at the planned ρ: when traffic grows by k the average grows by
    about k and the HPA scales the replicas by about k. Only the configuration the justification
    describes has its W recorded; another row of a mixed fleet gets None (fixed replicas)."""
    if group.role != "mixed" or group.batch_limit is None or not is_headline(inputs, group):
        return None  # a pool's requests are not the plan's Little's-law occupancy: fixed replicas
    queueing = (inputs.response.get("justification") or {}).get("queueing") or {}
    occupancy = (queueing.get("littles_law") or {}).get("occupancy")
    return None if occupancy is None or occupancy <= 0 else min(float(occupancy), float(group.batch_limit))


def vllm_image(inputs: DeployInputs, vendor: str) -> str:
    """The vLLM image: the table's release, or for a plan drafting with a separate model on NVIDIA the release
    engine_cli.json names for it (v0.11's V1 engine has no draft-model speculation)."""
    if vendor == "nvidia" and drafts_with_a_model(inputs):
        image: str = engine_cli()["vllm"]["draft_model"]["image"]
        return image
    return VLLM_IMAGE[vendor]


def deployment(inputs: DeployInputs, group: ReplicaGroup, index: int, app: str) -> dict[str, Any]:
    """A Deployment of `group.replicas` vLLM servers, each holding `tp × pp` GPUs of the GPU's vendor.
    Each replica is one pod on one node (`render` refuses a replica that spans nodes: it would want a
    LeaderWorkerSet)."""
    vendor = inputs.gpus[group.gpu]["vendor"]
    if vendor not in GPU_RESOURCE:
        raise NotDeployableError(f"no Kubernetes GPU resource known for vendor {vendor!r} (GPU {group.gpu!r})")
    name = k8s_name(inputs, index)
    argv = vllm_argv(inputs, group)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": app}
    if group.role != "mixed":
        labels["app.kubernetes.io/component"] = group.role
    annotations = {"headroom/plan": inputs.plan_id}
    if group.pool is not None:  # annotations, not labels: a class name may not be a valid label value
        annotations |= {"headroom/pool": group.pool, "headroom/classes": class_priorities(group)}
    container: dict[str, Any] = {
        "name": "vllm",
        "image": vllm_image(inputs, vendor),
        "command": argv[:2],
        "args": argv[2:],
        "ports": [{"name": "http", "containerPort": PORT}],
        "resources": {"limits": {GPU_RESOURCE[vendor]: group.gpus_per_replica}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT}, "periodSeconds": 10},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],  # NCCL between the tp workers
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in vllm_env(inputs, group).items()]
    if group.role != "mixed":  # NIXL's handshake: the decoder reaches the prefiller at its pod address
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if env:
        container["env"] = env
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "replicas": group.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": dict(labels)},  # a copy: YAML would write an anchor for a shared dict
                "spec": {"containers": [container], "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]},
            },
        },
    }


def pool_service(inputs: DeployInputs, group: ReplicaGroup, index: int) -> dict[str, Any]:
    """A headless Service per pool of a disaggregated plan: the P/D router finds each pool's pods by its DNS
    name; clients call the router, so no Service spans both pools."""
    name = k8s_name(inputs, index)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "annotations": {"headroom/plan": inputs.plan_id, "headroom/role": group.role}},
        "spec": {
            "clusterIP": "None",
            "selector": {"app.kubernetes.io/name": name},
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def class_priorities(group: ReplicaGroup) -> str:
    """A class pool's classes and their priorities, `chat=0,summarise=1`."""
    return ",".join(f"{name}={value}" for name, value in group.classes)


def class_pool_service(inputs: DeployInputs, group: ReplicaGroup, index: int) -> dict[str, Any]:
    """A Service per pool of a class plan: clients send each class's requests to its pool's Service."""
    name = k8s_name(inputs, index)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "annotations": {
                "headroom/plan": inputs.plan_id,
                "headroom/pool": group.pool or "",
                "headroom/classes": class_priorities(group),
            },
        },
        "spec": {
            "selector": {"app.kubernetes.io/name": name},
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def service(inputs: DeployInputs, app: str) -> dict[str, Any]:
    """One Service in front of every configuration's pods (the fleet serves one model)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app, "annotations": {"headroom/plan": inputs.plan_id}},
        "spec": {
            "selector": {"app.kubernetes.io/part-of": app},
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT, "protocol": "TCP"}],
        },
    }


def autoscaler(inputs: DeployInputs, group: ReplicaGroup, index: int, target: float) -> dict[str, Any]:
    """An autoscaling/v2 HPA on the Pods metric vllm:num_requests_running (served to the HPA by a
    custom-metrics adapter such as prometheus-adapter), target average `target` (see running_target)."""
    name = k8s_name(inputs, index)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "annotations": {"headroom/plan": inputs.plan_id}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": group.replicas,
            "maxReplicas": MAX_REPLICAS_FACTOR * group.replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": RUNNING_METRIC},
                        "target": {"type": "AverageValue", "averageValue": f"{max(1, round(target * 1000))}m"},
                    },
                }
            ],
        },
    }


def manifests(inputs: DeployInputs) -> list[dict[str, Any]]:
    """Deployment (+ HPA where the plan records W) per configuration, then the Service."""
    app = k8s_name(inputs)
    documents: list[dict[str, Any]] = []
    if is_classes_plan(inputs.response):  # no HPA: a pool's requests are not one Little's-law occupancy
        for index, group in enumerate(replica_groups(inputs.response)):
            documents += [deployment(inputs, group, index, app), class_pool_service(inputs, group, index)]
        return documents
    if is_disaggregated(inputs.response):
        for index, group in enumerate(replica_groups(inputs.response)):
            documents += [deployment(inputs, group, index, app), pool_service(inputs, group, index)]
        return documents
    for index, group in enumerate(replica_groups(inputs.response)):
        documents.append(deployment(inputs, group, index, app))
        target = running_target(inputs, group)
        if target is not None:
            documents.append(autoscaler(inputs, group, index, target))
    return [*documents, service(inputs, app)]


def render_k8s(inputs: DeployInputs) -> str:
    """The manifests as one multi-document YAML stream, headed by what produced it."""
    header = (
        f"# Headroom plan {inputs.plan_id}: vLLM on Kubernetes ({engine_cli()['vllm']['release']}).\n"
        f"# HPA target: mean requests running per replica at the planned rate (Little's law, L = lambda*W).\n"
    )
    if is_disaggregated(inputs.response):
        pd = engine_cli()["vllm"]["disaggregation"]
        header = (
            f"# Headroom plan {inputs.plan_id}: disaggregated vLLM on Kubernetes ({engine_cli()['vllm']['release']}), "
            f"a Deployment and a headless Service per pool.\n"
            f"# P/D flags as documented at {pd['source'].split(' ')[0]}; the image must carry "
            f"{pd['requires']}\n"
            f"# Clients call a prefill/decode router in front of the two Services ({pd['router_note']}); "
            f"no HPA: pool replicas are fixed as planned.\n"
        )
    if is_classes_plan(inputs.response):
        groups = replica_groups(inputs.response)
        header = (
            f"# Headroom plan {inputs.plan_id}: vLLM on Kubernetes ({engine_cli()['vllm']['release']}), "
            f"a Deployment and a Service per pool.\n{classes_note(inputs)}; no HPA: pool replicas are fixed as planned.\n"
        )
        notes = [note for note in (priority_note(g) for g in groups) if note is not None]
        if notes:
            source = engine_cli()["vllm"]["priority_scheduling"]["source"].split(" ")[0]
            header += f"# priority scheduling as documented at {source}\n" + "".join(f"{note}\n" for note in notes)
    header += "".join(f"{note}\n" for note in draft_model_notes(inputs, "vllm"))
    return header + yaml.safe_dump_all(manifests(inputs), sort_keys=False)


def render(inputs: DeployInputs, target: str) -> tuple[str, str]:
    """(body, media type) of the deployable output for `target` (one of TARGETS)."""
    if is_disaggregated(inputs.response) and target not in DISAGGREGATED_TARGETS:
        raise NotDeployableError(
            f"target {target!r} cannot express a disaggregated plan's prefill and decode pools here; "
            f"targets that can: {', '.join(DISAGGREGATED_TARGETS)}"
        )
    priority = [g.pool for g in replica_groups(inputs.response) if g.scheduling == "priority"]
    if priority and target not in PRIORITY_TARGETS:
        raise NotDeployableError(
            f"target {target!r} has no cited priority scheduling for the class plan's priority pool "
            f"{', '.join(p or '' for p in priority)}; targets that render it: {', '.join(PRIORITY_TARGETS)}"
        )
    if target == "k8s":
        spanning = [g for g in replica_groups(inputs.response) if nodes_per_replica(inputs, g) > 1]
        if spanning:
            g = spanning[0]
            raise NotDeployableError(
                f"a replica of tp {g.tp} x pp {g.pp} = {g.gpus_per_replica} {g.gpu} GPUs spans "
                f"{nodes_per_replica(inputs, g)} nodes; the k8s target renders one pod per replica (a multi-node "
                "replica needs a LeaderWorkerSet, not rendered); targets that render it: vllm, sglang, trt-llm"
            )
        return render_k8s(inputs), "application/yaml"
    if target in ENGINES:
        return render_engine(inputs, target), "text/plain"
    raise NotDeployableError(f"unknown target {target!r}; targets are {', '.join(TARGETS)}")
