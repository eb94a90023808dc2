"""Calibrate per-GPU efficiencies on published measurements and report how well the model predicts them.

    .venv/bin/python -m bench.fidelity                    # fit, write docs/calibration.md and docs/fidelity-performance.md
    .venv/bin/python -m bench.fidelity --write-catalog    # also write the fitted efficiency blocks into catalog/data/gpus.json

Every measurement in bench/measurements.json is predicted through `planner.performance.build_step_model`
with the reference catalog's GPU, model and precision rows (loaded into a throw-away SQLite catalog).
Three predictions are reported per point: `calibrated` (the per-GPU efficiencies shipped in
catalog/data/gpus.json), leave-one-model-out (every GPU refitted without any point of that model,
so the point's own model never informs its prediction) and `ideal` (the datasheet roofline).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path
from typing import Any

from catalog import migrate
from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from planner.calibration import (
    CalibrationFit,
    MeasuredPoint,
    PointResidual,
    PointSet,
    fit_step_models,
    points_from_records,
    predict,
)
from planner.errors import CalibrationError
from planner.performance import build_step_model
from planner.specs import IDEAL, Efficiency, GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "bench" / "measurements.json"
GPUS_JSON = ROOT / "catalog" / "data" / "gpus.json"
CALIBRATION_DOC = ROOT / "docs" / "calibration.md"
FIDELITY_DOC = ROOT / "docs" / "fidelity-performance.md"

#: vLLM allocates `gpu_memory_utilization` (default 0.9) of each GPU's memory to weights and KV
#: cache; the remaining 10 % holds the CUDA context, activations and fragmentation
#: (vLLM EngineArgs, https://docs.vllm.ai/en/latest/models/engine_args.html).
MEMORY_RESERVE_FRACTION = 0.10
#: What the fit starts from and holds when the points cannot see a parameter: the shipped
#: `calibrated` profile counts tensor-parallel communication (catalog `_efficiency`), so the fit does too.
FIT_BASE = Efficiency(name="calibrated", include_comm=True, memory_reserve_fraction=MEMORY_RESERVE_FRACTION)

#: GPUs with no published point take the fitted values of a measured GPU of the same
#: architecture; Blackwell has no measured sibling here and takes Hopper's (its predecessor).
CARRY_OVER: dict[str, str] = {
    "a100-40gb-sxm": "a100-80gb-sxm",
    "a10g": "a100-80gb-sxm",
    "h100-pcie": "h100-sxm",
    "h200": "h100-sxm",
    "b200": "h100-sxm",
    "gb200": "h100-sxm",
    "l4": "l40s",
    "mi325x": "mi300x",
}
METRICS: tuple[str, ...] = ("batch-1 decode", "prefill / TTFT", "large-batch throughput")


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """One published point with the specs it is predicted with."""

    record: Mapping[str, Any]
    point: MeasuredPoint
    gpu: GpuSpec
    model: ModelSpec
    precision: Precision
    tp: int

    @property
    def metric(self) -> str:
        if self.point.kind in ("prefill", "ttft"):
            return "prefill / TTFT"
        return "batch-1 decode" if self.point.batch == 1 else "large-batch throughput"

    def step_model_for(self) -> Callable[[Efficiency], StepModel]:
        gpu, model, precision, tp = self.gpu, self.model, self.precision, self.tp
        return lambda efficiency: build_step_model(gpu, model, precision, tp, efficiency)

    def predict_with(self, efficiency: Efficiency) -> float:
        return predict(build_step_model(self.gpu, self.model, self.precision, self.tp, efficiency), self.point)


def open_reference_catalog(directory: Path) -> Catalog:
    url = f"sqlite:///{directory / 'fidelity.db'}"
    migrate.upgrade(url)
    session = make_session_factory(make_engine(url))()
    catalog = Catalog(session)
    catalog.load_reference_catalog()
    session.commit()
    return catalog


def load_measurements(catalog: Catalog, path: Path = MEASUREMENTS) -> tuple[dict[str, Any], list[Measurement]]:
    document = json.loads(path.read_text(encoding="utf-8"))
    measurements = []
    for record in document["points"]:
        (point,) = points_from_records([{**record, "label": record["id"]}])
        measurements.append(
            Measurement(
                record=record,
                point=point,
                gpu=catalog.gpu_spec(record["gpu"], "ideal"),
                model=catalog.model_spec(record["model"]),
                precision=catalog.precision(record["weights"], record["kv_cache"]),
                tp=int(record["tp"]),
            )
        )
    return document, measurements


def fit_gpu(measurements: Sequence[Measurement], base: Efficiency = FIT_BASE) -> CalibrationFit:
    """Pool one GPU's points across models, precisions and tp degrees and fit the three parameters."""
    sets = [
        PointSet(points=(m.point,), step_model_for=m.step_model_for(), label=m.record["id"])
        for m in measurements
        if m.record.get("fit", True)
    ]
    return fit_step_models(sets, base=base, name="calibrated")


def by_gpu(measurements: Iterable[Measurement]) -> dict[str, list[Measurement]]:
    groups: dict[str, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(m.gpu.slug, []).append(m)
    return groups


def _median_efficiency(fits: Iterable[CalibrationFit], base: Efficiency) -> Efficiency:
    fits = list(fits)
    return replace(
        base,
        memory=statistics.median(f.efficiency.memory for f in fits),
        compute=statistics.median(f.efficiency.compute for f in fits),
        step_overhead_s=statistics.median(f.efficiency.step_overhead_s for f in fits),
    )


def leave_one_model_out(measurements: Sequence[Measurement]) -> dict[str, float]:
    """Prediction of every point from fits that never saw its model (any GPU).

    A GPU left with no points of other models, or whose remaining points cannot see a
    parameter, takes the median of the other GPUs' fits of the same round for it.
    """
    predictions: dict[str, float] = {}
    for held_model in sorted({m.model.slug for m in measurements}):
        rest = [m for m in measurements if m.model.slug != held_model]
        first_pass = {gpu: fit_gpu(points) for gpu, points in by_gpu(rest).items()}
        fallback = _median_efficiency(first_pass.values(), FIT_BASE)
        for gpu, held in by_gpu(m for m in measurements if m.model.slug == held_model).items():
            if gpu in first_pass:
                fit = first_pass[gpu]
                if fit.fixed:
                    fit = fit_gpu([m for m in rest if m.gpu.slug == gpu], base=fallback)
                efficiency = fit.efficiency
            else:
                efficiency = fallback
            for m in held:
                predictions[m.record["id"]] = m.predict_with(efficiency)
    return predictions


def _rel(predicted: float, measured: float) -> float:
    return predicted / measured - 1.0


def _fmt_value(point: MeasuredPoint, value: float) -> str:
    return f"{value:,.0f} tok/s" if point.kind == "throughput" else f"{value * 1e3:,.2f} ms"


def _summary(errors: Sequence[float]) -> tuple[float, float]:
    magnitudes = [abs(e) for e in errors]
    return statistics.median(magnitudes), max(magnitudes)


def write_catalog_efficiencies(blocks: Mapping[str, Mapping[str, Any]], path: Path = GPUS_JSON) -> None:
    """Replace the `efficiency` block of each listed GPU, keeping the file's layout (indent 2)."""
    gpus = json.loads(path.read_text(encoding="utf-8"))
    for gpu in gpus:
        if gpu["slug"] in blocks:
            gpu["efficiency"] = dict(blocks[gpu["slug"]])
    path.write_text(json.dumps(gpus, indent=2) + "\n", encoding="utf-8")


def efficiency_blocks(fits: Mapping[str, CalibrationFit], all_gpus: Sequence[str], today: str) -> dict[str, dict[str, Any]]:
    blocks: dict[str, dict[str, Any]] = {}
    for slug in all_gpus:
        donor = slug if slug in fits else CARRY_OVER.get(slug)
        if donor is None or donor not in fits:
            continue
        fit = fits[donor]
        eff = fit.efficiency
        held = f"; held at base: {', '.join(fit.fixed)}" if fit.fixed else ""
        if donor == slug:
            origin = f"fit on {fit.points_used} published points of {slug}"
        elif slug in ("b200", "gb200"):
            origin = (
                f"carried over from {donor}: no Blackwell GPU has a published point in bench/measurements.json, "
                f"so Hopper (its predecessor) stands in - an assumption, not a measurement; {donor}'s fit used {fit.points_used} points"
            )
        else:
            origin = (
                f"carried over from {donor} (same architecture family; {slug} has no published point in "
                f"bench/measurements.json), whose fit used {fit.points_used} points"
            )
        blocks[slug] = {
            "memory": round(eff.memory, 4),
            "compute": round(eff.compute, 4),
            "step_overhead_ms": round(eff.step_overhead_s * 1e3, 4),
            "memory_reserve_fraction": MEMORY_RESERVE_FRACTION,
            "source": (
                f"calibrated {today} by bench/fidelity.py: least-squares fit of eta_mem, eta_compute and per-step overhead "
                f"(tensor-parallel communication on) - {origin}, in-sample RMS relative error {fit.rms_relative_error:.1%}{held}; "
                "points and residuals in docs/calibration.md. memory_reserve_fraction 0.10 = 1 - vLLM's default "
                "gpu_memory_utilization 0.9 (docs.vllm.ai engine args)"
            ),
        }
    return blocks


def render_calibration_doc(
    document: Mapping[str, Any],
    measurements: Sequence[Measurement],
    fits: Mapping[str, CalibrationFit],
    blocks: Mapping[str, Mapping[str, Any]],
    today: str,
) -> str:
    lines = [
        "# Calibration of the step-time model",
        "",
        f"Generated by `bench/fidelity.py` on {today} from `bench/measurements.json`. Do not edit by hand.",
        "",
        "## Method",
        "",
        "The roofline step time (`planner/step_model.py`) is calibrated per GPU by three numbers: memory",
        "efficiency η_mem (fraction of datasheet HBM bandwidth achieved), compute efficiency η_compute (fraction of",
        "the datasheet dense peak of the precision's compute datatype) and a fixed overhead per continuous-batching",
        "step. `planner/calibration.py` fits them by bounded least squares (0 < η ≤ 1, overhead ≥ 0) on the relative",
        "errors of the published points of that GPU, pooled across models, precisions and tp degrees; tensor-parallel",
        "communication (two ring all-reduces per layer, catalog link bandwidth and latency) is on, as in the",
        "shipped `calibrated` profile. How each kind of point is predicted:",
        "",
        "- TPOT / decode step at batch B, context c per sequence: `step_s(B, B·c, B·c)` with c = prompt + output/2 when not stated.",
        "- TTFT / prefill of a prompt of p tokens at batch 1: `step_s(p, 0, p(p+1)/2)`.",
        "- Throughput at batch B with prompt p and output o: `B·o / (prefill(B, p) + (o − 1)·decode(B, p + o/2))` — one static",
        "  batch cycle, which is also the steady-state work of a closed loop at concurrency B.",
        "",
        f"Memory reserve: {MEMORY_RESERVE_FRACTION:.2f} of HBM on every GPU — vLLM's default `gpu_memory_utilization` is 0.9",
        "(https://docs.vllm.ai/en/latest/models/engine_args.html), i.e. 10 % of memory is left to the CUDA context,",
        "activations and fragmentation. Not fitted: none of the points constrains it.",
        "",
        "## Fitted values",
        "",
        "| GPU | points | η_mem | η_compute | overhead (ms) | in-sample RMS | max abs error | held at base | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for slug, fit in sorted(fits.items()):
        eff = fit.efficiency
        lines.append(
            f"| {slug} | {fit.points_used} | {eff.memory:.3f} | {eff.compute:.3f} | {eff.step_overhead_s * 1e3:.3f} | "
            f"{fit.rms_relative_error:.1%} | {fit.max_abs_relative_error:.1%} | {', '.join(fit.fixed) or '—'} | "
            f"{'; '.join(fit.notes) or '—'} |"
        )
    at_bound = [slug for slug, fit in sorted(fits.items()) if max(fit.efficiency.memory, fit.efficiency.compute) >= 0.999]
    if at_bound:
        lines += [
            "",
            f"At the upper bound η = 1: {', '.join(at_bound)}. The data asked for more than the datasheet, which means the",
            "model charges something else too much on those points (tensor-parallel latency, or per-request costs folded",
            "into the per-step overhead; see docs/fidelity-performance.md), not that the GPU reaches its datasheet.",
        ]
    lines += ["", "Shipped efficiency blocks (`catalog/data/gpus.json`):", "", "| GPU | η_mem | η_compute | overhead (ms) | reserve | from |", "|---|---|---|---|---|---|"]
    for slug, block in sorted(blocks.items()):
        origin = "own fit" if slug in fits else f"carried over from {CARRY_OVER[slug]}"
        lines.append(
            f"| {slug} | {block['memory']} | {block['compute']} | {block['step_overhead_ms']} | {block['memory_reserve_fraction']} | {origin} |"
        )
    lines += [
        "",
        "Blackwell (b200, gb200) has no published point in the set and no measured sibling; it takes Hopper's",
        "(h100-sxm) values, which is an assumption, not a measurement. The same holds, less strongly, for every",
        "carried-over GPU.",
        "",
        "## Sources",
        "",
    ]
    for key, source in document["sources"].items():
        lines += [f"- **{key}** — {source['title']}. {source['url']} ({source['date']}; {source['engine']}). {source['notes']}"]
    lines += [
        "",
        "## Every data point and its in-sample residual",
        "",
        "Error = predicted / measured − 1 with the GPU's fitted efficiencies (points marked not fitted in the note are",
        "predicted with them but did not take part in the fit). Times are per token / per prefill;",
        "throughput is output tokens per second of the whole replica.",
        "",
        "| id | source | GPU | model | weights / KV | tp | kind | batch | prompt | output | measured | predicted | error | derived / note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    residuals = {r.label: r for fit in fits.values() for r in fit.residuals}
    for m in measurements:
        rec, point = m.record, m.point
        if rec["id"] not in residuals:  # reported, not fitted: its error with the fitted efficiencies
            predicted = m.predict_with(fits[rec["gpu"]].efficiency)
            r = PointResidual(label=rec["id"], kind=point.kind, unit=point.unit, predicted=predicted,
                              measured=point.value, relative_error=_rel(predicted, point.value))
        else:
            r = residuals[rec["id"]]
        lines.append(
            f"| {rec['id']} | {rec['source']} | {rec['gpu']} | {rec['model']} | {rec['weights']} / {rec['kv_cache']} | {rec['tp']} | "
            f"{rec['kind']} | {point.batch} | {rec.get('prompt_tokens', '')} | {rec.get('output_tokens', '')} | "
            f"{_fmt_value(point, r.measured)} | {_fmt_value(point, r.predicted)} | {r.relative_error:+.1%} | "
            f"{rec.get('derived', '')}{'; ' if rec.get('derived') and rec.get('note') else ''}{rec.get('note', '')} |"
        )
    lines += [
        "",
        "## Limits of this data set",
        "",
        "- Few sources publish batch-1 decode (TPOT) with every setting stated: 5 such points (H100, A100, MI300X).",
        "  L40S has no batch-1 decode point; its memory efficiency comes from batch-16/64 throughput.",
        "- TTFT from a served endpoint (NIM, Baseten) includes HTTP, tokenization and scheduling time the step model",
        "  only sees as one step's overhead; TensorRT-LLM's first-token latency is an engine-level measurement.",
        "- Some settings are not stated by the sources and are assumed (listed per source above): the A100 variant",
        "  in TensorRT-LLM's tables, KV precision on NIM/Baseten/Oracle, and Baseten's int8 scheme (the catalog's",
        "  int8 is W8A8; TensorRT-LLM's Mixtral int8 of Dec 2023 was most likely weight-only, which reads the same",
        "  bytes but computes prefill in fp16).",
        "",
    ]
    return "\n".join(lines)


def render_fidelity_doc(
    measurements: Sequence[Measurement],
    calibrated: Mapping[str, float],
    lomo: Mapping[str, float],
    ideal: Mapping[str, float],
    today: str,
) -> tuple[str, dict[str, dict[str, tuple[float, float]]]]:
    lines = [
        "# Fidelity of the performance model against published measurements",
        "",
        f"Generated by `bench/fidelity.py` on {today}. Every point of `bench/measurements.json` (sources and",
        "derivations in `docs/calibration.md`) predicted three ways:",
        "",
        "- **calibrated** — the per-GPU efficiencies shipped in `catalog/data/gpus.json`. They were fitted on these same",
        "  points, so this is an in-sample error.",
        "- **leave-one-model-out (LOMO)** — each point predicted from per-GPU fits that never saw any point of its model",
        "  (on any GPU); a GPU left without points, or blind to a parameter, takes the median of the other GPUs' fits",
        "  of that round. This is the honest out-of-sample estimate for a model the catalog has no measurement of.",
        "- **ideal** — the datasheet roofline (η = 1, no overhead, no communication).",
        "",
        "Error = predicted / measured − 1; median and worst are of its magnitude.",
        "",
        "## Summary",
        "",
        "| metric | points | calibrated median | calibrated worst | LOMO median | LOMO worst | ideal median | ideal worst |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, dict[str, tuple[float, float]]] = {}
    groups = {metric: [m for m in measurements if m.metric == metric] for metric in METRICS}
    everything = [("all points", list(measurements))] + list(groups.items())
    for metric, ms in everything:
        if not ms:
            continue
        row = {}
        for name, preds in (("calibrated", calibrated), ("lomo", lomo), ("ideal", ideal)):
            row[name] = _summary([_rel(preds[m.record["id"]], m.point.value) for m in ms])
        summary[metric] = row
        lines.append(
            f"| {metric} | {len(ms)} | {row['calibrated'][0]:.1%} | {row['calibrated'][1]:.1%} | {row['lomo'][0]:.1%} | "
            f"{row['lomo'][1]:.1%} | {row['ideal'][0]:.1%} | {row['ideal'][1]:.1%} |"
        )
    lines += [
        "",
        "In-sample the fit is close to the 10 % median target; the leave-one-model-out column is the honest number for",
        "a model with no measurement of its own, and it is several times larger: three parameters per GPU absorb",
        "model- and engine-specific behaviour that does not transfer.",
        "",
        "## Where the remaining error comes from",
        "",
        "- **Tensor-parallel communication.** All-reduce latency is charged once per all-reduce (2 per layer, 5 µs",
        "  each from the catalog); an earlier reading of 2·(tp − 1) hops per all-reduce made tp-8 steps slower than",
        "  measured whole steps (MI300X Llama 3.1 70B, 7.7 ms) and was corrected in the performance model.",
        "- **Engine versions.** The H100 set mixes TensorRT-LLM 0.5/0.6 (2023) static-batch tables with NIM 1.8 (2025);",
        "  70B at tp 2/4 decodes far slower in the 2023 tables than three parameters per GPU can reconcile with the",
        "  7B rows (h100-sxm has the largest RMS in docs/calibration.md).",
        "- **Per-request costs fitted as per-step overhead.** TTFT includes request setup and sampling that happen once;",
        "  the fit can only express them as overhead on every step (milliseconds), which makes small-model decode slower",
        "  than it is. A per-request term in `Efficiency` would separate them.",
    ]
    for metric, ms in groups.items():
        lines += [
            "",
            f"## {metric}",
            "",
            "| id | GPU | model | weights / KV | tp | batch | prompt | output | measured | calibrated | error | LOMO error | ideal | ideal error |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for m in ms:
            rec, point, key = m.record, m.point, m.record["id"]
            lines.append(
                f"| {key} | {rec['gpu']} | {rec['model']} | {rec['weights']} / {rec['kv_cache']} | {rec['tp']} | {point.batch} | "
                f"{rec.get('prompt_tokens', '')} | {rec.get('output_tokens', '')} | {_fmt_value(point, point.value)} | "
                f"{_fmt_value(point, calibrated[key])} | {_rel(calibrated[key], point.value):+.1%} | "
                f"{_rel(lomo[key], point.value):+.1%} | {_fmt_value(point, ideal[key])} | {_rel(ideal[key], point.value):+.1%} |"
            )
    lines.append("")
    return "\n".join(lines), summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write-catalog", action="store_true", help="write the fitted efficiency blocks into catalog/data/gpus.json")
    parser.add_argument("--date", default=date.today().isoformat(), help="date stamped into the docs and sources")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as directory:
        catalog = open_reference_catalog(Path(directory))
        document, measurements = load_measurements(catalog)
        fits = {gpu: fit_gpu(points) for gpu, points in by_gpu(measurements).items()}
        all_gpus = [gpu["slug"] for gpu in json.loads(GPUS_JSON.read_text(encoding="utf-8"))]
        blocks = efficiency_blocks(fits, all_gpus, args.date)
        if args.write_catalog:
            write_catalog_efficiencies(blocks)
        catalog.session.close()

    # Re-open so the report predicts with what gpus.json now ships, not with the in-memory fit.
    with tempfile.TemporaryDirectory() as directory:
        catalog = open_reference_catalog(Path(directory))
        shipped = {slug: catalog.gpu_spec(slug, "calibrated").efficiency for slug in fits}
        catalog.session.close()
    calibrated = {m.record["id"]: m.predict_with(shipped[m.gpu.slug]) for m in measurements}
    ideal = {m.record["id"]: m.predict_with(IDEAL) for m in measurements}
    try:
        lomo = leave_one_model_out(measurements)
    except CalibrationError as error:
        raise SystemExit(f"leave-one-model-out fit failed: {error.detail}") from error

    CALIBRATION_DOC.write_text(render_calibration_doc(document, measurements, fits, blocks, args.date), encoding="utf-8")
    fidelity, summary = render_fidelity_doc(measurements, calibrated, lomo, ideal, args.date)
    FIDELITY_DOC.write_text(fidelity, encoding="utf-8")
    for metric, row in summary.items():
        print(
            f"{metric:24s} calibrated median {row['calibrated'][0]:6.1%} worst {row['calibrated'][1]:6.1%} | "
            f"LOMO median {row['lomo'][0]:6.1%} worst {row['lomo'][1]:6.1%} | ideal median {row['ideal'][0]:6.1%} worst {row['ideal'][1]:6.1%}"
        )
    for slug, fit in sorted(fits.items()):
        eff = fit.efficiency
        print(f"{slug:14s} η_mem {eff.memory:.3f} η_compute {eff.compute:.3f} overhead {eff.step_overhead_s * 1e3:.3f} ms  RMS {fit.rms_relative_error:.1%}  fixed {fit.fixed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
