"""Tensor-parallel degrees and all-reduce time."""

from __future__ import annotations

import dataclasses

import pytest

from planner.errors import PlannerInputError, UnsupportedConfigurationError
from planner.parallel import (
    check_tensor_parallel,
    kv_head_replicas,
    kv_heads_per_gpu,
    ring_all_reduce_s,
    valid_tensor_parallel_degrees,
)
from planner.performance import build_step_model, decode_step
from planner.specs import Efficiency, ModelSpec
from tests.planner.performance_specs import DEEPSEEK_V3, FP8_PRECISION, FP16_PRECISION, H100_SXM, LLAMA_2_70B

COMM = Efficiency(name="comm", include_comm=True)


def test_valid_tp_for_llama_2_70b():
    """64 heads and 8 KV heads: 1, 2, 4, 8 divide both; 3, 5, 6, 7 do not divide 64."""
    assert valid_tensor_parallel_degrees(H100_SXM, LLAMA_2_70B) == (1, 2, 4, 8)


@pytest.mark.parametrize(("tp", "reason"), [(3, "attention heads"), (12, "not a whole number of nodes")])
def test_tp_refusals(tp, reason):
    with pytest.raises(UnsupportedConfigurationError) as caught:
        check_tensor_parallel(H100_SXM, LLAMA_2_70B, tp)
    assert reason in caught.value.detail
    assert caught.value.extensions["valid_tp"] == [1, 2, 4, 8]


def test_tp_below_one_is_an_input_error():
    with pytest.raises(PlannerInputError):
        check_tensor_parallel(H100_SXM, LLAMA_2_70B, 0)


def test_kv_heads_neither_split_nor_replicated_evenly_are_refused():
    """48 heads, 12 KV heads, tp = 8: 8 divides 48 but neither 12 % 8 nor 8 % 12 is 0."""
    model = ModelSpec(
        slug="odd-kv",
        params_total=30e9,
        params_active=30e9,
        layers=48,
        hidden_size=6144,
        attention_heads=48,
        kv_heads=12,
        head_dim=128,
    )
    with pytest.raises(UnsupportedConfigurationError) as caught:
        check_tensor_parallel(H100_SXM, model, 8)
    assert "KV heads" in caught.value.detail
    assert valid_tensor_parallel_degrees(H100_SXM, model) == (1, 2, 3, 4, 6)


def test_kv_head_layout():
    """8 KV heads: tp 4 → 2 per GPU, one copy; a 4-KV-head model at tp 8 → 1 per GPU, 2 copies;
    MLA's latent → 1 per GPU, tp copies."""
    assert (kv_heads_per_gpu(LLAMA_2_70B, 4), kv_head_replicas(LLAMA_2_70B, 4)) == (2, 1)
    four_kv = dataclasses.replace(LLAMA_2_70B, slug="four-kv", kv_heads=4)
    assert (kv_heads_per_gpu(four_kv, 8), kv_head_replicas(four_kv, 8)) == (1, 2)
    assert (kv_heads_per_gpu(DEEPSEEK_V3, 8), kv_head_replicas(DEEPSEEK_V3, 8)) == (1, 8)


def test_ring_all_reduce_time():
    """16 KiB over 4 ranks at 450 GB/s with a 5 µs all-reduce latency: 2·3/4 × 16,384 / 450e9 = 54.6 ns + 5 µs."""
    assert ring_all_reduce_s(16_384, 4, 450e9, 5e-6) == pytest.approx(1.5 * 16_384 / 450e9 + 5e-6)
    assert ring_all_reduce_s(16_384, 1, 450e9, 5e-6) == 0.0


def test_comm_coefficients_for_llama_2_70b_tp4():
    """Two all-reduces per layer of hidden × 2 bytes per token: per token
    2 × 80 × 2·3/4 × 8192 × 2 B / 450e9 B/s = 8.738 µs; latency 2 × 80 all-reduces × 5 µs = 0.8 ms.
    FP8 weights still all-reduce 16-bit activations, so the same numbers."""
    for precision in (FP16_PRECISION, FP8_PRECISION):
        model = build_step_model(H100_SXM, LLAMA_2_70B, precision, 4, COMM)
        assert model.comm_s_per_token == pytest.approx(2 * 80 * 1.5 * 8192 * 2 / 450e9)
        assert model.comm_latency_s == pytest.approx(0.8e-3)
    batch_1 = decode_step(build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, COMM), batch=1, context_tokens=4096)
    assert batch_1.step_s == pytest.approx(141.342177280e9 / 13.4e12 + 2 * 80 * 1.5 * 8192 * 2 / 450e9 + 0.8e-3)
    assert batch_1.comm_s == pytest.approx(batch_1.step_s - batch_1.memory_s)


def test_no_comm_for_one_gpu_or_when_switched_off():
    one = build_step_model(H100_SXM, LLAMA_2_70B, FP8_PRECISION, 1, COMM)
    assert (one.comm_s_per_token, one.comm_latency_s) == (0.0, 0.0)
    off = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, Efficiency(include_comm=False))
    assert (off.comm_s_per_token, off.comm_latency_s) == (0.0, 0.0)


def test_efficiency_scales_bandwidth_compute_and_adds_overhead():
    """η_mem 0.8, η_compute 0.6, 1 ms overhead, overlap 0: BW = 4 × 3.35e12 × 0.8 = 10.72e12,
    F = 4 × 989e12 × 0.6 = 2.3736e15; batch-1 step = memory + compute + overhead."""
    efficiency = Efficiency(name="test", memory=0.8, compute=0.6, step_overhead_s=1e-3, memory_compute_overlap=0.0)
    model = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, efficiency)
    assert model.memory_bandwidth_bytes_per_s == pytest.approx(10.72e12)
    assert model.compute_flops_per_s == pytest.approx(2.3736e15)
    row = decode_step(model, batch=1, context_tokens=4096)
    memory_s = 141.342177280e9 / 10.72e12
    compute_s = (140e9 + 4096 * 4 * 80 * 64 * 128) / 2.3736e15
    assert row.step_s == pytest.approx(memory_s + compute_s + 1e-3)
