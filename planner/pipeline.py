"""Pipeline and expert parallelism: a replica of `tp × pp` GPUs, its stages, hops, all-to-all and nodes.

A replica is `pp` pipeline stages of `tp` GPUs each (`ep`, the expert-parallel degree of an MoE model,
is either 1 — experts tensor-split like every other matrix — or `tp` — whole experts sharded over each
stage's `tp` GPUs, vLLM's `--enable-expert-parallel`, whose EP size is the TP size of the group). The
layers are split over the stages; the stage holding the most layers, ⌈L/pp⌉, sets the pace.

Serving semantics (vLLM `pipeline_parallel_size`: one "virtual engine" per stage, so `pp` micro-batches
are in flight, docs.vllm.ai "Distributed inference and serving"; SGLang `--pp-size` the same): a step of
continuous batching over n new tokens is split into pp micro-batches of n/pp tokens. In steady state
every stage runs the pp micro-batches back to back, and each micro-batch must come back from the last
stage before its sequences can take their next step, so the time between two tokens of one sequence is

    t_step = pp · t_stage(n/pp) + Σ_hops t_hop(n/pp)                      (1)

where t_stage(b) is one stage's time on a micro-batch of b tokens (1/pp of the weights, KV and FLOPs of
the layers it holds) and t_hop(b) = b · hidden · activation bytes / link + link latency the send of a
micro-batch's activations to the next stage (NVLink inside a node, the per-GPU scale-out NIC between
nodes). There is no steady-state bubble: GPipe's bubble fraction (pp − 1)/(m + pp − 1) for m
micro-batches (Huang et al. 2019, arXiv 1811.06965 §2.2; Narayanan et al. 2021, Megatron-LM,
arXiv 2104.04473 §2.2.1) is paid only when the pipeline is filled from empty, i.e. by a request alone
in the replica. `lone_prefill_s` gives that case: one prompt (m = 1) goes through all pp stages one
after the other, `pp · t_stage(p) + Σ hops` — the TTFT through all stages.

Equation (1) folds into the ordinary `StepModel` coefficients (planner/step_model.py), so the
prefill, decode and mixed steps, the simulator and the queueing model use it unchanged: with
s = pp · ⌈L/pp⌉ / L ≥ 1 the slowest stage's share of the layers times pp,

    BW' = pp · tp · HBM · η_mem / s         F' = pp · tp · peak · η_compute / s
    dense weight bytes' = pp · W_dense      (each stage reads its weights once per micro-batch)
    expert bytes'       = pp · expert bytes (the same; an upper bound on the distinct experts a
                                             micro-batch touches, since 1 − (1−k/E)^(n/pp) ≤ 1 − (1−k/E)^n)
    KV bytes per token, FLOPs per token, attention FLOPs: unchanged

so that pp · combine(mem_stage, comp_stage) = combine(mem', comp') exactly (combine is homogeneous of
degree 1), and the communication per step is linear in n:

    comm_s_per_token' = s/pp · AR(tp) · 2 · L          tensor-parallel all-reduces of the stage's layers
                        + Σ_hops hidden · a / (pp · link_hop)
                        + EP all-to-all per token (below)
    comm_latency_s'   = pp · 2 · ⌈L/pp⌉ · α_tp  + Σ_hops α_hop  + pp · ⌈L_moe/pp⌉ · 2 · α_ep

(with ep > 1 the all-reduce terms are 0 and the all-to-all ones take their place, below).

Assumption the fold makes: the step's tokens fill pp micro-batches. A batch smaller than pp leaves
stages idle (the bubble above) and the fold then understates its KV and compute terms (the weight read,
which dominates a small decode, is exact: each stage reads its own weights once per micro-batch).

Expert parallelism (ep = tp on an MoE model) is the data-parallel-attention form, the one whose MoE
layers run an all-to-all: each of the ep GPUs runs attention (and every non-routed weight: embeddings,
dense MLP layers, shared experts) on its own requests with a full copy of those weights, and holds
E/ep whole routed experts; each MoE layer dispatches every token's hidden state to the GPUs holding its
k routed experts and combines the results back (DeepSeek-V3 arXiv 2412.19437 §3.2.2; DeepEP). Engines:
vLLM `--data-parallel-size ep --enable-expert-parallel` — its all-to-all kernels run only with
data parallelism (vllm/model_executor/layers/fused_moe/config.py `use_all2all_kernels = dp_size > 1
and use_ep`; with TP alone `--enable-expert-parallel` only places whole experts and keeps the
tensor-parallel all-reduce, which prices exactly as ep = 1 here) — and SGLang `--enable-dp-attention
--dp-size ep --ep-size ep --moe-a2a-backend deepep` (docs.sglang.io "Expert Parallelism": the default
backend `none` "uses All-Reduce or All-Gather for token dispatch"). Tokens are split evenly over the ep
ranks by their requests; with experts spread evenly, a token reaches each of the other ep − 1 GPUs with
probability 1 − (1 − 1/ep)^k, so each rank sends, per MoE layer and direction,

    (n/ep) · hidden · a · R,   R = (ep − 1) · (1 − (1 − 1/ep)^k)

(k = 1 gives (ep−1)/ep per token, the "tokens × hidden × bytes × (ep−1)/ep each way"), over the
replica's link (NVLink inside a node, the NIC when the ep GPUs span nodes: `tp_link`). There is no
tensor-parallel all-reduce left: attention is data-parallel. What the replica pays instead — every rank
reads the full non-routed weights each step and holds a copy of them — is in the step model and memory
fit of planner/expert_parallel.py, which builds the searched ep group.

Tensor parallelism across nodes (tp > gpus_per_node, whole nodes) prices its all-reduce on the per-GPU
scale-out NIC (planner/parallel.py `tp_link`), which is what makes it lose to tp inside a node and pp
across nodes; the search offers it (tp over 2, 4, 8 whole nodes, pp 1) where no node holds the model
(planner/candidates.py `enumerate_groups`), and an expert-parallel replica wider than a node would run
its all-to-all on the NIC the same way.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.errors import PlannerInputError, UnsupportedConfigurationError
from planner.parallel import Link, check_tensor_parallel, nvlink_link, ring_all_reduce_s, scale_out_link_of, tp_link
from planner.precision import activation_bytes
from planner.specs import GpuSpec, ModelSpec, QuantSpec
from planner.step_model import StepModel

if TYPE_CHECKING:
    from planner.workload import Workload

#: Pipeline degrees the optimizer searches (issue 14 §2: "pp ∈ {1, 2, 4, 8}").
PP_DEGREES: tuple[int, ...] = (1, 2, 4, 8)


def check_pipeline_parallel(gpu: GpuSpec, model: ModelSpec, tp: int, pp: int, ep: int = 1) -> None:
    """Raise unless `pp` stages of `tp` GPUs (expert-parallel `ep`) can hold one replica of `model`."""
    check_tensor_parallel(gpu, model, tp)
    if pp < 1:
        raise PlannerInputError(f"pp must be >= 1, got {pp}", pp=pp)
    if pp > model.layers:
        raise UnsupportedConfigurationError(
            f"pp={pp} exceeds {model.slug}'s {model.layers} layers: every pipeline stage needs at least one layer",
            pp=pp,
            layers=model.layers,
        )
    if ep < 1:
        raise PlannerInputError(f"ep must be >= 1, got {ep}", ep=ep)
    if ep > 1:
        if model.moe is None:
            raise UnsupportedConfigurationError(
                f"ep={ep} needs a mixture-of-experts model; {model.slug} is dense", ep=ep, valid_ep=[1]
            )
        if ep != tp or model.moe.experts % ep != 0:
            raise UnsupportedConfigurationError(
                f"ep={ep} must equal tp={tp} (the experts are sharded over the replica's GPUs, attention data-parallel: "
                f"vLLM --data-parallel-size with --enable-expert-parallel) and divide {model.slug}'s {model.moe.experts} experts",
                ep=ep,
                tp=tp,
                experts=model.moe.experts,
                valid_ep=valid_expert_parallel_degrees(model, tp),
            )


def valid_expert_parallel_degrees(model: ModelSpec, tp: int) -> list[int]:
    """1, and tp where the model is MoE and tp > 1 divides its experts."""
    if model.moe is not None and tp > 1 and model.moe.experts % tp == 0:
        return [1, tp]
    return [1]


def nodes_per_replica(gpu: GpuSpec, tp: int, pp: int) -> int:
    """Nodes one replica spans: stages packed whole into nodes (a stage wider than a node spans whole nodes)."""
    if tp > gpu.gpus_per_node:
        return pp * math.ceil(tp / gpu.gpus_per_node)  # each stage takes whole nodes
    stages_per_node = gpu.gpus_per_node // tp
    return math.ceil(pp / stages_per_node)


def cross_node_hops(gpu: GpuSpec, tp: int, pp: int) -> int:
    """Of the pp − 1 stage-to-stage hops, those that leave a node (the rest stay on NVLink)."""
    if pp <= 1:
        return 0
    if tp > gpu.gpus_per_node:
        return pp - 1  # every stage owns its own nodes
    return nodes_per_replica(gpu, tp, pp) - 1  # consecutive stages share a node until it is full


def stage_layers(model: ModelSpec, pp: int) -> int:
    """Layers of the largest stage: ⌈L / pp⌉ (vLLM splits layers as evenly as it can)."""
    return math.ceil(model.layers / pp)


def stage_imbalance(model: ModelSpec, pp: int) -> float:
    """s = pp · ⌈L/pp⌉ / L: how much slower than an even split the slowest stage makes the pipeline."""
    return pp * stage_layers(model, pp) / model.layers


def remote_expert_ranks(experts_per_token: int, ep: int) -> float:
    """R = (ep − 1)(1 − (1 − 1/ep)^k): expected other ranks a token's k routed experts live on."""
    if ep <= 1:
        return 0.0
    return (ep - 1) * (1.0 - (1.0 - 1.0 / ep) ** experts_per_token)  # each other rank hit w.p. 1 − (1 − 1/ep)^k


def all_to_all_bytes_per_token(model: ModelSpec, ep: int, activation_bytes: float) -> float:
    """Bytes one token sends in one MoE layer's dispatch (the combine returns as many): hidden · a · R."""
    if model.moe is None or ep <= 1:
        return 0.0
    return model.hidden_size * activation_bytes * remote_expert_ranks(model.moe.experts_per_token, ep)


def hop_s(tokens: float, model: ModelSpec, activation_bytes: float, link: Link) -> float:
    """One stage-to-stage send of `tokens` tokens' hidden states: tokens · hidden · a / B + α."""
    return tokens * model.hidden_size * activation_bytes / link.bytes_per_s + link.latency_s


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelTerms:
    """The communication and stage terms of one (tp, pp, ep) replica, as the step model and a plan show them.

    All `*_s_per_token` terms are per new token of a step and all `*_latency_s` per step (eq. (1) of
    the module docstring, summed over the pp micro-batches).
    """

    tp: int
    pp: int
    ep: int
    gpus: int
    nodes: int
    stage_layers: int
    stage_imbalance: float
    tp_link: Link
    hop_links: tuple[Link, ...]
    tp_comm_s_per_token: float
    tp_comm_latency_s: float
    hop_s_per_token: float
    hop_latency_s: float
    ep_comm_s_per_token: float
    ep_comm_latency_s: float

    @property
    def comm_s_per_token(self) -> float:
        return self.tp_comm_s_per_token + self.hop_s_per_token + self.ep_comm_s_per_token

    @property
    def comm_latency_s(self) -> float:
        return self.tp_comm_latency_s + self.hop_latency_s + self.ep_comm_latency_s


def parallel_terms(gpu: GpuSpec, model: ModelSpec, tp: int, pp: int, ep: int, activation_bytes: float) -> ParallelTerms:
    """Every communication term of a (tp, pp, ep) replica (module docstring); checks the layout first."""
    check_pipeline_parallel(gpu, model, tp, pp, ep)
    layers_s = stage_layers(model, pp)
    moe_layers_s = math.ceil(model.moe.moe_layers / pp) if model.moe is not None else 0
    link = tp_link(gpu, tp)
    # all-reduces per stage layer: two; none with expert parallelism (data-parallel attention, all-to-all MoE)
    all_reduces = 0 if ep > 1 else 2 * layers_s
    per_reduce_s_per_token = (
        ring_all_reduce_s(model.hidden_size * activation_bytes, tp, link.bytes_per_s, 0.0) if tp > 1 else 0.0
    )  # 2(tp−1)/tp · hidden · a / B
    tp_per_token = all_reduces * per_reduce_s_per_token  # n tokens over pp micro-batches: each stage sees all n
    tp_latency = pp * all_reduces * link.latency_s if tp > 1 else 0.0  # every micro-batch pays α per all-reduce
    cross = cross_node_hops(gpu, tp, pp)
    hop_links = (scale_out_link_of(gpu),) * cross + (nvlink_link(gpu),) * (pp - 1 - cross)
    # (pp − 1) hops of one micro-batch of n/pp tokens each
    hop_per_token = sum(model.hidden_size * activation_bytes / (pp * h.bytes_per_s) for h in hop_links)
    hop_latency = sum(h.latency_s for h in hop_links)
    a2a_bytes = all_to_all_bytes_per_token(model, ep, activation_bytes)
    # dispatch + combine per stage MoE layer; each of the ep ranks sends its n/ep tokens' share at once
    ep_per_token = 2 * moe_layers_s * a2a_bytes / (ep * link.bytes_per_s) if ep > 1 else 0.0
    ep_latency = pp * 2 * moe_layers_s * link.latency_s if ep > 1 else 0.0
    return ParallelTerms(
        tp=tp,
        pp=pp,
        ep=ep,
        gpus=tp * pp,
        nodes=nodes_per_replica(gpu, tp, pp),
        stage_layers=layers_s,
        stage_imbalance=stage_imbalance(model, pp),
        tp_link=link,
        hop_links=hop_links,
        tp_comm_s_per_token=tp_per_token,
        tp_comm_latency_s=tp_latency,
        hop_s_per_token=hop_per_token,
        hop_latency_s=hop_latency,
        ep_comm_s_per_token=ep_per_token,
        ep_comm_latency_s=ep_latency,
    )


def lone_prefill_s(sm: StepModel, pp: int, prompt_tokens: float) -> float:
    """TTFT of one prompt alone in a pp-stage replica: one micro-batch (m = 1) through every stage in turn.

    From the fold's coefficients (module docstring): the weight read is the fold's own (each stage reads
    its weights once), the FLOPs run on one stage at a time (pp × the fold's compute time), every token's
    all-reduces and all-to-alls happen on all pp stages and its hidden state crosses every hop
    (pp × n × comm_s_per_token), plus the per-step latencies and overhead:

        combine(t_mem(p), pp · t_compute(p)) + pp · p · comm_s_per_token + comm_latency_s + overhead

    which is pp · t_stage(p) + Σ hops, GPipe's time for m = 1 (bubble fraction (pp − 1)/pp). pp = 1 gives
    the plain prefill step `StepModel.step_s(p, 0, p(p+1)/2)`.
    """
    if prompt_tokens < 1:
        raise PlannerInputError(f"prompt_tokens must be >= 1, got {prompt_tokens}", prompt_tokens=prompt_tokens)
    attended = prompt_tokens * (prompt_tokens + 1) / 2  # token i attends to i tokens
    mem = sm.memory_s(prompt_tokens, 0.0)
    comp = pp * sm.compute_s(prompt_tokens, attended)
    hi, lo = (mem, comp) if mem >= comp else (comp, mem)
    comm = pp * prompt_tokens * sm.comm_s_per_token + sm.comm_latency_s
    return hi + (1.0 - sm.memory_compute_overlap) * lo + comm + sm.step_overhead_s


def lone_prompt_step_model(sm: StepModel, pp: int) -> StepModel:
    """The step model whose prefill of one prompt takes `lone_prefill_s`: the fold's compute rate over pp (the stages
    compute one after the other) and its per-token communication × pp (every stage's all-reduces and every hop on the
    prompt's tokens); the weight read, latencies and overhead as folded. So `step_s(p, 0, p(p+1)/2)` is exactly
    `lone_prefill_s(sm, pp, p)`, and a prefill pool's queue (planner/plan_disagg_candidates.py) prices one prompt's
    service with it. pp = 1 gives `sm` itself."""
    if pp < 1:
        raise PlannerInputError(f"pp must be >= 1, got {pp}", pp=pp)
    if pp == 1:
        return sm
    return dataclasses.replace(
        sm,
        compute_flops_per_s=sm.compute_flops_per_s / pp,  # one stage computing at a time: pp × the fold's compute time
        comm_s_per_token=pp * sm.comm_s_per_token,  # pp × n × comm_s_per_token, as lone_prefill_s
    )


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """GPipe's idle share of a pipeline filled from empty: (pp − 1) / (m + pp − 1) (arXiv 1811.06965 §2.2)."""
    if pp < 1 or micro_batches < 1:
        raise PlannerInputError("pp and micro_batches must be >= 1")
    return (pp - 1) / (micro_batches + pp - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelSection:
    """A pipeline (or expert-parallel) plan's justification: the layout, each communication term, one stage's
    time within a decode step at the plan's occupancy, and a lone prompt's TTFT through all stages with
    its bubble. Seconds and bytes/s; the step model section carries the same terms folded."""

    tp: int
    pp: int
    ep: int
    gpus_per_replica: int
    nodes_per_replica: int
    stage_layers: int
    stage_imbalance: float
    tp_link: str
    hop_links: tuple[str, ...]
    tp_comm_s_per_token: float
    tp_comm_latency_s: float
    hop_s_per_token: float
    hop_latency_s: float
    ep_comm_s_per_token: float
    ep_comm_latency_s: float
    decode_batch: int
    context_tokens: int
    decode_step_s: float
    stage_s: float
    hops_s: float
    prompt_tokens: int
    lone_prefill_s: float
    lone_bubble_fraction: float
    formula: str


PARALLEL_FORMULA = (
    "t_step = pp * t_stage(n/pp) + sum over hops of (n/pp * hidden * bytes / link + latency); "
    "lone prefill = combine(t_mem(p), pp * t_compute(p)) + pp * p * comm_s_per_token + comm_latency_s + overhead; "
    "bubble of a lone request = (pp - 1) / pp (GPipe, m = 1)"
)


def parallel_section(
    terms: ParallelTerms, sm: StepModel, *, batch: int, context_tokens: int, prompt_tokens: int
) -> ParallelSection:
    """The section for a replica with `terms` and step model `sm`, its decode step at `batch` sequences of
    `context_tokens` and a lone `prompt_tokens` prompt."""
    pp = terms.pp
    kv = batch * context_tokens
    step = sm.step_s(batch, kv, kv)
    with_comm = sm.comm_s_per_token > 0 or sm.comm_latency_s > 0  # the profile counts communication
    hops = batch * terms.hop_s_per_token + terms.hop_latency_s if with_comm and pp > 1 else 0.0
    return ParallelSection(
        tp=terms.tp,
        pp=pp,
        ep=terms.ep,
        gpus_per_replica=terms.gpus,
        nodes_per_replica=terms.nodes,
        stage_layers=terms.stage_layers,
        stage_imbalance=terms.stage_imbalance,
        tp_link=terms.tp_link.name,
        hop_links=tuple(h.name for h in terms.hop_links),
        tp_comm_s_per_token=terms.tp_comm_s_per_token,
        tp_comm_latency_s=terms.tp_comm_latency_s,
        hop_s_per_token=terms.hop_s_per_token,
        hop_latency_s=terms.hop_latency_s,
        ep_comm_s_per_token=terms.ep_comm_s_per_token,
        ep_comm_latency_s=terms.ep_comm_latency_s,
        decode_batch=batch,
        context_tokens=context_tokens,
        decode_step_s=step,
        stage_s=(step - hops) / pp,  # eq. (1): one stage on one micro-batch
        hops_s=hops,
        prompt_tokens=prompt_tokens,
        lone_prefill_s=lone_prefill_s(sm, pp, prompt_tokens),
        lone_bubble_fraction=bubble_fraction(pp, 1),
        formula=PARALLEL_FORMULA,
    )


def replica_parallel_section(
    gpu: GpuSpec,
    model: ModelSpec,
    weights: QuantSpec,
    sm: StepModel,
    *,
    tp: int,
    pp: int,
    ep: int,
    batch: float,
    workload: Workload,
) -> ParallelSection | None:
    """The section of one replica in stages or expert-parallel (None at pp 1 and ep 1), as every plan form shows it: an
    aggregated plan's justification, each pool of a disaggregated plan and each pool of a class plan. `sm` is the
    replica's folded step model (an expert-parallel group's own at ep > 1); the decode step is at `batch` sequences
    (rounded, at least one) of a decoding sequence's mean context (the mean prompt and half the mean output), the lone
    prompt the mean prompt."""
    if pp == 1 and ep == 1:
        return None
    terms = parallel_terms(gpu, model, tp, pp, ep, activation_bytes(weights))
    return parallel_section(
        terms,
        sm,
        batch=max(1, round(batch)),
        context_tokens=max(1, round(workload.prompt_tokens.mean + workload.output_tokens.mean / 2)),
        prompt_tokens=max(1, round(workload.prompt_tokens.mean)),
    )


def parallel_summary(section: ParallelSection) -> str:
    """One sentence naming a section's layout and terms, for a plan's explanation text (ms at the edge of the text)."""
    layout = f"tp {section.tp} × pp {section.pp}" + (f", ep {section.ep}" if section.ep > 1 else "")
    comm = [
        f"{name} {per_token:.3g} s/token + {latency * 1e3:.3g} ms/step"
        for name, per_token, latency in (
            ("all-reduce", section.tp_comm_s_per_token, section.tp_comm_latency_s),
            ("stage hops", section.hop_s_per_token, section.hop_latency_s),
            ("all-to-all", section.ep_comm_s_per_token, section.ep_comm_latency_s),
        )
        if per_token > 0 or latency > 0
    ]
    return (
        f"{layout} = {section.gpus_per_replica} GPUs over {section.nodes_per_replica} node(s): a decode step of "
        f"{section.decode_batch} sequence{'' if section.decode_batch == 1 else 's'} takes {section.decode_step_s * 1e3:.3g} ms ({section.pp} × "
        f"{section.stage_s * 1e3:.3g} ms stage + {section.hops_s * 1e3:.3g} ms hops), a lone {section.prompt_tokens}-token "
        f"prompt {section.lone_prefill_s * 1e3:.3g} ms through the stages (bubble {section.lone_bubble_fraction:.2f})"
        + (f"; {', '.join(comm)}" if comm else "")
    )
