"""Bodies of POST /v1/calibrations: measured points (or a vLLM benchmark result) in, a fitted
and stored efficiency profile with its residuals out. Times in milliseconds, throughput in
output tokens per second; conversion to SI happens in `to_points`."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.schemas.catalog import Slug
from planner.calibration import CalibrationFit, MeasuredPoint, points_from_records, points_from_vllm_benchmark

MeasurementKind = Literal["decode_step", "tpot", "prefill", "ttft", "throughput"]
FitParameter = Literal["memory", "compute", "overhead"]
_Tokens = Annotated[float | None, Field(default=None, ge=0)]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CalibrationPrecision(_Input):
    weights: Slug = Field(description="Quantization scheme of the weights (a catalog slug).", examples=["fp8"])
    kv_cache: Slug = Field(description="Quantization scheme of the KV cache (a catalog slug).", examples=["fp8"])


class CalibrationPoint(_Input):
    """One measurement. `value_ms` for decode_step / tpot / prefill / ttft; `output_tokens_per_s`
    (all sequences together) for throughput."""

    kind: MeasurementKind = Field(
        description=(
            "decode_step or tpot: one decode step at `batch` sequences of `context_tokens` (default prompt + output/2); "
            "prefill or ttft: prefill of `batch` prompts of `prompt_tokens`; throughput: output tokens/s at `batch` "
            "with `prompt_tokens` and `output_tokens` (one prefill + output − 1 decode steps) or at a decode `context_tokens`."
        )
    )
    batch: int = Field(default=1, ge=1, description="Sequences in flight (batch size or concurrency).")
    context_tokens: _Tokens = Field(description="KV-cache tokens each decoding sequence reads.")
    prompt_tokens: _Tokens = Field(description="Prompt length in tokens.")
    output_tokens: _Tokens = Field(description="Output length in tokens.")
    value_ms: float | None = Field(default=None, gt=0, description="Measured time in milliseconds (time kinds).")
    output_tokens_per_s: float | None = Field(default=None, gt=0, description="Measured output tokens per second (throughput).")
    label: str | None = Field(default=None, max_length=200, description="Name shown with this point's residual.")


class CalibrationRequest(_Input):
    """Points measured on one GPU type for one model, precision and tp; fits and stores profile `name`."""

    name: Slug = Field(
        description="Name of the efficiency profile to store (not 'ideal' or 'calibrated').", examples=["vllm-0.8-h100"]
    )
    gpu: Slug = Field(examples=["h100-sxm"])
    model: Slug = Field(examples=["llama-3.1-70b"])
    precision: CalibrationPrecision
    tp: int = Field(default=1, ge=1, le=64, description="Tensor-parallel degree the points were measured at.")
    points: list[CalibrationPoint] | None = Field(default=None, min_length=1, max_length=10_000)
    vllm_benchmark: dict[str, Any] | None = Field(
        default=None,
        description="The JSON `vllm bench serve` / benchmarks/benchmark_serving.py --save-result writes (keys completed, "
        "total_input_tokens, total_output_tokens, max_concurrency, request_rate, median_ttft_ms, median_tpot_ms, output_throughput).",
    )
    batch_hint: int | None = Field(
        default=None, ge=1, description="Sequences in flight when the vLLM result has no max_concurrency."
    )
    fit: list[FitParameter] | None = Field(
        default=None,
        min_length=1,
        description="Parameters to fit. Omitted: all three, each held at the GPU's calibrated value when the points cannot "
        "determine it (the response says which). Given: every named parameter must be determinable, else 422.",
    )

    @model_validator(mode="after")
    def _one_source_of_points(self) -> Self:
        if (self.points is None) == (self.vllm_benchmark is None):
            raise ValueError("give exactly one of points or vllm_benchmark")
        return self

    def to_points(self) -> list[MeasuredPoint]:
        if self.points is not None:
            return points_from_records(
                [{**p.model_dump(exclude_none=True), "label": p.label or f"point {i}"} for i, p in enumerate(self.points)]
            )
        return points_from_vllm_benchmark(self.vllm_benchmark or {}, batch_hint=self.batch_hint)


class CalibrationResidual(BaseModel):
    label: str
    kind: MeasurementKind
    unit: str = Field(description="'ms' for time kinds, 'output tokens/s' for throughput.")
    predicted: float = Field(description="What the fitted profile predicts, in `unit`.")
    measured: float = Field(description="The measured value, in `unit`.")
    relative_error: float = Field(description="predicted / measured − 1.")


class CalibrationRead(BaseModel):
    """The fitted and stored profile: use its `name` as `efficiency_profile` in evaluations and plans."""

    name: str
    gpu: str
    model: str
    precision: CalibrationPrecision
    tp: int
    memory: float = Field(description="Fitted (or held) η_mem.")
    compute: float = Field(description="Fitted (or held) η_compute.")
    step_overhead_ms: float
    memory_reserve_fraction: float = Field(description="Carried from the GPU's calibrated profile (not fitted).")
    include_comm: bool
    fitted: list[FitParameter]
    held: list[FitParameter] = Field(description="Parameters kept at the GPU's calibrated value.")
    notes: list[str] = Field(description="Why a parameter was held, or what the points could not determine.")
    points_used: int
    rms_relative_error: float
    max_abs_relative_error: float
    residuals: list[CalibrationResidual]
    source: str
    version: int = Field(description="Row version of the stored profile.")


def profile_record(body: CalibrationRequest, fit: CalibrationFit) -> dict[str, Any]:
    """The catalog's efficiency-profile record for a fit."""
    eff = fit.efficiency
    return {
        "name": body.name,
        "gpu_slug": body.gpu,
        "model_slug": body.model,
        "weights_slug": body.precision.weights,
        "memory": eff.memory,
        "compute": eff.compute,
        "step_overhead_ms": eff.step_overhead_s * 1e3,
        "memory_reserve_fraction": eff.memory_reserve_fraction,
        "include_comm": eff.include_comm,
        "memory_compute_overlap": eff.memory_compute_overlap,
        "source": f"POST /v1/calibrations: {eff.source} on {body.gpu} {body.model} {body.precision.weights}/{body.precision.kv_cache} tp{body.tp}",
        "fit": {
            "fitted": list(fit.fitted),
            "held": list(fit.fixed),
            "rms_relative_error": fit.rms_relative_error,
            "points_used": fit.points_used,
        },
    }


def calibration_read(body: CalibrationRequest, fit: CalibrationFit, stored: dict[str, Any]) -> CalibrationRead:
    eff = fit.efficiency
    scale = {"s": 1e3}  # time kinds are reported in ms, as they were sent
    return CalibrationRead(
        name=body.name,
        gpu=body.gpu,
        model=body.model,
        precision=body.precision,
        tp=body.tp,
        memory=eff.memory,
        compute=eff.compute,
        step_overhead_ms=eff.step_overhead_s * 1e3,
        memory_reserve_fraction=eff.memory_reserve_fraction,
        include_comm=eff.include_comm,
        # Both are FitParameter: the fit asked for is body.fit (FitParameter) or FITTABLE_PARAMETERS, and the planner fits
        # or holds only names among those; its tuples are typed str because the planner knows no API Literal.
        fitted=cast("list[FitParameter]", list(fit.fitted)),
        held=cast("list[FitParameter]", list(fit.fixed)),
        notes=list(fit.notes),
        points_used=fit.points_used,
        rms_relative_error=fit.rms_relative_error,
        max_abs_relative_error=fit.max_abs_relative_error,
        residuals=[
            CalibrationResidual(
                label=r.label,
                kind=r.kind,  # type: ignore[arg-type]
                unit="ms" if r.unit == "s" else r.unit,
                predicted=r.predicted * scale.get(r.unit, 1.0),
                measured=r.measured * scale.get(r.unit, 1.0),
                relative_error=r.relative_error,
            )
            for r in fit.residuals
        ],
        source=stored["source"],
        version=stored["version"],
    )
