"""Expert parallelism searched: hand vectors for the ep all-to-all replica and a plan where it wins and one where it loses.

Mixtral-8x7B fp16 on H100 SXM (3.35e12 B/s, 989e12 FLOP/s, NVLink 450e9 B/s and 5 µs), tp = ep = 8. One expert
is 3 × 4096 × 14336 = 176,160,768 parameters (352,321,536 B); 8 experts × 32 layers of them are 45.097e9 of the
46.7e9 parameters, so the non-routed (dense) weights are 1,602,843,392 parameters = 3,205,686,784 B. KV per token
2 × 32 × 8 × 128 × 2 B = 131,072 B (8 KV heads over 8 GPUs: no replication either way).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from planner.candidates import enumerate_all_options, enumerate_groups
from planner.expert_parallel import (
    expert_parallel_kv_capacity_tokens,
    expert_parallel_memory_fit,
    expert_parallel_step_model,
    never_faster,
)
from planner.memory import kv_capacity_tokens
from planner.optimizer import PlanConstraints
from planner.performance import build_step_model
from planner.pipeline import parallel_terms
from planner.planning import PlanningInputs, PlanningRequest, plan_capacity
from planner.queueing import max_rps_at_slo
from planner.specs import Efficiency, GpuSpec
from planner.workload import LognormalLength, Serving, Slo, Workload
from tests.planner.performance_specs import DEEPSEEK_V3, FP16_PRECISION, H100_SXM, MIXTRAL_8X7B

COMM = Efficiency(name="comm", include_comm=True)  # η = 1, no reserve, no overhead, communication on
DENSE_B = 3_205_686_784  # Mixtral's non-routed weights, fp16
EXPERT_B = 352_321_536  # one expert in one layer, fp16
BW = 8 * 3.35e12
AR_PER_TOKEN = 64 * 2 * 7 / 8 * 4096 * 2 / 450e9  # tp 8: 64 all-reduces of 8,192 B: 2.0389e-6 s
A2A_PER_TOKEN = 2 * 32 * 4096 * 2 * 7 * (1 - (7 / 8) ** 2) / (8 * 450e9)  # dispatch + combine, R = 1.640625: 2.3893e-7 s
LATENCY = 64 * 5e-6  # 64 all-reduces, or 32 dispatches + 32 combines: 0.32 ms either way


def _pair() -> tuple:
    tp = build_step_model(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM)
    ep = expert_parallel_step_model(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM)
    return tp, ep


def test_ep_decode_step_reads_the_dense_weights_on_every_rank_and_loses():
    """Decode, batch 32 at 4,096: 32 tokens touch 8·(1 − 0.75³²) = 7.99920 experts per layer, 90.185e9 B, plus
    17.180e9 B of KV. tp 8: (3.2057e9 + 90.185e9 + 17.180e9) / 26.8e12 = 4.1258 ms + 32 × 2.0389e-6 + 0.32 ms =
    4.5110 ms. ep 8 reads the dense weights on all 8 ranks, + 7 × 3.2057e9 / 26.8e12 = 0.8373 ms, and saves only
    32 × (2.0389e-6 − 2.3893e-7) = 0.0576 ms of all-reduce: 5.2907 ms. Break-even (memory-bound):
    0.8373 ms / 1.80e-6 s = 465 tokens per step."""
    tp, ep = _pair()
    assert tp.dense_weight_bytes == pytest.approx(DENSE_B)
    assert ep.dense_weight_bytes == pytest.approx(8 * DENSE_B)
    touched = 8 * (1 - 0.75**32)
    context = 32 * 4096
    kv = context * 131_072
    tp_step = (DENSE_B + 32 * touched * EXPERT_B + kv) / BW + 32 * AR_PER_TOKEN + LATENCY
    ep_step = (8 * DENSE_B + 32 * touched * EXPERT_B + kv) / BW + 32 * A2A_PER_TOKEN + LATENCY
    assert tp.step_s(32, context, context) == pytest.approx(tp_step, rel=1e-12)
    assert ep.step_s(32, context, context) == pytest.approx(ep_step, rel=1e-12)
    assert (tp_step * 1e3, ep_step * 1e3) == (pytest.approx(4.5110, abs=1e-4), pytest.approx(5.2907, abs=1e-4))
    assert 7 * DENSE_B / BW / (AR_PER_TOKEN - A2A_PER_TOKEN) == pytest.approx(465.2, abs=0.1)


def test_ep_prefill_chunk_hides_the_dense_reads_under_compute_and_wins():
    """A 2,048-token prefill: (2,048 × 25.8e9 + 2,098,176 × 524,288) FLOPs / 7.912e15 = 6.8173 ms of compute, above
    either memory time (3.485 / 4.322 ms), so the extra dense reads are hidden; what is left is communication:
    tp 8 2,048 × 2.0389e-6 + 0.32 ms = 4.4957 ms (11.313 ms in all), ep 8 2,048 × 2.3893e-7 + 0.32 ms = 0.8093 ms
    (7.627 ms)."""
    tp, ep = _pair()
    attended = 2048 * 2049 / 2
    compute = (2048 * 2 * 12.9e9 + attended * 4 * 32 * 32 * 128) / (8 * 989e12)
    assert compute == pytest.approx(6.8173e-3, rel=1e-4)
    assert tp.step_s(2048, 0, attended) == pytest.approx(compute + 2048 * AR_PER_TOKEN + LATENCY, rel=1e-12)
    assert ep.step_s(2048, 0, attended) == pytest.approx(compute + 2048 * A2A_PER_TOKEN + LATENCY, rel=1e-12)
    assert ep.step_s(2048, 0, attended) == pytest.approx(7.6266e-3, rel=1e-4)
    assert tp.step_s(2048, 0, attended) == pytest.approx(11.3130e-3, rel=1e-4)


def test_ep_memory_holds_eight_copies_of_the_dense_weights():
    """8 × 80e9 B hold 8 × 3.2057e9 + 45.097e9 B of weights under ep (one copy under tp): 7 × 3.2057e9 / 131,072 =
    171,203 fewer KV tokens (3,999,024 against 4,170,227)."""
    ep_tokens = expert_parallel_kv_capacity_tokens(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM)
    tp_tokens = kv_capacity_tokens(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM)
    assert tp_tokens - ep_tokens == 171_203
    assert ep_tokens == 3_999_024
    assert expert_parallel_memory_fit(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM).fits
    # a request's KV lives whole on its rank: 80e9 − 3.2057e9 − 90.194e9 / 8 = 65.520e9 B = 499,878 tokens at most
    per_rank = (80e9 - DENSE_B - 2 * 45_097_156_608 / 8) / 131_072
    assert math.floor(per_rank) == 499_878
    assert expert_parallel_memory_fit(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM, context_tokens=math.floor(per_rank)).fits
    assert not expert_parallel_memory_fit(
        H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM, context_tokens=math.ceil(per_rank) + 1
    ).fits


def test_ep_keeps_one_copy_of_an_mla_latent():
    """DeepSeek-V3's MLA latent (61 × (512 + 64) × 2 B = 70,272 B per token) is replicated on all 8 GPUs under tp 8
    and held once under ep 8 (each request's on its own rank)."""
    tp = build_step_model(H100_SXM, DEEPSEEK_V3, FP16_PRECISION, 8, COMM)
    ep = expert_parallel_step_model(H100_SXM, DEEPSEEK_V3, FP16_PRECISION, 8, COMM)
    assert ep.kv_bytes_per_token == pytest.approx(61 * 576 * 2)
    assert tp.kv_bytes_per_token == pytest.approx(8 * ep.kv_bytes_per_token)


# --- searched: one plan where ep wins, one where it loses ------------------------------------------------------

EFF = Efficiency(
    name="test",
    memory=0.8,
    compute=0.6,
    step_overhead_s=0.002,
    memory_reserve_fraction=0.1,
    include_comm=True,
    source="test input",
)
H100 = replace(H100_SXM, price_usd_per_hour_on_demand=4.0, efficiency=EFF)
INPUTS = PlanningInputs(model=MIXTRAL_8X7B, gpus=(H100,), precisions=(FP16_PRECISION,), efficiency_profile="test")
LONG = Workload(
    arrival_rate_rps=60.0,
    prompt_tokens=LognormalLength(mean_tokens=4000, p99_tokens=8000),
    output_tokens=LognormalLength(mean_tokens=100, p99_tokens=300),
)
LONG_SLO = Slo(ttft_s=10.0, tpot_s=0.2)
CHAT = Workload(
    arrival_rate_rps=70.0,
    prompt_tokens=LognormalLength(mean_tokens=200, p99_tokens=600),
    output_tokens=LognormalLength(mean_tokens=400, p99_tokens=1200),
)
CHAT_SLO = Slo(ttft_s=1.0, tpot_s=0.012)


def _mu(workload: Workload, slo: Slo, serving: Serving) -> dict[int, float]:
    """Each ep's per-replica rate within the SLOs at that setting (the queueing model the search uses)."""
    groups, _ = enumerate_groups(
        model=MIXTRAL_8X7B,
        gpus=(H100,),
        precisions=(FP16_PRECISION,),
        workload=workload,
        slo=slo,
        tp_degrees=(8,),
        expert_parallel=True,
    )
    assert sorted(g.ep for g in groups) == [1, 8]  # both offered
    return {g.ep: max_rps_at_slo(g.step_model, workload, serving, slo, kv_capacity_tokens=g.kv_capacity_tokens) for g in groups}


def test_long_prompts_plan_expert_parallel():
    """4,000-token prompts at 60 req/s: the steps are 2,048-token prefill chunks, where ep saves 3.7 ms of
    all-reduce per step (above) against 0.84 ms of dense reads hidden under compute. At batch 256 and chunk
    2,048 tp 8 serves 24.6 req/s per replica (3 replicas, $96/h) and ep 8 30.7 (2 replicas, $64/h): the plan is ep."""
    grid = {"tp_degrees": (8,), "batch_limits": (64, 256), "chunk_budgets": (2048,)}
    result = plan_capacity(
        PlanningRequest(workload=LONG, slo=LONG_SLO, constraints=PlanConstraints(), verify=False, **grid), INPUTS
    )
    [row] = result.rows
    assert (row.tp, row.ep, row.replicas, row.batch_limit) == (8, 8, 2, 256)
    mu = _mu(LONG, LONG_SLO, Serving(batch_limit=256, chunk_tokens=2048))
    assert math.ceil(60 / mu[1]) == 3 and math.ceil(60 / mu[8]) == 2
    parallel = result.justification.parallel if result.justification else None
    assert parallel is not None and parallel.ep == 8 and parallel.tp_comm_s_per_token == 0.0
    assert parallel.ep_comm_s_per_token == pytest.approx(A2A_PER_TOKEN, rel=1e-9)  # the all-to-all term shown


def test_a_tight_tpot_on_short_chats_plans_tensor_parallel():
    """200-token prompts, 400-token outputs at 70 req/s and a 12 ms TPOT: small decode steps, where ep's dense reads
    (+0.84 ms at η = 1, +1.05 ms at η_mem 0.8) outweigh the all-reduce it saves (below the 465-token break-even).
    At batch 64 and chunk 512 tp 8 serves 19.7 req/s (4 replicas, $128/h), ep 8 17.4 (5, $160/h): the plan is tp."""
    grid = {"tp_degrees": (8,), "batch_limits": (16, 64), "chunk_budgets": (None, 512)}
    result = plan_capacity(
        PlanningRequest(workload=CHAT, slo=CHAT_SLO, constraints=PlanConstraints(), verify=False, **grid), INPUTS
    )
    [row] = result.rows
    assert (row.tp, row.ep, row.replicas) == (8, 1, 4)
    mu = _mu(CHAT, CHAT_SLO, Serving(batch_limit=64, chunk_tokens=512))
    assert math.ceil(70 / mu[1]) == 4 and math.ceil(70 / mu[8]) == 5


def test_without_communication_priced_no_ep_group_is_offered():
    """A profile that counts no communication would price ep's dense re-reads and none of its savings: not offered."""
    quiet = replace(H100, efficiency=replace(EFF, include_comm=False))
    groups, _ = enumerate_groups(
        model=MIXTRAL_8X7B,
        gpus=(quiet,),
        precisions=(FP16_PRECISION,),
        workload=CHAT,
        slo=Slo(ttft_s=10.0),
        tp_degrees=(8,),
        expert_parallel=True,
    )
    assert [g.ep for g in groups] == [1]


def test_ep_across_two_nodes_runs_its_all_to_all_on_the_nic():
    """DeepSeek-V3 (hidden 7,168, top-8 of 256, 58 MoE layers) at ep 16 over two 8-GPU nodes, fp8 activations (1 B):
    R = 15 · (1 − (15/16)⁸) = 6.0492 other ranks, so 2 × 58 × 7,168 × 6.0492 B / (16 × 50e9 B/s) = 6.2873e-6 s per
    token over the NIC (in-node α + NIC α = 15 µs per dispatch or combine: 2 × 58 × 15e-6 = 1.74 ms per step),
    5.9 × the 1.0612e-6 s of ep 8 on NVLink (R = 7 · (1 − (7/8)⁸) = 4.5947: 2 × 58 × 7,168 × 4.5947 / (8 × 450e9))."""
    from planner.pipeline import parallel_terms

    r16 = 15 * (1 - (15 / 16) ** 8)
    assert r16 == pytest.approx(6.0492, abs=1e-4)
    across = parallel_terms(H100_SXM, DEEPSEEK_V3, 16, 1, 16, 1.0)
    assert across.tp_link.bytes_per_s == 50e9
    assert across.ep_comm_s_per_token == pytest.approx(2 * 58 * 7168 * r16 / (16 * 50e9))
    assert across.ep_comm_s_per_token == pytest.approx(6.2873e-6, rel=1e-4)
    assert across.ep_comm_latency_s == pytest.approx(2 * 58 * 15e-6)
    inside = parallel_terms(H100_SXM, DEEPSEEK_V3, 8, 1, 8, 1.0)
    assert inside.ep_comm_s_per_token == pytest.approx(2 * 58 * 7168 * 7 * (1 - (7 / 8) ** 8) / (8 * 450e9))
    assert inside.ep_comm_s_per_token == pytest.approx(1.0612e-6, rel=1e-4)


# --- pruning: an ep setting its ep = 1 twin is sure to beat is not offered ------------------------------------------

SERIAL = Efficiency(name="serial", include_comm=True, memory_compute_overlap=0.0)  # memory + compute, nothing hidden


def test_never_faster_holds_below_the_break_even_tokens_and_only_there():
    """With memory and compute added (overlap 0) the ep 8 step pays the 7 extra dense reads, 7 × 3.2057e9 / 26.8e12 =
    0.8373 ms, at every step, and saves 2.0389e-6 − 2.3893e-7 = 1.80e-6 s of communication a token: it is slower at
    every step of fewer than 465 tokens (the decode test's break-even) whatever the KV read and attention, and may be
    faster above. Checked against the step model on a grid of steps up to 256 tokens."""
    tp = build_step_model(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, SERIAL)
    ep = expert_parallel_step_model(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, SERIAL)
    capacity = expert_parallel_kv_capacity_tokens(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, SERIAL)
    assert never_faster(ep, tp, max_tokens=256, max_kv_tokens=capacity)
    assert never_faster(ep, tp, max_tokens=465, max_kv_tokens=capacity)
    assert not never_faster(ep, tp, max_tokens=466, max_kv_tokens=capacity)
    assert not never_faster(ep, tp, max_tokens=2048, max_kv_tokens=capacity)
    for n in (1, 7, 64, 255, 256):
        for kv in (0, 4096, capacity):
            for attended in (0.0, n * kv, 1e12):
                assert ep.step_s(n, kv, attended) > tp.step_s(n, kv, attended)
    # ep 8 at 2,048 tokens wins where compute hides nothing but the comm saving outweighs the dense reads
    assert ep.step_s(2048, 0, 2048 * 2049 / 2) < tp.step_s(2048, 0, 2048 * 2049 / 2)
    # full overlap can hide the dense reads under compute, so nothing is proved there
    overlapped = (build_step_model(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM), _pair()[1])
    assert not never_faster(overlapped[1], overlapped[0], max_tokens=1, max_kv_tokens=capacity)


def test_ep_settings_below_the_break_even_are_left_out_and_the_rest_kept():
    """Chunk budgets 256 and 2,048 (and none): the ep 8 group's 256-token settings are dropped (slower at every step
    they can run, same price, the twin's slots), its 2,048-token and unchunked ones kept; the twin keeps all."""
    h100 = replace(H100_SXM, price_usd_per_hour_on_demand=4.0, efficiency=SERIAL)
    groups, _ = enumerate_groups(
        model=MIXTRAL_8X7B,
        gpus=(h100,),
        precisions=(FP16_PRECISION,),
        workload=LONG,
        slo=LONG_SLO,
        tp_degrees=(8,),
        expert_parallel=True,
    )
    options = enumerate_all_options(groups, LONG, batch_limits=(16, 64), chunk_budgets=(None, 256, 2048))
    by_ep = {ep: sorted((o.batch_limit, o.chunk_tokens or 0) for o in options if o.group.ep == ep) for ep in (1, 8)}
    assert by_ep[1] == [(16, 0), (16, 256), (16, 2048), (64, 0), (64, 256), (64, 2048)]
    assert by_ep[8] == [(16, 0), (16, 2048), (64, 0), (64, 2048)]


# --- the all-to-all on a PCIe-only GPU is priced on PCIe, not NVLink -----------------------------------------------

# NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, dense BF16/FP16 362.05 TFLOP/s; no NVLink on this SKU, so GPUs of a
# node talk over PCIe Gen4 x16: 24 GB/s each way (NCCL's usable-rate model of the 32 GB/s line rate) and 42 µs per
# small collective (nccl-tests on 8 Ada GPUs over PCIe) — catalog/data/gpus.json's l40s row, whose sources it cites.
L40S = GpuSpec(
    slug="l40s",
    vendor="nvidia",
    architecture="ada",
    memory_bytes=48e9,
    hbm_bandwidth_bytes_per_s=864e9,
    peak_flops_per_s={"bf16": 362.05e12, "fp16": 362.05e12, "fp8": 733e12, "int8": 733e12, "fp4": None},
    interconnect_bytes_per_s=24e9,
    interconnect_latency_s=42e-6,
    gpus_per_node=8,
)


def test_l40s_ep2_all_to_all_runs_over_pcie():
    """Mixtral (hidden 4,096, top-2 of 8, 32 MoE layers) at ep 2 on two L40S, fp16 activations (2 B). A token's two
    experts miss its own rank's four w.p. 1 − (1/2)² = 0.75, so R = 1 × 0.75 and the dispatch sends
    4,096 × 2 × 0.75 = 6,144 B per token and MoE layer (the combine as much). Each of the 2 ranks sends its half of
    the tokens over its own PCIe link: 2 × 32 × 6,144 / (2 × 24e9) = 8.192e-6 s per token, and 2 × 32 × 42 µs =
    2.688 ms per step of latency. On H100 NVLink (450e9 B/s, 5 µs) the same all-to-all is 4.3691e-7 s per token and
    0.32 ms: 18.75 × and 8.4 × cheaper. The tp 2 all-reduces it replaces on the same PCIe link: 64 × 2 · ½ · 8,192 /
    24e9 = 2.1845e-5 s per token."""
    a2a = 2 * 32 * 4096 * 2 * 0.75 / (2 * 24e9)
    assert a2a == pytest.approx(8.192e-6)
    pcie = parallel_terms(L40S, MIXTRAL_8X7B, 2, 1, 2, 2.0)
    assert pcie.tp_link.bytes_per_s == 24e9
    assert pcie.ep_comm_s_per_token == pytest.approx(a2a, rel=1e-12)
    assert pcie.ep_comm_latency_s == pytest.approx(2.688e-3, rel=1e-12)
    assert pcie.tp_comm_s_per_token == 0.0
    nvlink = parallel_terms(H100_SXM, MIXTRAL_8X7B, 2, 1, 2, 2.0)
    assert nvlink.ep_comm_s_per_token == pytest.approx(4.3691e-7, rel=1e-4)
    assert pcie.ep_comm_s_per_token / nvlink.ep_comm_s_per_token == pytest.approx(450 / 24)
    tp2 = parallel_terms(L40S, MIXTRAL_8X7B, 2, 1, 1, 2.0)
    assert tp2.tp_comm_s_per_token == pytest.approx(2.1845e-5, rel=1e-4)
    # the step model the search prices the ep group with carries the PCIe terms
    sm = expert_parallel_step_model(L40S, MIXTRAL_8X7B, FP16_PRECISION, 2, COMM)
    assert sm.comm_s_per_token == pytest.approx(a2a, rel=1e-12)
    assert sm.comm_latency_s == pytest.approx(2.688e-3, rel=1e-12)
