"""Fit the per (GPU, engine) efficiency profiles and the per (architecture, engine, datatype)
low-precision factors; write catalog/data/engine_profiles.json and docs/engines.md.

    .venv/bin/python -m bench.engine_profiles            # fit, write the JSON and the report

Data: the `evidence` points of bench/serving_evidence.json the step model can express
(`fit_data()`: MLPerf `check` points never), plus the fitted points of bench/measurements.json with
the engine its source names; a measurements.json point that repeats an evidence point (same GPU,
engine, model, weights, tp, lengths, kind) is left out. The fitter is bench/fidelity.py's `fit_gpu`
(soft-L1, 1/√n per source, the same bounds) on each pair's points.

Rules (stated in docs/engines.md):
- a (GPU, engine) pair gets its own profile with at least MIN_POINTS points from at least MIN_SOURCES source;
- low-precision factor of datatype d on (GPU, engine) = η_compute fitted on the pair's d points /
  η_compute fitted on its 16-bit points (each slice ≥ MIN_POINTS points, compute seen by the points);
  where the pair has no 16-bit slice, the denominator is the median 16-bit η_compute of the same
  engine on the other GPUs of the vendor (an assumption, said in the factor's source). Capped at 1
  (the datasheet ratio: no engine runs low precision faster than its datasheet ratio). Per
  architecture: the median over its GPUs.
- the pair's profile is then fitted on all its points with the factors applied in the step model,
  so its η_compute is the 16-bit one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

from bench.fidelity import FIT_BASE, Measurement, fit_gpu, load_measurements, open_reference_catalog
from bench.serving_evidence import evaluate, fit_data, inexpressible_reason, load, measurement_of
from catalog.repository import Catalog
from planner.calibration import CalibrationFit
from planner.engines import ENGINES, LowPrecisionFactor
from planner.errors import CalibrationError
from planner.specs import Efficiency

ROOT = Path(__file__).resolve().parent.parent
PROFILES_JSON = ROOT / "catalog" / "data" / "engine_profiles.json"
REPORT_DOC = ROOT / "docs" / "engines.md"
COMMAND = ".venv/bin/python -m bench.engine_profiles"

#: A pair's own profile needs this many points from this many sources: four parameters from fewer
#: than twice as many points is not a fit, and one source is accepted (the LOSO column then has no
#: out-of-sample figure for it, which the table shows).
MIN_POINTS = 8
MIN_SOURCES = 1
SIXTEEN_BIT = ("bf16", "fp16")
LOW_PRECISION = ("fp8", "int8", "fp4")


def engine_of_source(text: str) -> str | None:
    """The engine a measurements.json source names (its `engine` text)."""
    lowered = text.lower()
    for needle, engine in (("tensorrt-llm", "trt-llm"), ("nim", "trt-llm"), ("sglang", "sglang"), ("vllm", "vllm")):
        if needle in lowered:
            return engine
    return None


def _key(record: Mapping[str, Any], engine: str) -> tuple[Any, ...]:
    return (
        record["gpu"],
        engine,
        record["model"],
        record["weights"],
        record["tp"],
        record.get("prompt_tokens"),
        record.get("output_tokens"),
        record["kind"],
    )


def fit_points(catalog: Catalog) -> dict[tuple[str, str], list[Measurement]]:
    """Every fit point grouped by (GPU, engine); each Measurement's record carries `engine` and `release`."""
    evidence = [r for r in fit_data(load()) if inexpressible_reason(r) is None]
    groups: dict[tuple[str, str], list[Measurement]] = {}
    seen: set[tuple[Any, ...]] = set()
    for record in evidence:
        if record["engine"] not in ENGINES:  # e.g. NIM points whose backend is not printed: no engine to fit
            continue
        m = measurement_of(catalog, record)
        seen.add(_key(record, record["engine"]))
        groups.setdefault((record["gpu"], record["engine"]), []).append(m)
    document, measurements = load_measurements(catalog)
    for m in measurements:
        if not m.record.get("fit", True):
            continue
        source = document["sources"][m.record["source"]]
        engine = engine_of_source(str(source.get("engine", "")))
        if engine is None or _key(m.record, engine) in seen:
            continue
        record = {**m.record, "engine": engine, "engine_release": str(source.get("date", "?"))}
        groups.setdefault((m.gpu.slug, engine), []).append(replace(m, record=record))
    return dict(sorted(groups.items()))


def _n_sources(ms: Sequence[Measurement]) -> int:
    return len({m.record["source"] for m in ms})


def _compute_fit(ms: Sequence[Measurement], base: Efficiency) -> float | None:
    """η_compute fitted on `ms`, or None when too few points or the points cannot see compute."""
    if len(ms) < MIN_POINTS:
        return None
    try:
        fit = fit_gpu(ms, base=base)
    except CalibrationError:
        return None
    return None if "compute" in fit.fixed else fit.efficiency.compute


def low_precision_factors(
    catalog: Catalog, groups: Mapping[tuple[str, str], Sequence[Measurement]]
) -> tuple[list[LowPrecisionFactor], list[tuple[str, str, str, float | None, float | None, str]]]:
    """The factors per (architecture, engine, datatype), and the per-(GPU, engine, datatype) rows behind them."""
    sixteen: dict[tuple[str, str], float] = {}
    low: dict[tuple[str, str, str], float] = {}
    for (gpu, engine), ms in groups.items():
        eta = _compute_fit([m for m in ms if m.precision.weights.compute_dtype in SIXTEEN_BIT], FIT_BASE)
        if eta is not None:
            sixteen[(gpu, engine)] = eta
        for datatype in LOW_PRECISION:
            eta_low = _compute_fit([m for m in ms if m.precision.weights.compute_dtype == datatype], FIT_BASE)
            if eta_low is not None:
                low[(gpu, engine, datatype)] = eta_low
    rows: list[tuple[str, str, str, float | None, float | None, str]] = []
    per_arch: dict[tuple[str, str, str], list[tuple[float, str]]] = {}
    for (gpu, engine, datatype), eta_low in sorted(low.items()):
        spec = catalog.gpu_spec(gpu, "ideal")
        if (gpu, engine) in sixteen:
            reference, how = sixteen[(gpu, engine)], f"{gpu}'s own 16-bit points"
        else:
            peers = [
                eta
                for (other, other_engine), eta in sixteen.items()
                if other_engine == engine and catalog.gpu_spec(other, "ideal").vendor == spec.vendor
            ]
            if not peers:
                rows.append((gpu, engine, datatype, eta_low, None, "no 16-bit reference under this engine: datasheet ratio"))
                continue
            reference = statistics.median(peers)
            how = f"median 16-bit η_compute of {engine} on the other {spec.vendor} GPUs ({len(peers)}), an assumption"
        rows.append((gpu, engine, datatype, eta_low, reference, how))
        per_arch.setdefault((spec.architecture.lower(), engine, datatype), []).append(
            (min(1.0, eta_low / reference), f"{gpu}: {how}")
        )
    factors = [
        LowPrecisionFactor(
            architecture=arch,
            engine=engine,
            datatype=datatype,
            factor=round(statistics.median(v for v, _ in values), 4),
            source=(
                f"bench/engine_profiles.py: η_compute fitted on {datatype} points / 16-bit η_compute "
                f"({'; '.join(how for _, how in values)}), capped at 1; docs/engines.md"
            ),
        )
        for (arch, engine, datatype), values in sorted(per_arch.items())
    ]
    return factors, rows


def _median_abs(errors: Sequence[float]) -> float:
    return statistics.median(abs(e) for e in errors)


def _rel(predicted: float, m: Measurement) -> float:
    return predicted / m.point.value - 1.0


def _optimism(predicted: float, m: Measurement) -> float:
    error = _rel(predicted, m)
    return error if m.point.kind == "throughput" else 1.0 / (1.0 + error) - 1.0


def fit_pair(ms: Sequence[Measurement], base: Efficiency) -> CalibrationFit:
    return fit_gpu(ms, base=base)


def loso(ms: Sequence[Measurement], base: Efficiency) -> dict[str, float] | None:
    """Every point predicted from the pair's fit without its source; None with one source."""
    sources = sorted({m.record["source"] for m in ms})
    if len(sources) < 2:
        return None
    out: dict[str, float] = {}
    for held in sources:
        rest = [m for m in ms if m.record["source"] != held]
        try:
            efficiency = fit_gpu(rest, base=base).efficiency if len(rest) >= MIN_POINTS else None
        except CalibrationError:
            efficiency = None
        for m in ms:
            if m.record["source"] == held:
                out[m.record["id"]] = m.predict_with(efficiency or base)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--date", default=date.today().isoformat(), help="date stamped into the JSON and report")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        catalog = open_reference_catalog(Path(directory))
        groups = fit_points(catalog)
        factors, factor_rows = low_precision_factors(catalog, groups)
        profiles: list[dict[str, Any]] = []
        table: list[str] = []
        for (gpu, engine), ms in groups.items():
            spec = catalog.gpu_spec(gpu, "ideal")
            shipped = catalog.gpu_spec(gpu, "calibrated").efficiency
            before = [_optimism(m.predict_with(shipped), m) for m in ms]
            releases = sorted({str(m.record.get("engine_release")) for m in ms})
            if len(ms) < MIN_POINTS or _n_sources(ms) < MIN_SOURCES:
                table.append(
                    f"| {gpu} | {engine} | {len(ms)} | {_n_sources(ms)} | - | - | - | - | - | {_median_abs(before):.1%} / {statistics.median(before):+.1%} | - | - | too few points: falls back |"
                )
                continue
            arch = spec.architecture.lower()
            pairs = tuple((f.datatype, f.factor) for f in factors if f.architecture == arch and f.engine == engine)
            base = replace(FIT_BASE, low_precision_factors=pairs)
            fit = fit_pair(ms, base)
            eff = fit.efficiency
            after = [_optimism(m.predict_with(eff), m) for m in ms]
            out = loso(ms, base)
            loso_text = "-" if out is None else f"{_median_abs([_optimism(out[m.record['id']], m) for m in ms]):.1%}"
            generation = "; ".join(releases)
            profiles.append(
                {
                    "gpu": gpu,
                    "engine": engine,
                    "engine_generation": generation,
                    "memory": round(eff.memory, 4),
                    "compute": round(eff.compute, 4),
                    "step_overhead_ms": round(eff.step_overhead_s * 1e3, 4),
                    "memory_reserve_fraction": eff.memory_reserve_fraction,
                    "memory_compute_overlap": round(eff.memory_compute_overlap, 4),
                    "points": len(ms),
                    "sources": _n_sources(ms),
                    "source": (
                        f"fitted {args.date} by bench/engine_profiles.py (bench/fidelity.py fit_gpu: soft-L1, 1/sqrt(n) per source, "
                        f"eta [0.05, 1], overhead [0, 2 ms]) on {len(ms)} {engine} points of {gpu} from {_n_sources(ms)} sources "
                        f"(releases {generation}) with the low-precision factors {dict(pairs) or 'none'} applied; in-sample median "
                        f"|optimism| {_median_abs(after):.1%}, leave-one-source-out {loso_text}; docs/engines.md"
                    ),
                }
            )
            table.append(
                f"| {gpu} | {engine} | {len(ms)} | {_n_sources(ms)} | {eff.memory:.3f} | {eff.compute:.3f} | "
                f"{eff.step_overhead_s * 1e3:.2f} | {eff.memory_compute_overlap:.3f} | {dict(pairs) or '-'} | "
                f"{_median_abs(before):.1%} / {statistics.median(before):+.1%} | {_median_abs(after):.1%} / {statistics.median(after):+.1%} | "
                f"{loso_text} | own profile |"
            )
        check = evaluate(catalog, load())
        catalog.session.close()
    document = {
        "description": (
            f"Per (GPU, engine) efficiency profiles and per (architecture, engine, datatype) low-precision factors, written by "
            f"{COMMAND} on {args.date}; do not edit by hand (docs/engines.md says how they are fitted)."
        ),
        "profiles": profiles,
        "low_precision": [
            {"architecture": f.architecture, "engine": f.engine, "datatype": f.datatype, "factor": f.factor, "source": f.source}
            for f in factors
        ],
    }
    PROFILES_JSON.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    REPORT_DOC.write_text(
        render(args.date, table, factor_rows, factors, len([e for e in check if e.reason is None])), encoding="utf-8"
    )
    print("\n".join(table))
    for f in factors:
        print(f"{f.architecture} {f.engine} {f.datatype} factor {f.factor}")
    return 0


def render(
    today: str,
    table: Sequence[str],
    factor_rows: Sequence[tuple[str, str, str, float | None, float | None, str]],
    factors: Sequence[LowPrecisionFactor],
    expressible: int,
) -> str:
    lines = [
        "# Engine profiles: efficiency per (GPU, engine), low precision per (architecture, engine, datatype)",
        "",
        f"Generated by `{COMMAND}` on {today} from `bench/serving_evidence.json` (its `evidence` points the step model",
        f"can express; {expressible} of its points, checks included, are expressible) and `bench/measurements.json`.",
        "Do not edit by hand.",
        "Writes `catalog/data/engine_profiles.json`, which the catalog loads into `engine_profiles` and",
        "`low_precision_factors` (migration 0014).",
        "",
        "## Rules",
        "",
        f"- A (GPU, engine) pair gets its own profile with ≥ {MIN_POINTS} fit points from ≥ {MIN_SOURCES} source.",
        "  MLPerf points (role `check`) are never fit data.",
        "- The fitter is `bench/fidelity.py` `fit_gpu` (soft-L1 on relative errors, each source weighted 1/√n, η in",
        "  [0.05, 1], overhead in [0, 2 ms], overlap in [0, 1], tensor-parallel communication on).",
        "- Low-precision factor of datatype d = η_compute fitted on the pair's d points ÷ η_compute fitted on its",
        "  16-bit points (each slice ≥ 8 points and compute visible). Without a 16-bit slice the denominator is the",
        "  median 16-bit η_compute of the same engine on the vendor's other GPUs — an assumption, named in the factor's",
        "  source. Capped at 1 (the datasheet ratio). Per architecture: the median over its GPUs.",
        "- The profile is then fitted on all the pair's points with the factors applied to the low-precision peaks,",
        "  so its η_compute is the 16-bit rate.",
        "- Lookup when planning (`planner/engines.py`): the pair's profile → the same GPU's profile under the engine",
        "  with most points (plan says `fallback: true` and why) → the GPU's engine-agnostic catalog calibration",
        "  (today's `gpus.json` efficiency, without factors). A factor: (architecture, engine, datatype) → the same",
        "  architecture and datatype under another engine → the datasheet ratio (factor 1). TensorRT-LLM is not",
        "  offered on AMD GPUs.",
        "",
        "## Profiles, and the error before (today's per-GPU calibration) and after",
        "",
        "Error columns: median |optimism| / median optimism over the pair's fit points (positive = Headroom promises",
        "more than was measured). LOSO = median |optimism| of each point predicted by the pair's fit without its source",
        "(`-` with one source).",
        "",
        "| GPU | engine | points | sources | η_mem | η_compute | overhead ms | overlap | factors | before | after (in-sample) | LOSO | profile |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *table,
        "",
        "## Low-precision factors",
        "",
        "| GPU | engine | datatype | η_compute (low precision) | 16-bit reference | reference |",
        "|---|---|---|---|---|---|",
    ]
    for gpu, engine, datatype, eta_low, reference, how in factor_rows:
        ref = "-" if reference is None else f"{reference:.3f}"
        low = "-" if eta_low is None else f"{eta_low:.3f}"
        lines.append(f"| {gpu} | {engine} | {datatype} | {low} | {ref} | {how} |")
    lines += ["", "| architecture | engine | datatype | factor |", "|---|---|---|---|"]
    lines += [f"| {f.architecture} | {f.engine} | {f.datatype} | {f.factor:.3f} |" for f in factors]
    lines += [
        "",
        "## L40S FP8",
        "",
        "Against the L40S FP8 TensorRT-LLM evidence (the `l40s | trt-llm` row above) the per-GPU calibration shipped",
        "before was optimistic by the `before` column; the engine profile with the Ada FP8 factor is the `after` and",
        "LOSO columns. The set has no expressible L40S vLLM evidence point (the two L40S vLLM rows are MLPerf checks",
        "without published lengths, so they are neither fit data nor predictable), so an L40S plan on vLLM takes the L40S",
        "TensorRT-LLM profile (`fallback: true`, said in the plan) with the Ada FP8 factor; its error on vLLM itself is",
        "unmeasured until an L40S vLLM serving point with lengths is added to `bench/serving_evidence.json`.",
        "",
        "## Caveats",
        "",
        "- h200 × vllm and mi300x × sglang have one source each (dstack, DeepSeek-R1 only, tp 8): their fits put",
        "  η_compute at its bound 1 and a low η_mem, i.e. the points charge the MLA/MoE costs the step model does not",
        "  see to bandwidth. They pass the rule and ship, but their out-of-sample error is unknown (LOSO `-`).",
        "- b200 and gb200 × trt-llm pool two TensorRT-LLM 1.0 sources that disagree (LOSO above 60 %): the robust fit",
        "  splits the difference, and its in-sample error is larger than the per-GPU calibration's, which was fitted on",
        "  one of the two.",
        "- A profile pools every release of its engine in the set (`engine_generation` lists them): there are not",
        "  yet enough points per release for a profile per generation.",
        "",
        "## In the API",
        "",
        "`POST /v1/plans` takes `engine` (one, a list, or `any`; omitted: the engine-agnostic calibration, answers",
        "unchanged). Each allowed engine is planned in full; the cheapest answers with `engine: {chosen, allowed, reason,",
        "profile: {gpu, engine, generation, source, fallback, reason}, profiles}` and the others appear in",
        "`justification.alternatives` with kind `engine`. `constraints.pin.engine` narrows the list to one (outside it: 422).",
        "A list of n engines runs n full plans (search, MILP and, with `verify`, the simulator), so it takes about n times",
        "as long as one; an omitted engine plans once, as before.",
        "`/v1/evaluate`, `/v1/simulate`, `/v1/what-if` and `/v1/fleet-plans` take one `engine`; `/v1/capacity` its",
        "`pin.engine`. An unknown engine is a 422; `trt-llm` on AMD GPUs only is a 422 naming the engine.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
