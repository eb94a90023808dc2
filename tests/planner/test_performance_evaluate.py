"""`evaluate` as the API will use it: shape, serialisation, refusals, the throughput curve."""

from __future__ import annotations

import json

import pytest

from planner.errors import ModelDoesNotFitError, PlannerInputError, UnsupportedConfigurationError
from planner.performance import batch_grid, build_step_model, decode_step, evaluate, throughput_curve
from planner.specs import IDEAL
from tests.planner.performance_specs import B200, FP16_PRECISION, H100_SXM, INT8_PRECISION, LLAMA_2_70B


def _seed(**overrides):
    arguments = {"context_tokens": 4096, "batch_sizes": [1, 32, 134], "prompt_tokens": 2000} | overrides
    return evaluate(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL, **arguments)


def test_batches_above_the_memory_limit_are_marked_not_hidden():
    """Batch 200 needs 200 × 1.342e9 = 268.4e9 B of KV, more than the 180e9 left: the row is
    computed ((140e9 + 268.4e9) / 13.4e12 = 30.48 ms) but flagged, and a note says so."""
    evaluation = _seed(batch_sizes=[134, 135, 200])
    flags = {row.batch: row.fits_in_memory for row in evaluation.decode}
    assert flags == {134: True, 135: False, 200: False}
    assert evaluation.decode[2].step_s == pytest.approx((140e9 + 200 * 1_342_177_280) / 13.4e12)
    assert any("[135, 200]" in note for note in evaluation.notes)


def test_to_dict_is_json_ready_and_carries_the_contract_fields():
    data = json.loads(json.dumps(_seed().to_dict()))
    for name in (
        "weights_bytes",
        "kv_bytes_per_token",
        "kv_bytes_per_request",
        "max_batch_by_memory",
        "break_even_flops_per_byte",
        "prefill",
        "decode",
        "step_model",
        "throughput_curve",
    ):
        assert name in data
    assert set(data["prefill"]) >= {"tokens", "time_s", "linear_time_s", "weight_read_s", "bound"}
    assert set(data["decode"][0]) >= {
        "batch",
        "step_s",
        "output_tokens_per_s",
        "output_tokens_per_s_per_request",
        "kv_bytes",
        "flops_per_byte",
        "bound",
    }
    assert set(data["step_model"]) >= {
        "weight_bytes",
        "kv_bytes_per_token",
        "flops_per_token",
        "attention_flops_per_context_token",
        "memory_bandwidth_bytes_per_s",
        "compute_flops_per_s",
        "comm_s_per_token",
        "comm_latency_s",
        "step_overhead_s",
        "memory_compute_overlap",
    }
    assert data["step_model"]["weight_bytes"] == 140e9
    assert data["decode"][1]["batch"] == 32


def test_throughput_curve_shows_the_knee():
    """Memory-bound with KV reads: tokens/s = B × BW / (W + B·c·kv) → ceiling BW / (c·kv) =
    13.4e12 / 1.342e9 = 9,983.8 tok/s; half of it at B = W / (c·kv) = 104.3, so the knee is 105.
    The grid runs 1 … 134 (the memory limit); throughput rises, per-request speed falls."""
    curve = _seed().throughput_curve
    assert curve.memory_limit_batch == 134
    assert curve.ceiling_tokens_per_s == pytest.approx(13.4e12 / 1_342_177_280)
    assert curve.knee_batch == 105
    batches = [point.batch for point in curve.points]
    assert batches[0] == 1 and batches[-1] == 134
    assert 32 in batches and 128 in batches
    rates = [point.output_tokens_per_s for point in curve.points]
    assert rates == sorted(rates)
    per_request = [point.output_tokens_per_s_per_request for point in curve.points]
    assert per_request == sorted(per_request, reverse=True)
    assert curve.points[-1].output_tokens_per_s == pytest.approx(5613.8, rel=0.005)


def test_batch_grid_is_log_spaced_and_ends_at_the_limit():
    assert batch_grid(1) == (1,)
    assert batch_grid(0) == ()
    assert batch_grid(16) == (1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16)
    grid = batch_grid(1000)
    assert grid[-1] == 1000 and len(grid) < 45


def test_decode_turns_compute_bound_at_short_context_and_large_batch():
    """Eight B200s (64e12 B/s, 18e15 FLOP/s), context 16: each sequence adds 16 × 327,680 B = 5.24 MB
    of reads (82 ns) but 140e9 + 16 × 2.62e6 FLOPs (7.78 µs), against a 2.19 ms weight read, so
    compute binds above 2.1875 ms / (7.780 − 0.082) µs ≈ 284 sequences: batch 512 is compute-bound and its intensity with attention
    exceeds the break-even 281.25."""
    model = build_step_model(B200, LLAMA_2_70B, FP16_PRECISION, 8, IDEAL)
    assert model.break_even_flops_per_byte == pytest.approx(18e15 / 64e12)
    small, large = (decode_step(model, batch=b, context_tokens=16) for b in (256, 512))
    assert small.bound == "memory"
    assert large.bound == "compute"
    assert large.flops_per_byte_with_attention > model.break_even_flops_per_byte
    assert large.step_s == pytest.approx(512 * (140e9 + 16 * 2_621_440) / 18e15)


def test_evaluate_refuses_a_model_that_does_not_fit_with_advice():
    with pytest.raises(ModelDoesNotFitError) as caught:
        evaluate(
            H100_SXM,
            LLAMA_2_70B,
            FP16_PRECISION,
            1,
            IDEAL,
            context_tokens=4096,
            batch_sizes=[1],
            prompt_tokens=100,
            candidate_precisions=[INT8_PRECISION],
        )
    assert caught.value.extensions["smallest_fitting_tp"] == 2
    assert caught.value.extensions["fitting_precisions"] == [{"weights": "int8", "kv_cache": "fp16"}]


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"context_tokens": 8192}, UnsupportedConfigurationError),
        ({"prompt_tokens": 5000}, UnsupportedConfigurationError),
        ({"context_tokens": 0}, PlannerInputError),
        ({"batch_sizes": [0]}, PlannerInputError),
    ],
)
def test_evaluate_refuses_impossible_requests(overrides, error):
    """Llama-2-70B's window is 4,096 tokens."""
    with pytest.raises(error):
        _seed(**overrides)


def test_throughput_curve_of_a_replica_that_holds_no_request_is_empty():
    model = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL)
    curve = throughput_curve(model, context_tokens=4096, max_batch=0)
    assert curve.points == ()
    assert curve.knee_batch == 105
