"""Calibration input formats: the simple JSON list of points and vLLM's benchmark_serving result.

Split from planner/calibration.py (which re-exports both functions) to keep that module's size down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from planner.calibration import MEASUREMENT_UNITS, MeasuredPoint
from planner.errors import CalibrationError


def fail(message: str, **extensions: Any) -> NoReturn:
    raise CalibrationError(message, **extensions)


def points_from_records(records: Sequence[Mapping[str, Any]]) -> list[MeasuredPoint]:
    """Points from the simple JSON list format (times in ms, throughput in output tokens/s).

    Each record: {"kind", "batch"?, "context_tokens"?, "prompt_tokens"?, "output_tokens"?,
    one of "value_ms" (decode_step/tpot/prefill/ttft) or "output_tokens_per_s" (throughput), "label"?,
    "batching"? ("static", the default, or "continuous")}.
    """
    points: list[MeasuredPoint] = []
    for i, record in enumerate(records):
        kind = str(record.get("kind", ""))
        if kind not in MEASUREMENT_UNITS:
            fail(f"point {i}: unknown kind {kind!r}; expected one of {sorted(MEASUREMENT_UNITS)}", index=i, field="kind")
        if kind == "throughput":
            raw = record.get("output_tokens_per_s")
            if raw is None:
                fail(f"point {i}: a throughput point needs output_tokens_per_s", index=i, field="output_tokens_per_s")
            value = float(raw)
        else:
            raw = record.get("value_ms")
            if raw is None:
                fail(f"point {i}: a {kind} point needs value_ms", index=i, field="value_ms")
            value = float(raw) / 1e3
        points.append(
            MeasuredPoint(
                kind=kind,
                value=value,
                batch=int(record.get("batch", 1)),
                context_tokens=float(record.get("context_tokens", 0.0)),
                prompt_tokens=float(record.get("prompt_tokens", 0.0)),
                output_tokens=float(record.get("output_tokens", 0.0)),
                label=str(record.get("label", f"point {i}")),
                batching=str(record.get("batching", "static")),
            )
        )
    return points


def points_from_vllm_benchmark(result: Mapping[str, Any], *, batch_hint: int | None = None) -> list[MeasuredPoint]:
    """Points from the JSON that vLLM's `benchmarks/benchmark_serving.py --save-result` writes.

    Keys read (vLLM's names): completed, total_input_tokens, total_output_tokens, max_concurrency,
    request_rate ("inf" for a closed loop), median_ttft_ms, median_tpot_ms, output_throughput.
    The batch is `max_concurrency`, else `batch_hint`. TTFT becomes a prefill point only at
    batch 1 (at higher concurrency it includes queueing); throughput only when requests were
    sent at an infinite rate, since an open-loop rate measures the offered load, not capacity.
    The serving benchmark drives vLLM's continuous-batching server, so TPOT and throughput are
    continuous-batching points (the mixed step at concurrency > 1).
    """
    for key in ("completed", "total_input_tokens", "total_output_tokens"):
        if key not in result:
            fail(f"not a vLLM benchmark_serving result: missing {key!r}", field=key)
    completed = float(result["completed"])
    if completed <= 0:
        fail("the vLLM benchmark completed no requests", field="completed")
    prompt = float(result["total_input_tokens"]) / completed  # mean prompt tokens per request
    output = float(result["total_output_tokens"]) / completed  # mean output tokens per request
    concurrency = result.get("max_concurrency")
    batch = int(concurrency) if concurrency is not None else batch_hint
    if batch is None:
        fail(
            "the vLLM result has no max_concurrency; pass batch_hint (the number of sequences in flight)",
            field="max_concurrency",
        )
    closed_loop = str(result.get("request_rate", "inf")) == "inf"
    label = str(result.get("model_id", "vllm benchmark"))
    points: list[MeasuredPoint] = []
    ttft_ms = result.get("median_ttft_ms", result.get("mean_ttft_ms"))
    if ttft_ms is not None and batch == 1 and prompt >= 1:
        points.append(
            MeasuredPoint(kind="ttft", value=float(ttft_ms) / 1e3, batch=1, prompt_tokens=prompt, label=f"{label} ttft")
        )
    tpot_ms = result.get("median_tpot_ms", result.get("mean_tpot_ms"))
    if tpot_ms is not None and float(tpot_ms) > 0:
        points.append(
            MeasuredPoint(
                kind="tpot",
                value=float(tpot_ms) / 1e3,
                batch=batch,
                prompt_tokens=prompt,
                output_tokens=output,
                label=f"{label} tpot @ concurrency {batch}",
                batching="continuous",
            )
        )
    throughput = result.get("output_throughput")
    if throughput is not None and closed_loop and float(throughput) > 0:
        points.append(
            MeasuredPoint(
                kind="throughput",
                value=float(throughput),
                batch=batch,
                prompt_tokens=prompt,
                output_tokens=output,
                label=f"{label} output throughput @ concurrency {batch}",
                batching="continuous",
            )
        )
    if not points:
        fail("the vLLM result holds no usable TTFT, TPOT or output throughput", field="result")
    return points
