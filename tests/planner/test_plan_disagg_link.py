"""The link between the pools is a decision: one node's scale-up link when both pools fit there, else scale-out."""

from __future__ import annotations

import dataclasses

import pytest

from planner.disagg import SCALE_OUT_LINKS, intra_node_link
from planner.plan_disagg import plan_disaggregated, verify_disaggregated
from planner.specs import Precision
from planner.workload import LognormalLength, Slo, Workload
from tests.planner.performance_specs import A100_SXM, FP16, H100_SXM, LLAMA_2_70B

H100 = dataclasses.replace(H100_SXM, price_usd_per_hour_on_demand=4.0)
A100 = dataclasses.replace(A100_SXM, price_usd_per_hour_on_demand=2.0)
FP16_ALL = Precision(weights=FP16, kv_cache=FP16)
LINK = SCALE_OUT_LINKS["connectx7_400g"]
SLO = Slo(ttft_s=2.0, tpot_s=0.05)
#: Llama-2-70B's KV cache: 2 (K, V) × 80 layers × 8 KV heads × 128 dims × 2 bytes (FP16) = 327,680 bytes a token.
KV_BYTES_PER_TOKEN = 2 * 80 * 8 * 128 * 2


def workload(rate: float) -> Workload:
    return Workload(
        arrival_rate_rps=rate,
        prompt_tokens=LognormalLength(mean_tokens=2048, p99_tokens=8192),
        output_tokens=LognormalLength(mean_tokens=256, p99_tokens=1024),
    )


def plan(rate: float, gpus: list | None = None, *, same_node: bool = True, verify: bool = False):  # type: ignore[no-untyped-def, type-arg]
    return plan_disaggregated(
        gpus=gpus or [H100],
        model=LLAMA_2_70B,
        precisions=[FP16_ALL],
        tps=[2, 4, 8],
        workload=workload(rate),
        slo=SLO,
        link=LINK,
        same_node=same_node,
        verify=verify,
    )


def test_small_pools_share_a_node_and_its_nvlink() -> None:
    """At 1 req/s one tp2 prefill and one tp2 decode replica (4 H100s) fit one 8-GPU node: the KV crosses NVLink.
    By hand, a p99 prompt of 8,192 tokens is 8,192 × 327,680 B = 2.68 GB over 2 links: 2.68e9 / (2 × 450e9) + 5 µs
    = 2.988 ms over NVLink against 2.68e9 / (2 × 50e9) + 10 µs = 26.85 ms over ConnectX-7."""
    near = plan(1.0)
    assert (near.prefill.gpu, near.decode.gpu) == ("h100-sxm", "h100-sxm")
    assert near.prefill.gpus + near.decode.gpus <= H100.gpus_per_node
    assert near.link == intra_node_link(H100) and near.node_gpus == 8
    assert "one 8-GPU node" in near.link_why
    p99_bytes = 8192 * KV_BYTES_PER_TOKEN
    assert near.kv_bytes_per_token == KV_BYTES_PER_TOKEN
    assert near.prediction.transfer_q_s == pytest.approx(p99_bytes / (2 * 450e9) + 5e-6, rel=1e-3)
    apart = plan(1.0, same_node=False)
    assert apart.link == LINK and "not offered" in apart.link_why
    assert apart.prediction.transfer_q_s == pytest.approx(p99_bytes / (2 * 50e9) + 10e-6, rel=1e-3)
    assert near.prediction.transfer_q_s < apart.prediction.transfer_q_s / 8
    assert near.prediction.ttft_s < apart.prediction.ttft_s
    assert near.cost_usd_per_hour <= apart.cost_usd_per_hour  # one node is a choice, never a price


def test_large_pools_cross_the_scale_out_network() -> None:
    """At 20 req/s the pools need more H100s than one node holds: the KV crosses ConnectX-7, and the plan says why."""
    far = plan(20.0)
    assert far.prefill.gpus + far.decode.gpus > H100.gpus_per_node
    assert far.link == LINK and far.node_gpus is None
    assert "do not fit one 8-GPU node" in far.link_why


def test_pools_on_two_gpu_types_cross_the_scale_out_network() -> None:
    """H100 prefill and A100 decode (tests/planner/test_plan_disagg.py) sit in different nodes whatever their size."""
    mixed = plan(10.0, [H100, A100])
    assert mixed.prefill.gpu != mixed.decode.gpu
    assert mixed.link == LINK and "different GPUs" in mixed.link_why


def test_verification_keeps_the_node_link_it_was_planned_with() -> None:
    """A plan made without verification and verified afterwards (as `any` does for a winner) keeps its node and link
    while it still fits, and the simulation runs over that link."""
    made = plan(1.0)
    checked = verify_disaggregated(made, workload(1.0), SLO)
    assert checked.simulated_s is not None
    if checked.prefill.gpus + checked.decode.gpus <= 8:
        assert checked.link == made.link and checked.node_gpus == 8
    else:
        assert checked.link == LINK and "once verification added a replica" in checked.link_why


def test_a_gpus_own_nic_replaces_the_default_where_the_catalog_has_it() -> None:
    """No figures: the default link itself. Bandwidth alone: the default's latency, and the source says so. The pair
    crosses the slower NIC: H100 at 400 Gb/s with an A100 at 200 Gb/s moves the KV at 25e9 B/s per GPU."""
    from planner.disagg import gpu_scale_out_link, scale_out_link

    assert gpu_scale_out_link(H100, LINK) is LINK
    half = dataclasses.replace(A100, scale_out_bytes_per_s=25e9, scale_out_source="DGX A100: ConnectX-6 HDR 200 Gb/s")
    own = gpu_scale_out_link(half, LINK)
    assert own.bytes_per_s_per_gpu == 25e9 and own.latency_s == LINK.latency_s
    assert "ConnectX-6" in own.source and "latency: the default's" in own.source
    assert scale_out_link(H100, half, LINK) == own == scale_out_link(half, H100, LINK)
    fast = dataclasses.replace(H100, scale_out_bytes_per_s=50e9, scale_out_latency_s=2e-6, scale_out_source="test")
    assert scale_out_link(fast, half, LINK) == own  # the slower NIC's bandwidth and its latency


def test_pools_across_nodes_cross_their_gpus_nic_not_the_default() -> None:
    """H100 pools apart with a 100 Gb/s NIC per GPU (12.5e9 B/s): the p99 prompt's 2.68 GB over min(tp) links takes
    2.68e9 / (links × 12.5e9) + 10 µs, 4× the ConnectX-7 figure; the plan's link is that NIC."""
    slow = dataclasses.replace(H100, scale_out_bytes_per_s=12.5e9, scale_out_source="test: 100 Gb/s per GPU")
    apart = plan(1.0, [slow], same_node=False)
    links = min(apart.prefill.tp, apart.decode.tp)
    assert apart.link.bytes_per_s_per_gpu == 12.5e9 and apart.scale_out_link == apart.link
    assert apart.prediction.transfer_q_s == pytest.approx(8192 * KV_BYTES_PER_TOKEN / (links * 12.5e9) + 10e-6, rel=1e-3)
