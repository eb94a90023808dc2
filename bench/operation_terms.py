"""Issue 14 §1: do the operation-level step terms improve the fit? In-sample, LOMO and LOSO, four variants.

    .venv/bin/python -m bench.operation_terms            # writes docs/operation-terms.md (~25 CPU min: LOMO/LOSO × 4)
    .venv/bin/python -m bench.operation_terms --side-by-side-only   # only the AIConfigurator rows, to stdout
    .venv/bin/python -m bench.operation_terms --kernel-tables       # rewrite only the kernel-fit section (seconds)

Dated sections written by hand at the end of the document (headings "## 20…") are kept on every rewrite.

Variants, each refitted per GPU on bench/measurements.json exactly as bench/fidelity.py fits the shipped
profiles (soft-L1, 1/√n source weights, FIT_BOUNDS; η_mem, η_compute, overhead, overlap):

- **one-η** — the shipped form (planner/step_model.py with M½ = 0, c_seq = 0).
- **+c_seq** — plus the per-sequence cost `sequence_overhead_s`, fitted per GPU (bounds 0..200 µs).
- **+GEMM by shape and datatype** — GEMM efficiency from the kernel fits of bench/kernel_fit.py: M½
  (`gemm_half_tokens`) of the step's compute datatype, and the datatype's realised GEMM rate relative
  to BF16 (η_peak(fp8) / η_peak(bf16), as a low-precision factor), so the fitted η_compute is the
  whole-step efficiency of a BF16 GEMM and an FP8 step is not assumed to run at twice its rate. GPUs
  without a kernel table (l40s, mi300x, a100 FP8) keep the one-η form.
- **both**.

Then the same GPUs' step times beside AIConfigurator's (bench/aiconfigurator_runs.json, BF16, its
aggregated configuration: TPOT at its batch, and one prompt's prefill against its TTFT).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.fidelity import (
    FIT_BASE,
    FIT_BOUNDS,
    FIT_F_SCALE,
    FIT_LOSS,
    FIT_PARAMETERS,
    METRICS,
    Measurement,
    by_gpu,
    fittable_gpus,
    fitted_measurements,
    load_measurements,
    open_reference_catalog,
)
from bench.kernel_fit import CARRY_OVER, gemm_fits, gemm_half_tokens, kernel_tables
from planner.calibration import CalibrationFit, MeasuredPoint, PointSet, fit_step_models, predict
from planner.errors import CalibrationError
from planner.performance import build_step_model
from planner.specs import Efficiency, GpuSpec, Precision
from planner.step_model import StepModel

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "operation-terms.md"
RUNS = ROOT / "bench" / "aiconfigurator_runs.json"
#: c_seq bounds in µs: ≥ 0 (physics); ≤ 200 µs per sequence per step, far above sampling (a few µs per
#: sequence in a fused sampler) and the attention setup (bench/kernel_fit.py: 9-42 ns per sequence per layer).
SEQUENCE_BOUNDS = (0.0, 200.0)
VARIANTS: dict[str, tuple[bool, bool]] = {
    "one-η": (False, False),
    "+c_seq": (True, False),
    "+GEMM by shape and datatype": (False, True),
    "both": (True, True),
}

Terms = tuple[float, tuple[tuple[str, float], ...]]  # (M½, low-precision factors)


def gemm_terms(gpu: GpuSpec, precision: Precision) -> Terms:
    """M½ and the datatype's GEMM rate relative to BF16, from the kernel fits (none without a table)."""
    fits = gemm_fits()
    donor = gpu.slug if any(g == gpu.slug for g, _ in fits) else CARRY_OVER.get(gpu.slug)
    dtype = precision.weights.compute_dtype
    if donor is None or (donor, "bfloat16") not in fits:
        return 0.0, ()
    factors: tuple[tuple[str, float], ...] = ()
    if dtype == "fp8" and (donor, "fp8") in fits:
        factors = (("fp8", fits[(donor, "fp8")].eta_peak / fits[(donor, "bfloat16")].eta_peak),)
    return gemm_half_tokens(donor, dtype), factors


def builder(m: Measurement, with_gemm: bool) -> Callable[[Efficiency], StepModel]:
    gpu, model, precision, tp = m.gpu, m.model, m.precision, m.tp
    half, factors = gemm_terms(gpu, precision) if with_gemm else (0.0, ())

    def build(efficiency: Efficiency) -> StepModel:
        if factors:
            efficiency = replace(efficiency, low_precision_factors=factors)
        return replace(build_step_model(gpu, model, precision, tp, efficiency), gemm_half_tokens=half)

    return build


def fit_gpu(measurements: Sequence[Measurement], with_seq: bool, with_gemm: bool, base: Efficiency = FIT_BASE) -> CalibrationFit:
    """bench/fidelity.py's `fit_gpu`, with the variant's terms."""
    fitted = [m for m in measurements if m.record.get("fit", True)]
    per_source: dict[str, int] = {}
    for m in fitted:
        per_source[m.record["source"]] = per_source.get(m.record["source"], 0) + 1
    sets = [
        PointSet(
            points=(m.point,),
            step_model_for=builder(m, with_gemm),
            label=m.record["id"],
            weight=per_source[m.record["source"]] ** -0.5,
        )
        for m in fitted
    ]
    parameters = (*FIT_PARAMETERS, "sequence") if with_seq else FIT_PARAMETERS
    bounds = {name: FIT_BOUNDS[name] for name in FIT_PARAMETERS} | ({"sequence": SEQUENCE_BOUNDS} if with_seq else {})
    return fit_step_models(sets, fit=parameters, base=base, name="calibrated", loss=FIT_LOSS, f_scale=FIT_F_SCALE, bounds=bounds)


Profile = tuple[Efficiency, float]  # (efficiency, c_seq)


def profile(fit: CalibrationFit) -> Profile:
    return fit.efficiency, fit.sequence_overhead_s or 0.0


def predict_with(m: Measurement, prof: Profile, with_gemm: bool) -> float:
    efficiency, c_seq = prof
    return predict(replace(builder(m, with_gemm)(efficiency), sequence_overhead_s=c_seq), m.point)


def leave_one_group_out(
    measurements: Sequence[Measurement], key: Callable[[Measurement], str], with_seq: bool, with_gemm: bool
) -> dict[str, float]:
    """bench/fidelity.py's `leave_one_group_out`, carrying c_seq with the efficiency."""
    predictions: dict[str, float] = {}
    for held_group in sorted({key(m) for m in measurements}):
        rest = [m for m in measurements if key(m) != held_group]
        first: dict[str, CalibrationFit] = {}
        for gpu, points in fittable_gpus(rest).items():
            try:
                first[gpu] = fit_gpu(points, with_seq, with_gemm)
            except CalibrationError:
                continue
        fallback_eff = replace(
            FIT_BASE,
            memory=statistics.median(f.efficiency.memory for f in first.values()),
            compute=statistics.median(f.efficiency.compute for f in first.values()),
            step_overhead_s=statistics.median(f.efficiency.step_overhead_s for f in first.values()),
            memory_compute_overlap=statistics.median(f.efficiency.memory_compute_overlap for f in first.values()),
        )
        fallback = (fallback_eff, statistics.median(f.sequence_overhead_s or 0.0 for f in first.values()))
        for gpu, held in by_gpu(m for m in measurements if key(m) == held_group).items():
            prof = fallback
            if gpu in first:
                fit = first[gpu]
                if fit.fixed:
                    try:
                        fit = fit_gpu([m for m in rest if m.gpu.slug == gpu], with_seq, with_gemm, base=fallback_eff)
                    except CalibrationError:
                        pass
                prof = profile(fit)
            for m in held:
                predictions[m.record["id"]] = predict_with(m, prof, with_gemm)
    return predictions


def _errors(ms: Sequence[Measurement], preds: Mapping[str, float]) -> tuple[float, float]:
    errors = [abs(preds[m.record["id"]] / m.point.value - 1.0) for m in ms]
    return statistics.median(errors), max(errors)


def aic_rows(catalog: Any, profiles: Mapping[str, Mapping[str, Profile]]) -> list[str]:
    """Headroom's TPOT and one-prompt prefill for AIConfigurator's aggregated configurations, per variant."""
    answers = json.loads(RUNS.read_text(encoding="utf-8"))["answers"]
    lines = []
    for a in answers:
        agg = a.get("agg")
        if not agg:
            continue
        gpu = catalog.gpu_spec(a["gpu"], "ideal")
        model = catalog.model_spec(a["model"])
        precision = catalog.precision("bf16", "bf16")
        tp, batch, p, o = int(agg["tp"]), int(agg["batch"]), float(a["prompt_tokens"]), float(a["output_tokens"])
        record = {"id": a["id"], "source": "aic", "gpu": a["gpu"]}
        tpot = MeasuredPoint(
            kind="tpot", value=agg["tpot_ms"] / 1e3, batch=batch, prompt_tokens=p, output_tokens=o, batching="continuous"
        )
        prefill = MeasuredPoint(kind="prefill", value=agg["ttft_ms"] / 1e3, batch=1, prompt_tokens=p)
        cells = []
        for name, (_, with_gemm) in VARIANTS.items():
            prof = profiles[name].get(a["gpu"])
            if prof is None:
                cells.append("—")
                continue
            values = []
            for point in (tpot, prefill):
                m = Measurement(record=record, point=point, gpu=gpu, model=model, precision=precision, tp=tp)
                values.append(predict_with(m, prof, with_gemm))
            cells.append(f"{values[0] * 1e3:.1f} ({values[0] / tpot.value - 1:+.0%}) / {values[1] * 1e3:.0f}")
        lines.append(
            f"| {a['id']} {a['model']} {a['gpu']} tp{tp} batch {batch} {int(p)}/{int(o)} | {agg['tpot_ms']:.1f} / {agg['ttft_ms']:.0f} | "
            + " | ".join(cells)
            + " |"
        )
    return lines


def side_by_side_only() -> int:
    """Only the in-sample fits and the AIConfigurator table (the LOMO/LOSO rounds take tens of CPU minutes)."""
    with tempfile.TemporaryDirectory() as directory:
        catalog = open_reference_catalog(Path(directory))
        _, measurements = load_measurements(catalog)
        profiles: dict[str, dict[str, Profile]] = {}
        for name, (with_seq, with_gemm) in VARIANTS.items():
            by = {gpu: profile(fit_gpu(points, with_seq, with_gemm)) for gpu, points in fittable_gpus(measurements).items()}
            profiles[name] = by | {c: by[d] for c, d in CARRY_OVER.items() if d in by}
        for line in aic_rows(catalog, profiles):
            print(line)
        catalog.session.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--side-by-side-only" in argv:
        return side_by_side_only()
    if "--kernel-tables" in argv:
        head = DOC.read_text(encoding="utf-8").split(KERNEL_HEADING, 1)[0]
        DOC.write_text(head + kernel_section() + dated_sections(), encoding="utf-8")
        print(f"rewrote the kernel-fit section of {DOC}")
        return 0
    with tempfile.TemporaryDirectory() as directory:
        catalog = open_reference_catalog(Path(directory))
        _, measurements = load_measurements(catalog)
        fitted = fitted_measurements(measurements)
        groups = [("all fitted points", fitted)] + [(metric, [m for m in fitted if m.metric == metric]) for metric in METRICS]
        summary: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
        fits: dict[str, dict[str, CalibrationFit]] = {}
        for name, (with_seq, with_gemm) in VARIANTS.items():
            fits[name] = {gpu: fit_gpu(points, with_seq, with_gemm) for gpu, points in fittable_gpus(measurements).items()}
            preds = {
                "in-sample": {m.record["id"]: predict_with(m, profile(fits[name][m.gpu.slug]), with_gemm) for m in measurements},
                "LOMO": leave_one_group_out(measurements, lambda m: m.model.slug, with_seq, with_gemm),
                "LOSO": leave_one_group_out(measurements, lambda m: str(m.record["source"]), with_seq, with_gemm),
            }
            summary[name] = {label: {scheme: _errors(ms, p) for scheme, p in preds.items()} for label, ms in groups if ms}
            print(
                name, {scheme: f"{v[0]:.1%}/{v[1]:.1%}" for scheme, v in summary[name]["all fitted points"].items()}, flush=True
            )
        profiles = {name: {gpu: profile(fit) for gpu, fit in fits[name].items()} for name in VARIANTS}
        profiles = {name: by | {c: by[d] for c, d in CARRY_OVER.items() if d in by} for name, by in profiles.items()}
        side = aic_rows(catalog, profiles)
        catalog.session.close()
    DOC.write_text(render(summary, fits, side, len(fitted)) + dated_sections(), encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


def render(
    summary: Mapping[str, Mapping[str, Mapping[str, tuple[float, float]]]],
    fits: Mapping[str, Mapping[str, CalibrationFit]],
    side: Sequence[str],
    points: int,
) -> str:
    lines = [
        "# Operation-level step terms (issue 14 §1)",
        "",
        "Generated by `python -m bench.operation_terms` (kernel fits: `python -m bench.kernel_fit`). Do not edit by hand, except the dated sections at the end (`## 20…`), which every rewrite keeps.",
        "",
        f"Median / worst |predicted / measured − 1| over the {points} fitted points of bench/measurements.json, each variant",
        "refitted per GPU as bench/fidelity.py fits the shipped profiles (in-sample; leave-one-model-out; leave-one-source-out).",
        "",
        "| variant | metric | in-sample | LOMO | LOSO |",
        "|---|---|---|---|---|",
    ]
    for name, by_metric in summary.items():
        for metric, schemes in by_metric.items():
            cells = " | ".join(f"{schemes[s][0]:.1%} / {schemes[s][1]:.1%}" for s in ("in-sample", "LOMO", "LOSO"))
            lines.append(f"| {name} | {metric} | {cells} |")
    lines += [
        "",
        "Fitted per GPU:",
        "",
        "| variant | GPU | η_mem | η_compute | overhead (ms) | overlap | c_seq (µs / sequence) | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, by_gpu_fit in fits.items():
        for gpu, fit in sorted(by_gpu_fit.items()):
            eff = fit.efficiency
            c_seq = "—" if fit.sequence_overhead_s is None else f"{fit.sequence_overhead_s * 1e6:.2f}"
            notes = "; ".join(n for n in fit.notes if "bound" in n) or ""
            lines.append(
                f"| {name} | {gpu} | {eff.memory:.3f} | {eff.compute:.3f} | {eff.step_overhead_s * 1e3:.2f} | {eff.memory_compute_overlap:.2f} | {c_seq} | {notes} |"
            )
    lines += [
        "",
        "## Beside AIConfigurator's step times",
        "",
        "AIConfigurator's aggregated answer (bench/aiconfigurator_runs.json: BF16, its tp and batch) against Headroom's",
        "TPOT at that concurrency (the continuous-batching mixed step seen by one request, planner/calibration.py), per",
        "variant: Headroom ms (Headroom ÷ AIConfigurator − 1), then one prompt's prefill step in ms. AIConfigurator's",
        "aggregated TTFT is shown for context only: it is a closed-loop figure that includes waiting for the running",
        "batch's steps, not one prefill step, so it is not compared.",
        "",
        "| question | AIC TPOT / TTFT (ms) | " + " | ".join(f"{name}: TPOT / prefill (ms)" for name in VARIANTS) + " |",
        "|---|---|" + "---|" * len(VARIANTS),
        *side,
        "",
    ]
    return "\n".join(lines) + kernel_section()


KERNEL_HEADING = "## Kernel-level fits (`python -m bench.kernel_fit`)"
DATED_HEADING = "\n## 20"


def dated_sections() -> str:
    """The hand-written dated sections at the end of the current document ("## 20…" headings), kept verbatim."""
    text = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    at = text.find(DATED_HEADING)
    return text[at:] if at >= 0 else ""


def kernel_section() -> str:
    """The kernel-level fits the GEMM variant takes M½ and the datatype factor from (bench/kernel_fit.py)."""
    lines = [
        KERNEL_HEADING,
        "",
        "NVIDIA AIConfigurator's published kernel timings (bench/kernel_measurements.json; Apache-2.0; TensorRT-LLM",
        "1.3.0rc20 on H100/H200/B200, 1.0.0 on A100): GEMMs, decode attention, the custom all-reduce and MoE layers.",
        "",
        *kernel_tables(),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
