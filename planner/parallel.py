"""Tensor parallelism: which degrees a model and GPU allow, how KV heads spread, and all-reduce time.

Head layout follows vLLM's `QKVParallelLinear` (vllm/model_executor/layers/linear.py): query heads
are split evenly, so `tp` must divide `attention_heads`; KV heads are split when `tp` divides
`kv_heads`, and replicated `tp / kv_heads` times when `kv_heads` divides `tp` (each GPU then holds
one KV head); any other `tp` is refused. An MLA model caches one latent per token that every rank
needs ("When using MLA during decode it becomes MQA": vLLM `ModelConfig.get_num_kv_heads` returns
1), so its latent is replicated on all `tp` GPUs.

Communication: Megatron-style tensor parallelism all-reduces the hidden state twice per layer
(after attention and after the MLP; Shoeybi et al. 2019, arXiv 1909.08053, §3). A ring all-reduce
of S bytes over p ranks moves 2·(p−1)/p·S bytes through each link in 2·(p−1) steps (reduce-scatter
then all-gather; Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective Communication
Operations in MPICH"), so it costs 2·(p−1)/p·S/B + α, the form docs/design.md states ("ring:
2·(tp−1)/tp·bytes/link_bandwidth + latency"). α is the end-to-end latency of one small-message
all-reduce (`GpuSpec.interconnect_latency_s`), not a per-hop figure: on NVSwitch and Infinity
Fabric machines serving engines use one-shot or two-shot all-reduce kernels for the small decode
messages (vLLM `custom_all_reduce`), whose latency does not grow as 2·(p−1) ring hops.

Across nodes: tp may exceed `gpus_per_node` when it takes whole nodes (vLLM runs TP over several
nodes with Ray, docs.vllm.ai "Distributed inference and serving", though it recommends TP inside a
node and PP across). Such an all-reduce crosses the per-GPU scale-out NIC (`GpuSpec.scale_out_*`,
planner/disagg.py `gpu_scale_out_link`), so the ring's bandwidth is the NIC's, and its latency α is
one in-node all-reduce plus one NIC latency (a hierarchical all-reduce: reduce inside the node, then
across nodes). That is what makes cross-node TP lose to in-node TP with pipeline stages across nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.disagg import gpu_scale_out_link
from planner.errors import PlannerInputError, UnsupportedConfigurationError
from planner.specs import GpuSpec, ModelSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """A per-GPU link a collective or a pipeline hop crosses: bandwidth one way, latency, where from."""

    name: str
    bytes_per_s: float
    latency_s: float
    source: str


def nvlink_link(gpu: GpuSpec) -> Link:
    """The in-node link (NVLink, Infinity Fabric, PCIe) from the catalog's interconnect figures."""
    return Link(
        name=f"{gpu.slug} in-node interconnect",
        bytes_per_s=gpu.interconnect_bytes_per_s,
        latency_s=gpu.interconnect_latency_s,
        source=f"catalog ({gpu.slug}): interconnect_gb_per_s / interconnect_latency",
    )


def scale_out_link_of(gpu: GpuSpec) -> Link:
    """The GPU's share of the scale-out network (its NIC), catalog figures or planner/disagg.py's default."""
    nic = gpu_scale_out_link(gpu)
    return Link(name=nic.name, bytes_per_s=nic.bytes_per_s_per_gpu, latency_s=nic.latency_s, source=nic.source)


def tp_link(gpu: GpuSpec, tp: int) -> Link:
    """The link a tp-way all-reduce is priced on: in-node up to `gpus_per_node`, else the NIC (hierarchical)."""
    if tp <= gpu.gpus_per_node:
        return nvlink_link(gpu)
    nic = scale_out_link_of(gpu)
    return Link(
        name=f"{nic.name} (tp across nodes)",
        bytes_per_s=min(nic.bytes_per_s, gpu.interconnect_bytes_per_s),
        latency_s=gpu.interconnect_latency_s + nic.latency_s,  # in-node all-reduce, then across the NIC
        source=nic.source,
    )


def kv_head_replicas(model: ModelSpec, tp: int) -> int:
    """How many GPUs of a replica hold a copy of each KV head (1 when heads are split).

    MLA: the latent is one shared "head", so every one of the `tp` GPUs holds it.
    """
    if model.mla is not None:
        return tp
    return max(1, tp // model.kv_heads)  # tp ≥ kv_heads: tp/kv_heads copies; else split, 1 copy


def check_tensor_parallel(gpu: GpuSpec, model: ModelSpec, tp: int) -> None:
    """Raise unless `tp` GPUs of `gpu` can hold one tensor-parallel replica of `model`."""
    if tp < 1:
        raise PlannerInputError(f"tp must be >= 1, got {tp}", tp=tp)
    if tp > gpu.gpus_per_node and tp % gpu.gpus_per_node != 0:
        raise UnsupportedConfigurationError(
            f"tp={tp} exceeds the {gpu.gpus_per_node} GPUs of one {gpu.slug} node and is not a whole number of "
            "nodes; tensor parallelism across nodes takes whole nodes",
            tp=tp,
            gpus_per_node=gpu.gpus_per_node,
            valid_tp=list(valid_tensor_parallel_degrees(gpu, model)),
        )
    if model.attention_heads % tp != 0:
        raise UnsupportedConfigurationError(
            f"tp={tp} does not divide {model.slug}'s {model.attention_heads} attention heads",
            tp=tp,
            attention_heads=model.attention_heads,
            valid_tp=list(valid_tensor_parallel_degrees(gpu, model)),
        )
    if model.mla is None and model.kv_heads % tp != 0 and tp % model.kv_heads != 0:
        raise UnsupportedConfigurationError(
            f"tp={tp} neither divides nor is a multiple of {model.slug}'s {model.kv_heads} KV heads, "
            "so the KV heads can be neither split evenly nor replicated evenly",
            tp=tp,
            kv_heads=model.kv_heads,
            valid_tp=list(valid_tensor_parallel_degrees(gpu, model)),
        )


def is_valid_tensor_parallel(gpu: GpuSpec, model: ModelSpec, tp: int) -> bool:
    return (
        1 <= tp
        and (tp <= gpu.gpus_per_node or tp % gpu.gpus_per_node == 0)
        and model.attention_heads % tp == 0
        and (model.mla is not None or model.kv_heads % tp == 0 or tp % model.kv_heads == 0)
    )


def valid_tensor_parallel_degrees(gpu: GpuSpec, model: ModelSpec) -> tuple[int, ...]:
    """Every tp from 1 to `gpus_per_node` that `check_tensor_parallel` accepts, ascending (in-node only;
    whole multiples of a node are accepted too, priced on the NIC)."""
    return tuple(tp for tp in range(1, gpu.gpus_per_node + 1) if is_valid_tensor_parallel(gpu, model, tp))


def ring_all_reduce_s(message_bytes: float, ranks: int, link_bytes_per_s: float, latency_s: float) -> float:
    """Time of one ring all-reduce of `message_bytes` over `ranks` GPUs (0 for one rank)."""
    if ranks <= 1:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * message_bytes / link_bytes_per_s + latency_s  # ring bytes / link + one all-reduce latency


def comm_s_per_token(gpu: GpuSpec, model: ModelSpec, tp: int, activation_bytes: float) -> float:
    """All-reduce bandwidth time per new token per step: two all-reduces per layer of hidden·activation bytes
    (over `tp_link`: NVLink in a node, the NIC across nodes)."""
    if tp <= 1:
        return 0.0
    return (
        2 * model.layers * 2.0 * (tp - 1) / tp * model.hidden_size * activation_bytes / tp_link(gpu, tp).bytes_per_s
    )  # 2 per layer × L × ring bytes / link


def comm_latency_s(gpu: GpuSpec, model: ModelSpec, tp: int) -> float:
    """All-reduce latency per step: two all-reduces per layer, each costing one all-reduce latency α."""
    if tp <= 1:
        return 0.0
    return 2 * model.layers * tp_link(gpu, tp).latency_s  # 2 per layer × L × α


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each GPU stores (1 for MLA's latent)."""
    if model.mla is not None:
        return 1
    return math.ceil(model.kv_heads / tp)  # split evenly, or one replicated head when tp > kv_heads
