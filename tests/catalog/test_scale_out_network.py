"""The KV cache crosses the scale-out network of the two pools' GPUs, from the catalog (migration 0013)."""

from __future__ import annotations

import pytest

from catalog.repository import Catalog
from planner.disagg import DEFAULT_SCALE_OUT, scale_out_link
from planner.plan_disagg import plan_disaggregated
from planner.specs import GpuSpec, Precision
from planner.workload import LognormalLength, Slo, Workload
from tests.planner.performance_specs import FP16

FP16_ALL = Precision(weights=FP16, kv_cache=FP16)
#: Llama-3.1-8B's KV cache: 2 (K, V) × 32 layers × 8 KV heads × 128 dims × 2 bytes (FP16) = 131,072 bytes a token.
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
#: The p99 prompt of `WORKLOAD`: 8,192 tokens × 131,072 B = 1,073,741,824 B.
P99_PROMPT_BYTES = 8192 * KV_BYTES_PER_TOKEN
WORKLOAD = Workload(
    arrival_rate_rps=1.0,
    prompt_tokens=LognormalLength(mean_tokens=2048, p99_tokens=8192),
    output_tokens=LognormalLength(mean_tokens=256, p99_tokens=1024),
)


@pytest.fixture
def reference(catalog: Catalog) -> Catalog:
    assert catalog.load_reference_catalog()
    return catalog


def test_the_catalog_carries_each_gpus_nic_share_in_si_units(reference: Catalog) -> None:
    """l40s: 50 Gb/s → 6.25e9 B/s, no latency (the default's 10 µs applies); h100-sxm: 400 Gb/s → 50e9 B/s, 10 µs;
    h100-pcie: nothing sourced, so the pair uses the default ConnectX-7 link itself."""
    l40s, h100, pcie = (reference.gpu_spec(slug) for slug in ("l40s", "h100-sxm", "h100-pcie"))
    assert l40s.scale_out_bytes_per_s == pytest.approx(6.25e9) and l40s.scale_out_latency_s is None
    assert "g6e.48xlarge" in (l40s.scale_out_source or "")
    assert h100.scale_out_bytes_per_s == pytest.approx(50e9) and h100.scale_out_latency_s == pytest.approx(10e-6)
    assert pcie.scale_out_bytes_per_s is None
    assert scale_out_link(pcie, pcie) == DEFAULT_SCALE_OUT
    mixed = scale_out_link(h100, l40s)  # the slower NIC of the pair, whichever pool it serves
    assert mixed.bytes_per_s_per_gpu == pytest.approx(6.25e9) and mixed.latency_s == pytest.approx(10e-6)
    assert "g6e.48xlarge" in mixed.source and "latency: the default's" in mixed.source
    assert scale_out_link(l40s, h100) == mixed


def _apart(gpu: GpuSpec, reference: Catalog) -> float:
    plan = plan_disaggregated(
        gpus=[gpu],
        model=reference.model_spec("llama-3.1-8b"),
        precisions=[FP16_ALL],
        tps=[1],
        workload=WORKLOAD,
        slo=Slo(ttft_s=2.0, tpot_s=0.1),
        link=DEFAULT_SCALE_OUT,
        same_node=False,
        verify=False,
    )
    assert plan.kv_bytes_per_token == KV_BYTES_PER_TOKEN
    assert plan.link == plan.scale_out_link == scale_out_link(gpu, gpu)
    return plan.prediction.transfer_q_s


def test_an_l40s_pool_pair_across_nodes_moves_the_kv_slower_than_an_h100_pair(reference: Catalog) -> None:
    """By hand, the p99 prompt's 1,073,741,824 B over one link (tp 1): L40S at 50 Gb/s = 6.25e9 B/s takes
    0.171799 s + 10 µs = 171.81 ms; H100 SXM at 400 Gb/s = 50e9 B/s takes 0.021475 s + 10 µs = 21.48 ms (8× faster
    bandwidth). Before 0013 both crossed the same 400 Gb/s ConnectX-7."""
    l40s = _apart(reference.gpu_spec("l40s"), reference)
    h100 = _apart(reference.gpu_spec("h100-sxm"), reference)
    assert l40s == pytest.approx(P99_PROMPT_BYTES / 6.25e9 + 10e-6, rel=1e-3)
    assert l40s == pytest.approx(0.17181, rel=1e-3)
    assert h100 == pytest.approx(P99_PROMPT_BYTES / 50e9 + 10e-6, rel=1e-3)
    assert h100 == pytest.approx(0.021485, rel=1e-3)
    assert l40s > 7 * h100
