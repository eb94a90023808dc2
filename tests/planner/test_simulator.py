"""The simulator against hand-worked traces and against the laws any queue must obey."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.arrivals import Trace, sample_trace
from planner.errors import PlannerInputError, SimulationLimitError, UnsupportedConfigurationError
from planner.simulator import RequestTimes, simulate, simulate_requests
from planner.step_model import StepModel
from planner.workload import FixedLength, LognormalLength, Serving, Workload

MS = 1e-3

#: One millisecond per new token and nothing else: no weights, KV reads at an unbounded bandwidth
#: (1 byte per token over 1e30 B/s contributes ~1e-30 s), no attention FLOPs, full overlap.
ONE_MS_PER_TOKEN = StepModel(
    dense_weight_bytes=0.0,
    kv_bytes_per_token=1.0,
    flops_per_token=1.0,
    attention_flops_per_context_token=0.0,
    memory_bandwidth_bytes_per_s=1e30,
    compute_flops_per_s=1e3,
)

#: Llama-2-70B fp16 on 4×H100 SXM, ideal roofline (docs/design.md test vectors; H100 datasheet
#: 3.35 TB/s and 989 TFLOP/s per GPU): 140 GB of weights, 327,680 KV bytes per token,
#: attention 4·layers·heads·head_dim FLOPs per context token.
LLAMA2_70B_4XH100 = StepModel(
    dense_weight_bytes=140e9,
    kv_bytes_per_token=327_680.0,
    flops_per_token=140e9,
    attention_flops_per_context_token=4 * 80 * 64 * 128,
    memory_bandwidth_bytes_per_s=4 * 3.35e12,
    compute_flops_per_s=4 * 989e12,
)
#: (4 × 80 GB − 140 GB) / 327,680 B (docs/design.md: 134 requests of 4,096 tokens fit).
KV_70B_TOKENS = int(180e9 / 327_680)
CHAT = Workload(
    arrival_rate_rps=1.0,
    prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=4000),
    output_tokens=LognormalLength(mean_tokens=250, p99_tokens=1000),
)


def saturation_rps(workload: Workload, serving: Serving, requests: int = 2000) -> float:
    """Measured: the requests of `workload` all queued at time 0, finished per second."""
    sampled = sample_trace(workload, requests, np.random.default_rng(12345))
    flood = Trace(arrival_s=np.zeros(requests), prompt_tokens=sampled.prompt_tokens, output_tokens=sampled.output_tokens)
    times = simulate_requests(LLAMA2_70B_4XH100, flood, serving, kv_capacity_tokens=KV_70B_TOKENS)
    return requests / float(np.max(times.finish_s))


def _trace(*requests: tuple[float, int, int]) -> Trace:
    return Trace(
        arrival_s=np.array([r[0] for r in requests]),
        prompt_tokens=np.array([r[1] for r in requests]),
        output_tokens=np.array([r[2] for r in requests]),
    )


def _max_concurrent(start: np.ndarray, end: np.ndarray, weight: np.ndarray | None = None) -> float:
    """Largest Σ weight over intervals [start, end) open at once (ends sort before starts at a tie)."""
    w = np.ones_like(start) if weight is None else weight.astype(np.float64)
    times = np.concatenate((start, end))
    deltas = np.concatenate((w, -w))
    order = np.lexsort((deltas, times))  # by time, then removals (negative) first
    return float(np.max(np.cumsum(deltas[order])))


# -- hand-worked traces ---------------------------------------------------------------------------


def test_three_requests_step_by_step() -> None:
    """One replica, batch_limit 2, no chunking, 1 ms per new token (ONE_MS_PER_TOKEN), ample KV.

    A arrives at 0 ms (prompt 4, output 3); B at 1.5 ms (prompt 2, output 2); C at 2.5 ms (prompt 3, output 1).
      step 1, 0 → 4 ms:  admit A; prefill A's 4 tokens (4 ms). A's first token at 4.
      step 2, 4 → 7 ms:  admit B (a slot is free); C waits (batch full). Decode A + prefill B's 2 = 3 tokens.
                         A has 2 tokens; B's first token at 7.
      step 3, 7 → 9 ms:  decode A and B (2 tokens). A has 3 = its output → done at 9; B has 2 → done at 9.
      step 4, 9 → 12 ms: admit C; prefill its 3 tokens. C's first (and only) token at 12 → done at 12.
    TTFT: A 4, B 7 − 1.5 = 5.5, C 12 − 2.5 = 9.5 ms.  E2E: A 9, B 7.5, C 9.5 ms.
    TPOT: A (9 − 4)/2 = 2.5 ms, B (9 − 7)/1 = 2 ms, C undefined (one token).  Waits: A 0, B 2.5, C 6.5 ms.
    """
    times = simulate_requests(
        ONE_MS_PER_TOKEN,
        _trace((0.0, 4, 3), (1.5 * MS, 2, 2), (2.5 * MS, 3, 1)),
        Serving(batch_limit=2),
        kv_capacity_tokens=1000,
    )
    assert times.steps == 4
    assert times.queue_wait_s == pytest.approx(np.array([0.0, 2.5, 6.5]) * MS, abs=1e-12)
    assert times.ttft_s == pytest.approx(np.array([4.0, 5.5, 9.5]) * MS, abs=1e-12)
    assert times.e2e_s == pytest.approx(np.array([9.0, 7.5, 9.5]) * MS, abs=1e-12)
    assert times.tpot_s[:2] == pytest.approx(np.array([2.5, 2.0]) * MS, abs=1e-12)
    assert math.isnan(times.tpot_s[2])


def test_three_requests_with_chunked_prefill_step_by_step() -> None:
    """The same trace with chunk_tokens = 3 (decodes count against it, prompts split FCFS).

      step 1, 0 → 3 ms:   admit A; budget 3 → 3 of A's 4 prompt tokens.
      step 2, 3 → 6 ms:   admit B (C waits: batch full). Budget 3: A's last 1, B's 2. A and B first tokens at 6.
      step 3, 6 → 8 ms:   decode A and B. A has 2 tokens; B has 2 → done at 8.
      step 4, 8 → 11 ms:  admit C. Decode A (1 of the budget), then 2 of C's 3 prompt tokens. A has 3 → done at 11.
      step 5, 11 → 12 ms: C's last prompt token → first token at 12 → done.
    TTFT: A 6, B 4.5, C 9.5 ms.  E2E: A 11, B 6.5, C 9.5 ms.  TPOT: A 2.5, B 2 ms.  Waits: A 0, B 1.5, C 5.5 ms.
    """
    times = simulate_requests(
        ONE_MS_PER_TOKEN,
        _trace((0.0, 4, 3), (1.5 * MS, 2, 2), (2.5 * MS, 3, 1)),
        Serving(batch_limit=2, chunk_tokens=3),
        kv_capacity_tokens=1000,
    )
    assert times.steps == 5
    assert times.queue_wait_s == pytest.approx(np.array([0.0, 1.5, 5.5]) * MS, abs=1e-12)
    assert times.ttft_s == pytest.approx(np.array([6.0, 4.5, 9.5]) * MS, abs=1e-12)
    assert times.e2e_s == pytest.approx(np.array([11.0, 6.5, 9.5]) * MS, abs=1e-12)
    assert times.tpot_s[:2] == pytest.approx(np.array([2.5, 2.0]) * MS, abs=1e-12)


def test_kv_read_and_attention_of_each_step() -> None:
    """What each step reads and attends, through a step model that adds them up (overlap 0):
    t = (1 + kv_tokens_read) ms + (new_tokens + attended_tokens) ms.

    One request, prompt 4, output 3, chunk_tokens 3:
      step 1: prefill 3 at position 0: kv 0, attended 3·0 + 3·4/2 = 6, new 3 → 1 + 0 + 3 + 6 = 10 ms (ends 10).
      step 2: prefill 1 at position 3: kv 3, attended 1·3 + 1 = 4, new 1 → 1 + 3 + 1 + 4 = 9 ms (ends 19, first token).
      step 3: decode at context 4 + 1: kv 5, attended 5, new 1 → 12 ms (ends 31).
      step 4: decode at context 4 + 2: kv 6, attended 6, new 1 → 14 ms (ends 45, third token: done).
    TTFT 19 ms, E2E 45 ms, TPOT (45 − 19)/2 = 13 ms.
    """
    summing = StepModel(
        dense_weight_bytes=1.0,
        kv_bytes_per_token=1.0,
        flops_per_token=1.0,
        attention_flops_per_context_token=1.0,
        memory_bandwidth_bytes_per_s=1e3,
        compute_flops_per_s=1e3,
        memory_compute_overlap=0.0,
    )
    times = simulate_requests(summing, _trace((0.0, 4, 3)), Serving(batch_limit=1, chunk_tokens=3), kv_capacity_tokens=100)
    assert times.ttft_s[0] == pytest.approx(19 * MS, abs=1e-12)
    assert times.e2e_s[0] == pytest.approx(45 * MS, abs=1e-12)
    assert times.tpot_s[0] == pytest.approx(13 * MS, abs=1e-12)


def test_head_request_waits_for_kv_with_free_slots_and_is_not_skipped() -> None:
    """KV capacity 100 tokens, 4 slots. A (prompt 50 + output 40 = 90 tokens) runs; B (10 + 5 = 15)
    arrives with three slots free but only 10 tokens of KV → waits until A finishes. C (1 + 1 = 2)
    would fit beside A but FCFS never skips the blocked head: it is admitted with B, not before."""
    times = simulate_requests(
        ONE_MS_PER_TOKEN,
        _trace((0.0, 50, 40), (1 * MS, 10, 5), (2 * MS, 1, 1)),
        Serving(batch_limit=4),
        kv_capacity_tokens=100,
    )
    assert times.admission_s[1] == times.finish_s[0]
    assert times.admission_s[2] == times.admission_s[1]
    assert times.queue_wait_s[1] > 0.05  # A's 40 output tokens take 40+ ms


def test_request_larger_than_the_kv_cache_is_refused_up_front() -> None:
    with pytest.raises(UnsupportedConfigurationError) as error:
        simulate_requests(ONE_MS_PER_TOKEN, _trace((0.0, 60, 50)), Serving(batch_limit=4), kv_capacity_tokens=100)
    assert error.value.extensions["request_tokens"] == 110
    assert error.value.extensions["kv_capacity_tokens"] == 100


# -- limits of a replica --------------------------------------------------------------------------


def test_batch_limit_and_kv_capacity_are_never_exceeded_and_are_reached() -> None:
    """Overloaded (1.3 × saturation): the running set fills to batch_limit but never past it, and
    the reserved KV (prompt + output of every running request) never exceeds capacity."""
    serving = Serving(batch_limit=48)
    kv_capacity = 40_000  # tight enough that KV, not slots, binds part of the time
    result = simulate(
        LLAMA2_70B_4XH100,
        CHAT.at_rate(1.3 * saturation_rps(CHAT, serving)),
        serving,
        kv_capacity_tokens=kv_capacity,
        requests=3000,
        seed=3,
    )
    d = result.detail
    running = _max_concurrent(d.admission_s, d.finish_s)
    reserved = _max_concurrent(d.admission_s, d.finish_s, d.prompt_tokens + d.output_tokens)
    assert running <= 48
    assert reserved <= kv_capacity
    assert reserved > 0.9 * kv_capacity
    assert not result.stable


def test_too_many_steps_raise_the_limit_error() -> None:
    with pytest.raises(SimulationLimitError):
        simulate(
            LLAMA2_70B_4XH100,
            CHAT.at_rate(5.0),
            Serving(batch_limit=64),
            kv_capacity_tokens=KV_70B_TOKENS,
            requests=500,
            max_steps=1000,
        )


# -- laws and statistics --------------------------------------------------------------------------


def test_same_seed_same_run_other_seed_other_run() -> None:
    kwargs = {"kv_capacity_tokens": KV_70B_TOKENS, "requests": 1500}
    workload, serving = CHAT.at_rate(6.0), Serving(replicas=2, batch_limit=64, router="random")
    first = simulate(LLAMA2_70B_4XH100, workload, serving, seed=7, **kwargs)
    again = simulate(LLAMA2_70B_4XH100, workload, serving, seed=7, **kwargs)
    other = simulate(LLAMA2_70B_4XH100, workload, serving, seed=8, **kwargs)
    for field in ("arrival_s", "admission_s", "first_token_s", "finish_s", "replica"):
        np.testing.assert_array_equal(getattr(first.detail, field), getattr(again.detail, field))
    assert first.ttft_s == again.ttft_s and first.e2e_s == again.e2e_s and first.steps == again.steps
    assert not np.array_equal(first.detail.finish_s, other.detail.finish_s)


@pytest.mark.parametrize("rho", [0.4, 0.8])
def test_littles_law_on_simulated_output(rho: float) -> None:
    """L = λ·W: the time-average number in the system over the window equals the measured arrival
    rate times the mean time in system, up to edge effects of order W/window."""
    serving = Serving(replicas=2, batch_limit=64, router="round_robin")
    rate = rho * serving.replicas * saturation_rps(CHAT, Serving(batch_limit=64))
    result = simulate(LLAMA2_70B_4XH100, CHAT.at_rate(rate), serving, kv_capacity_tokens=KV_70B_TOKENS, requests=6000, seed=11)
    assert result.stable
    assert result.mean_in_system == pytest.approx(result.measured_arrival_rate_rps * result.mean_time_in_system_s, rel=0.03)
    # The running part alone obeys it too: occupancy = λ per replica × mean time from admission to finish.
    measured = slice(result.requests - result.measured_requests, None)
    running_s = float(np.mean((result.detail.finish_s - result.detail.admission_s)[measured]))
    per_replica_rate = result.measured_arrival_rate_rps / serving.replicas
    assert result.mean_occupancy == pytest.approx(per_replica_rate * running_s, rel=0.03)
    assert result.throughput_rps == pytest.approx(result.measured_arrival_rate_rps, rel=0.03)


def test_p99s_never_fall_as_the_rate_rises() -> None:
    """Same seed, so the same arrivals compressed in time (gamma draws scale with 1/λ)."""
    serving = Serving(batch_limit=64)
    saturation = saturation_rps(CHAT, serving)
    results = [
        simulate(
            LLAMA2_70B_4XH100, CHAT.at_rate(rho * saturation), serving, kv_capacity_tokens=KV_70B_TOKENS, requests=4000, seed=5
        )
        for rho in (0.2, 0.45, 0.7, 0.9)
    ]
    for metric in ("ttft_s", "tpot_s", "e2e_s", "queue_wait_s"):
        p99s = [getattr(r, metric).p99 for r in results]
        assert p99s == sorted(p99s), metric
    assert all(r.stable for r in results)
    occupancy = [r.mean_occupancy for r in results]
    assert occupancy == sorted(occupancy)


def test_burstier_arrivals_wait_longer_at_the_same_rate() -> None:
    serving = Serving(batch_limit=64)
    rate = 0.7 * saturation_rps(CHAT, serving)
    poisson = simulate(LLAMA2_70B_4XH100, CHAT.at_rate(rate), serving, kv_capacity_tokens=KV_70B_TOKENS, requests=5000, seed=9)
    bursty_workload = Workload(
        arrival_rate_rps=rate, prompt_tokens=CHAT.prompt_tokens, output_tokens=CHAT.output_tokens, arrival_cv=2.0
    )
    bursty = simulate(LLAMA2_70B_4XH100, bursty_workload, serving, kv_capacity_tokens=KV_70B_TOKENS, requests=5000, seed=9)
    assert bursty.queue_wait_s.p99 > poisson.queue_wait_s.p99
    assert bursty.ttft_s.p99 > poisson.ttft_s.p99


def test_chunked_prefill_lowers_tpot_p99_when_prompts_dominate() -> None:
    """Prompts of ~3,000 tokens (p99 8,000) against ~100 output tokens: unchunked, a long prefill
    stalls every decoding sequence for a whole compute-bound step; a 512-token budget spreads it."""
    workload = Workload(
        arrival_rate_rps=3.0,
        prompt_tokens=LognormalLength(mean_tokens=3000, p99_tokens=8000),
        output_tokens=LognormalLength(mean_tokens=100, p99_tokens=400),
    )
    whole = simulate(
        LLAMA2_70B_4XH100, workload, Serving(batch_limit=32), kv_capacity_tokens=KV_70B_TOKENS, requests=3000, seed=2
    )
    chunked = simulate(
        LLAMA2_70B_4XH100,
        workload,
        Serving(batch_limit=32, chunk_tokens=512),
        kv_capacity_tokens=KV_70B_TOKENS,
        requests=3000,
        seed=2,
    )
    assert chunked.tpot_s.p99 < 0.8 * whole.tpot_s.p99
    np.testing.assert_array_equal(chunked.detail.arrival_s, whole.detail.arrival_s)


def test_p99_confidence_interval_brackets_the_estimate_and_narrows_with_more_requests() -> None:
    serving = Serving(batch_limit=64)
    workload = CHAT.at_rate(0.6 * saturation_rps(CHAT, serving))
    short = simulate(LLAMA2_70B_4XH100, workload, serving, kv_capacity_tokens=KV_70B_TOKENS, requests=2500, seed=4)
    long = simulate(LLAMA2_70B_4XH100, workload, serving, kv_capacity_tokens=KV_70B_TOKENS, requests=20000, seed=4)
    for result in (short, long):
        for metric in (result.ttft_s, result.tpot_s, result.e2e_s):
            assert metric.p99_ci_low is not None and metric.p99_ci_high is not None
            assert metric.p99_ci_low < metric.p99 < metric.p99_ci_high
            assert metric.p50 <= metric.p90 <= metric.p99
    width = lambda p: p.p99_ci_high - p.p99_ci_low
    assert width(long.e2e_s) < width(short.e2e_s)
    assert long.measured_requests == 18000 and long.requests == 20000
    # Too few requests for five blocks of 200: no interval rather than a meaningless one.
    tiny = simulate(LLAMA2_70B_4XH100, workload, serving, kv_capacity_tokens=KV_70B_TOKENS, requests=300, seed=4)
    assert tiny.e2e_s.p99_ci_low is None and tiny.e2e_s.samples == 270


def test_unstable_load_ends_and_says_so() -> None:
    serving = Serving(batch_limit=32)
    saturation = saturation_rps(CHAT, serving)
    over = simulate(
        LLAMA2_70B_4XH100, CHAT.at_rate(1.3 * saturation), serving, kv_capacity_tokens=KV_70B_TOKENS, requests=3000, seed=6
    )
    under = simulate(
        LLAMA2_70B_4XH100, CHAT.at_rate(0.7 * saturation), serving, kv_capacity_tokens=KV_70B_TOKENS, requests=3000, seed=6
    )
    assert not over.stable and under.stable
    assert over.backlog_at_end > 100
    assert over.throughput_rps == pytest.approx(saturation, rel=0.1)
    assert not np.any(np.isnan(over.detail.finish_s))  # every request still served, the run drained


# -- routers --------------------------------------------------------------------------------------


def _in_system_at_arrivals(d: RequestTimes, replicas: int) -> np.ndarray:
    """For each request, the unfinished requests each replica held when it arrived."""
    counts = np.zeros((d.arrival_s.size, replicas), dtype=np.int64)
    for i, t in enumerate(d.arrival_s):
        earlier = slice(0, i)
        open_ = d.finish_s[earlier] > t
        counts[i] = np.bincount(d.replica[earlier][open_], minlength=replicas)
    return counts


def test_routers() -> None:
    serving_rate = 3 * 0.75 * saturation_rps(CHAT, Serving(batch_limit=32))
    results = {}
    for router in ("random", "round_robin", "jsq"):
        results[router] = simulate(
            LLAMA2_70B_4XH100,
            CHAT.at_rate(serving_rate),
            Serving(replicas=3, batch_limit=32, router=router),
            kv_capacity_tokens=KV_70B_TOKENS,
            requests=2400,
            seed=10,
        )
    np.testing.assert_array_equal(results["round_robin"].detail.replica, np.arange(2400) % 3)
    shares = np.bincount(results["random"].detail.replica, minlength=3)
    assert np.all(np.abs(shares - 800) < 4 * math.sqrt(2400 * (1 / 3) * (2 / 3)))  # binomial ± 4σ
    assert len(set(results["random"].detail.replica[:30].tolist())) == 3
    jsq = results["jsq"].detail
    counts = _in_system_at_arrivals(jsq, 3)
    np.testing.assert_array_equal(jsq.replica, np.argmin(counts, axis=1))
    # Balancing on queue length shortens the tail of waiting compared with a blind split.
    assert results["jsq"].queue_wait_s.p99 < results["random"].queue_wait_s.p99
    assert results["jsq"].e2e_s.p99 < results["random"].e2e_s.p99


# -- inputs ---------------------------------------------------------------------------------------


def test_replayed_trace_sets_the_requests() -> None:
    arrival = np.arange(1, 401) * 0.25
    trace = Trace(arrival_s=arrival, prompt_tokens=np.full(400, 500), output_tokens=np.full(400, 50))
    result = simulate(
        LLAMA2_70B_4XH100,
        CHAT,
        Serving(batch_limit=16),
        kv_capacity_tokens=KV_70B_TOKENS,
        trace=trace,
        requests=5,
        warmup_fraction=0.25,
    )
    assert result.requests == 400 and result.measured_requests == 300
    np.testing.assert_array_equal(result.detail.arrival_s, arrival)
    assert result.measured_arrival_rate_rps == pytest.approx(4.0)
    # Deterministic spacing and lengths: every request sees the same service, so the spread is tiny.
    assert result.e2e_s.p99 == pytest.approx(result.e2e_s.p50, rel=0.05)


def test_gamma_interarrivals_have_the_requested_mean_and_cv() -> None:
    workload = Workload(
        arrival_rate_rps=4.0, prompt_tokens=FixedLength(tokens=10), output_tokens=FixedLength(tokens=5), arrival_cv=2.5
    )
    gaps = np.diff(sample_trace(workload, 200_000, np.random.default_rng(0)).arrival_s)
    assert np.mean(gaps) == pytest.approx(0.25, rel=0.02)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(2.5, rel=0.03)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"warmup_fraction": 1.0}, "warm-up"),
        ({"kv_capacity_tokens": 0}, "KV capacity"),
        ({"requests": 0}, "at least one request"),
        ({"requests": 1}, "too few measured"),
    ],
)
def test_bad_inputs_are_planner_input_errors(kwargs: dict, message: str) -> None:
    arguments = {"kv_capacity_tokens": KV_70B_TOKENS, "requests": 100} | kwargs
    with pytest.raises(PlannerInputError, match=message):
        simulate(LLAMA2_70B_4XH100, CHAT, Serving(batch_limit=8), **arguments)


def test_zero_rate_needs_a_trace() -> None:
    with pytest.raises(PlannerInputError, match="positive arrival rate"):
        simulate(LLAMA2_70B_4XH100, CHAT.at_rate(0.0), Serving(batch_limit=8), kv_capacity_tokens=KV_70B_TOKENS)


class _Stopped(Exception):
    pass


def test_a_checkpoint_that_raises_stops_a_simulation_and_one_that_passes_changes_nothing() -> None:
    """The service passes its request deadline's checkpoint: called every 4,096 steps, it ends a
    simulation its request abandoned; a checkpoint that returns leaves every figure as it was."""
    calls = 0

    def stop(_: None = None) -> None:
        nonlocal calls
        calls += 1
        raise _Stopped

    serving, workload = Serving(batch_limit=64), CHAT.at_rate(5.0)
    with pytest.raises(_Stopped):
        simulate(LLAMA2_70B_4XH100, workload, serving, kv_capacity_tokens=KV_70B_TOKENS, requests=4000, checkpoint=stop)
    assert calls == 1
    quiet = simulate(
        LLAMA2_70B_4XH100, workload, serving, kv_capacity_tokens=KV_70B_TOKENS, requests=4000, checkpoint=lambda: None
    )
    plain = simulate(LLAMA2_70B_4XH100, workload, serving, kv_capacity_tokens=KV_70B_TOKENS, requests=4000)
    assert quiet.ttft_s.p99 == plain.ttft_s.p99 and quiet.e2e_s.p99 == plain.e2e_s.p99
