"""Fit η_mem, η_compute and per-step overhead to measured step times, prefill times and throughput.

A measurement is predicted through the step-time formula of `planner/step_model.py`:

    decode step / TPOT at batch B, context c per sequence:  step_s(B, B·c, B·c)
    prefill / TTFT of B prompts of p tokens:                 step_s(B·p, 0, B·p(p+1)/2)
    throughput at batch B, prompt p, output o:               B·o / (prefill(B, p) + (o − 1)·decode(B, p + o/2))
    throughput at batch B with no prompt length:             B / decode(B, c)

The throughput form above is one static batch cycle (prefill of the whole batch, then o − 1
decode steps at the mean context): what a static-batch benchmark measures (TensorRT-LLM's
gptSessionBenchmark, vLLM's benchmark_latency). A point with `batching="continuous"` was
measured on an in-flight-batching engine at a steady concurrency B (vLLM's serving benchmark
at max_concurrency B, trtllm-bench at maximum load, a closed loop of B clients). In that
steady state every step holds the B slots: B·(o−1)/o of them decode and B/o of them are
prefilled (chunked prefill mixes their p prompt tokens into the same step), so

    mixed step:  n = B·(o−1)/o + B·p/o new tokens, KV read = B·(o−1)/o · c,
                 attended = B·(o−1)/o · c + (B/o)·p(p+1)/2,       c = p + o/2
    throughput = B / mixed step                                  (B output tokens per step)
    TPOT at concurrency B = the same step with (B − 1)/o prompts admitted (the other slots'
                            turnover seen by one decoding request)
    at concurrency 1 nothing mixes: the static forms apply exactly

The fit minimises the relative errors (predicted − measured)/measured by bounded least squares
from several starting points, since max(memory, compute) has kinks. By default the loss is
plain squares and the bounds 0 < η ≤ 1, overhead ≥ 0 (what a user's own points get); the
shipped profiles use a robust loss (`loss="soft_l1"`) and physically plausible bounds
(`bounds=`), stated with their sources in bench/fidelity.py.

A parameter is only fitted when the points can see it: memory efficiency needs a point whose
memory time is material, compute efficiency a point whose compute time is (a long prefill or a
large batch), overhead two points with different step durations. Otherwise it is held at the
base value and the fit says so, or — with `strict=True` — a `CalibrationError` names what is
missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, NoReturn

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from planner.errors import CalibrationError
from planner.specs import IDEAL, Efficiency, GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel

#: Kinds of measurement and the unit of their `value`.
MEASUREMENT_UNITS: dict[str, str] = {
    "decode_step": "s",
    "tpot": "s",
    "prefill": "s",
    "ttft": "s",
    "throughput": "output tokens/s",
}
FITTABLE_PARAMETERS: tuple[str, ...] = ("memory", "compute", "overhead")
#: Parameters a caller may ask for beyond the default three: "overlap" is the step model's
#: memory_compute_overlap (1 = max(memory, compute), 0 = their sum). A whole step runs
#: compute-bound GEMMs and memory-bound attention one kernel after the other, so its time
#: lies between max and sum when both are material (large-batch decode, mixed steps).
#: "sequence" is the step model's sequence_overhead_s c_seq (seconds per sequence in the step:
#: sampling, scheduling, per-sequence attention setup), fitted in µs; it is not an `Efficiency`
#: field, so the fit reports it in `CalibrationFit.sequence_overhead_s` and predicts with it.
OPTIONAL_PARAMETERS: tuple[str, ...] = ("overlap", "sequence")
#: How the engine batched when the point was measured (see the module docstring).
BATCHING_MODES: tuple[str, ...] = ("static", "continuous")
#: Losses `fit_step_models` accepts (scipy.optimize.least_squares names).
LOSSES: tuple[str, ...] = ("linear", "soft_l1", "huber", "cauchy", "arctan")

#: A point informs compute efficiency when, at the base efficiencies, its compute time is at
#: least this fraction of its memory time: below it a realistic η_compute (≥ 0.3–0.5) still
#: leaves the step memory-bound, so the point says nothing about compute.
COMPUTE_INFORMATIVE_RATIO = 0.5
#: A point informs memory efficiency when memory time is at least this fraction of compute time.
MEMORY_INFORMATIVE_RATIO = 0.5
#: Relative sensitivities below this (per unit change of log η, or per 1 ms of overhead) count as blind.
SENSITIVITY_FLOOR = 1e-3
#: Starting points of the multi-start search (η_mem, η_compute, overhead_ms): the whole plausible box.
_STARTS: tuple[tuple[float, float, float], ...] = (
    (0.8, 0.8, 0.5),
    (0.5, 0.5, 2.0),
    (0.3, 0.3, 5.0),
    (0.8, 0.4, 0.1),
    (0.5, 0.8, 1.0),
)
_OVERHEAD_MS_MAX = 1000.0  # one second per step: far above any engine's scheduling overhead
_SEQUENCE_US_MAX = 1000.0  # 1 ms per sequence per step: far above any sampling or scheduling cost
_SEQUENCE_US_START = 5.0  # where the multi-start search starts c_seq (µs per sequence)


def _fail(message: str, **extensions: Any) -> NoReturn:
    raise CalibrationError(message, **extensions)


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredPoint:
    """One published or measured number, in SI units.

    `value` is seconds for decode_step / tpot / prefill / ttft and output tokens per second
    (all sequences together) for throughput. `context_tokens` is the KV context each decoding
    sequence reads; when 0 it is taken as prompt + output/2 (the mean over a generation).
    """

    kind: str
    value: float
    batch: int = 1
    context_tokens: float = 0.0
    prompt_tokens: float = 0.0
    output_tokens: float = 0.0
    label: str = ""
    #: "static": the batch runs start to finish together; "continuous": in-flight batching at a
    #: steady concurrency `batch` (throughput and TPOT are then the mixed step's).
    batching: str = "static"

    def __post_init__(self) -> None:
        where = f" ({self.label})" if self.label else ""
        if self.batching not in BATCHING_MODES:
            _fail(f"unknown batching {self.batching!r}{where}; expected one of {list(BATCHING_MODES)}", field="batching")
        if self.kind not in MEASUREMENT_UNITS:
            _fail(
                f"unknown measurement kind {self.kind!r}{where}; expected one of {sorted(MEASUREMENT_UNITS)}",
                field="kind",
            )
        if not (isinstance(self.value, (int, float)) and math.isfinite(self.value) and self.value > 0):
            _fail(f"measured value must be a positive finite number, got {self.value!r}{where}", field="value")
        if self.batch < 1:
            _fail(f"batch must be >= 1, got {self.batch}{where}", field="batch")
        for name in ("context_tokens", "prompt_tokens", "output_tokens"):
            if getattr(self, name) < 0:
                _fail(f"{name} must be >= 0{where}", field=name)
        if self.kind in ("prefill", "ttft") and self.prompt_tokens < 1:
            _fail(f"a {self.kind} point needs prompt_tokens >= 1{where}", field="prompt_tokens")
        if self.kind in ("decode_step", "tpot") and self.decode_context_tokens < 1:
            _fail(
                f"a {self.kind} point needs context_tokens (or prompt/output tokens) >= 1{where}",
                field="context_tokens",
            )
        if self.kind == "throughput":
            has_cycle = self.prompt_tokens >= 1 and self.output_tokens >= 1
            if not has_cycle and self.context_tokens < 1:
                _fail(
                    f"a throughput point needs prompt and output tokens, or a decode context_tokens{where}",
                    field="context_tokens",
                )
        if self.is_steady_state and self.kind in ("prefill", "ttft"):
            _fail(f"continuous batching applies to throughput and TPOT points, not {self.kind}{where}", field="batching")

    @property
    def is_steady_state(self) -> bool:
        """A continuous-batching point at concurrency > 1 with prompt and output lengths: predicted
        by the mixed step. At concurrency 1 nothing mixes, and the static form is exact."""
        return self.batching == "continuous" and self.batch > 1 and self.prompt_tokens >= 1 and self.output_tokens >= 1

    @property
    def decode_context_tokens(self) -> float:
        """KV tokens each decoding sequence reads: stated, or prompt + output/2 (mean over the generation)."""
        if self.context_tokens > 0:
            return self.context_tokens
        return self.prompt_tokens + self.output_tokens / 2.0  # p + o/2

    @property
    def unit(self) -> str:
        return MEASUREMENT_UNITS[self.kind]


def decode_step_s(step_model: StepModel, batch: float, context_tokens: float) -> float:
    """One decode step of `batch` sequences each at `context_tokens`."""
    return step_model.step_s(batch, batch * context_tokens, batch * context_tokens, batch)  # n = B, KV = attended = B·c


def prefill_s(step_model: StepModel, batch: float, prompt_tokens: float) -> float:
    """One step that prefills `batch` prompts of `prompt_tokens` each from an empty cache."""
    attended = batch * prompt_tokens * (prompt_tokens + 1.0) / 2.0  # B · p(p+1)/2
    return step_model.step_s(batch * prompt_tokens, 0.0, attended, batch)  # B sequences


class _StepTokens(NamedTuple):
    """The tokens of one step, in `StepModel.step_s`'s argument order."""

    new_tokens: float
    kv_tokens_read: float
    attended_tokens: float


def _mixed_step_tokens(batch: float, prompt_tokens: float, output_tokens: float, *, seen_by_one: bool = False) -> _StepTokens:
    """(new tokens, KV tokens read, attended tokens) of one steady-state continuous-batching step.

    Each of the B slots turns over every o steps, so B/o prompts are prefilled per step and the
    other slots decode. Seen by one decoding request (its TPOT), only the other B − 1 slots
    turn over during its generation: (B − 1)/o prompts per step, B − (B − 1)/o decoding.
    """
    admitted = (batch - 1.0 if seen_by_one else batch) / output_tokens  # prompts prefilled per step
    decoding = batch - admitted  # the rest of the slots decode one token each
    context = prompt_tokens + output_tokens / 2.0  # mean decode context p + o/2
    new_tokens = decoding + admitted * prompt_tokens  # decode tokens + prefill tokens
    attended = decoding * context + admitted * prompt_tokens * (prompt_tokens + 1.0) / 2.0
    return _StepTokens(new_tokens, decoding * context, attended)


def mixed_step_s(
    step_model: StepModel, batch: float, prompt_tokens: float, output_tokens: float, *, seen_by_one: bool = False
) -> float:
    """One steady-state step of an in-flight-batching engine holding `batch` requests of p in / o out."""
    new_tokens, kv_read, attended = _mixed_step_tokens(batch, prompt_tokens, output_tokens, seen_by_one=seen_by_one)
    return step_model.step_s(new_tokens, kv_read, attended, batch)  # all B slots: decoding or being prefilled


def predict(step_model: StepModel, point: MeasuredPoint) -> float:
    """What the step model predicts for `point`, in the point's unit."""
    if point.is_steady_state and point.kind in ("decode_step", "tpot"):
        return mixed_step_s(
            step_model, point.batch, point.prompt_tokens, point.output_tokens, seen_by_one=True
        )  # one token per step
    if point.is_steady_state:
        return point.batch / mixed_step_s(step_model, point.batch, point.prompt_tokens, point.output_tokens)  # B tokens per step
    if point.kind in ("decode_step", "tpot"):
        return decode_step_s(step_model, point.batch, point.decode_context_tokens)
    if point.kind in ("prefill", "ttft"):
        return prefill_s(step_model, point.batch, point.prompt_tokens)
    if point.prompt_tokens >= 1 and point.output_tokens >= 1:
        cycle_s = prefill_s(step_model, point.batch, point.prompt_tokens) + (point.output_tokens - 1.0) * decode_step_s(
            step_model, point.batch, point.decode_context_tokens
        )  # prefill + (o − 1) decode steps at the mean context
        return point.batch * point.output_tokens / cycle_s  # B·o tokens per cycle
    return point.batch / decode_step_s(step_model, point.batch, point.decode_context_tokens)  # B tokens per step


@dataclass(frozen=True, slots=True, kw_only=True)
class PointSet:
    """Points measured on one configuration and how to build its step model for an efficiency."""

    points: tuple[MeasuredPoint, ...]
    step_model_for: Callable[[Efficiency], StepModel]
    label: str = ""
    #: Multiplies each point's relative residual in the fit (e.g. 1/√n per source so one long
    #: table does not outvote every other source); residuals are reported unweighted.
    weight: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PointResidual:
    label: str
    kind: str
    unit: str
    predicted: float
    measured: float
    relative_error: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationFit:
    """Fitted efficiency, what was fitted and what was held, and how well it reproduces the points."""

    efficiency: Efficiency
    fitted: tuple[str, ...]
    fixed: tuple[str, ...]
    notes: tuple[str, ...]
    residuals: tuple[PointResidual, ...]
    rms_relative_error: float
    max_abs_relative_error: float
    points_used: int
    base: Efficiency = field(default=IDEAL)
    #: The fitted c_seq in seconds per sequence per step, or None when "sequence" was not fitted.
    sequence_overhead_s: float | None = None


def _efficiency_with(base: Efficiency, memory: float, compute: float, overhead_s: float) -> Efficiency:
    return replace(base, memory=memory, compute=compute, step_overhead_s=overhead_s)


def _time_shares(step_model: StepModel, point: MeasuredPoint) -> tuple[float, float]:
    """Memory and compute seconds of the step(s) behind a point (the cycle for throughput)."""
    decode_n, decode_kv = point.batch, point.batch * point.decode_context_tokens
    prefill_n = point.batch * point.prompt_tokens
    prefill_attended = point.batch * point.prompt_tokens * (point.prompt_tokens + 1.0) / 2.0
    if point.is_steady_state:
        seen_by_one = point.kind in ("decode_step", "tpot")
        new_tokens, kv_read, attended = _mixed_step_tokens(
            point.batch, point.prompt_tokens, point.output_tokens, seen_by_one=seen_by_one
        )
        return step_model.memory_s(new_tokens, kv_read), step_model.compute_s(new_tokens, attended)
    if point.kind in ("decode_step", "tpot"):
        return step_model.memory_s(decode_n, decode_kv), step_model.compute_s(decode_n, decode_kv)
    if point.kind in ("prefill", "ttft"):
        return step_model.memory_s(prefill_n, 0.0), step_model.compute_s(prefill_n, prefill_attended)
    mem = comp = 0.0
    if point.prompt_tokens >= 1 and point.output_tokens >= 1:
        mem += step_model.memory_s(prefill_n, 0.0)
        comp += step_model.compute_s(prefill_n, prefill_attended)
        steps = point.output_tokens - 1.0
    else:
        steps = 1.0
    mem += steps * step_model.memory_s(decode_n, decode_kv)
    comp += steps * step_model.compute_s(decode_n, decode_kv)
    return mem, comp


def _step_count(point: MeasuredPoint) -> float:
    """Steps behind one measured value (overhead is paid once per step)."""
    if point.kind == "throughput" and point.prompt_tokens >= 1 and point.output_tokens >= 1 and not point.is_steady_state:
        return point.output_tokens  # one prefill step + (o − 1) decode steps
    return 1.0


def _identifiability(
    sets: Sequence[PointSet], base: Efficiency, requested: Sequence[str]
) -> tuple[list[str], list[tuple[str, str]]]:
    """Split the requested parameters into those the points can see and those they cannot (with why)."""
    memory_seen = compute_seen = False
    durations: list[float] = []
    for point_set in sets:
        step_model = point_set.step_model_for(base)
        for point in point_set.points:
            mem, comp = _time_shares(step_model, point)
            memory_seen |= mem >= MEMORY_INFORMATIVE_RATIO * comp
            compute_seen |= comp >= COMPUTE_INFORMATIVE_RATIO * mem
            durations.append((max(mem, comp)) / _step_count(point))
    fitted: list[str] = []
    blind: list[tuple[str, str]] = []
    for name in requested:
        if name == "memory" and not memory_seen:
            blind.append(
                (name, "need at least one memory-bound point (decode at small batch, e.g. batch-1 TPOT) to fit memory efficiency")
            )
        elif name == "compute" and not compute_seen:
            blind.append(
                (
                    name,
                    "need at least one compute-bound point (prefill of a long prompt, or decode at batch >= 256) to fit compute efficiency",
                )
            )
        elif name == "overlap" and not (memory_seen and compute_seen):
            blind.append(
                (
                    name,
                    "need points where memory and compute time are both material (large-batch decode, long prefill) to fit their overlap",
                )
            )
        elif name == "sequence" and not any(point.batch > 1 for point_set in sets for point in point_set.points):
            blind.append((name, "need points at batch > 1 to separate a per-sequence cost from the per-step overhead"))
        elif name == "overhead" and (len(durations) < 2 or max(durations) <= 1.05 * min(durations)):
            blind.append(
                (
                    name,
                    "need points with different step durations (other models, batch sizes, contexts or prompt lengths) to separate per-step overhead from efficiency",
                )
            )
        else:
            fitted.append(name)
    return fitted, blind


def fit_step_models(
    sets: Sequence[PointSet],
    *,
    fit: Sequence[str] = FITTABLE_PARAMETERS,
    base: Efficiency = IDEAL,
    strict: bool = False,
    name: str = "calibrated",
    loss: str = "linear",
    f_scale: float = 0.1,
    bounds: Mapping[str, tuple[float, float]] | None = None,
) -> CalibrationFit:
    """Least-squares fit of η_mem, η_compute and step overhead to points on one GPU type.

    Points of several models / precisions / tp degrees can be pooled: each `PointSet` brings
    its own step-model builder. Parameters not in `fit`, or not visible in the points, stay at
    `base`; `strict` turns a blind requested parameter into a `CalibrationError`.

    `loss` is scipy's `least_squares` loss on the (weighted) relative residuals: "linear" is
    plain least squares; "soft_l1" grows like |r| beyond `f_scale` (0.1 = 10 % error), so one
    odd source cannot drag the fit. `bounds` maps a parameter to (low, high) — η as a fraction, c_seq
    ("sequence", optional) in µs per sequence,
    overhead in milliseconds — replacing the default (0.001, 1) / (0, 1000 ms) box.
    """
    requested = _requested_parameters(fit, loss=loss, f_scale=f_scale)
    box = _parameter_box(bounds)
    points = [(point_set, point) for point_set in sets for point in point_set.points]
    if not points:
        _fail("no measured points: give at least one decode step, TPOT, prefill, TTFT or throughput measurement", field="points")
    fitted, blind = _fittable_parameters(sets, base, requested, strict=strict, point_count=len(points))
    problem = _FitProblem(sets=tuple(sets), points=tuple(points), fitted=tuple(fitted), base=base)
    best = _least_squares(problem, box, loss=loss, f_scale=f_scale)
    notes = [f"{parameter} held at base value: {reason}" for parameter, reason in blind]
    notes += [f"{p} held at base value (not requested)" for p in FITTABLE_PARAMETERS if p not in requested]
    notes += _determination_notes(problem, best, strict=strict)
    notes += _bound_notes(problem, best, box, bounds)
    return _calibration_fit(problem, best, notes, name=name, loss=loss, requested=requested)


def _requested_parameters(fit: Sequence[str], *, loss: str, f_scale: float) -> list[str]:
    """The parameters asked for, once each in the order given, after checking them, `loss` and `f_scale`."""
    requested = list(dict.fromkeys(fit))
    for parameter in requested:
        if parameter not in FITTABLE_PARAMETERS + OPTIONAL_PARAMETERS:
            _fail(
                f"unknown fit parameter {parameter!r}; expected a subset of {list(FITTABLE_PARAMETERS + OPTIONAL_PARAMETERS)}",
                field="fit",
            )
    if not requested:
        _fail("nothing to fit: name at least one of memory, compute, overhead", field="fit")
    if loss not in LOSSES:
        _fail(f"unknown loss {loss!r}; expected one of {list(LOSSES)}", field="loss")
    if not (math.isfinite(f_scale) and f_scale > 0):
        _fail(f"f_scale must be a positive number, got {f_scale!r}", field="f_scale")
    return requested


def _parameter_box(bounds: Mapping[str, tuple[float, float]] | None) -> dict[str, tuple[float, float]]:
    """(low, high) of each parameter: the default box, narrowed by the caller's `bounds` once checked."""
    box = {
        "memory": (1e-3, 1.0),
        "compute": (1e-3, 1.0),
        "overhead": (0.0, _OVERHEAD_MS_MAX),
        "overlap": (0.0, 1.0),
        "sequence": (0.0, _SEQUENCE_US_MAX),
    }
    for parameter, (low, high) in (bounds or {}).items():
        if parameter not in box:
            _fail(f"bounds for unknown parameter {parameter!r}", field="bounds")
        floor, ceiling = {"overhead": (0.0, _OVERHEAD_MS_MAX), "sequence": (0.0, _SEQUENCE_US_MAX)}.get(parameter, (0.0, 1.0))
        if not (floor <= low < high <= ceiling) or (parameter in ("memory", "compute") and low <= 0.0):
            _fail(f"bounds for {parameter} must satisfy {floor} < low < high <= {ceiling}, got ({low}, {high})", field="bounds")
        box[parameter] = (float(low), float(high))
    return box


def _fittable_parameters(
    sets: Sequence[PointSet], base: Efficiency, requested: Sequence[str], *, strict: bool, point_count: int
) -> tuple[list[str], list[tuple[str, str]]]:
    """`_identifiability`'s split, failing when nothing (or, if `strict`, not everything requested)
    can be fitted, or when there are fewer points than parameters to fit."""
    fitted, blind = _identifiability(sets, base, requested)
    if blind and strict:
        _fail("; ".join(reason for _, reason in blind), missing=[name for name, _ in blind])
    if not fitted:
        _fail("; ".join(reason for _, reason in blind), missing=[name for name, _ in blind])
    if point_count < len(fitted):
        _fail(
            f"{point_count} point(s) cannot determine {len(fitted)} parameters ({', '.join(fitted)}): "
            f"give at least {len(fitted)} points",
            points=point_count,
            parameters=fitted,
        )
    return fitted, blind


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _FitProblem:
    """The least-squares problem: the pooled points, the parameters fitted (the vector x, in this
    order) and the efficiency the others are held at."""

    sets: tuple[PointSet, ...]
    points: tuple[tuple[PointSet, MeasuredPoint], ...]
    fitted: tuple[str, ...]
    base: Efficiency
    index: Mapping[str, int] = field(init=False)
    measured: npt.NDArray[np.float64] = field(init=False)
    weights: npt.NDArray[np.float64] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {parameter: i for i, parameter in enumerate(self.fitted)})
        object.__setattr__(self, "measured", np.array([point.value for _, point in self.points]))
        object.__setattr__(self, "weights", np.array([point_set.weight for point_set, _ in self.points]))
        if not np.all(np.isfinite(self.weights) & (self.weights > 0)):
            _fail("point-set weights must be positive finite numbers", field="weight")

    def efficiency_of(self, x: np.ndarray) -> Efficiency:
        index, base = self.index, self.base
        memory = float(x[index["memory"]]) if "memory" in index else base.memory
        compute = float(x[index["compute"]]) if "compute" in index else base.compute
        overhead_s = float(x[index["overhead"]]) / 1e3 if "overhead" in index else base.step_overhead_s
        efficiency = _efficiency_with(base, memory, compute, overhead_s)
        if "overlap" in index:
            efficiency = replace(efficiency, memory_compute_overlap=float(x[index["overlap"]]))
        return efficiency

    def sequence_overhead_of(self, x: np.ndarray) -> float | None:
        return float(x[self.index["sequence"]]) / 1e6 if "sequence" in self.index else None  # fitted in µs

    def predictions(self, x: np.ndarray) -> npt.NDArray[np.float64]:
        efficiency = self.efficiency_of(x)
        models = {id(point_set): point_set.step_model_for(efficiency) for point_set in self.sets}
        c_seq = self.sequence_overhead_of(x)
        if c_seq is not None:
            models = {key: replace(model, sequence_overhead_s=c_seq) for key, model in models.items()}
        return np.array([predict(models[id(point_set)], point) for point_set, point in self.points])

    def residuals(self, x: np.ndarray) -> npt.NDArray[np.float64]:
        return self.weights * (self.predictions(x) / self.measured - 1.0)  # weighted relative error of each point


def _least_squares(problem: _FitProblem, box: Mapping[str, tuple[float, float]], *, loss: str, f_scale: float) -> Any:
    """The best of scipy's bounded trust-region fits from each of `_STARTS` (max(memory, compute)
    has kinks, so one start can stop at a corner)."""
    fitted, base = problem.fitted, problem.base
    lower = np.array([box[p][0] for p in fitted])
    upper = np.array([box[p][1] for p in fitted])

    def solve(start: tuple[float, float, float]) -> Any:
        by_name = {
            "memory": start[0],
            "compute": start[1],
            "overhead": start[2],
            "overlap": base.memory_compute_overlap,
            "sequence": _SEQUENCE_US_START,
        }
        x0 = np.clip(np.array([by_name[p] for p in fitted]), lower, upper)
        x0 = np.where(x0 <= lower, lower + 1e-6 * (upper - lower), np.where(x0 >= upper, upper - 1e-6 * (upper - lower), x0))
        return least_squares(
            problem.residuals,
            x0,
            bounds=(lower, upper),
            method="trf",
            loss=loss,
            f_scale=f_scale,
            xtol=1e-15,
            ftol=1e-15,
            gtol=1e-15,
            max_nfev=2000,
        )

    return min((solve(start) for start in _STARTS), key=lambda result: float(result.cost))


def _determination_notes(problem: _FitProblem, best: Any, *, strict: bool) -> list[str]:
    """Notes (errors, if `strict`) on fitted parameters the points leave undetermined at the solution."""
    fitted, index = problem.fitted, problem.index
    notes = []
    # A fitted parameter no residual responds to (e.g. every point ended compute-bound) is
    # undetermined: report it instead of returning an arbitrary value.
    jac = np.asarray(best.jac)
    scale = np.array([best.x[index[p]] if p in ("memory", "compute") else 1.0 for p in fitted])
    sensitivity = np.abs(jac * scale).max(axis=0)
    for parameter in fitted:
        if sensitivity[index[parameter]] < SENSITIVITY_FLOOR:
            message = f"the points do not constrain {parameter} at the fitted solution (no point is bound by it)"
            if strict:
                _fail(message, missing=[parameter])
            notes.append(message)
    if len(fitted) > 1:
        singular = np.linalg.svd(jac * scale, compute_uv=False)
        if singular[-1] < 1e-9 * singular[0]:
            message = f"{', '.join(fitted)} are not separately determined by these points (their effects are collinear)"
            if strict:
                _fail(message, parameters=list(fitted))
            notes.append(message)
    return notes


def _bound_notes(
    problem: _FitProblem, best: Any, box: Mapping[str, tuple[float, float]], bounds: Mapping[str, tuple[float, float]] | None
) -> list[str]:
    """Notes on fitted parameters that ended at a bound the caller set (the points ask for more)."""
    notes = []
    for parameter in problem.fitted:
        value, (low, high) = float(best.x[problem.index[parameter]]), box[parameter]
        at_low, at_high = value <= low + 1e-6 * (high - low), value >= high - 1e-6 * (high - low)
        if bounds and parameter in bounds and ((at_low and low > 0.0) or (at_high and parameter != "overlap")):
            notes.append(
                f"{parameter} at its bound {low if at_low else high}: the points ask for a value outside the plausible range"
            )
    return notes


def _calibration_fit(
    problem: _FitProblem, best: Any, notes: Sequence[str], *, name: str, loss: str, requested: Sequence[str]
) -> CalibrationFit:
    """The fit's record: the efficiency at the solution, named and sourced, and every point's residual."""
    fitted, points = problem.fitted, problem.points
    efficiency = problem.efficiency_of(best.x)
    predicted = problem.predictions(best.x)
    relative = predicted / problem.measured - 1.0
    rms = float(math.sqrt(float(np.mean(relative**2))))
    efficiency = replace(
        efficiency,
        name=name,
        source=(
            f"{'least-squares' if loss == 'linear' else loss + ' robust'} fit of {', '.join(fitted)} to {len(points)} measured points "
            f"(RMS relative error {rms:.1%})"
        ),
    )
    residual_rows = tuple(
        PointResidual(
            label=point.label or f"{point_set.label} {point.kind}".strip(),
            kind=point.kind,
            unit=point.unit,
            predicted=float(p),
            measured=point.value,
            relative_error=float(r),
        )
        for (point_set, point), p, r in zip(points, predicted, relative, strict=True)
    )
    return CalibrationFit(
        efficiency=efficiency,
        fitted=tuple(fitted),
        fixed=tuple(p for p in FITTABLE_PARAMETERS if p not in fitted)
        + tuple(p for p in OPTIONAL_PARAMETERS if p in requested and p not in fitted),
        notes=tuple(notes),
        residuals=residual_rows,
        rms_relative_error=rms,
        max_abs_relative_error=float(np.max(np.abs(relative))),
        points_used=len(points),
        base=problem.base,
        sequence_overhead_s=problem.sequence_overhead_of(best.x),
    )


def fit_efficiency(
    points: Sequence[MeasuredPoint],
    gpu: GpuSpec,
    model: ModelSpec,
    precision: Precision,
    tp: int,
    *,
    fit: Sequence[str] = FITTABLE_PARAMETERS,
    base: Efficiency = IDEAL,
    strict: bool = False,
    name: str = "calibrated",
    loss: str = "linear",
    f_scale: float = 0.1,
    bounds: Mapping[str, tuple[float, float]] | None = None,
) -> CalibrationFit:
    """Fit efficiencies for one (GPU, model, precision, tp) through the performance model's step model."""
    from planner.performance import (
        build_step_model,  # the performance model owns the step-model physics
    )

    def step_model_for(efficiency: Efficiency) -> StepModel:
        return build_step_model(gpu, model, precision, tp, efficiency)

    point_set = PointSet(points=tuple(points), step_model_for=step_model_for, label=f"{gpu.slug} {model.slug} tp{tp}")
    return fit_step_models([point_set], fit=fit, base=base, strict=strict, name=name, loss=loss, f_scale=f_scale, bounds=bounds)


# The input formats live in planner/calibration_inputs.py (imported last: it builds on MeasuredPoint above).
from planner.calibration_inputs import points_from_records, points_from_vllm_benchmark

__all__ = [
    "BATCHING_MODES",
    "FITTABLE_PARAMETERS",
    "LOSSES",
    "MEASUREMENT_UNITS",
    "OPTIONAL_PARAMETERS",
    "CalibrationFit",
    "MeasuredPoint",
    "PointResidual",
    "PointSet",
    "decode_step_s",
    "fit_efficiency",
    "fit_step_models",
    "mixed_step_s",
    "points_from_records",
    "points_from_vllm_benchmark",
    "predict",
    "prefill_s",
]
