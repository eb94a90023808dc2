"""Disaggregated serving: a prefill pool and a decode pool joined by a KV-cache transfer.

A request waits in the prefill pool's queue, is prefilled, reserves a slot (and the KV memory of
its whole context) on a decode replica, has its prompt's KV cache copied there over the link
between the pools, then decodes in a batch that never runs a prefill. The analytic model:

    TTFT_q = W_prefill,q + S_prefill(p_q) + W_admit,q + t_transfer(p_q) [+ t_step(n̄) if counted]
    TPOT_q = t_step(n_q)                  (decode pool alone: no prefill interference)
    E2E_q  = TTFT_q + (o_q − 1) · t_step(n̄)

Sums of percentiles bound the percentile of a sum from above (the parts are positively related
only through load); the simulator (planner/simulator_disagg.py) measures how loose that is.

Prefill pool: one shared FCFS queue (NVIDIA Dynamo's and DistServe's dispatchers keep one) in
front of c replicas, each serving prompts at S(p) = t_step(p, 0, p(p+1)/2) — prefill is
compute-bound, so batching k prompts under a token budget costs about the sum of their S(p) and
the queue is an M/G/c on per-prompt work. Mean wait by Allen–Cunneen,
W = C(c, λ·E[S]) / (c/E[S] − λ) · (c_a² + c_s²)/2, which for c = 1 is Pollaczek–Khinchine exactly
and for a fixed prompt length DistServe's M/D/1 (Zhong et al., "DistServe", OSDI 2024, §3.1:
Avg TTFT = D + λD²/(2(1 − λD))). DistServe assumes one prompt length; with a length
distribution the service time varies (c_s > 0) and the M/D/1 mean would be too low, hence M/G/c.
The tail is exponential with the conditional mean: P(W > t) = C·exp(−t·C/W), exact for M/M/c.

Decode pool: R replicas of s slots, s = min(batch_limit, ⌊KV capacity / (p̄ + ō)⌋) — a slot holds
the KV of a whole context from the moment its transfer starts, so in-flight transfers occupy decode
memory. A slot is held for H = t_transfer(p̄) + (ō − 1)·t_step(n̄) and the per-replica occupancy
n̄ = λ·H / R solves a fixed point (the step time grows with the batch). Admission waits as in
M/M/c with c = R·s servers of mean H (Erlang C). The q-quantile occupancy is Poisson(n̄)'s
(the M/G/∞ occupancy), capped at s: TPOT_q is the step at that batch, a per-step bound on a
per-request mean (conservative).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from planner.closed_forms import erlang_c
from planner.errors import ConvergenceError, PlannerInputError, UnstableLoadError
from planner.specs import GpuSpec
from planner.step_model import StepModel
from planner.workload import LengthDistribution, Workload

#: Midpoint quantiles over which the prompt distribution's service moments are taken.
_QUADRATURE_POINTS = 64
#: Absolute tolerance of the decode occupancy's root (brentq returns a root within about twice it).
_OCCUPANCY_XTOL = 1e-9


@dataclass(frozen=True, slots=True, kw_only=True)
class KvLink:
    """The link the KV cache crosses between a prefill and a decode GPU, per GPU and one direction."""

    name: str
    bytes_per_s_per_gpu: float
    latency_s: float
    source: str

    def __post_init__(self) -> None:
        if not (self.bytes_per_s_per_gpu > 0 and math.isfinite(self.bytes_per_s_per_gpu)):
            raise PlannerInputError("link bandwidth must be positive and finite", field="bytes_per_s_per_gpu")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise PlannerInputError("link latency must be >= 0 and finite", field="latency_s")


#: Scale-out links between nodes: one NIC per GPU (rail-optimised clusters).
SCALE_OUT_LINKS: dict[str, KvLink] = {
    "connectx7_400g": KvLink(
        name="ConnectX-7 NDR 400 Gb/s per GPU",
        bytes_per_s_per_gpu=400e9 / 8,  # 400 Gb/s ÷ 8 bits = 50 GB/s per GPU per direction
        # RDMA is built for under 10 µs end to end (NVIDIA RoCE/InfiniBand docs); taken as the upper
        # bound: it is 0.1 % of a 10 ms transfer, so its exact value barely matters
        latency_s=10e-6,
        source=(
            "NVIDIA DGX H100 User Guide §1.2.3: eight ConnectX-7 cards, one per GPU, each NDR 400 Gb/s "
            "(ConnectX-7 VPI user manual: single-port OSFP NDR 400 Gb/s)"
        ),
    ),
    "connectx6_200g": KvLink(
        name="ConnectX-6 HDR 200 Gb/s per GPU",
        bytes_per_s_per_gpu=200e9 / 8,  # 200 Gb/s ÷ 8 = 25 GB/s (DGX A100: eight HDR 200 Gb/s ConnectX-6)
        latency_s=10e-6,
        source="NVIDIA DGX A100 User Guide: eight single-port ConnectX-6 HDR 200 Gb/s for the compute fabric",
    ),
}


#: The scale-out network a GPU without catalog figures (GpuSpec.scale_out_bytes_per_s None) is planned over.
DEFAULT_SCALE_OUT = SCALE_OUT_LINKS["connectx7_400g"]


def gpu_scale_out_link(gpu: GpuSpec, default: KvLink = DEFAULT_SCALE_OUT) -> KvLink:
    """The GPU's own share of the scale-out network from the catalog (migration 0013); `default` itself where the
    catalog has neither figure, and its bandwidth or latency where it has one but not the other (the source says so)."""
    if gpu.scale_out_bytes_per_s is None and gpu.scale_out_latency_s is None:
        return default  # the catalog has no figures: the plan's transfer section says it used the default
    bandwidth = default.bytes_per_s_per_gpu if gpu.scale_out_bytes_per_s is None else gpu.scale_out_bytes_per_s
    latency = default.latency_s if gpu.scale_out_latency_s is None else gpu.scale_out_latency_s
    return KvLink(
        name=f"{gpu.slug} scale-out network {bandwidth * 8 / 1e9:g} Gb/s per GPU",  # bytes/s × 8 = bits/s
        bytes_per_s_per_gpu=bandwidth,
        latency_s=latency,
        source=(
            f"catalog ({gpu.slug}): {gpu.scale_out_source or 'no source given'}"
            + ("" if gpu.scale_out_latency_s is not None else f"; latency: the default's ({default.name})")
            + ("" if gpu.scale_out_bytes_per_s is not None else f"; bandwidth: the default's ({default.name})")
        ),
    )


def scale_out_link(prefill: GpuSpec, decode: GpuSpec, default: KvLink = DEFAULT_SCALE_OUT) -> KvLink:
    """The network between a prefill and a decode pool in different nodes: the slower of the two GPUs' NICs
    (`gpu_scale_out_link`), with its latency; the prefill GPU's on a tie."""
    p, d = gpu_scale_out_link(prefill, default), gpu_scale_out_link(decode, default)
    return d if d.bytes_per_s_per_gpu < p.bytes_per_s_per_gpu else p


def intra_node_link(gpu: GpuSpec) -> KvLink:
    """The GPU's own scale-up link (NVLink, Infinity Fabric) from the catalog, for pools in one node."""
    return KvLink(
        name=f"{gpu.slug} scale-up link",
        bytes_per_s_per_gpu=gpu.interconnect_bytes_per_s,
        latency_s=gpu.interconnect_latency_s,
        source="catalog: the GPU's interconnect bandwidth and latency (docs/catalog-sources.md)",
    )


def kv_transfer_bytes(prompt_tokens: float, kv_bytes_per_token: float) -> float:
    """Bytes of one prompt's KV cache (one copy: the model's KV bytes per token at the KV precision)."""
    return prompt_tokens * kv_bytes_per_token  # p × bytes/token


def kv_transfer_s(*, prompt_tokens: float, kv_bytes_per_token: float, link: KvLink, gpus: int) -> float:
    """t = latency + bytes / (g · B): each of the g = min(tp_prefill, tp_decode) GPU pairs sends its shard."""
    if gpus < 1:
        raise PlannerInputError(f"gpus must be >= 1, got {gpus}", field="gpus")
    return link.latency_s + kv_transfer_bytes(prompt_tokens, kv_bytes_per_token) / (
        gpus * link.bytes_per_s_per_gpu
    )  # latency + p·b / (g·B)


def prefill_s(step_model: StepModel, prompt_tokens: float) -> float:
    """One prompt alone: p new tokens, no KV read, p(p+1)/2 attended context tokens."""
    return step_model.step_s(prompt_tokens, 0.0, prompt_tokens * (prompt_tokens + 1.0) / 2.0)


def decode_step_s(step_model: StepModel, batch: float, context_tokens: float) -> float:
    """One decode step of `batch` sequences at mean context c: step_s(n, n·c, n·c)."""
    return step_model.step_s(batch, batch * context_tokens, batch * context_tokens)


@functools.lru_cache(maxsize=64)
def _quadrature(dist: LengthDistribution) -> tuple[float, ...]:
    """The distribution's midpoint quantiles; kept, since every setting of a search takes the same prompts' points."""
    u = (np.arange(_QUADRATURE_POINTS) + 0.5) / _QUADRATURE_POINTS
    return tuple(float(dist.quantile(float(q))) for q in u)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillPool:
    step_model: StepModel
    replicas: int
    tp: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise PlannerInputError(f"prefill replicas must be >= 1, got {self.replicas}", field="replicas")


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodePool:
    step_model: StepModel
    replicas: int
    batch_limit: int
    kv_capacity_tokens: float
    tp: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.batch_limit < 1:
            raise PlannerInputError("decode replicas and batch_limit must be >= 1", field="replicas")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillQueue:
    """The prefill pool's M/G/c: utilisation, service moments and the waiting time."""

    rho: float
    service_mean_s: float
    service_cv2: float
    p_wait: float
    mean_wait_s: float
    wait_q_s: float


def prefill_service_moments(step_model: StepModel, prompt_tokens: LengthDistribution) -> tuple[float, float]:
    """E[S] and c_s² = Var[S]/E[S]² of one prompt's prefill over the prompt-length distribution."""
    services = np.array([prefill_s(step_model, p) for p in _quadrature(prompt_tokens)])
    mean = float(services.mean())
    return mean, float(services.var() / mean**2)


def prefill_queue(pool: PrefillPool, workload: Workload, q: float, *, moments: tuple[float, float] | None = None) -> PrefillQueue:
    """W = C(c, a)/(c/E[S] − λ)·(c_a² + c_s²)/2 and P(W > t) = C·e^{−tC/W} (Allen–Cunneen, exponential tail).
    `moments` (E[S], c_s²) as `prefill_service_moments` gives them, when the caller already has them."""
    mean, cv2 = moments if moments is not None else prefill_service_moments(pool.step_model, workload.prompt_tokens)
    lam, c = workload.arrival_rate_rps, pool.replicas
    rho = lam * mean / c  # λ·E[S] / c
    if rho >= 1.0 - 1e-12:  # within rounding of 1 the queue is saturated (c/E[S] − λ would be 0)
        raise UnstableLoadError(f"prefill pool: ρ = {rho:.3f} ≥ 1", rho=rho)
    p_wait = erlang_c(c, lam * mean) if lam > 0 else 0.0
    mean_wait = p_wait / (c / mean - lam) * (workload.arrival_cv**2 + cv2) / 2.0 if lam > 0 else 0.0  # Erlang C × variability
    tail = 1.0 - q
    wait_q = mean_wait / p_wait * math.log(p_wait / tail) if p_wait > tail else 0.0  # invert C·e^{−tC/W} = 1 − q
    return PrefillQueue(rho=rho, service_mean_s=mean, service_cv2=cv2, p_wait=p_wait, mean_wait_s=mean_wait, wait_q_s=wait_q)


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeOccupancy:
    """The decode pool at its fixed point: slots, mean batch, step and holding time, admission wait."""

    slots: int
    mean_batch: float
    rho: float
    step_s: float
    hold_s: float
    p_wait: float
    admission_wait_q_s: float
    batch_q: int
    step_q_s: float
    binding: str


def poisson_quantile(q: float, mean: float) -> int:
    """The smallest k with P(N ≤ k) ≥ q for N ~ Poisson(mean), by summing the pmf p_k = p_{k−1}·mean/k."""
    if mean <= 0.0:
        return 0
    k, pmf = 0, math.exp(-mean)
    cdf = pmf
    while cdf < q and k < 10 * mean + 100:  # the loop ends well past any quantile below 1 − 1e-12
        k += 1
        pmf *= mean / k  # p_k from p_{k−1}
        cdf += pmf
    return k


def decode_slots(pool: DecodePool, workload: Workload) -> tuple[int, str]:
    """s = min(batch_limit, ⌊KV capacity / (p̄ + ō)⌋) and which of the two binds."""
    by_memory = math.floor(pool.kv_capacity_tokens / (workload.prompt_tokens.mean + workload.output_tokens.mean))
    if by_memory < 1:
        raise PlannerInputError("the decode replica's KV memory does not hold one mean context", field="kv_capacity_tokens")
    return (pool.batch_limit, "batch_limit") if pool.batch_limit <= by_memory else (by_memory, "kv_memory")


def _occupancy_excess(pool: DecodePool, workload: Workload, transfer_mean_s: float, replicas: int, n: float) -> float:
    """n − (λ/R)·(t_x + (ō − 1)·t_step(max(n, 1))): zero at the decode pool's mean occupancy."""
    context = workload.prompt_tokens.mean + workload.output_tokens.mean / 2.0  # a decoding sequence's mean context
    steps = max(workload.output_tokens.mean - 1.0, 0.0)
    return n - workload.arrival_rate_rps / replicas * (
        transfer_mean_s + steps * decode_step_s(pool.step_model, max(n, 1.0), context)
    )  # n − (λ/R)·H(n)


def decode_saturated(pool: DecodePool, workload: Workload, transfer_mean_s: float, *, replicas: int | None = None) -> bool:
    """True when the occupancy fixed point needs more than the replica's slots (decode_occupancy raises then);
    `replicas` overrides the pool's, so a search can test a count without building its pool."""
    slots, _ = decode_slots(pool, workload)
    return _occupancy_excess(pool, workload, transfer_mean_s, replicas or pool.replicas, float(slots)) <= 0.0


def decode_tpot_lower_bound_s(pool: DecodePool, workload: Workload, hold_min_s: float, q: float, *, replicas: int) -> float:
    """A closed-form lower bound on decode_occupancy's TPOT_q at `replicas`: the step is nondecreasing in the
    batch, so H ≥ H_min = t_x + (ō − 1)·t_step(1) gives n̄ ≥ λ·H_min/R and batch_q ≥ min(s, max(1, Poisson_q(λ·H_min/R)))."""
    slots, _ = decode_slots(pool, workload)
    context = workload.prompt_tokens.mean + workload.output_tokens.mean / 2.0
    # λ·H_min / R, less the root's tolerance: at n̄ ≤ 1 the fixed point is exactly λ·H_min/R and the root may sit just below it
    mean_batch_min = max(0.0, workload.arrival_rate_rps * hold_min_s / replicas - 2.0 * _OCCUPANCY_XTOL)
    return decode_step_s(pool.step_model, min(slots, max(1, poisson_quantile(q, mean_batch_min))), context)


def decode_occupancy(pool: DecodePool, workload: Workload, transfer_mean_s: float, q: float) -> DecodeOccupancy:
    """Solve n̄ = (λ/R)·(t_x + (ō − 1)·t_step(n̄)) on [0, s], then Erlang C for admission."""
    slots, binding = decode_slots(pool, workload)
    p_mean, o_mean = workload.prompt_tokens.mean, workload.output_tokens.mean
    context = p_mean + o_mean / 2.0  # a decoding sequence's mean context
    lam_per_replica = workload.arrival_rate_rps / pool.replicas
    steps = max(o_mean - 1.0, 0.0)

    def excess(n: float) -> float:
        return _occupancy_excess(pool, workload, transfer_mean_s, pool.replicas, n)

    if decode_saturated(pool, workload, transfer_mean_s):
        raise UnstableLoadError(f"decode pool: the fixed point needs more than {slots} slots per replica", rho=1.0)
    if lam_per_replica == 0.0:
        n = 0.0
    else:
        try:
            n = float(optimize.brentq(excess, 0.0, float(slots), xtol=_OCCUPANCY_XTOL))
        except (ValueError, RuntimeError) as exc:  # pragma: no cover - bracketed above
            raise ConvergenceError(f"decode occupancy: {exc}") from exc
    step = decode_step_s(pool.step_model, max(n, 1.0), context)
    hold = transfer_mean_s + steps * step  # t_x + (ō − 1)·t_step
    servers = pool.replicas * slots
    offered = workload.arrival_rate_rps * hold  # a = λ·H Erlangs
    p_wait = erlang_c(servers, offered) if offered > 0 else 0.0
    tail = 1.0 - q
    wait_q = math.log(p_wait / tail) / (servers / hold - workload.arrival_rate_rps) if p_wait > tail else 0.0
    batch_q = min(slots, max(1, poisson_quantile(q, n)))
    return DecodeOccupancy(
        slots=slots,
        mean_batch=n,
        rho=n / slots,
        step_s=step,
        hold_s=hold,
        p_wait=p_wait,
        admission_wait_q_s=wait_q,
        batch_q=batch_q,
        step_q_s=decode_step_s(pool.step_model, batch_q, context),
        binding=binding,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggPrediction:
    """Latency percentiles of a disaggregated deployment and the terms they add up from."""

    percentile: float
    prefill: PrefillQueue
    decode: DecodeOccupancy
    prefill_q_s: float
    transfer_q_s: float
    transfer_mean_s: float
    ttft_s: float
    tpot_s: float
    e2e_s: float


def predict_disagg(
    prefill_pool: PrefillPool,
    decode_pool: DecodePool,
    workload: Workload,
    *,
    link: KvLink,
    kv_bytes_per_token: float,
    percentile: float = 99.0,
    count_first_decode_step: bool = False,
) -> DisaggPrediction:
    """TTFT, TPOT and E2E at `percentile` (see the module docstring); raises UnstableLoadError past capacity."""
    if not 50.0 <= percentile < 100.0:
        raise PlannerInputError(f"percentile must be in [50, 100), got {percentile}", field="percentile")
    q = percentile / 100.0
    gpus = min(prefill_pool.tp, decode_pool.tp)
    p_q = workload.prompt_tokens.quantile(q)
    transfer_q = kv_transfer_s(prompt_tokens=p_q, kv_bytes_per_token=kv_bytes_per_token, link=link, gpus=gpus)
    transfer_mean = kv_transfer_s(
        prompt_tokens=workload.prompt_tokens.mean, kv_bytes_per_token=kv_bytes_per_token, link=link, gpus=gpus
    )
    pq = prefill_queue(prefill_pool, workload, q)
    dq = decode_occupancy(decode_pool, workload, transfer_mean, q)
    prefill_q = prefill_s(prefill_pool.step_model, p_q)
    first_step = dq.step_s if count_first_decode_step else 0.0
    ttft = pq.wait_q_s + prefill_q + dq.admission_wait_q_s + transfer_q + first_step  # wait + prefill + admit + transfer
    o_q = workload.output_tokens.quantile(q)
    e2e = ttft + max(o_q - 1.0, 0.0) * dq.step_s  # TTFT + (o_q − 1)·t_step(n̄)
    return DisaggPrediction(
        percentile=percentile,
        prefill=pq,
        decode=dq,
        prefill_q_s=prefill_q,
        transfer_q_s=transfer_q,
        transfer_mean_s=transfer_mean,
        ttft_s=ttft,
        tpot_s=dq.step_q_s,
        e2e_s=e2e,
    )
