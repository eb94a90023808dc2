"""Predict the serving-evidence set with today's shipped calibration and write the error report.

    .venv/bin/python -m bench.serving_evidence          # writes docs/serving-evidence.md

bench/serving_evidence.json holds published serving measurements with the engine, its release,
precision, parallelism, lengths and concurrency of each point (issue 14 §3, §5). Nothing is fitted
here: every point the step model can express is predicted through `planner.performance.build_step_model`
with the `calibrated` efficiency each GPU ships in catalog/data/gpus.json (the reference catalog
loaded into a throw-away SQLite database, as bench/fidelity.py does), and the error is reported per
GPU × engine. Points it cannot express (pipeline or expert parallelism, several nodes, attention
data-parallelism, lengths not published) are counted separately with the reason. Points with role
"check" (MLPerf) are reported but are never fit data. Each point is also predicted with its (GPU,
engine, release generation) profile, as a plan for its release asks (`engine_spec`: planner/engines.py,
fitted by bench/engine_profiles.py): the per-cell table shows both.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from bench.fidelity import Measurement, open_reference_catalog, trtllm_bench_concurrency
from bench.serving_evidence_leads import lead_problems, leads_section
from catalog.engine_profiles import EngineProfiles
from catalog.repository import Catalog
from planner.calibration import points_from_records
from planner.engines import ENGINES as PLANNED_ENGINES
from planner.engines import POOLED_GENERATION, EngineChoice, choose_profile, release_generation, runs_on
from planner.memory import replica_kv_bytes_per_token, weight_bytes
from planner.specs import Efficiency, GpuSpec, ModelSpec, Precision

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ROOT / "bench" / "serving_evidence.json"
REPORT_DOC = ROOT / "docs" / "serving-evidence.md"
COMMAND = ".venv/bin/python -m bench.serving_evidence"

ENGINES: tuple[str, ...] = ("vllm", "sglang", "trt-llm", "other")
ROLES: tuple[str, ...] = ("evidence", "check")
KINDS: tuple[str, ...] = ("throughput", "tpot", "ttft", "decode_step", "prefill")
REQUIRED_POINT_FIELDS: tuple[str, ...] = (
    "id", "source", "role", "engine", "engine_release", "gpu", "model", "weights", "kv_cache",
    "tp", "pp", "ep", "nodes", "kind", "batching", "concurrency", "request_rate",
    "prompt_tokens", "output_tokens", "published",
)  # fmt: skip
REQUIRED_SOURCE_FIELDS: tuple[str, ...] = ("title", "url", "section", "publisher", "date", "engine", "engine_release", "method")
#: vLLM allocates gpu_memory_utilization (default 0.9) of each GPU to weights and KV cache
#: (vLLM EngineArgs, https://docs.vllm.ai/en/latest/models/engine_args.html); every AMD throughput
#: command in the set passes --gpu-memory-utilization 0.9.
VLLM_GPU_MEMORY_UTILIZATION = 0.9
#: Throughput at or above this concurrency counts as high-concurrency serving throughput (issue 14 §3
#: asks for ≥ 40 % of points "at a stated concurrency or request rate" under load).
HIGH_CONCURRENCY = 32
WORST_SHOWN = 15


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluated:
    """One point: its record, and (when expressible) its prediction with the shipped calibration."""

    record: Mapping[str, Any]
    reason: str | None  # why the step model cannot express it; None when it can
    measurement: Measurement | None = None
    predicted: float | None = None
    #: The prediction with the point's (GPU, engine, release generation) profile, priced as a plan for its release
    #: asks (`engine_spec`; planner/engines.py, docs/engines.md); None where the engine does not run on the GPU or
    #: is not one of planner.engines.ENGINES.
    engine_predicted: float | None = None
    #: The pair has no profile of its own: another engine's profile or the catalog calibration stood in.
    engine_fallback: bool = False
    #: The generation of the profile that priced it (its release's, or `all`, the pair's pooled profile).
    engine_generation: str | None = None

    @property
    def engine_optimism(self) -> float | None:
        """`optimism` of the engine-profile prediction."""
        if self.engine_predicted is None or self.measurement is None:
            return None
        error = self.engine_predicted / self.measurement.point.value - 1.0
        return error if self.record["kind"] == "throughput" else 1.0 / (1.0 + error) - 1.0

    @property
    def error(self) -> float:
        """predicted / measured − 1 (positive: Headroom optimistic for throughput, pessimistic for a time)."""
        assert self.measurement is not None and self.predicted is not None
        return self.predicted / self.measurement.point.value - 1.0

    @property
    def optimism(self) -> float:
        """The error signed so that positive always means Headroom promises more than was measured."""
        return self.error if self.record["kind"] == "throughput" else 1.0 / (1.0 + self.error) - 1.0


def load(path: Path = EVIDENCE) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def problems(document: Mapping[str, Any], catalog_slugs: Mapping[str, set[str]] | None = None) -> list[str]:
    """Everything wrong with the set's form (empty when well-formed).

    `catalog_slugs`: {"gpus", "models", "quantizations"} → known slugs; a point naming one outside
    them must say so in its expressibility (it is reported as not expressible, never silently dropped).
    """
    found: list[str] = []
    sources: Mapping[str, Mapping[str, Any]] = document.get("sources", {})
    for key, source in sources.items():
        missing = [f for f in REQUIRED_SOURCE_FIELDS if not source.get(f)]
        if missing:
            found.append(f"source {key}: missing {', '.join(missing)}")
        if not str(source.get("url", "")).startswith("https://"):
            found.append(f"source {key}: url is not https")
    ids: set[str] = set()
    cited: set[str] = set()
    for record in document.get("points", []):
        pid = str(record.get("id", "?"))
        missing = [f for f in REQUIRED_POINT_FIELDS if f not in record]
        if missing:
            found.append(f"{pid}: missing {', '.join(missing)}")
            continue
        if pid in ids:
            found.append(f"{pid}: duplicate id")
        ids.add(pid)
        source = sources.get(record["source"])
        if source is None:
            found.append(f"{pid}: source {record['source']!r} is not in sources")
            continue
        cited.add(record["source"])
        if record["engine"] not in ENGINES:
            found.append(f"{pid}: engine {record['engine']!r} not one of {ENGINES}")
        if record["role"] not in ROLES:
            found.append(f"{pid}: role {record['role']!r} not one of {ROLES}")
        if source.get("mlperf") and record["role"] != "check":
            found.append(f"{pid}: an MLPerf point must have role 'check' (never fit data)")
        if record["kind"] not in KINDS:
            found.append(f"{pid}: kind {record['kind']!r} not one of {KINDS}")
        value_key = "output_tokens_per_s" if record["kind"] == "throughput" else "value_ms"
        if not (isinstance(record.get(value_key), (int, float)) and record[value_key] > 0):
            found.append(f"{pid}: needs a positive {value_key}")
        for field in ("tp", "pp", "ep", "nodes"):
            if not (isinstance(record[field], int) and record[field] >= 1):
                found.append(f"{pid}: {field} must be an integer ≥ 1")
        if record.get("ambiguous") and not (
            isinstance(record.get("alternative_output_tokens_per_s"), (int, float))
            or isinstance(record.get("alternative_value_ms"), (int, float))
        ):
            found.append(f"{pid}: an ambiguous point must give the alternative reading's value")
        if catalog_slugs is not None:
            for field, table in (
                ("gpu", "gpus"),
                ("model", "models"),
                ("weights", "quantizations"),
                ("kv_cache", "quantizations"),
            ):
                if record[field] not in catalog_slugs[table]:
                    found.append(f"{pid}: {field} {record[field]!r} is not a catalog {table} slug")
    for key in sources:
        if key not in cited:
            found.append(f"source {key}: cited by no point")
    return found + lead_problems(document, None if catalog_slugs is None else catalog_slugs["gpus"])


def chip_coverage(document: Mapping[str, Any], gpu: str, subset: str = "all") -> tuple[int, int, int]:
    """(points, sources, publishers) on one GPU: every point, the fit-role ones (role 'evidence'), or those a
    refit can use and today's model can predict (`fit_data` and expressible). MLPerf checks count only in 'all'."""
    if subset == "all":
        chosen = [r for r in document["points"] if r["gpu"] == gpu]
    elif subset == "evidence":
        chosen = [r for r in document["points"] if r["gpu"] == gpu and r["role"] == "evidence"]
    elif subset == "predictable":
        chosen = [r for r in fit_data(document) if r["gpu"] == gpu and inexpressible_reason(r) is None]
    else:
        raise ValueError(f"subset {subset!r} is not one of all, evidence, predictable")
    keys = {r["source"] for r in chosen}
    return len(chosen), len(keys), len({document["sources"][key]["publisher"] for key in keys})


def fit_data(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The points a refit may use: role 'evidence' (MLPerf and other checks never) whose quantity is not ambiguous."""
    return [record for record in document["points"] if record["role"] == "evidence" and not record.get("ambiguous")]


def inexpressible_reason(record: Mapping[str, Any]) -> str | None:
    """Why today's step model (one node, tensor parallelism only, known lengths) cannot express a point."""
    if record["pp"] > 1:
        return "pipeline parallelism (pp > 1)"
    if record["ep"] > 1:
        return "expert parallelism (ep > 1)"
    if record["nodes"] > 1:
        return "multi-node replica"
    if record.get("attention_dp"):
        return "attention data-parallelism (DP attention)"
    if record["prompt_tokens"] is None or record["output_tokens"] is None:
        return "prompt/output lengths not published"
    if record["concurrency"] is None and record["batching"] == "continuous":
        return "concurrency not published"
    return None


def vllm_max_num_seqs_concurrency(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, tp: int, sequence_tokens: float, max_num_seqs: int
) -> int:
    """Requests vLLM keeps in flight: --max-num-seqs, lowered to what its KV cache holds at ISL + OSL tokens each."""
    free_bytes = VLLM_GPU_MEMORY_UTILIZATION * tp * gpu.memory_bytes - weight_bytes(model, precision.weights)
    per_request = replica_kv_bytes_per_token(model, precision.kv_cache, tp) * sequence_tokens  # KV of ISL + OSL
    return max(1, min(max_num_seqs, int(free_bytes / per_request)))


def concurrency_of(record: Mapping[str, Any], gpu: GpuSpec, model: ModelSpec, precision: Precision) -> int:
    """The batch the step model is evaluated at: printed, or computed by the source's engine rule."""
    rule = record["concurrency"]
    tp = int(record["tp"])
    sequence = float(record["prompt_tokens"]) + float(record["output_tokens"])
    if rule == "trtllm-bench-kv-limited":
        return trtllm_bench_concurrency(gpu, model, precision, tp, sequence)
    if rule == "vllm-max-num-seqs-kv-limited":
        limit = min(int(record["max_num_seqs"]), int(record.get("num_prompts", record["max_num_seqs"])))
        return vllm_max_num_seqs_concurrency(gpu, model, precision, tp, sequence, limit)
    return int(rule)


def measurement_of(catalog: Catalog, record: Mapping[str, Any]) -> Measurement:
    gpu = catalog.gpu_spec(record["gpu"], "ideal")
    model = catalog.model_spec(record["model"])
    precision = catalog.precision(record["weights"], record["kv_cache"])
    fields = {
        "kind": record["kind"],
        "label": record["id"],
        "batch": concurrency_of(record, gpu, model, precision),
        "prompt_tokens": record["prompt_tokens"],
        "output_tokens": record["output_tokens"],
        "batching": record["batching"],
    }
    fields |= {key: record[key] for key in ("output_tokens_per_s", "value_ms") if key in record}
    (point,) = points_from_records([fields])
    return Measurement(record=record, point=point, gpu=gpu, model=model, precision=precision, tp=int(record["tp"]))


def engine_spec(record: Mapping[str, Any]) -> str:
    """The engine a plan for this point's release asks for: `engine@generation` of its published release, or
    `engine@all` (the pair's pooled profile) where the release names no version, as bench/engine_profiles.py
    prices its points. A release the pair has no profile of falls back to the pooled one (planner/engines.py)."""
    generation = release_generation(str(record["engine_release"]))
    return f"{record['engine']}@{generation or POOLED_GENERATION}"


def evaluate(catalog: Catalog, document: Mapping[str, Any]) -> list[Evaluated]:
    """Every point with its prediction under each GPU's shipped `calibrated` efficiency, and under its (GPU, engine,
    release generation) profile (`engine_spec`)."""
    shipped: dict[str, Efficiency] = {}
    on_engine: dict[tuple[str, str], EngineChoice | None] = {}
    store = EngineProfiles(catalog.session)
    profiles, factors = store.profiles(), store.factors()
    paired = {(p.gpu, p.engine) for p in profiles}
    out: list[Evaluated] = []
    for record in document["points"]:
        reason = inexpressible_reason(record)
        if reason is not None:
            out.append(Evaluated(record=record, reason=reason))
            continue
        m = measurement_of(catalog, record)
        gpu, engine = record["gpu"], record["engine"]
        if gpu not in shipped:
            shipped[gpu] = catalog.gpu_spec(gpu, "calibrated").efficiency
        known = engine in PLANNED_ENGINES
        spec = engine_spec(record) if known else engine
        if (gpu, spec) not in on_engine:
            gpu_spec = catalog.gpu_spec(gpu, "calibrated")
            runs = known and runs_on(engine, gpu_spec)
            on_engine[(gpu, spec)] = choose_profile(gpu_spec, spec, profiles, factors) if runs else None
        choice = on_engine[(gpu, spec)]
        out.append(
            Evaluated(
                record=record,
                reason=None,
                measurement=m,
                predicted=m.predict_with(shipped[gpu]),
                engine_predicted=None if choice is None else m.predict_with(choice.efficiency),
                engine_fallback=choice is not None and (gpu, engine) not in paired,
                engine_generation=None if choice is None else choice.generation,
            )
        )
    return out


def kind_class(record: Mapping[str, Any]) -> str:
    """Coverage class: high-concurrency serving throughput, low-concurrency, static batch, or a latency."""
    if record["kind"] != "throughput":
        return record["kind"]
    if record["batching"] == "static":
        return "static-batch throughput"
    concurrency = record["concurrency"]
    if isinstance(concurrency, str) or (isinstance(concurrency, int) and concurrency >= HIGH_CONCURRENCY):
        return "high-concurrency throughput"
    return "low-concurrency throughput" if concurrency is not None else "throughput (concurrency unknown)"


def _fmt(record: Mapping[str, Any], value: float) -> str:
    return f"{value:,.0f} tok/s" if record["kind"] == "throughput" else f"{value * 1e3:,.1f} ms"


def _cell_key(e: Evaluated) -> tuple[str, str]:
    return (e.record["gpu"], e.record["engine"])


def _group(items: Iterable[Evaluated], key: Any) -> dict[Any, list[Evaluated]]:
    groups: dict[Any, list[Evaluated]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return dict(sorted(groups.items()))


def cell_errors(evaluated: Sequence[Evaluated]) -> dict[tuple[str, str], tuple[int, float, float, float]]:
    """Per GPU × engine over expressible points: (n, median |error|, worst signed error, median optimism)."""
    cells: dict[tuple[str, str], tuple[int, float, float, float]] = {}
    for key, items in _group((e for e in evaluated if e.reason is None), _cell_key).items():
        errors = [e.error for e in items]
        worst = max(errors, key=abs)
        cells[key] = (len(items), statistics.median(abs(x) for x in errors), worst, statistics.median(e.optimism for e in items))
    return cells


def _prefill_heavy(r: Mapping[str, Any]) -> bool:
    return bool(r["prompt_tokens"] > r["output_tokens"])


def _decode_heavy(r: Mapping[str, Any]) -> bool:
    return bool(r["output_tokens"] >= 4 * r["prompt_tokens"])


def _is(**fields: Any) -> Callable[[Mapping[str, Any]], bool]:
    return lambda r: all(r.get(k) == v for k, v in fields.items())


#: Models and ISL/OSL pairs both TensorRT-LLM 0.12.0 and 0.14.0 tables have, so a release contrast compares like with like.
_BOTH_RELEASES = ("llama-3.1-8b", "mistral-7b-v0.3", "mixtral-8x7b", "llama-3.1-70b")
_BOTH_LENGTHS = ((128, 128), (128, 2048), (128, 4096), (2048, 128), (2048, 2048))


def _release(gpu: str, weights: str, release: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda r: (
        _is(gpu=gpu, weights=weights, engine_release=release)(r)
        and r["model"] in _BOTH_RELEASES
        and (r["prompt_tokens"], r["output_tokens"]) in _BOTH_LENGTHS
    )


def _moe(r: Mapping[str, Any]) -> bool:
    return str(r["model"]).startswith(("mixtral", "qwen3-30b", "deepseek"))


def _offline_prompts(r: Mapping[str, Any]) -> int:
    """Prompts handed to an offline run: num_prompts where the admission rule carries it, else the printed concurrency."""
    return int(r.get("num_prompts", r["concurrency"]))


#: Slices of the expressible points set side by side: what differs between them is what the refit
#: must explain (issue 14 §1/§3: FP8 compute on Ada, tensor-parallel cost, per-sequence cost, MoE, engine release).
CONTRASTS: tuple[tuple[str, str, Callable[[Mapping[str, Any]], bool], str, Callable[[Mapping[str, Any]], bool]], ...] = (
    (
        "L40S FP8, TensorRT-LLM: prefill-heavy vs decode-heavy, tp 1",
        "ISL > OSL",
        lambda r: _is(gpu="l40s", tp=1)(r) and _prefill_heavy(r),
        "OSL ≥ 4 ISL",
        lambda r: _is(gpu="l40s", tp=1)(r) and _decode_heavy(r),
    ),
    (
        "L40S FP8, TensorRT-LLM: tp 1 vs tp > 1 (PCIe)",
        "tp 1",
        _is(gpu="l40s", tp=1),
        "tp > 1",
        lambda r: _is(gpu="l40s")(r) and r["tp"] > 1,
    ),
    (
        "H100, TensorRT-LLM 0.12/0.14, prefill-heavy: FP8 vs FP16 weights",
        "fp8",
        lambda r: _is(gpu="h100-sxm", weights="fp8", engine="trt-llm")(r) and _prefill_heavy(r),
        "fp16",
        lambda r: _is(gpu="h100-sxm", weights="fp16", engine="trt-llm")(r) and _prefill_heavy(r),
    ),
    (
        "A100 FP16, TensorRT-LLM: tp ≤ 2 vs tp ≥ 4",
        "tp ≤ 2",
        lambda r: _is(gpu="a100-80gb-sxm")(r) and r["tp"] <= 2,
        "tp ≥ 4",
        lambda r: _is(gpu="a100-80gb-sxm")(r) and r["tp"] >= 4,
    ),
    (
        "H100 FP8, TensorRT-LLM, same models and lengths: release 0.12.0 vs 0.14.0",
        "0.12.0",
        _release("h100-sxm", "fp8", "0.12.0"),
        "0.14.0",
        _release("h100-sxm", "fp8", "0.14.0"),
    ),
    (
        "H200 FP8, TensorRT-LLM, same models and lengths: release 0.12.0 vs 0.14.0",
        "0.12.0",
        _release("h200", "fp8", "0.12.0"),
        "0.14.0",
        _release("h200", "fp8", "0.14.0"),
    ),
    (
        "H100/H200, TensorRT-LLM: dense vs MoE (Mixtral)",
        "dense",
        lambda r: r["gpu"] in ("h100-sxm", "h200") and r["engine"] == "trt-llm" and not _moe(r),
        "MoE",
        lambda r: r["gpu"] in ("h100-sxm", "h200") and r["engine"] == "trt-llm" and _moe(r),
    ),
    (
        "MI300X, vLLM static batch (benchmark_latency): batch ≤ 8 vs batch ≥ 64",
        "batch ≤ 8",
        lambda r: _is(gpu="mi300x", batching="static")(r) and r["concurrency"] <= 8,
        "batch ≥ 64",
        lambda r: _is(gpu="mi300x", batching="static")(r) and r["concurrency"] >= 64,
    ),
    (
        "MI300X static batch: Llama 3.1 70B vs 405B (tp 8)",
        "70B",
        _is(gpu="mi300x", batching="static", model="llama-3.1-70b"),
        "405B",
        _is(gpu="mi300x", batching="static", model="llama-3.1-405b"),
    ),
    (
        "DeepSeek-V3 (R1) on MI300X, tp 8: vLLM vs SGLang",
        "vllm",
        _is(gpu="mi300x", model="deepseek-v3", engine="vllm"),
        "sglang",
        _is(gpu="mi300x", model="deepseek-v3", engine="sglang"),
    ),
    (
        "DeepSeek-V3 (R1) offline, tp 8 (dstack): 32-64 prompts (1-2 tokens per routed expert) vs ≥ 256 prompts",
        "≤ 64 prompts",
        lambda r: _is(source="dstack-deepseek-r1-offline")(r) and _offline_prompts(r) <= 64,
        "≥ 256 prompts",
        lambda r: _is(source="dstack-deepseek-r1-offline")(r) and _offline_prompts(r) >= 256,
    ),
    (
        "H100, NIM 1.8.0 Llama 3.3 70B 5000/500 TPOT: offered concurrency ≤ 50 vs the engine's admission limit (85-86 decoding, Little's law)",
        "≤ 50",
        lambda r: _is(source="nvidia-nim-1.8.0-llama3.3-70b-h100", kind="tpot", prompt_tokens=5000)(r) and r["concurrency"] <= 50,
        "at the limit",
        lambda r: _is(source="nvidia-nim-1.8.0-llama3.3-70b-h100", kind="tpot", prompt_tokens=5000)(r) and r["concurrency"] > 50,
    ),
    (
        "DeepSeek-V3 (R1), vLLM tp 8: H200 vs MI300X",
        "h200",
        _is(gpu="h200", model="deepseek-v3", engine="vllm"),
        "mi300x",
        _is(gpu="mi300x", model="deepseek-v3", engine="vllm"),
    ),
)


def contrasts(evaluated: Sequence[Evaluated]) -> list[tuple[str, str, int, float, str, int, float]]:
    """Each contrast: (title, label A, n A, median optimism A, label B, n B, median optimism B); NaN where a slice is empty."""
    expressible = [e for e in evaluated if e.reason is None]
    rows = []
    for title, label_a, pick_a, label_b, pick_b in CONTRASTS:
        a = [e.optimism for e in expressible if pick_a(e.record)]
        b = [e.optimism for e in expressible if pick_b(e.record)]
        rows.append(
            (
                title,
                label_a,
                len(a),
                statistics.median(a) if a else math.nan,
                label_b,
                len(b),
                statistics.median(b) if b else math.nan,
            )
        )
    return rows


def _point_line(e: Evaluated) -> str:
    r = e.record
    assert e.measurement is not None and e.predicted is not None
    p = e.measurement.point
    return (
        f"| {r['id']} | {r['gpu']} | {r['engine']} {r['engine_release']} | {r['model']} | {r['weights']}/{r['kv_cache']} | "
        f"{r['tp']} | {r['kind']} | {r['batching']} | {p.batch} | {r['prompt_tokens']}/{r['output_tokens']} | "
        f"{_fmt(r, p.value)} | {_fmt(r, e.predicted)} | {e.error:+.1%} | {r['source']} |"
    )


def render(document: Mapping[str, Any], evaluated: Sequence[Evaluated], today: str) -> str:
    points = document["points"]
    sources = document["sources"]
    expressible = [e for e in evaluated if e.reason is None]
    n = len(points)
    high = sum(1 for r in points if kind_class(r) == "high-concurrency throughput")
    publishers = sorted({s["publisher"] for s in sources.values()})
    lines = [
        "# Serving evidence: published serving results by GPU × engine, against today's model",
        "",
        f"Generated by `{COMMAND}` on {today} from `bench/serving_evidence.json`. Do not edit by hand.",
        "",
        "The set collects published serving measurements with the engine as a dimension (engine, release,",
        "precision, tp/pp/ep, prompt/output lengths and concurrency as published) for the per-engine refit of",
        "issue 14. **Nothing is fitted here**: each point the step model can express is predicted with the",
        "`calibrated` efficiency every GPU ships in `catalog/data/gpus.json` today, through",
        "`planner.performance.build_step_model` (the same path as `bench/fidelity.py`). Error = predicted /",
        "measured − 1: for a throughput a positive error means Headroom is optimistic, for a time (TPOT) it",
        "means Headroom is pessimistic. *Optimism* below is signed so that positive always means Headroom",
        "promises more than was measured.",
        "",
        "How each point is predicted: a static batch (vLLM `benchmark_latency`) as prefill + (o − 1) decode",
        "steps; a continuous-batching point (trtllm-bench, vLLM `benchmark_throughput`, a serving benchmark",
        "at fixed concurrency) by the steady-state mixed step at its concurrency (`docs/calibration.md`,",
        "Method). Concurrency that a source does not print is its engine's own admission rule",
        "(`concurrency_rules` in the JSON). MLPerf points have role `check`: they are the independent check",
        "and are never fit data (`fit_data()` leaves them out; a test holds it).",
        "",
        "## Totals against issue 14's asks",
        "",
        "| ask | target | in the set |",
        "|---|---|---|",
        f"| points | ≥ 300 | {n} ({sum(1 for r in points if r['role'] == 'evidence')} evidence, {sum(1 for r in points if r['role'] == 'check')} check) |",
        f"| sources | ≥ 10 independent | {len(sources)} sources from {len(publishers)} publishers ({', '.join(publishers)}) |",
        f"| high-concurrency serving throughput | ≥ 40 % | {high} ({high / n:.0%}; throughput at concurrency ≥ {HIGH_CONCURRENCY} or at an engine's maximum-load admission) |",
    ]
    for gpu in ("mi300x", "mi325x"):
        every, evidence, predictable = (chip_coverage(document, gpu, subset) for subset in ("all", "evidence", "predictable"))
        lines.append(
            f"| {gpu} | ≥ 20 points from ≥ 3 sources | {every[0]} points from {every[1]} sources ({every[2]} publishers); "
            f"fit role (evidence): {evidence[0]} from {evidence[1]} sources ({evidence[2]} publishers), "
            f"{predictable[0]} of them predictable and unambiguous ({predictable[2]} publishers) |"
        )
    for gpu in ("l40s", "l4"):
        gp = [r for r in points if r["gpu"] == gpu and r["weights"] == "fp8"]
        engines = sorted({r["engine"] for r in gp})
        usable = sum(1 for r in gp if inexpressible_reason(r) is None and r["role"] == "evidence")
        lines.append(
            f"| {gpu} FP8 | measured | {len(gp)} points ({', '.join(engines) or 'none'}; {usable} predictable evidence) |"
        )
    predictable = {id(r) for r in fit_data(document) if inexpressible_reason(r) is None}
    for model in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"):
        mp = [r for r in points if r["model"] == model]
        per_gpu = ", ".join(f"{gpu} {count}" for gpu, count in sorted(Counter(r["gpu"] for r in mp).items()))
        usable = sum(1 for r in mp if id(r) in predictable)
        lines.append(f"| {model} | points on more GPUs | {len(mp)} ({per_gpu}); {usable} predictable and unambiguous |")
    for gpu in ("h100-sxm", "h200", "b200", "gb200"):
        gp = [r for r in points if r["gpu"] == gpu]
        releases = sorted({f"{r['engine']} {r['engine_release']}" for r in gp})
        usable = sum(1 for r in gp if id(r) in predictable)
        lines.append(
            f"| {gpu} | points | {len(gp)} ({usable} predictable and unambiguous; engine releases: {'; '.join(releases)}) |"
        )
    lines += [
        "",
        "## Coverage: points per GPU × engine × kind",
        "",
        "| GPU | engine | kind | points | releases | sources |",
        "|---|---|---|---|---|---|",
    ]
    coverage = _group(
        (Evaluated(record=r, reason=None) for r in points), lambda e: (e.record["gpu"], e.record["engine"], kind_class(e.record))
    )
    for (gpu, engine, kind), items in coverage.items():
        releases = sorted({str(e.record["engine_release"]) for e in items})
        srcs = sorted({e.record["source"] for e in items})
        lines.append(f"| {gpu} | {engine} | {kind} | {len(items)} | {'; '.join(releases)} | {', '.join(srcs)} |")
    lines += [
        "",
        "## Error of today's model per GPU × engine",
        "",
        f"Over the {len(expressible)} expressible points (roles `evidence` and `check` alike; the check points in",
        "this set are not expressible, below). Worst = the signed error of largest magnitude.",
        "",
        "The last three columns predict the same points with the point's (GPU, engine, release generation) profile and",
        "low-precision factors (`catalog/data/engine_profiles.json`, fitted on these evidence points by",
        "`bench/engine_profiles.py`: in-sample where the profile is the pair's own; docs/engines.md has the",
        "leave-one-source-out errors), each point priced as a plan for its own release asks: `engine@generation` of its",
        "`engine_release` (major.minor), `engine@all` where the release names no version. A release without a profile",
        "of its own on that GPU falls back to the pair's profile pooled over its releases (planner/engines.py);",
        "`own release` counts the points priced on their release's own profile. `(fallback)`: the pair has no profile",
        "at all, and another engine's profile or the catalog calibration stood in (docs/engines.md).",
        "",
        "| GPU | engine | points | median abs(error) | worst error | median optimism | engine profile: median abs(error) | median optimism | own release |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cells = cell_errors(evaluated)
    for (gpu, engine), (count, median, worst, optimism) in sorted(cells.items(), key=lambda kv: -kv[1][1]):
        items = [e for e in evaluated if e.reason is None and _cell_key(e) == (gpu, engine)]
        after = [o for o in (e.engine_optimism for e in items) if o is not None]
        fallback = " (fallback)" if any(e.engine_fallback for e in items) else ""
        after_text = (
            f"{statistics.median(abs(o) for o in after):.1%}{fallback} | {statistics.median(after):+.1%}" if after else "- | -"
        )
        own = sum(
            1
            for e in items
            if not e.engine_fallback
            and e.engine_generation is not None
            and e.engine_generation == release_generation(str(e.record["engine_release"]))
        )
        own_text = f"{own} of {len(items)}" if after else "-"
        lines.append(
            f"| {gpu} | {engine} | {count} | {median:.1%} | {worst:+.1%} | {optimism:+.1%} | {after_text} | {own_text} |"
        )
    lines += [
        "",
        "### By engine release and precision",
        "",
        "The same cells split by release and by weight precision (the engine and its generation are the",
        "dimension issue 14 §1 asks for; FP8 against FP16 on one chip shows whether the FP8 compute rate is realised).",
        "",
        "| GPU | engine | release | weights | kind | points | median abs(error) | median optimism |",
        "|---|---|---|---|---|---|---|---|",
    ]
    split = _group(
        expressible,
        lambda e: (
            e.record["gpu"],
            e.record["engine"],
            str(e.record["engine_release"]),
            e.record["weights"],
            kind_class(e.record),
        ),
    )
    for (gpu, engine, release, weights, kind), items in split.items():
        median = statistics.median(abs(e.error) for e in items)
        optimism = statistics.median(e.optimism for e in items)
        lines.append(f"| {gpu} | {engine} | {release} | {weights} | {kind} | {len(items)} | {median:.1%} | {optimism:+.1%} |")
    by_model = _group(expressible, lambda e: (e.record["model"], e.record["gpu"], e.record["engine"]))
    lines += [
        "",
        "### By model",
        "",
        "| model | GPU | engine | points | median abs(error) | median optimism |",
        "|---|---|---|---|---|---|",
    ]
    for (model, gpu, engine), items in by_model.items():
        median = statistics.median(abs(e.error) for e in items)
        optimism = statistics.median(e.optimism for e in items)
        lines.append(f"| {model} | {gpu} | {engine} | {len(items)} | {median:.1%} | {optimism:+.1%} |")
    lines += [
        "",
        "### Contrasts",
        "",
        "Median optimism of two slices of the expressible points side by side: where a slice differs from its",
        "partner, the model misses something that depends on what separates them (the data the refit should read).",
        "",
        "| contrast | slice A | n | median optimism | slice B | n | median optimism |",
        "|---|---|---|---|---|---|---|",
    ]
    for title, label_a, n_a, opt_a, label_b, n_b, opt_b in contrasts(evaluated):
        lines.append(f"| {title} | {label_a} | {n_a} | {opt_a:+.1%} | {label_b} | {n_b} | {opt_b:+.1%} |")
    worst = sorted(expressible, key=lambda e: -abs(e.error))[:WORST_SHOWN]
    lines += [
        "",
        f"## The {WORST_SHOWN} worst points",
        "",
        "| id | GPU | engine | model | weights/KV | tp | kind | batching | concurrency | ISL/OSL | measured | Headroom | error | source |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_point_line(e) for e in worst]
    ambiguous = [e for e in expressible if e.record.get("ambiguous")]
    if ambiguous:
        lines += [
            "",
            "## Points whose quantity the source leaves open",
            "",
            f"{len(ambiguous)} points print a figure without saying which quantity it is (the note in the JSON says",
            "why and which reading is taken). Both readings' errors are shown; these points are in the tables",
            "above under the reading taken, and a refit must not use them until the question is settled",
            "(`fit_data()` leaves them out).",
            "",
            "| id | GPU | engine | model | ISL/OSL | concurrency | measured (reading taken) | alternative | Headroom | error | error (alternative) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for e in ambiguous:
            r = e.record
            assert e.measurement is not None and e.predicted is not None
            alt = float(r.get("alternative_output_tokens_per_s") or r["alternative_value_ms"] / 1e3)
            lines.append(
                f"| {r['id']} | {r['gpu']} | {r['engine']} {r['engine_release']} | {r['model']} | {r['prompt_tokens']}/{r['output_tokens']} | "
                f"{e.measurement.point.batch} | {_fmt(r, e.measurement.point.value)} | {_fmt(r, alt)} | {_fmt(r, e.predicted)} | "
                f"{e.error:+.1%} | {e.predicted / alt - 1.0:+.1%} |"
            )
    not_expressible = [e for e in evaluated if e.reason is not None]
    lines += [
        "",
        "## Points Headroom cannot express",
        "",
        f"{len(not_expressible)} points are kept in the set but not predicted: today's step model has one node,",
        "tensor parallelism only (no pipeline or expert parallelism, no attention data-parallelism), and needs",
        "the prompt and output lengths (and a concurrency where it matters). The parallelism rows are the data for",
        "issue 14 §2 (pipeline, expert and multi-node replicas); the others wait for a source that prints what is missing.",
        "",
        "| reason | points | GPUs × engines | sources |",
        "|---|---|---|---|",
    ]
    for reason, items in _group(not_expressible, lambda e: e.reason).items():
        cells_text = ", ".join(sorted({f"{e.record['gpu']} {e.record['engine']}" for e in items}))
        srcs = ", ".join(sorted({e.record["source"] for e in items}))
        lines.append(f"| {reason} | {len(items)} | {cells_text} | {srcs} |")
    lines += leads_section(document)
    lines += ["", "## Sources", ""]
    for key, source in sources.items():
        count = sum(1 for r in points if r["source"] == key)
        lines += [
            f"- **{key}** ({count} points; {source['publisher']}, {source['date']}; engine {source['engine']} "
            f"{source['engine_release']}{'; MLPerf: check only' if source.get('mlperf') else ''}): {source['title']}, "
            f"{source['section']}. <{source['url']}>{' (' + source['url_note'] + ')' if source.get('url_note') else ''}. "
            f"Method: {source['method']}" + (f" Notes: {source['notes']}" if source.get("notes") else ""),
        ]
    lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--date", default=date.today().isoformat(), help="date stamped into the report")
    args = parser.parse_args(argv)
    document = load()
    with tempfile.TemporaryDirectory() as directory:
        catalog = open_reference_catalog(Path(directory))
        slugs = {
            "gpus": {g.slug for g in catalog.gpu_specs("ideal")},
            "models": {r["slug"] for r in json.loads((ROOT / "catalog" / "data" / "models.json").read_text(encoding="utf-8"))},
            "quantizations": {
                r["slug"] for r in json.loads((ROOT / "catalog" / "data" / "quantizations.json").read_text(encoding="utf-8"))
            },
        }
        found = problems(document, slugs)
        if found:
            raise SystemExit("bench/serving_evidence.json is not well-formed:\n" + "\n".join(found))
        evaluated = evaluate(catalog, document)
        catalog.session.close()
    REPORT_DOC.write_text(render(document, evaluated, args.date), encoding="utf-8")
    for (gpu, engine), (count, median, worst, optimism) in sorted(cell_errors(evaluated).items()):
        print(f"{gpu:14s} {engine:8s} n={count:3d} median |err| {median:6.1%} worst {worst:+7.1%} optimism {optimism:+6.1%}")
    print(f"{sum(1 for e in evaluated if e.reason is not None)} points not expressible; report: {REPORT_DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
