"""Pipeline and expert parallelism: hand test vectors (docs/design.md "Pipeline and expert parallelism")."""

from __future__ import annotations

import dataclasses

import pytest

from planner.errors import PlannerInputError, UnsupportedConfigurationError
from planner.memory import kv_capacity_tokens, memory_fit
from planner.performance import build_step_model, decode_step, prefill
from planner.pipeline import (
    bubble_fraction,
    check_pipeline_parallel,
    cross_node_hops,
    lone_prefill_s,
    lone_prompt_step_model,
    nodes_per_replica,
    parallel_terms,
    remote_expert_ranks,
    stage_imbalance,
)
from planner.specs import IDEAL, Efficiency
from tests.planner.performance_specs import FP16_PRECISION, H100_SXM, LLAMA_2_70B, MIXTRAL_8X7B

COMM = Efficiency(name="comm", include_comm=True)  # η = 1, no reserve, no overhead, communication on
KV_32_AT_4096 = 32 * 4096 * 327_680  # 42,949,672,960 B: batch 32 at 4,096 context, Llama-2-70B fp16


def test_pp2_decode_is_two_stage_times_of_half_the_batch():
    """Llama-2-70B fp16, tp=4 × pp=2 on H100 (ideal): each stage holds 70e9 B of weights and 163,840 B of
    KV per token; a micro-batch of 16 sequences at 4,096 reads 70e9 + 16·4,096·163,840 = 80.737e9 B from
    4 × 3.35e12 B/s = 6.0252 ms; two micro-batches per step: 12.0504 ms (memory-bound: the compute is
    2 × 16 × 140e9 / 3.956e15 = 1.13 ms). tp=4 alone: (140e9 + 42.95e9) / 13.4e12 = 13.653 ms; tp=8:
    6.826 ms — pp adds GPUs for the KV reads but, unlike tp, re-reads the weights per micro-batch."""
    pp2 = decode_step(build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL, pp=2), batch=32, context_tokens=4096)
    stage_s = (70e9 + 16 * 4096 * 163_840) / (4 * 3.35e12)
    assert stage_s == pytest.approx(6.02520e-3, rel=1e-5)
    assert pp2.step_s == pytest.approx(2 * stage_s, rel=1e-12)
    assert pp2.step_s == pytest.approx(12.0504e-3, rel=1e-5)
    tp4 = decode_step(build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL), batch=32, context_tokens=4096)
    tp8 = decode_step(build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 8, IDEAL), batch=32, context_tokens=4096)
    assert tp4.step_s == pytest.approx((140e9 + KV_32_AT_4096) / 13.4e12)
    assert tp8.step_s < pp2.step_s < tp4.step_s


def test_pp2_ttft_goes_through_all_stages():
    """A lone 2,000-token prompt: 280e12 linear FLOPs + 2,001,000 × 4·80·64·128 = 5.245e12 attention FLOPs on
    one stage at a time: pp × (half the FLOPs on 4 × 989e12) = 285.245e12 / 3.956e15 = 72.105 ms — no faster
    than tp=4 alone, while the pipelined (steady-state) prefill step, other micro-batches filling the other
    stage, is half that."""
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL, pp=2)
    flops = 2000 * 140e9 + 2000 * 2001 / 2 * 4 * 80 * 64 * 128
    assert lone_prefill_s(sm, 2, 2000) == pytest.approx(flops / (4 * 989e12), rel=1e-9)
    assert lone_prefill_s(sm, 2, 2000) == pytest.approx(72.105e-3, rel=1e-4)
    assert prefill(sm, 2000).time_s == pytest.approx(flops / (8 * 989e12), rel=1e-9)
    tp4 = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL)
    assert lone_prefill_s(tp4, 1, 2000) == pytest.approx(prefill(tp4, 2000).time_s, rel=1e-12)


def test_pp2_ttft_adds_every_hop_and_all_reduce():
    """With communication, tp=8 × pp=2 on two H100 nodes: per token 80 all-reduces per stage of
    2·7/8·8192·2 B over 450e9 B/s (6.3716e-8 s each: 5.0972e-6 s) on both stages plus one NIC hop of
    8192·2 B over 50e9 B/s (3.2768e-7 s); per step 2 × 80 × 5e-6 s + 10e-6 s = 0.81 ms of latency."""
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 8, COMM, pp=2)
    ideal = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 8, IDEAL, pp=2)
    per_token = 2 * 80 * 2 * 7 / 8 * 8192 * 2 / 450e9 + 8192 * 2 / 50e9
    assert lone_prefill_s(sm, 2, 100) - lone_prefill_s(ideal, 2, 100) == pytest.approx(100 * per_token + 0.81e-3, rel=1e-9)


def test_the_lone_prompt_step_model_prefills_in_lone_prefill_s():
    """A prefill pool prices one prompt's service with `lone_prompt_step_model` (planner/plan_disagg_candidates.py):
    its plain prefill step is exactly `lone_prefill_s` — 72.105 ms for the 2,000-token prompt above on tp 4 × pp 2
    (ideal), and with communication on tp 8 × pp 2 the same 100-token step as `lone_prefill_s` — while the weight read
    and per-step latency stay the fold's. pp 1 is the step model itself."""
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL, pp=2)
    lone = lone_prompt_step_model(sm, 2)
    assert prefill(lone, 2000).time_s == pytest.approx(72.105e-3, rel=1e-4)
    assert prefill(lone, 2000).time_s == pytest.approx(lone_prefill_s(sm, 2, 2000), rel=1e-12)
    comm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 8, COMM, pp=2)
    lone_comm = lone_prompt_step_model(comm, 2)
    assert lone_comm.step_s(100, 0, 100 * 101 / 2) == pytest.approx(lone_prefill_s(comm, 2, 100), rel=1e-12)
    assert (lone_comm.memory_s(100, 0), lone_comm.comm_latency_s) == (comm.memory_s(100, 0), comm.comm_latency_s)
    assert lone_prompt_step_model(comm, 1) is comm
    with pytest.raises(PlannerInputError):
        lone_prompt_step_model(comm, 0)


def test_stage_hops_cross_the_nic_only_between_nodes():
    """tp=4 × pp=2 fits one 8-GPU node (hop on NVLink); tp=8 × pp=2 takes two nodes (one NIC hop); tp=2 × pp=8:
    four stages per node, two nodes, one of the seven hops leaves the node."""
    assert (nodes_per_replica(H100_SXM, 4, 2), cross_node_hops(H100_SXM, 4, 2)) == (1, 0)
    assert (nodes_per_replica(H100_SXM, 8, 2), cross_node_hops(H100_SXM, 8, 2)) == (2, 1)
    assert (nodes_per_replica(H100_SXM, 2, 8), cross_node_hops(H100_SXM, 2, 8)) == (2, 1)
    terms = parallel_terms(H100_SXM, LLAMA_2_70B, 2, 8, 1, 2.0)
    assert terms.hop_s_per_token == pytest.approx((8192 * 2 / 50e9 + 6 * 8192 * 2 / 450e9) / 8)
    assert terms.hop_latency_s == pytest.approx(10e-6 + 6 * 5e-6)


def test_pp_splits_weights_and_kv_memory():
    """tp=4 × pp=2 has 8 × 80e9 = 640e9 B: after 140e9 of weights, 500e9 / 327,680 = 1,525,878 KV tokens
    — the same as tp=8 (the replica's KV per token is unchanged by stages; 8 KV heads split at tp ≤ 8)."""
    assert kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL, pp=2) == 1_525_878
    assert kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 8, IDEAL) == 1_525_878
    assert memory_fit(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 1, IDEAL, pp=2).fits  # 160e9 ≥ 140e9
    assert not memory_fit(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 1, IDEAL).fits


def test_uneven_stages_pace_the_pipeline():
    """80 layers over pp=3: the largest stage has 27, s = 3 · 27 / 80 = 1.0125, so bandwidth and FLOP/s are 1.0125×
    below 3 · tp GPUs' worth."""
    assert stage_imbalance(LLAMA_2_70B, 3) == pytest.approx(1.0125)
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 1, IDEAL, pp=3)
    assert sm.memory_bandwidth_bytes_per_s == pytest.approx(3 * 3.35e12 / 1.0125)


def test_expert_parallel_all_to_all_bytes():
    """Mixtral (hidden 4096, top-2 of 8) at tp = ep = 8: a token's two experts are on other ranks w.p.
    1 − (7/8)² each, R = 7 × 0.234375 = 1.640625 ranks, so dispatch sends 4096 × 2 B × 1.640625 = 13,440 B per
    token and MoE layer (and the combine as much). Per token: 2 × 32 layers × 13,440 / (8 × 450e9) = 2.3893e-7 s.
    Attention is data-parallel in the expert-parallel form (vLLM runs its all-to-all only with
    --data-parallel-size), so no all-reduce is left: tp = 8 alone pays 64 × 2·7/8·4096·2 / 450e9 = 2.0389e-6 s."""
    assert remote_expert_ranks(2, 8) == pytest.approx(1.640625)
    assert remote_expert_ranks(1, 8) == pytest.approx(7 / 8)  # k = 1: (ep − 1)/ep, the brief's formula
    terms = parallel_terms(H100_SXM, MIXTRAL_8X7B, 8, 1, 8, 2.0)
    assert terms.ep_comm_s_per_token == pytest.approx(2 * 32 * 13_440 / (8 * 450e9))
    assert terms.ep_comm_latency_s == pytest.approx(2 * 32 * 5e-6)
    assert terms.tp_comm_s_per_token == 0.0
    assert terms.tp_comm_latency_s == 0.0
    no_ep = parallel_terms(H100_SXM, MIXTRAL_8X7B, 8, 1, 1, 2.0)
    assert no_ep.tp_comm_s_per_token == pytest.approx(64 * 2 * 7 / 8 * 4096 * 2 / 450e9)
    assert no_ep.comm_latency_s == pytest.approx(terms.comm_latency_s)  # 64 all-reduces vs 32 dispatches + 32 combines
    assert terms.comm_s_per_token < no_ep.comm_s_per_token


def test_cross_node_tp_is_priced_on_the_nic_and_loses_to_pp():
    """tp=16 over two H100 nodes: 160 all-reduces per token of 2·15/16·16,384 B over the 50e9 B/s NIC
    (9.8304e-5 s per token, 160 × 15 µs = 2.4 ms per step) against tp=8 × pp=2's 5.26e-6 s and 0.81 ms.
    At tp=16 the 8 KV heads are also replicated twice. At batch 32 and 4,096 context tp=16 takes
    (140e9 + 2 × 42.95e9) / 53.6e12 + 3.146 + 2.4 = 4.213 + 3.146 + 2.4 = 9.76 ms; tp=8 × pp=2
    6.025 + 0.168 + 0.81 = 7.00 ms: the same 16 GPUs, the cross-node TP loses."""
    tp16 = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 16, COMM)
    assert tp16.comm_s_per_token == pytest.approx(160 * 2 * 15 / 16 * 16_384 / 50e9)
    assert tp16.comm_latency_s == pytest.approx(160 * 15e-6)
    pp2 = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 8, COMM, pp=2)
    a = decode_step(tp16, batch=32, context_tokens=4096).step_s
    b = decode_step(pp2, batch=32, context_tokens=4096).step_s
    assert a == pytest.approx((140e9 + 2 * KV_32_AT_4096) / (16 * 3.35e12) + 32 * 9.8304e-5 + 2.4e-3, rel=1e-9)
    assert b == pytest.approx((280e9 + KV_32_AT_4096) / (16 * 3.35e12) + 32 * (5.0972e-6 + 1.6384e-7) + 0.81e-3, rel=1e-4)
    assert b < a


def test_nic_figures_from_the_catalog_price_cross_node_links():
    """A GPU whose catalog row gives a 200 Gb/s NIC and 3 µs: the hop of tp=8 × pp=2 costs 16,384 B / 25e9 B/s."""
    slow = dataclasses.replace(H100_SXM, scale_out_bytes_per_s=25e9, scale_out_latency_s=3e-6, scale_out_source="test row")
    terms = parallel_terms(slow, LLAMA_2_70B, 8, 2, 1, 2.0)
    assert terms.hop_s_per_token == pytest.approx(16_384 / 25e9 / 2)
    assert terms.hop_latency_s == pytest.approx(3e-6)


def test_bubble_fraction_is_gpipes():
    """(pp − 1)/(m + pp − 1): pp=4 with m=4 micro-batches idles 3/7; with m=1, 3/4."""
    assert bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert bubble_fraction(4, 1) == pytest.approx(3 / 4)
    assert bubble_fraction(1, 1) == 0.0


@pytest.mark.parametrize(
    ("model", "tp", "pp", "ep", "error", "text"),
    [
        (LLAMA_2_70B, 4, 0, 1, PlannerInputError, "pp must be >= 1"),
        (LLAMA_2_70B, 4, 81, 1, UnsupportedConfigurationError, "exceeds llama-2-70b's 80 layers"),
        (LLAMA_2_70B, 4, 2, 4, UnsupportedConfigurationError, "dense"),
        (MIXTRAL_8X7B, 8, 1, 4, UnsupportedConfigurationError, "must equal tp=8"),
        (LLAMA_2_70B, 12, 1, 1, UnsupportedConfigurationError, "whole number of nodes"),
    ],
)
def test_layout_refusals(model, tp, pp, ep, error, text):
    with pytest.raises(error) as caught:
        check_pipeline_parallel(H100_SXM, model, tp, pp, ep)
    assert text in caught.value.detail
