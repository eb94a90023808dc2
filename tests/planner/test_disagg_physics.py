"""Disaggregated serving physics: KV transfer, the prefill pool's queue, the decode pool's admission."""

from __future__ import annotations

import math

import pytest

from planner.closed_forms import mmc_wait_quantile_s
from planner.disagg import (
    SCALE_OUT_LINKS,
    DecodePool,
    KvLink,
    PrefillPool,
    decode_occupancy,
    kv_transfer_s,
    poisson_quantile,
    predict_disagg,
    prefill_queue,
)
from planner.errors import UnstableLoadError
from planner.step_model import StepModel
from planner.workload import FixedLength, Workload
from tests.planner.test_simulator import ONE_MS_PER_TOKEN  # one millisecond per new token and nothing else

#: A 10 ms weight read per step (1e10 B at 1e12 B/s) and nothing else that matters: KV reads of
#: n·c ≈ 20·150 bytes add 3e-9 s, compute 1 FLOP per token at 1e30 FLOP/s nothing.
TEN_MS_PER_STEP = StepModel(
    dense_weight_bytes=1e10,
    kv_bytes_per_token=1.0,
    flops_per_token=1.0,
    attention_flops_per_context_token=0.0,
    memory_bandwidth_bytes_per_s=1e12,
    compute_flops_per_s=1e30,
)
#: 100 prompt tokens of 1 byte of KV each over 10 kB/s, no latency: a 10 ms transfer.
SLOW_LINK = KvLink(name="test", bytes_per_s_per_gpu=1e4, latency_s=0.0, source="test vector")
LLAMA2_70B_KV_BYTES_PER_TOKEN = 2 * 80 * 8 * 128 * 2  # K and V × 80 layers × 8 KV heads × 128 × fp16 = 327,680


def workload(rate: float) -> Workload:
    return Workload(arrival_rate_rps=rate, prompt_tokens=FixedLength(tokens=100), output_tokens=FixedLength(tokens=101))


def test_kv_transfer_of_a_4k_llama2_70b_prompt_over_connectx7() -> None:
    """4,096 tokens × 327,680 B = 1.342 GB; 4 GPU pairs × 50 GB/s (400 Gb/s ÷ 8) = 200 GB/s ⇒
    6.711 ms + 10 µs latency = 6.721 ms. Over NVLink 4 (450 GB/s per direction per GPU): 1.342/1800 = 0.746 ms."""
    cx7 = SCALE_OUT_LINKS["connectx7_400g"]
    assert cx7.bytes_per_s_per_gpu == pytest.approx(50e9)
    got = kv_transfer_s(prompt_tokens=4096, kv_bytes_per_token=LLAMA2_70B_KV_BYTES_PER_TOKEN, link=cx7, gpus=4)
    assert got == pytest.approx(4096 * 327_680 / 200e9 + 10e-6)
    assert got == pytest.approx(6.721e-3, rel=1e-3)
    nvlink = KvLink(name="nvlink4", bytes_per_s_per_gpu=450e9, latency_s=0.0, source="H100 datasheet: 900 GB/s bidirectional")
    assert kv_transfer_s(prompt_tokens=4096, kv_bytes_per_token=327_680, link=nvlink, gpus=4) == pytest.approx(
        0.7457e-3, rel=1e-3
    )


def test_prefill_pool_of_one_replica_with_fixed_prompts_is_distserves_md1() -> None:
    """p = 100 at 1 ms/token: D = 0.1 s; λ = 5 ⇒ ρ = 0.5. M/D/1 (DistServe §3.1): W = λD²/(2(1−ρ)) = 0.05 s,
    mean TTFT = D + W = 0.15 s. Tail P(W > t) = ρ·e^{−tρ/W} = 0.5·e^{−10t} ⇒ p99 = 0.1·ln 50 = 0.3912 s."""
    got = prefill_queue(PrefillPool(step_model=ONE_MS_PER_TOKEN, replicas=1), workload(5.0), 0.99)
    assert got.rho == pytest.approx(0.5)
    assert got.service_cv2 == pytest.approx(0.0, abs=1e-12)
    assert got.mean_wait_s == pytest.approx(0.05)
    assert got.service_mean_s + got.mean_wait_s == pytest.approx(0.15)
    assert got.wait_q_s == pytest.approx(0.1 * math.log(50.0))


def test_prefill_pool_past_capacity_is_unstable() -> None:
    """λ = 10 prompts of 0.1 s on one replica: ρ = 1."""
    with pytest.raises(UnstableLoadError):
        prefill_queue(PrefillPool(step_model=ONE_MS_PER_TOKEN, replicas=1), workload(10.0), 0.99)


def test_decode_occupancy_fixed_point_and_no_admission_wait() -> None:
    """Step ≈ 10 ms whatever the batch; a slot is held t_x + (ō−1)·t = 0.01 + 100 × 0.01 = 1.01 s;
    λ = 20 on one replica ⇒ n̄ = 20.2 of min(64, ⌊1e9/201⌋) = 64 slots; Erlang C(64, 20.2) ≈ 0 ⇒ no wait."""
    pool = DecodePool(step_model=TEN_MS_PER_STEP, replicas=1, batch_limit=64, kv_capacity_tokens=1e9)
    got = decode_occupancy(pool, workload(20.0), 0.01, 0.99)
    assert got.slots == 64 and got.binding == "batch_limit"
    assert got.mean_batch == pytest.approx(20.2, rel=1e-6)
    assert got.hold_s == pytest.approx(1.01, rel=1e-6)
    assert got.admission_wait_q_s == 0.0
    assert got.step_q_s == pytest.approx(0.010, rel=1e-6)


def test_decode_kv_memory_binds_and_in_flight_transfers_count() -> None:
    """KV for 10 contexts of 201 tokens (2,010 tokens) ⇒ 10 slots < batch limit 64. At λ = 20 a slot is
    needed for 1.01 s: 20.2 Erlangs on 10 slots is unstable. At λ = 22 with two replicas of 12 slots
    (2,412 tokens each): n̄ = 11 × 1.01 = 11.11 per replica; 24 servers, a = 22 × 1.01 = 22.22 Erlangs,
    wait p99 ln(C/0.01)/(24/1.01 − 22) from Erlang C (M/M/24; the KV reads' ~1e-8 s of step time aside)."""
    small = DecodePool(step_model=TEN_MS_PER_STEP, replicas=1, batch_limit=64, kv_capacity_tokens=2010)
    with pytest.raises(UnstableLoadError):
        decode_occupancy(small, workload(20.0), 0.01, 0.99)
    two = DecodePool(step_model=TEN_MS_PER_STEP, replicas=2, batch_limit=64, kv_capacity_tokens=2412)
    got = decode_occupancy(two, workload(22.0), 0.01, 0.99)
    assert got.slots == 12 and got.binding == "kv_memory"
    assert got.mean_batch == pytest.approx(11.0 * 1.01, rel=1e-6)
    assert got.admission_wait_q_s == pytest.approx(mmc_wait_quantile_s(24, 22.0, 1.01, 0.99), rel=1e-5)
    assert got.admission_wait_q_s > 0.0


def test_ttft_adds_prefill_wait_prefill_transfer_and_tpot_is_decode_alone() -> None:
    """λ = 5: prefill wait p99 0.3912 s + prefill 0.1 s + admission 0 + transfer 0.01 s = 0.5012 s;
    TPOT = the 10 ms decode step (no prefill in the batch); E2E = 0.5012 + 100 × 0.010 = 1.5012 s.
    Counting the first decode step adds 10 ms to TTFT."""
    prefill = PrefillPool(step_model=ONE_MS_PER_TOKEN, replicas=1)
    decode = DecodePool(step_model=TEN_MS_PER_STEP, replicas=1, batch_limit=64, kv_capacity_tokens=1e9)
    got = predict_disagg(prefill, decode, workload(5.0), link=SLOW_LINK, kv_bytes_per_token=1.0)
    assert got.transfer_q_s == pytest.approx(0.01)
    assert got.ttft_s == pytest.approx(0.1 * math.log(50.0) + 0.1 + 0.01, rel=1e-6)
    assert got.tpot_s == pytest.approx(0.010, rel=1e-6)
    assert got.e2e_s == pytest.approx(0.5012 + 1.0, rel=1e-4)
    counted = predict_disagg(prefill, decode, workload(5.0), link=SLOW_LINK, kv_bytes_per_token=1.0, count_first_decode_step=True)
    assert counted.ttft_s - got.ttft_s == pytest.approx(0.010, rel=1e-6)


def test_poisson_quantile() -> None:
    """Poisson(2): P(N ≤ k) = e^{−2}(1, 3, 5, 19/3, 7, …) = .135, .406, .677, .857, .947, .983, .995;
    the 0.99 quantile is 6, the median 2."""
    assert poisson_quantile(0.99, 2.0) == 6
    assert poisson_quantile(0.5, 2.0) == 2
    assert poisson_quantile(0.99, 0.0) == 0
