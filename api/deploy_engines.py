"""Each serving engine's launch command for a stored plan (vLLM, SGLang, TensorRT-LLM), one per
replica group, with every planned knob on its flag (the table in api/deploy.py's docstring).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

import yaml

from api.deploy import (
    PORT,
    TRT_OPTIONS_FILE,
    DeployInputs,
    ReplicaGroup,
    checkpoint,
    draft_model_notes,
    engine_cli,
    is_disaggregated,
    kv_cache_dtype,
    kv_free_memory_fraction,
    memory_utilization,
    nodes_per_replica,
    prefix_cache_notes,
    replica_groups,
    sglang_speculative_argv,
    trtllm_speculative_options,
    vllm_speculative_argv,
    weights_flag,
)
from api.deploy_expert_parallel import (
    sglang_expert_parallel,
    trtllm_expert_parallel,
    vllm_expert_parallel,
    vllm_expert_parallel_env,
)
from api.schemas.classes import is_classes_plan


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
