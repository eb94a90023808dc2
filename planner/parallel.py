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

All-reduce as a function of message size (issue 14 §1): on NVLink and Infinity Fabric nodes engines
pick the all-reduce algorithm by message size, as NCCL's tuner does (it prices every algorithm and
protocol as latency + bytes / bandwidth and runs the cheapest; NVIDIA/nccl src/graph/tuning.cc): a
one-shot kernel for small messages, where every rank reads all p−1 peers' buffers ((p−1)·S bytes over
its link, the lowest latency), and a two-shot / ring all-reduce for large ones (2·(p−1)/p·S bytes,
a larger fixed cost that grows with the 2·(p−1) steps; vLLM `custom_all_reduce.cuh` 1-stage vs
2-stage, TensorRT-LLM `AllReduceStrategy` ONESHOT / TWOSHOT / NCCL). So

    t(S) = min( a₀ + a₁·(p−1) + (p−1)·S / (e₁·B),   b₀ + b₁·2(p−1) + 2(p−1)/p·S / (e₂·B) )

with B the catalog link bandwidth and (a₀, a₁, e₁, b₀, b₁, e₂) fitted per NVLink generation (GPU
architecture) to NVIDIA AIConfigurator's published all-reduce kernel timings (bench/kernel_measurements.json,
`python -m bench.kernel_fit`; 4.7–9.4 % median error where the single ring line with the catalog α was
17–43 %). An architecture with no timings takes the fit pooled over all of them. A PCIe link (no
NVLink peer-to-peer, so NCCL only) and the NIC keep the ring line with the catalog α.

The step model is linear in a step's new tokens n (t_comm = n·comm_s_per_token + comm_latency_s), so
it carries the line through t(n·hidden·a) closest in relative error over the step sizes a server runs
(`STEP_TOKENS`, 1 to 8192 new tokens): `all_reduce_line`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

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
    #: The fitted all-reduce of this link (module docstring); None: the ring line with `latency_s` (PCIe, the NIC).
    all_reduce: AllReduceFit | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AllReduceFit:
    """One link class's all-reduce: the cheaper of a one-shot and a two-shot / ring algorithm (module docstring)."""

    link_class: str
    one_shot_latency_s: float
    one_shot_latency_per_peer_s: float
    one_shot_efficiency: float
    ring_latency_s: float
    ring_latency_per_step_s: float
    ring_efficiency: float
    source: str

    def __post_init__(self) -> None:
        if not (0.0 < self.one_shot_efficiency <= 2.0 and 0.0 < self.ring_efficiency <= 2.0):
            raise PlannerInputError(f"{self.link_class}: all-reduce efficiencies must be in (0, 2]")
        if min(self.one_shot_latency_s, self.one_shot_latency_per_peer_s, self.ring_latency_s, self.ring_latency_per_step_s) < 0:
            raise PlannerInputError(f"{self.link_class}: all-reduce latencies must be >= 0")


_KERNEL_SOURCE = (
    "fitted by `python -m bench.kernel_fit` (all-reduce link classes) to NVIDIA AIConfigurator's TensorRT-LLM "
    "custom all-reduce timings, BF16, 2/4/8 GPUs, 128 to 5.4e8 elements (bench/kernel_measurements.json, Apache-2.0)"
)

#: Fitted per NVLink generation (the GPU's architecture); efficiencies are of the catalog link bandwidth.
ALL_REDUCE_FITS: dict[str, AllReduceFit] = {
    fit.link_class: fit
    for fit in (
        AllReduceFit(
            link_class="ampere",  # A100 SXM, NVLink 3, TensorRT-LLM 1.0.0: 69 timings, 9.4 % median error
            one_shot_latency_s=4.043e-6,
            one_shot_latency_per_peer_s=0.173e-6,
            one_shot_efficiency=0.405,
            ring_latency_s=47.11e-6,
            ring_latency_per_step_s=0.410e-6,
            ring_efficiency=0.691,
            source=_KERNEL_SOURCE,
        ),
        AllReduceFit(
            link_class="hopper",  # H100 / H200 SXM, NVLink 4, TensorRT-LLM 1.3.0rc20: 138 timings, 4.7 %
            one_shot_latency_s=2.668e-6,
            one_shot_latency_per_peer_s=0.079e-6,
            one_shot_efficiency=0.636,
            ring_latency_s=26.03e-6,
            ring_latency_per_step_s=0.019e-6,
            ring_efficiency=0.793,
            source=_KERNEL_SOURCE,
        ),
        AllReduceFit(
            link_class="blackwell",  # B200, NVLink 5, TensorRT-LLM 1.3.0rc20: 69 timings, 6.2 %
            one_shot_latency_s=4.709e-6,
            one_shot_latency_per_peer_s=0.080e-6,
            one_shot_efficiency=0.595,
            ring_latency_s=29.99e-6,
            ring_latency_per_step_s=0.044e-6,
            ring_efficiency=0.666,
            source=_KERNEL_SOURCE,
        ),
        AllReduceFit(
            link_class="pooled",  # all 276 timings of the three: for an architecture without its own
            one_shot_latency_s=3.439e-6,
            one_shot_latency_per_peer_s=0.100e-6,
            one_shot_efficiency=0.560,
            ring_latency_s=30.88e-6,
            ring_latency_per_step_s=0.210e-6,
            ring_efficiency=0.736,
            source=_KERNEL_SOURCE,
        ),
    )
}

#: The fastest PCIe link, Gen5 x16's 64 GB/s line rate: a link no faster is PCIe, all-reduced by NCCL alone
#: (custom all-reduce kernels need NVLink / Infinity Fabric peer-to-peer; catalog migration 0012).
PCIE_MAX_BYTES_PER_S = 64e9

#: New tokens per step the step model's all-reduce line is fitted over: batch-1 decode to 8192 (vLLM's
#: default max_num_batched_tokens for an API server with chunked prefill), one point per doubling.
STEP_TOKENS: tuple[int, ...] = tuple(2**i for i in range(14))


def all_reduce_fit_of(gpu: GpuSpec) -> AllReduceFit | None:
    """The fitted all-reduce of `gpu`'s in-node link: its architecture's, else the pooled one; None on PCIe."""
    if gpu.interconnect_bytes_per_s <= PCIE_MAX_BYTES_PER_S:
        return None
    return ALL_REDUCE_FITS.get(gpu.architecture.lower(), ALL_REDUCE_FITS["pooled"])


def nvlink_link(gpu: GpuSpec) -> Link:
    """The in-node link (NVLink, Infinity Fabric, PCIe) from the catalog's interconnect figures."""
    return Link(
        name=f"{gpu.slug} in-node interconnect",
        bytes_per_s=gpu.interconnect_bytes_per_s,
        latency_s=gpu.interconnect_latency_s,
        source=f"catalog ({gpu.slug}): interconnect_gb_per_s / interconnect_latency",
        all_reduce=all_reduce_fit_of(gpu),
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


def all_reduce_s(message_bytes: float, ranks: int, link: Link) -> float:
    """Time of one all-reduce of `message_bytes` over `ranks` GPUs on `link` (0 for one rank): the cheaper of
    the fitted one-shot and ring algorithms (module docstring), or the ring line with α where none is fitted."""
    fit = link.all_reduce
    if ranks <= 1:
        return 0.0
    if fit is None:
        return ring_all_reduce_s(message_bytes, ranks, link.bytes_per_s, link.latency_s)
    one_shot = (
        fit.one_shot_latency_s
        + fit.one_shot_latency_per_peer_s * (ranks - 1)
        + (ranks - 1) * message_bytes / (fit.one_shot_efficiency * link.bytes_per_s)
    )  # a₀ + a₁·(p−1) + every peer's buffer read over the link
    ring = (
        fit.ring_latency_s
        + fit.ring_latency_per_step_s * 2 * (ranks - 1)
        + 2.0 * (ranks - 1) / ranks * message_bytes / (fit.ring_efficiency * link.bytes_per_s)
    )  # b₀ + b₁·2(p−1) steps + reduce-scatter and all-gather bytes over the link
    return min(one_shot, ring)


@lru_cache(maxsize=4096)
def all_reduce_line(link: Link, ranks: int, bytes_per_token: float) -> tuple[float, float]:
    """(latency s, s per new token) of the line a + b·n closest to `all_reduce_s(n · bytes_per_token)` in
    relative error over `STEP_TOKENS` (weighted least squares, min Σ ((a + b·n) / t(n) − 1)²); exactly
    (α, ring bytes / B) where no fit applies. Both clamped at 0 (a concave t(n) keeps them positive)."""
    if ranks <= 1:
        return 0.0, 0.0
    if link.all_reduce is None:
        return link.latency_s, ring_all_reduce_s(bytes_per_token, ranks, link.bytes_per_s, 0.0)
    # normal equations of the 2-parameter fit with rows (1/t, n/t) and target 1
    s00 = s01 = s11 = r0 = r1 = 0.0
    for n in STEP_TOKENS:
        inv = 1.0 / all_reduce_s(n * bytes_per_token, ranks, link)
        s00 += inv * inv
        s01 += n * inv * inv
        s11 += n * n * inv * inv
        r0 += inv
        r1 += n * inv
    det = s00 * s11 - s01 * s01
    latency = (s11 * r0 - s01 * r1) / det  # Cramer's rule
    slope = (s00 * r1 - s01 * r0) / det
    return max(latency, 0.0), max(slope, 0.0)


def comm_s_per_token(gpu: GpuSpec, model: ModelSpec, tp: int, activation_bytes: float) -> float:
    """All-reduce time per new token per step: two all-reduces per layer of hidden·activation bytes per token
    (over `tp_link`: NVLink in a node, the NIC across nodes), the slope of `all_reduce_line`."""
    if tp <= 1:
        return 0.0
    _, slope = all_reduce_line(tp_link(gpu, tp), tp, model.hidden_size * activation_bytes)
    return 2 * model.layers * slope  # 2 per layer × L × s per token


def comm_latency_s(gpu: GpuSpec, model: ModelSpec, tp: int, activation_bytes: float) -> float:
    """All-reduce latency per step: two all-reduces per layer, each the intercept of `all_reduce_line`."""
    if tp <= 1:
        return 0.0
    latency, _ = all_reduce_line(tp_link(gpu, tp), tp, model.hidden_size * activation_bytes)
    return 2 * model.layers * latency  # 2 per layer × L × α


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each GPU stores (1 for MLA's latent)."""
    if model.mla is not None:
        return 1
    return math.ceil(model.kv_heads / tp)  # split evenly, or one replicated head when tp > kv_heads
