"""Efficiency calibration: predictions of each kind of point, recovery of known efficiencies,
identifiability, errors for unusable input, and the input formats (simple list, vLLM result)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.calibration import (
    MeasuredPoint,
    PointSet,
    decode_step_s,
    fit_efficiency,
    fit_step_models,
    mixed_step_s,
    points_from_records,
    points_from_vllm_benchmark,
    predict,
    prefill_s,
)
from planner.errors import CalibrationError
from planner.performance import build_step_model
from planner.specs import IDEAL, Efficiency
from tests.planner.performance_specs import (
    A100_SXM,
    FP16_PRECISION,
    H100_SXM,
    INT8_PRECISION,
    LLAMA_2_70B,
    MIXTRAL_8X7B,
)

TRUE = Efficiency(name="truth", memory=0.72, compute=0.55, step_overhead_s=0.002)


def _synthetic(
    points: list[MeasuredPoint], efficiency: Efficiency, *, gpu=H100_SXM, model=LLAMA_2_70B, precision=FP16_PRECISION, tp=4
) -> list[MeasuredPoint]:
    """The same points with the values the step model gives at `efficiency`."""
    step_model = build_step_model(gpu, model, precision, tp, efficiency)
    return [replace(point, value=predict(step_model, point)) for point in points]


SHAPES = [
    MeasuredPoint(kind="tpot", value=1.0, batch=1, context_tokens=4096),
    MeasuredPoint(kind="decode_step", value=1.0, batch=32, context_tokens=1000),
    MeasuredPoint(kind="ttft", value=1.0, prompt_tokens=2000),
    MeasuredPoint(kind="prefill", value=1.0, prompt_tokens=128),
    MeasuredPoint(kind="throughput", value=1.0, batch=256, prompt_tokens=128, output_tokens=128),
    MeasuredPoint(kind="throughput", value=1.0, batch=8, context_tokens=512),
]


def test_decode_prediction_is_the_step_formula_worked_by_hand():
    """Llama-2-70B fp16 on 4 ideal H100s, batch 1 at 4,096 context (docs/design.md test vector):
    (140e9 + 4,096 × 327,680 B) / 13.4e12 B/s = 10.548 ms; compute (140e9 FLOP / 3.956e15 FLOP/s ≈ 35 µs) does not bind."""
    step_model = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL)
    point = MeasuredPoint(kind="tpot", value=0.0105, batch=1, context_tokens=4096)
    assert predict(step_model, point) == pytest.approx((140e9 + 4096 * 327_680) / 13.4e12, rel=1e-9)


def test_throughput_prediction_is_one_prefill_plus_output_minus_one_decode_steps():
    """B = 64, p = 128, o = 128: 64·128 tokens / (prefill of 64 prompts + 127 steps at context 192)."""
    step_model = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, TRUE)
    point = MeasuredPoint(kind="throughput", value=1000.0, batch=64, prompt_tokens=128, output_tokens=128)
    cycle_s = prefill_s(step_model, 64, 128) + 127 * decode_step_s(step_model, 64, 128 + 64)
    assert predict(step_model, point) == pytest.approx(64 * 128 / cycle_s, rel=1e-12)
    assert prefill_s(step_model, 64, 128) == pytest.approx(step_model.step_s(64 * 128, 0.0, 64 * 128 * 129 / 2), rel=1e-12)


def test_fit_recovers_known_efficiencies_exactly():
    points = _synthetic(SHAPES, TRUE)
    fit = fit_efficiency(points, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, base=IDEAL)
    assert fit.fitted == ("memory", "compute", "overhead")
    assert fit.efficiency.memory == pytest.approx(0.72, abs=1e-6)
    assert fit.efficiency.compute == pytest.approx(0.55, abs=1e-6)
    assert fit.efficiency.step_overhead_s == pytest.approx(0.002, abs=1e-9)
    assert fit.rms_relative_error < 1e-6
    assert [r.relative_error for r in fit.residuals] == pytest.approx([0.0] * len(points), abs=1e-6)


def test_pooled_fit_over_two_models_recovers_the_gpu_efficiencies():
    """One A100's points of a dense and an MoE model, each through its own step model."""
    dense = _synthetic(SHAPES[:3], TRUE, gpu=A100_SXM, tp=4)
    moe_shapes = [
        MeasuredPoint(kind="tpot", value=1.0, batch=1, prompt_tokens=512, output_tokens=128),
        MeasuredPoint(kind="ttft", value=1.0, prompt_tokens=4096),
    ]
    moe = _synthetic(moe_shapes, TRUE, gpu=A100_SXM, model=MIXTRAL_8X7B, precision=INT8_PRECISION, tp=1)
    sets = [
        PointSet(points=tuple(dense), step_model_for=lambda e: build_step_model(A100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, e)),
        PointSet(points=tuple(moe), step_model_for=lambda e: build_step_model(A100_SXM, MIXTRAL_8X7B, INT8_PRECISION, 1, e)),
    ]
    fit = fit_step_models(sets)
    assert (fit.efficiency.memory, fit.efficiency.compute) == pytest.approx((0.72, 0.55), abs=1e-6)
    assert fit.efficiency.step_overhead_s == pytest.approx(0.002, abs=1e-9)
    assert fit.points_used == 5


def test_only_batch_one_decode_points_hold_compute_at_base_and_say_so():
    decode_only = _synthetic([SHAPES[0], MeasuredPoint(kind="tpot", value=1.0, batch=1, context_tokens=256)], TRUE)
    base = Efficiency(compute=0.6)
    fit = fit_efficiency(decode_only, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, base=base)
    assert "compute" in fit.fixed and "compute" not in fit.fitted
    assert fit.efficiency.compute == 0.6
    assert any("compute-bound point" in note for note in fit.notes)


def test_strict_fit_names_the_missing_compute_bound_point():
    decode_only = _synthetic([SHAPES[0], SHAPES[1]], TRUE)
    with pytest.raises(CalibrationError, match="need at least one compute-bound point") as raised:
        fit_efficiency(decode_only, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, strict=True)
    assert "compute" in raised.value.extensions["missing"]


def test_long_prefill_only_cannot_fit_memory():
    prefill_only = _synthetic([SHAPES[2], MeasuredPoint(kind="ttft", value=1.0, prompt_tokens=8000)], TRUE)
    with pytest.raises(CalibrationError, match="memory-bound point"):
        fit_efficiency(prefill_only, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, fit=("memory",), strict=True)


def test_fewer_points_than_parameters_is_refused():
    two = _synthetic([SHAPES[0], SHAPES[2]], TRUE)
    with pytest.raises(CalibrationError, match="2 point\\(s\\) cannot determine 3 parameters"):
        fit_efficiency(two, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "latency", "value": 1.0}, "unknown measurement kind"),
        ({"kind": "tpot", "value": 0.0, "context_tokens": 10}, "positive finite"),
        ({"kind": "tpot", "value": float("nan"), "context_tokens": 10}, "positive finite"),
        ({"kind": "ttft", "value": 0.1}, "needs prompt_tokens"),
        ({"kind": "tpot", "value": 0.01}, "needs context_tokens"),
        ({"kind": "throughput", "value": 100.0, "batch": 8}, "needs prompt and output tokens"),
        ({"kind": "tpot", "value": 0.01, "batch": 0, "context_tokens": 10}, "batch must be >= 1"),
    ],
)
def test_degenerate_points_are_calibration_errors(kwargs, message):
    with pytest.raises(CalibrationError, match=message):
        MeasuredPoint(**kwargs)


def test_no_points_and_unknown_parameters_are_refused():
    with pytest.raises(CalibrationError, match="no measured points"):
        fit_efficiency([], H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4)
    with pytest.raises(CalibrationError, match="unknown fit parameter 'bandwidth'"):
        fit_efficiency(_synthetic(SHAPES, TRUE), H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, fit=("bandwidth",))


def test_simple_list_format_converts_milliseconds_and_tokens_per_second():
    points = points_from_records(
        [
            {"kind": "tpot", "batch": 1, "context_tokens": 2048, "value_ms": 12.5},
            {"kind": "throughput", "batch": 64, "prompt_tokens": 128, "output_tokens": 256, "output_tokens_per_s": 3000},
        ]
    )
    assert points[0].value == pytest.approx(0.0125)
    assert points[1].value == 3000 and points[1].decode_context_tokens == 256
    with pytest.raises(CalibrationError, match="point 0: a ttft point needs value_ms"):
        points_from_records([{"kind": "ttft", "prompt_tokens": 100}])


# Key names as written by vLLM's benchmarks/benchmark_serving.py --save-result (result_json
# setup keys + benchmark() result keys + process_one_metric's mean_/median_/std_/pNN_ keys).
VLLM_RESULT = {
    "date": "20250101-120000",
    "backend": "vllm",
    "model_id": "meta-llama/Llama-3.1-8B-Instruct",
    "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
    "num_prompts": 200,
    "request_rate": "inf",
    "burstiness": 1.0,
    "max_concurrency": 1,
    "duration": 412.3,
    "completed": 200,
    "total_input_tokens": 204800,
    "total_output_tokens": 51200,
    "request_throughput": 0.485,
    "request_goodput:": None,
    "output_throughput": 124.2,
    "total_token_throughput": 620.9,
    "mean_ttft_ms": 41.2,
    "median_ttft_ms": 40.7,
    "std_ttft_ms": 2.1,
    "p99_ttft_ms": 47.9,
    "mean_tpot_ms": 7.95,
    "median_tpot_ms": 7.91,
    "std_tpot_ms": 0.2,
    "p99_tpot_ms": 8.4,
    "mean_itl_ms": 7.95,
    "median_itl_ms": 7.9,
    "std_itl_ms": 0.5,
    "p99_itl_ms": 9.1,
    "mean_e2el_ms": 2061.0,
    "median_e2el_ms": 2058.0,
    "std_e2el_ms": 10.0,
    "p99_e2el_ms": 2090.0,
}


def test_vllm_result_at_concurrency_one_gives_ttft_tpot_and_throughput():
    ttft, tpot, throughput = points_from_vllm_benchmark(VLLM_RESULT)
    assert (ttft.kind, ttft.value, ttft.prompt_tokens) == ("ttft", pytest.approx(0.0407), 1024)
    assert (tpot.kind, tpot.value, tpot.batch) == ("tpot", pytest.approx(0.00791), 1)
    assert tpot.decode_context_tokens == 1024 + 256 / 2
    assert (throughput.kind, throughput.value, throughput.output_tokens) == ("throughput", 124.2, 256)


def test_vllm_result_at_higher_concurrency_drops_ttft_and_open_loop_drops_throughput():
    busy = {**VLLM_RESULT, "max_concurrency": 32}
    assert [p.kind for p in points_from_vllm_benchmark(busy)] == ["tpot", "throughput"]
    open_loop = {**VLLM_RESULT, "max_concurrency": None, "request_rate": 4.0}
    assert [p.kind for p in points_from_vllm_benchmark(open_loop, batch_hint=16)] == ["tpot"]
    with pytest.raises(CalibrationError, match="pass batch_hint"):
        points_from_vllm_benchmark({**VLLM_RESULT, "max_concurrency": None})
    with pytest.raises(CalibrationError, match="missing 'completed'"):
        points_from_vllm_benchmark({"mean_tpot_ms": 8.0})


def test_fit_from_a_vllm_result_recovers_memory_efficiency():
    """A synthetic vLLM result whose TPOT is what η_mem = 0.8 predicts yields η_mem = 0.8."""
    truth = Efficiency(memory=0.8, compute=0.5)
    step_model = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, truth)
    tpot_s = decode_step_s(step_model, 1, 1024 + 128)
    result = {
        **VLLM_RESULT,
        "median_tpot_ms": tpot_s * 1e3,
        "median_ttft_ms": None,
        "mean_ttft_ms": None,
        "output_throughput": None,
    }
    fit = fit_efficiency(points_from_vllm_benchmark(result), H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, fit=("memory",))
    assert fit.efficiency.memory == pytest.approx(0.8, abs=1e-6)


# --- continuous batching, robust fit, bounds, overlap ------------------------------------------


def test_continuous_throughput_is_batch_over_one_mixed_step_worked_by_hand():
    """B = 64 slots, p = 128, o = 128 on an in-flight-batching engine: per step 64/128 = 0.5 prompts
    are admitted and 63.5 slots decode, so the step has 63.5 + 0.5·128 = 127.5 new tokens, reads the
    KV of 63.5 sequences at c = 128 + 64 = 192, attends 63.5·192 + 0.5·128·129/2 tokens, and the
    replica emits 64 tokens per step."""
    step_model = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, TRUE)
    point = MeasuredPoint(kind="throughput", value=1000.0, batch=64, prompt_tokens=128, output_tokens=128, batching="continuous")
    step_s = step_model.step_s(127.5, 63.5 * 192, 63.5 * 192 + 0.5 * 128 * 129 / 2)
    assert predict(step_model, point) == pytest.approx(64 / step_s, rel=1e-12)
    assert mixed_step_s(step_model, 64, 128, 128) == pytest.approx(step_s, rel=1e-12)
    # the static cycle of the same numbers charges a whole-batch prefill step and is a different number
    static = replace(point, batching="static")
    assert predict(step_model, static) != pytest.approx(predict(step_model, point), rel=1e-3)


def test_continuous_tpot_at_concurrency_b_sees_the_other_slots_prefills():
    """TPOT at concurrency 32, p = 1000, o = 250: (32 − 1)/250 prompts per step are prefilled
    alongside 32 − 31/250 decoding sequences at c = 1125."""
    step_model = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, TRUE)
    point = MeasuredPoint(kind="tpot", value=0.03, batch=32, prompt_tokens=1000, output_tokens=250, batching="continuous")
    admitted, decoding = 31 / 250, 32 - 31 / 250
    expected = step_model.step_s(decoding + admitted * 1000, decoding * 1125, decoding * 1125 + admitted * 1000 * 1001 / 2)
    assert predict(step_model, point) == pytest.approx(expected, rel=1e-12)
    summed = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, replace(TRUE, memory_compute_overlap=0.0))
    assert predict(summed, point) > decode_step_s(summed, 32, 1125)  # the others' prefill compute adds when nothing overlaps


def test_continuous_at_concurrency_one_is_the_static_form_exactly():
    """Nothing mixes at concurrency 1: the prefill step then o − 1 decode steps."""
    step_model = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, TRUE)
    for kind, value in (("throughput", 50.0), ("tpot", 0.02)):
        continuous = MeasuredPoint(kind=kind, value=value, batch=1, prompt_tokens=500, output_tokens=200, batching="continuous")
        assert predict(step_model, continuous) == predict(step_model, replace(continuous, batching="static"))


def test_unknown_batching_and_continuous_ttft_are_refused():
    with pytest.raises(CalibrationError, match="unknown batching"):
        MeasuredPoint(kind="tpot", value=0.01, context_tokens=100, batching="paged")
    with pytest.raises(CalibrationError, match="continuous batching applies"):
        MeasuredPoint(kind="ttft", value=0.1, batch=8, prompt_tokens=100, output_tokens=10, batching="continuous")
    (point,) = points_from_records(
        [
            {
                "kind": "throughput",
                "output_tokens_per_s": 900,
                "batch": 16,
                "prompt_tokens": 100,
                "output_tokens": 100,
                "batching": "continuous",
            }
        ]
    )
    assert point.batching == "continuous" and point.is_steady_state


def test_vllm_serving_points_are_continuous_batching():
    busy = {**VLLM_RESULT, "max_concurrency": 32}
    tpot, throughput = points_from_vllm_benchmark(busy)
    assert tpot.batching == throughput.batching == "continuous"
    assert tpot.is_steady_state and throughput.is_steady_state


def _planted_outlier_sets() -> tuple[list[PointSet], list[MeasuredPoint]]:
    more = [MeasuredPoint(kind="decode_step", value=1.0, batch=b, context_tokens=c) for b in (4, 16, 64) for c in (500, 2000)]
    truth_points = _synthetic(SHAPES + more, TRUE)
    # a second source's copy of the batch-32 decode step, 60 % faster than the truth says
    odd = replace(truth_points[1], value=truth_points[1].value * 0.4, label="odd source")
    points = truth_points + [odd]
    sets = [
        PointSet(points=(p,), step_model_for=lambda e: build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, e))
        for p in points
    ]
    return sets, points


def test_robust_fit_ignores_a_planted_outlier_that_drags_plain_least_squares():
    """Twelve exact points of η = (0.72, 0.55, 2 ms) plus a second source's batch-32 decode step 60 %
    below the first's: soft-L1 stays on the truth (the outlier keeps a large residual), plain
    squares is pulled off it."""
    sets, _ = _planted_outlier_sets()
    robust = fit_step_models(sets, loss="soft_l1", f_scale=0.05)
    plain = fit_step_models(sets)
    assert (robust.efficiency.memory, robust.efficiency.compute) == pytest.approx((0.72, 0.55), rel=0.05)
    plain_miss = max(abs(plain.efficiency.memory / 0.72 - 1), abs(plain.efficiency.compute / 0.55 - 1))
    robust_miss = max(abs(robust.efficiency.memory / 0.72 - 1), abs(robust.efficiency.compute / 0.55 - 1))
    assert plain_miss > 3 * robust_miss
    assert abs(robust.residuals[-1].relative_error) > 1.0  # the outlier is left standing, predicted ~2.5× its value
    assert "soft_l1 robust fit" in robust.efficiency.source


def test_source_weight_scales_a_points_pull():
    """Down-weighting the outlier's set by 100 makes even plain least squares recover the truth."""
    sets, _ = _planted_outlier_sets()
    weighted = sets[:-1] + [replace(sets[-1], weight=0.01)]
    fit = fit_step_models(weighted)
    assert (fit.efficiency.memory, fit.efficiency.compute) == pytest.approx((0.72, 0.55), rel=0.01)
    with pytest.raises(CalibrationError, match="weights must be positive"):
        fit_step_models(sets[:-1] + [replace(sets[-1], weight=0.0)])


def test_bounds_hold_the_fit_in_range_and_say_when_they_bind():
    points = _synthetic(SHAPES, TRUE)
    fit = fit_efficiency(points, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, bounds={"memory": (0.8, 1.0)})
    assert fit.efficiency.memory == pytest.approx(0.8, abs=1e-9)
    assert any(note.startswith("memory at its bound 0.8") for note in fit.notes)
    free = fit_efficiency(points, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, bounds={"memory": (0.5, 1.0)})
    assert free.efficiency.memory == pytest.approx(0.72, abs=1e-6) and not free.notes
    with pytest.raises(CalibrationError, match="bounds for compute"):
        fit_efficiency(points, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, bounds={"compute": (0.0, 0.5)})
    with pytest.raises(CalibrationError, match="unknown loss"):
        fit_efficiency(points, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, loss="l3")


def test_overlap_is_an_optional_parameter_the_fit_recovers():
    """memory_compute_overlap = 0.4 with both memory- and compute-heavy points is recovered; it is
    not fitted unless asked for."""
    truth = replace(TRUE, memory_compute_overlap=0.4)
    shapes = SHAPES + [
        MeasuredPoint(kind="throughput", value=1.0, batch=128, prompt_tokens=1000, output_tokens=200, batching="continuous")
    ]
    points = _synthetic(shapes, truth)
    fit = fit_efficiency(points, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, fit=("memory", "compute", "overhead", "overlap"))
    assert fit.efficiency.memory_compute_overlap == pytest.approx(0.4, abs=1e-4)
    assert fit.efficiency.memory == pytest.approx(0.72, abs=1e-4)
    default = fit_efficiency(points, H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4)
    assert default.efficiency.memory_compute_overlap == 1.0 and "overlap" not in default.fitted
