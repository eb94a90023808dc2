"""Fit the per (GPU, engine) efficiency profiles and the per (architecture, engine, datatype)
low-precision factors; write catalog/data/engine_profiles.json and docs/engines.md.

    .venv/bin/python -m bench.engine_profiles            # fit, write the JSON and the report
    .venv/bin/python -m bench.engine_profiles --variant collectives+moe --out /tmp/v   # a step variant
                                                         # (bench/step_variants.py), written under --out

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
import re
import statistics
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

from bench.fidelity import FIT_BASE, Measurement, fit_gpu, load_measurements, open_reference_catalog
from bench.serving_evidence import evaluate, fit_data, inexpressible_reason, load, measurement_of
from bench.step_variants import VARIANTS, step_variant
from catalog.repository import Catalog
from planner.calibration import CalibrationFit
from planner.engines import (
    ENGINES,
    POOLED_GENERATION,
    PROFILE_BOUNDS,
    EngineProfile,
    LowPrecisionFactor,
    generation_order,
    parameters_at_bounds,
    with_low_precision,
)
from planner.errors import CalibrationError
from planner.specs import Efficiency

ROOT = Path(__file__).resolve().parent.parent
PROFILES_JSON = ROOT / "catalog" / "data" / "engine_profiles.json"
REPORT_DOC = ROOT / "docs" / "engines.md"
COMMAND = ".venv/bin/python -m bench.engine_profiles"

#: A pair's own profile needs this many points from this many sources: four parameters from fewer
#: than twice as many points is not a fit, and a pair seen by one source only cannot tell the engine
#: from that publisher's setup (its leave-one-source-out error is undefined). The one-source pair in
#: the set, h100-sxm × vllm (dstack's Llama 3.1 405B FP8 offline runs on vLLM 0.6.3, 17 points), fitted
#: alone to η_compute 0.06 with overlap 0.90: under-determined, so such a pair takes the documented fallback.
MIN_POINTS = 8
MIN_SOURCES = 2
#: A release generation (major.minor) of a pair gets its own profile with at least this many of the pair's
#: points of that release, of at least this many models: the same 2 × 4 parameters, and a release profile
#: fitted on one model would be that model's profile. No source count is asked: in this set each release is
#: published by one source (a TensorRT-LLM release's perf table, a ROCm vLLM docker's page), so a two-source
#: rule would leave nearly every release pooled; the LOSO columns show what a release gets from the others.
MIN_GENERATION_POINTS = MIN_POINTS
MIN_GENERATION_MODELS = 2
SIXTEEN_BIT = ("bf16", "fp16")
LOW_PRECISION = ("fp8", "int8", "fp4")
#: The version a measurements.json source's `engine` text names after the engine's own name; "0.5/0.6.1"
#: (two releases in one table) names no single generation.
_VERSION_IN_TEXT = {
    "trt-llm": re.compile(r"TensorRT-LLM v?(\d+)\.(\d+)(?![\d.]*/)"),
    "vllm": re.compile(r"vLLM v?(\d+)\.(\d+)(?![\d.]*/)"),
    "sglang": re.compile(r"SGLang v?(\d+)\.(\d+)(?![\d.]*/)"),
}
_VERSION_AT_START = re.compile(r"^\s*v?(\d+)\.(\d+)")


def engine_of_source(text: str) -> str | None:
    """The engine a measurements.json source names (its `engine` text)."""
    lowered = text.lower()
    for needle, engine in (("tensorrt-llm", "trt-llm"), ("nim", "trt-llm"), ("sglang", "sglang"), ("vllm", "vllm")):
        if needle in lowered:
            return engine
    return None


def generation_of(engine: str, release: str, source_text: bool = False) -> str | None:
    """The release generation (major.minor) of a point: from its `engine_release` (serving_evidence.json), or
    from the version printed after the engine's name in a measurements.json source's `engine` text; None
    when no single release is stated (a date, "not stated", a NIM container version)."""
    found = _VERSION_IN_TEXT[engine].search(release) if source_text else _VERSION_AT_START.match(release)
    return None if found is None else f"{int(found.group(1))}.{int(found.group(2))}"


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
    """Every fit point grouped by (GPU, engine); each Measurement's record carries `engine`, `engine_release` and
    `generation` (generation_of; None when the release is not stated)."""
    evidence = [r for r in fit_data(load()) if inexpressible_reason(r) is None]
    groups: dict[tuple[str, str], list[Measurement]] = {}
    seen: set[tuple[Any, ...]] = set()
    for record in evidence:
        if record["engine"] not in ENGINES:  # e.g. NIM points whose backend is not printed: no engine to fit
            continue
        m = measurement_of(catalog, record)
        seen.add(_key(record, record["engine"]))
        generation = generation_of(record["engine"], str(record["engine_release"]))
        groups.setdefault((record["gpu"], record["engine"]), []).append(replace(m, record={**record, "generation": generation}))
    document, measurements = load_measurements(catalog)
    for m in measurements:
        if not m.record.get("fit", True):
            continue
        source = document["sources"][m.record["source"]]
        text = str(source.get("engine", ""))
        engine = engine_of_source(text)
        if engine is None or _key(m.record, engine) in seen:
            continue
        generation = generation_of(engine, text, source_text=True)
        release = generation or str(source.get("date", "?"))
        record = {**m.record, "engine": engine, "engine_release": release, "generation": generation}
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
    """bench/fidelity.py's fit within the profile bounds the planner judges a profile by (planner/engines.py)."""
    return fit_gpu(ms, base=base, bounds=PROFILE_BOUNDS)


def pair_base(architecture: str, engine: str, factors: Sequence[LowPrecisionFactor]) -> Efficiency:
    """The fit's base: FIT_BASE with the low-precision factors a plan on (architecture, engine) applies
    (planner/engines.py with_low_precision, fallbacks included), so the fitted η_compute is the 16-bit rate
    the planner multiplies them by."""
    return with_low_precision(FIT_BASE, architecture, engine, factors)


def _models(ms: Sequence[Measurement]) -> int:
    return len({m.record["model"] for m in ms})


def generation_groups(ms: Sequence[Measurement]) -> dict[str, list[Measurement]]:
    """A pair's points by release generation, unstated releases left out."""
    groups: dict[str, list[Measurement]] = {}
    for m in ms:
        if m.record.get("generation"):
            groups.setdefault(str(m.record["generation"]), []).append(m)
    return dict(sorted(groups.items(), key=lambda item: generation_order(item[0])))


def _releases(ms: Sequence[Measurement]) -> str:
    return "; ".join(sorted({str(m.record.get("engine_release")) for m in ms}))


def has_profile(ms: Sequence[Measurement]) -> bool:
    """Whether a pair's points earn it a profile (MIN_POINTS from MIN_SOURCES)."""
    return len(ms) >= MIN_POINTS and _n_sources(ms) >= MIN_SOURCES


def has_generation_profile(gms: Sequence[Measurement]) -> bool:
    """Whether a release generation's points earn it a profile of its own (MIN_GENERATION_POINTS of MIN_GENERATION_MODELS)."""
    return len(gms) >= MIN_GENERATION_POINTS and _models(gms) >= MIN_GENERATION_MODELS


def pair_profiles(
    gpu: str, engine: str, ms: Sequence[Measurement], base: Efficiency, stamp: str = "", only: Collection[str] | None = None
) -> list[tuple[EngineProfile, CalibrationFit]]:
    """The pair's profiles by the rules: none below MIN_POINTS / MIN_SOURCES; else the profile pooled over its
    releases (generation `all`) and one per generation with MIN_GENERATION_POINTS of MIN_GENERATION_MODELS models
    (`only`: just those of these labels, for a held-out prediction that needs no other)."""
    if not has_profile(ms):
        return []
    slices = [(POOLED_GENERATION, list(ms))] + [
        (generation, gms) for generation, gms in generation_groups(ms).items() if has_generation_profile(gms)
    ]
    slices = [(label, gms) for label, gms in slices if only is None or label in only]
    out: list[tuple[EngineProfile, CalibrationFit]] = []
    for generation, gms in slices:
        try:
            fit = fit_pair(gms, base)
        except CalibrationError:
            continue
        what = "every release" if generation == POOLED_GENERATION else f"release generation {generation}"
        pinned = parameters_at_bounds(fit.efficiency)
        source = (
            f"fitted {stamp} by bench/engine_profiles.py (bench/fidelity.py fit_gpu: soft-L1, 1/sqrt(n) per source, "
            f"eta [0.05, 1], overhead [0, 2 ms]) on {len(gms)} {engine} points of {gpu} ({what}: releases {_releases(gms)}) "
            f"from {_n_sources(gms)} sources, {_models(gms)} models, low-precision factors "
            f"{dict(base.low_precision_factors) or 'none'} applied"
            + (f"; at bounds: {', '.join(pinned)}" if pinned else "")
            + "; docs/engines.md"
        )
        profile = EngineProfile(
            gpu=gpu,
            engine=engine,
            generation=generation,
            efficiency=replace(fit.efficiency, low_precision_factors=(), source=source),
            points=len(gms),
            sources=_n_sources(gms),
            source=source,
        )
        out.append((profile, fit))
    return out


def engine_spec(m: Measurement) -> str:
    """The engine a plan for this point's release asks for: `engine@generation`, or `engine@all` when unstated."""
    return f"{m.record['engine']}@{m.record.get('generation') or POOLED_GENERATION}"


def profile_record(profile: EngineProfile) -> dict[str, Any]:
    eff = profile.efficiency
    return {
        "gpu": profile.gpu,
        "engine": profile.engine,
        "engine_generation": profile.generation,
        "memory": round(eff.memory, 4),
        "compute": round(eff.compute, 4),
        "step_overhead_ms": round(eff.step_overhead_s * 1e3, 4),
        "memory_reserve_fraction": eff.memory_reserve_fraction,
        "memory_compute_overlap": round(eff.memory_compute_overlap, 4),
        "points": profile.points,
        "sources": profile.sources,
        "source": profile.source,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--date", default=date.today().isoformat(), help="date stamped into the JSON and report")
    parser.add_argument("--variant", choices=VARIANTS, default="shipped", help="step-model variant (bench/step_variants.py)")
    parser.add_argument("--out", type=Path, help="folder for the JSON and report of a variant (required with one)")
    args = parser.parse_args(argv)
    if args.variant != "shipped" and args.out is None:
        parser.error("--variant needs --out: a variant's profiles are not the shipped ones")
    profiles_json = PROFILES_JSON if args.out is None else args.out / PROFILES_JSON.name
    report_doc = REPORT_DOC if args.out is None else args.out / REPORT_DOC.name
    from bench.engine_errors import cross_validate, error_report  # the report's half; imports this module

    with tempfile.TemporaryDirectory() as directory, step_variant(args.variant):
        catalog = open_reference_catalog(Path(directory))
        groups = fit_points(catalog)
        factors, factor_rows = low_precision_factors(catalog, groups)
        fitted: dict[tuple[str, str], list[tuple[EngineProfile, CalibrationFit]]] = {}
        for (gpu, engine), ms in groups.items():
            base = pair_base(catalog.gpu_spec(gpu, "ideal").architecture, engine, factors)
            fitted[(gpu, engine)] = pair_profiles(gpu, engine, ms, base, args.date)
        errors = cross_validate(catalog, groups, factors, fitted, args.date)
        report = error_report(catalog, groups, fitted, errors)
        check = evaluate(catalog, load())
        catalog.session.close()
    profiles = [
        profile_record(
            replace(
                p,
                source=f"{p.source.removesuffix('; docs/engines.md')}; {report.summary[(p.gpu, p.engine, p.generation)]}; docs/engines.md",
            )
        )
        for pairs in fitted.values()
        for p, _ in pairs
    ]
    document = {
        "description": (
            f"Per (GPU, engine, engine generation) efficiency profiles and per (architecture, engine, datatype) low-precision "
            f"factors, written by {COMMAND} on {args.date}; do not edit by hand (docs/engines.md says how they are fitted)."
        ),
        "profiles": profiles,
        "low_precision": [
            {"architecture": f.architecture, "engine": f.engine, "datatype": f.datatype, "factor": f.factor, "source": f.source}
            for f in factors
        ],
    }
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    profiles_json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    report_doc.write_text(
        render(
            args.date,
            report.profile_table,
            factor_rows,
            factors,
            len([e for e in check if e.reason is None]),
            report.lines,
            report.bounds_line,
        ),
        encoding="utf-8",
    )
    print("\n".join(report.profile_table))
    print("\n".join(report.goal_lines))
    return 0


def render(
    today: str,
    table: Sequence[str],
    factor_rows: Sequence[tuple[str, str, str, float | None, float | None, str]],
    factors: Sequence[LowPrecisionFactor],
    expressible: int,
    error_lines: Sequence[str],
    bounds_line: str = "",
) -> str:
    lines = [
        "# Engine profiles: efficiency per (GPU, engine, generation), low precision per (architecture, engine, datatype)",
        "",
        f"Generated by `{COMMAND}` on {today} from `bench/serving_evidence.json` (its `evidence` points the step model",
        f"can express; {expressible} of its points, checks included, are expressible) and `bench/measurements.json`.",
        "Do not edit by hand: the command regenerates this page, its error tables included, and",
        "`catalog/data/engine_profiles.json`, which the catalog loads into `engine_profiles` (keyed by GPU, engine and",
        "engine generation) and `low_precision_factors` (migration 0014). It takes several minutes of CPU (every",
        "held-out source and model refits its GPU's profiles).",
        "",
        "## Rules",
        "",
        f"- A (GPU, engine) pair gets its own profile with ≥ {MIN_POINTS} fit points from ≥ {MIN_SOURCES} source: the",
        "  profile pooled over every release in the set (generation `all`). MLPerf points (role `check`) are never fit data.",
        "- A release generation (major.minor of the published release: vLLM 0.11.1rc is `0.11`) of the pair gets a",
        f"  profile of its own with ≥ {MIN_GENERATION_POINTS} of the pair's points of that release covering ≥ {MIN_GENERATION_MODELS}",
        "  models (four parameters need twice as many points, and a one-model release profile would be that model's).",
        "  No source count is asked: each release in the set is published by one source (a TensorRT-LLM release's perf",
        "  table, a ROCm vLLM docker page), so a two-source rule would pool nearly every release. A release with fewer",
        "  points, or one whose source states no release, is priced by the pooled profile, and the plan says so.",
        "- The fitter is `bench/fidelity.py` `fit_gpu` (soft-L1 on relative errors, each source weighted 1/√n) within",
        "  `planner/engines.py` `PROFILE_BOUNDS` (η in [0.05, 1], overhead in [0, 2 ms], overlap in [0, 1], the same as",
        "  bench/fidelity.py's; tensor-parallel communication on).",
        "- A parameter that ends on one of those bounds was pinned by the bound, not determined by the points: the",
        "  table's `at bounds` column names it, and a plan priced with that profile says `under-determined … (low",
        "  confidence in this profile …)` in `engine.profile.reason`, lists it in `engine.profile.at_bounds`, and is graded",
        "  one step below the GPU's catalog calibration (`engine.profile.calibration_grade`, `calibration_grades`; low",
        "  stays low), which `constraints.min_confidence` then sees.",
        "- Low-precision factor of datatype d = η_compute fitted on the pair's d points ÷ η_compute fitted on its",
        "  16-bit points (each slice ≥ 8 points and compute visible). Without a 16-bit slice the denominator is the",
        "  median 16-bit η_compute of the same engine on the vendor's other GPUs — an assumption, named in the factor's",
        "  source. Capped at 1 (the datasheet ratio). Per architecture: the median over its GPUs.",
        "- The profiles are then fitted with the factors a plan on that pair applies (the engine's own, else the same",
        "  architecture's under another engine, `planner/engines.py` `with_low_precision`), so η_compute is the 16-bit",
        "  rate the planner multiplies them by.",
        "- Lookup when planning (`planner/engines.py` `choose_profile`): `engine` alone → the pair's newest generation",
        "  with a profile of its own, else its pooled profile; `engine@generation` (e.g. `vllm@0.11`) → that",
        "  generation's profile, else the pooled one (`fallback: true`, and why); a generation no GPU has a profile of",
        "  is a 422 naming the known ones (`check_generation`); `engine@all` → the pooled profile. A",
        "  pair without a profile → the same GPU's pooled profile under the engine with most points (`fallback: true`)",
        "  → the GPU's engine-agnostic catalog calibration (today's `gpus.json` efficiency, without factors). A",
        "  factor: (architecture, engine, datatype) → the same architecture and datatype under another engine → the",
        "  datasheet ratio (factor 1). TensorRT-LLM is not offered on AMD GPUs.",
        "",
        "## Profiles",
        "",
        "`points`, `sources`: what the profile is fitted on. `before`: median |optimism| of all the pair's points with",
        "today's per-GPU calibration (pooled rows). `priced`: the points this profile prices when each is planned on",
        "its own release (a pooled profile prices the releases without a profile of their own and the unstated ones);",
        "in-sample, LOSO and LOMO are the median |optimism| over those (next section).",
        "",
        "| GPU | engine | generation | points | sources | models | η_mem | η_compute | overhead ms | overlap | factors | at bounds | before | priced | in-sample | LOSO | LOMO | used |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *table,
        "",
        bounds_line,
        "",
        *error_lines,
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
        "The set has no expressible L40S vLLM evidence point (the two L40S vLLM rows are MLPerf checks without",
        "published lengths, so they are neither fit data nor predictable), so an L40S plan on vLLM takes the L40S",
        "TensorRT-LLM profile (`fallback: true`, said in the plan) with the Ada FP8 factor; its error on vLLM itself is",
        "unmeasured until an L40S vLLM serving point with lengths is added to `bench/serving_evidence.json`.",
        "",
        "## Caveats",
        "",
        "- Sources in this set are not all independent: the two dstack posts share their runs' publisher, and",
        "  NVIDIA's perf tables share a method (trtllm-bench at maximum load); LOSO holds out a source key, not a publisher.",
        "- A generation profile fitted on one source has no out-of-source figure of its own: its LOSO is the pooled",
        "  profile of the other releases predicting it, which is what a release without a table gets.",
        "- Where a pair's sources disagree on different models (b200 and gb200 × trt-llm: Qwen3-30B-A3B MoE in one",
        "  TensorRT-LLM 1.0 source, Llama 3.1 in the other), splitting by release cannot help: both are release 1.0,",
        "  and the LOSO there is a leave-one-model-out in disguise (the step model's MoE cost, not the release).",
        "",
        "## In the API",
        "",
        "`POST /v1/plans` takes `engine` (one, a list, or `any`; omitted: the engine-agnostic calibration, answers",
        "unchanged); an engine may name its generation, `vllm@0.11` or `trt-llm@all` (the pooled profile). Each allowed",
        "engine is planned in full; the cheapest answers with `engine: {chosen, allowed, reason, profile: {gpu, engine,",
        "generation, source, fallback, reason, at_bounds}, profiles}` and the others appear in `justification.alternatives`",
        "with kind `engine`; `plan.engine` stays the bare engine (the deploy target), `engine.profile.generation` the",
        "generation priced. `constraints.pin.engine` (a bare engine) narrows the list to the engines it matches, every",
        "generation of its engine (`vllm` matches `vllm@0.11`; none matched: 422). A list of n engines runs n full plans,",
        "so it takes about n times as long as one. `/v1/evaluate`, `/v1/simulate`, `/v1/capacity`, `/v1/what-if` and",
        "`/v1/fleet-plans` take one `engine`, optionally `engine@generation`, through the same parser and the same pin rule",
        "(capacity, what-if), and echo `engine` with each GPU's profile (`profile.generation`). An unknown engine, a",
        "malformed generation or a generation no profile of the engine has (the 422 lists `known_generations`) is a 422;",
        "`trt-llm` on AMD GPUs only is a 422 naming the engine.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
