"""Deployable output of a stored plan: each serving engine's launch command, and
Kubernetes manifests, rendered from the plan's decisions with every planned knob on its flag.

Pure: functions of the stored plan (its response dict) and plain catalog records; the router
(api/routers/deploy.py) reads them from the database. This module holds what every target shares
(the replica groups, memory, precision and speculative-decoding flags); the engines' commands are
api/deploy_engines.py, the Kubernetes manifests api/deploy_k8s.py, and `render` (api/deploy_render.py)
picks the target. The flags come from api/data/engine_cli.json,
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
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

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
