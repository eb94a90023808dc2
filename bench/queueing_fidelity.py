"""Fidelity of the analytic queueing model against the discrete-event simulator (issue 4 §3).

Runs a sampled grid — 3 models (Llama-3.1-8B, Llama-2-70B, Mixtral-8x7B) × 3 GPUs (A100 80GB
SXM, H100 SXM, L40S) × tp 1–8 × batch limits 8–256 × chunking on/off × fixed/lognormal
lengths × ρ 0.1–0.9 — and writes `docs/queueing-fidelity.md`: analytic vs simulated p99 TTFT,
TPOT and E2E per point with the simulator's 95 % CI, and median / worst relative error overall
and by region.

    .venv/bin/python -m bench.queueing_fidelity                 # the committed table (a few minutes)
    .venv/bin/python -m bench.queueing_fidelity --quick         # a smaller grid, for development

GPU, model and precision figures come from the reference catalog (`catalog/data/*.json`, each
row citing its datasheet or model card); efficiencies are the ideal roofline with tensor-parallel
communication on (the catalog's uncalibrated placeholder plus comm), because what is measured
here is the queueing model against the simulator on the *same* step-time formula, not the
roofline against hardware.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pickle
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.memory import kv_capacity_tokens
from planner.performance import build_step_model
from planner.queueing import (
    RELIABLE_MAX_PROMPT_CV2,
    RELIABLE_MAX_SPLIT_FRACTION,
    RELIABLE_MAX_UTILISATION,
    RELIABLE_MAX_WAIT_PROBABILITY,
    max_rps_at_slo,
    predict,
    saturation_rps,
)
from planner.simulator import simulate
from planner.specs import Efficiency, GpuSpec, ModelSpec, MoeSpec, Precision, QuantSpec
from planner.step_model import StepModel
from planner.workload import FixedLength, LengthDistribution, LognormalLength, Serving, Slo, Workload

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "catalog" / "data"
OUT = ROOT / "docs" / "queueing-fidelity.md"

EFFICIENCY = Efficiency(
    name="ideal+comm",
    include_comm=True,
    source="ideal roofline (docs/design.md test-vector assumptions) with tensor-parallel all-reduce time on",
)
#: The target of issue 4 §3, and the utilisation up to which it applies.
TARGET_ERROR = 0.10
TARGET_MAX_RHO = 0.85


def _records(name: str) -> dict[str, dict]:
    return {r["slug"]: r for r in json.loads((DATA / f"{name}.json").read_text())}


def gpu_spec(slug: str) -> GpuSpec:
    r = _records("gpus")[slug]
    return GpuSpec(
        slug=slug,
        vendor=r["vendor"],
        architecture=r["architecture"],
        memory_bytes=r["memory_gb"] * 1e9,
        hbm_bandwidth_bytes_per_s=r["memory_bandwidth_gb_per_s"] * 1e9,
        peak_flops_per_s={k: (v * 1e12 if v is not None else None) for k, v in r["peak_tflops"].items()},
        interconnect_bytes_per_s=r["interconnect_gb_per_s"] * 1e9,
        interconnect_latency_s=r["interconnect_latency_us"] * 1e-6,
        gpus_per_node=r["gpus_per_node"],
        efficiency=EFFICIENCY,
    )


def model_spec(slug: str) -> ModelSpec:
    record = _records("models")[slug]
    # The record carries catalog-only keys (name, source, checkpoint, ...) the spec has no field for.
    spec_fields = {f.name for f in dataclasses.fields(ModelSpec)} - {"moe", "mla"}
    moe = record["moe"]
    return ModelSpec(**{k: v for k, v in record.items() if k in spec_fields}, moe=MoeSpec(**moe) if moe else None)


def fp16() -> Precision:
    r = _records("quantizations")["fp16"]
    q = QuantSpec(
        slug="fp16",
        weight_bytes_per_param=r["weight_bytes_per_param"],
        element_bytes=r["element_bytes"],
        compute_dtype=r["compute_dtype"],
        kv_cache_dtypes=tuple(r["kv_cache_dtypes"]),
        min_architecture=r["min_architecture"],
    )
    return Precision(weights=q, kv_cache=q)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    model: str
    gpu: str
    tp: int
    batch_limit: int
    chunk_tokens: int | None
    lengths: str  # "fixed" or "lognormal"
    prompt: LengthDistribution
    output: LengthDistribution

    @property
    def label(self) -> str:
        chunk = f"chunk {self.chunk_tokens}" if self.chunk_tokens else "no chunk"
        return f"{self.model} {self.gpu} tp{self.tp} b{self.batch_limit} {chunk} {self.lengths}"


#: Length mixes: a chat-like mix (prompt 1,000, output 200 tokens on average) fixed, and
#: lognormal with p99 = 4 × mean (a long-tailed traffic report), plus a prefill-heavy variant.
LENGTHS = {
    "fixed": (FixedLength(tokens=1000), FixedLength(tokens=200)),
    "lognormal": (LognormalLength(mean_tokens=1000, p99_tokens=4000), LognormalLength(mean_tokens=200, p99_tokens=800)),
    "prefill-heavy": (LognormalLength(mean_tokens=3000, p99_tokens=8000), LognormalLength(mean_tokens=100, p99_tokens=300)),
}

#: The sampled grid: each row varies several factors at once (a fractional design rather than
#: the 3·3·4·6·2·3 cross product, which would take hours on two cores).
GRID: tuple[tuple[str, str, int, int, int | None, str], ...] = (
    ("llama-3.1-8b", "a100-80gb-sxm", 1, 64, None, "fixed"),
    ("llama-3.1-8b", "a100-80gb-sxm", 1, 256, 2048, "lognormal"),
    ("llama-3.1-8b", "h100-sxm", 1, 32, None, "lognormal"),
    ("llama-3.1-8b", "h100-sxm", 2, 128, 1024, "fixed"),
    ("llama-3.1-8b", "l40s", 1, 16, None, "lognormal"),
    ("llama-3.1-8b", "l40s", 1, 64, 512, "prefill-heavy"),
    ("llama-2-70b", "a100-80gb-sxm", 4, 32, None, "lognormal"),
    ("llama-2-70b", "a100-80gb-sxm", 8, 128, 2048, "fixed"),
    ("llama-2-70b", "h100-sxm", 4, 64, None, "fixed"),
    ("llama-2-70b", "h100-sxm", 8, 256, 4096, "lognormal"),
    ("llama-2-70b", "h100-sxm", 4, 16, 512, "prefill-heavy"),
    ("llama-2-70b", "l40s", 8, 32, None, "lognormal"),
    ("mixtral-8x7b", "a100-80gb-sxm", 2, 64, 1024, "lognormal"),
    ("mixtral-8x7b", "h100-sxm", 2, 128, None, "fixed"),
    ("mixtral-8x7b", "h100-sxm", 4, 8, None, "prefill-heavy"),
    ("mixtral-8x7b", "l40s", 4, 32, 512, "fixed"),
    ("mixtral-8x7b", "l40s", 8, 64, None, "lognormal"),
)
RHOS = (0.1, 0.3, 0.5, 0.7, 0.85, 0.9)
QUICK_RHOS = (0.3, 0.7, 0.85)


def scenario(row: tuple[str, str, int, int, int | None, str]) -> Scenario:
    model, gpu, tp, batch, chunk, lengths = row
    prompt, output = LENGTHS[lengths]
    return Scenario(
        model=model, gpu=gpu, tp=tp, batch_limit=batch, chunk_tokens=chunk, lengths=lengths, prompt=prompt, output=output
    )


def build(s: Scenario) -> tuple[StepModel, int]:
    gpu, model, precision = gpu_spec(s.gpu), model_spec(s.model), fp16()
    return build_step_model(gpu, model, precision, s.tp, EFFICIENCY), kv_capacity_tokens(gpu, model, precision, s.tp, EFFICIENCY)


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    scenario: Scenario
    rho: float
    rate_rps: float
    requests: int
    analytic: dict[str, float | None]
    simulated: dict[str, tuple[float, float | None, float | None]]
    reliable: bool
    wait_probability: float
    dispersion: float
    prefill_feedback: float
    predict_ms: float
    simulate_s: float

    def error(self, metric: str) -> float | None:
        a = self.analytic[metric]
        sim = self.simulated[metric][0]
        if a is None or not math.isfinite(sim) or sim <= 0:
            return None
        return a / sim - 1.0


METRICS = ("ttft", "tpot", "e2e")


def run_point(s: Scenario, rho: float, requests: int, seed: int = 0) -> Point:
    sm, kv = build(s)
    serving = Serving(batch_limit=s.batch_limit, chunk_tokens=s.chunk_tokens)
    base = Workload(arrival_rate_rps=1.0, prompt_tokens=s.prompt, output_tokens=s.output)
    saturation = saturation_rps(sm, base, serving, kv_capacity_tokens=kv)
    workload = base.at_rate(rho * saturation)
    started = time.perf_counter()
    p = predict(sm, workload, serving, kv_capacity_tokens=kv)
    predict_ms = (time.perf_counter() - started) * 1e3
    sim = simulate(sm, workload, serving, kv_capacity_tokens=kv, requests=requests, seed=seed)
    analytic = {m: (getattr(p, m).p99_s if getattr(p, m) is not None else None) for m in METRICS}
    simulated = {
        m: (getattr(sim, f"{m}_s").p99, getattr(sim, f"{m}_s").p99_ci_low, getattr(sim, f"{m}_s").p99_ci_high) for m in METRICS
    }
    return Point(
        scenario=s,
        rho=rho,
        rate_rps=workload.arrival_rate_rps,
        requests=requests,
        analytic=analytic,
        simulated=simulated,
        reliable=p.reliable,
        wait_probability=p.queueing.wait_probability if p.queueing else math.nan,
        dispersion=p.queueing.occupancy_dispersion if p.queueing else math.nan,
        prefill_feedback=p.queueing.prefill_feedback if p.queueing else math.nan,
        predict_ms=predict_ms,
        simulate_s=sim.wall_time_s,
    )


def _requests_for(rho: float, base: int) -> int:
    """Longer runs near saturation, where the p99 converges slowest (relaxation time ~ 1/(1−ρ)²)."""
    return int(base * (1.0 if rho <= 0.5 else 2.0 if rho <= 0.85 else 3.0))


#: A simulated p99 whose 95 % CI half-width exceeds this is rerun with twice the requests (up to
#: `MAX_LENGTHENING` times the first run), so the simulator's own error stays well inside the 10 % target.
CI_TARGET = 0.03
MAX_LENGTHENING = 8


def _widest(p: Point) -> float:
    widths = [_half_width(p, m) for m in METRICS if p.analytic[m] is not None]
    return max((w for w in widths if math.isfinite(w)), default=0.0)


def run_lengthened(s: Scenario, rho: float, base: int) -> Point:
    """`run_point`, doubling the simulated requests while a p99's CI half-width exceeds `CI_TARGET` (ρ ≤ 0.85 only)."""
    requests = _requests_for(rho, base)
    point = run_point(s, rho, requests)
    while rho <= TARGET_MAX_RHO + 1e-9 and _widest(point) > CI_TARGET and requests < MAX_LENGTHENING * _requests_for(rho, base):
        requests *= 2
        point = run_point(s, rho, requests)
    return point


def _half_width(p: Point, metric: str) -> float:
    sim, low, high = p.simulated[metric]
    return math.nan if low is None or high is None else (high - low) / 2.0 / sim


def _fmt_ms(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x * 1e3:,.1f}"


def _fmt_err(e: float | None) -> str:
    return "—" if e is None else f"{e * 100:+.1f} %"


def _summary(points: list[Point], title: str) -> list[str]:
    lines = [f"| {title} | points | median \\|error\\| | worst error | within 10 % |", "|---|---|---|---|---|"]
    for metric in METRICS:
        errs = [e for e in (p.error(metric) for p in points) if e is not None]
        if not errs:
            continue
        worst = max(errs, key=abs)
        within = sum(abs(e) <= TARGET_ERROR for e in errs)
        lines.append(
            f"| {metric.upper()} p99 | {len(errs)} | {statistics.median(abs(e) for e in errs) * 100:.1f} % | "
            f"{worst * 100:+.1f} % | {within}/{len(errs)} |"
        )
    return lines


#: Scenarios timed by `_timings` (indices into GRID), both at ρ = 0.5: Llama-2-70B H100 tp4
#: batch 64 fixed, no chunking; Llama-3.1-8B A100 batch 256 chunk 2,048 lognormal.
TIMED = (8, 1)
#: `_timings`' CPU medians for the model as of commit 34d8388 (4,096-point sample, no per-configuration
#: caching, no behind-prompts term): the median of three rounds interleaved with the current model
#: on this machine (load average 1.3–2.6): per scenario of `TIMED`, (predict ms, max_rps_at_slo ms).
#: The current model in the same rounds: (2.6, 35) and (3.8, 62); with a 4,096-point sample (2.5, 34)
#: and (2.7, 39).
BEFORE_CPU_MS = {8: (3.6, 51.0), 1: (4.9, 64.0)}


def _timings(repeats: int = 20) -> dict[int, dict[str, float]]:
    """`predict` and `max_rps_at_slo` times (wall and CPU, medians of `repeats`) per `TIMED` scenario at ρ = 0.5.

    CPU time (`time.process_time`) is the figure to compare across runs: the wall time on this shared
    2-core machine mostly measures the other jobs (the load average is reported with it).
    """
    slo = Slo(ttft_s=1.0, tpot_s=0.05)
    out = {}
    for index in TIMED:
        s = scenario(GRID[index])
        sm, kv = build(s)
        serving = Serving(batch_limit=s.batch_limit, chunk_tokens=s.chunk_tokens)
        base = Workload(arrival_rate_rps=1.0, prompt_tokens=s.prompt, output_tokens=s.output)
        workload = base.at_rate(0.5 * saturation_rps(sm, base, serving, kv_capacity_tokens=kv))
        wall_predict, wall_max, cpu_predict, cpu_max = [], [], [], []
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            predict(sm, workload, serving, kv_capacity_tokens=kv)
            wall_predict.append((time.perf_counter() - wall) * 1e3)
            cpu_predict.append((time.process_time() - cpu) * 1e3)
            wall, cpu = time.perf_counter(), time.process_time()
            max_rps_at_slo(sm, workload, serving, slo, kv_capacity_tokens=kv)
            wall_max.append((time.perf_counter() - wall) * 1e3)
            cpu_max.append((time.process_time() - cpu) * 1e3)
        out[index] = {
            "predict_ms": statistics.median(wall_predict),
            "max_rps_ms": statistics.median(wall_max),
            "predict_cpu_ms": statistics.median(cpu_predict),
            "max_rps_cpu_ms": statistics.median(cpu_max),
            "repeats": float(repeats),
            "load": os.getloadavg()[0],
        }
    return out


def write_report(points: list[Point], command: str, wall_s: float, corpus: list[str] | None = None) -> str:
    lines = [
        "# Queueing model fidelity: analytic p99 vs the discrete-event simulator",
        "",
        (
            f"Generated by `{command}` ({wall_s / 60:.1f} min on the 2-core development machine). "
            "Do not edit by hand; rerun the script."
        ),
        "",
        (
            "Each point runs `planner.queueing.predict` and `planner.simulator.simulate` on the same step model, "
            "workload and serving shape at utilisation ρ = λ / `saturation_rps`. Error = analytic / simulated − 1 "
            "on the p99. The simulator's 95 % CI (batch means over 20 blocks) is shown as [low, high]. Runs start at "
            "20,000 requests (40,000 above ρ = 0.5, 60,000 above 0.85) and, up to ρ = 0.85, are rerun with twice the "
            f"requests while any p99's CI half-width exceeds {CI_TARGET:.0%}, up to {MAX_LENGTHENING}× (the *n* column). "
            "Efficiency: ideal roofline with "
            "tensor-parallel communication (the comparison is model against simulator on one step-time formula). "
            "Lengths: *fixed* = 1,000 prompt / 200 output tokens; *lognormal* = the same means with p99 = 4 × mean; "
            "*prefill-heavy* = lognormal prompts mean 3,000 / p99 8,000, outputs mean 100 / p99 300."
        ),
        "",
        "## Summary",
        "",
        f"Target (issue 4 §3): every analytic p99 within {TARGET_ERROR:.0%} of the simulator's for ρ ≤ {TARGET_MAX_RHO}.",
        "",
    ]
    in_scope = [p for p in points if p.rho <= TARGET_MAX_RHO + 1e-9]
    widths = [
        (high - low) / 2.0 / sim
        for p in points
        for sim, low, high in p.simulated.values()
        if low is not None and high is not None and sim > 0
    ]
    if widths:
        wide = [p for p in in_scope if _widest(p) > CI_TARGET]
        wide_reliable = [p for p in wide if p.reliable]
        lines += [
            (
                f"Simulator 95 % CI half-width on the p99s: median {statistics.median(widths):.1%}, "
                f"90th percentile {float(np.percentile(widths, 90)):.1%}, largest {max(widths):.1%}. "
                f"At ρ ≤ {TARGET_MAX_RHO}, {len(wide)} of {len(in_scope)} points still have a p99 CI half-width above "
                f"{CI_TARGET:.0%} after {MAX_LENGTHENING}× lengthening ({len(wide_reliable)} of them inside the region `predict` "
                "marks reliable): they are the points near a full batch, where a p99 is set by rare long episodes and "
                "converges slowly; the errors there are larger than the CI anyway."
            ),
            "",
        ]
    lines += _summary(in_scope, f"all points, ρ ≤ {TARGET_MAX_RHO}")
    lines.append("")
    flagged = [p for p in in_scope if p.reliable]
    lines += _summary(flagged, f"points `predict` marks reliable, ρ ≤ {TARGET_MAX_RHO}")
    lines.append("")
    lines += _summary([p for p in in_scope if not p.reliable], f"points handed to the simulator, ρ ≤ {TARGET_MAX_RHO}")
    lines.append("")
    for name, select in (
        ("ρ ≤ 0.5", lambda p: p.rho <= 0.5),
        ("0.5 < ρ ≤ 0.85", lambda p: 0.5 < p.rho <= TARGET_MAX_RHO + 1e-9),
        ("ρ = 0.9 (beyond the target)", lambda p: p.rho > TARGET_MAX_RHO + 1e-9),
        ("no chunking", lambda p: p.scenario.chunk_tokens is None),
        ("chunked prefill", lambda p: p.scenario.chunk_tokens is not None),
        ("fixed lengths", lambda p: p.scenario.lengths == "fixed"),
        ("lognormal lengths", lambda p: p.scenario.lengths != "fixed"),
    ):
        subset = [p for p in points if select(p)]
        if subset:
            lines += _summary(subset, name)
            lines.append("")
    unreliable = [p for p in in_scope if not p.reliable]
    lines += [
        "## Regions handed to the simulator",
        "",
        (
            f"`predict` returns `reliable = False` (with `fidelity_note` saying why) when any of: per-replica arrivals are not "
            f"Poisson (an arrival CV other than 1, or round-robin / join-shortest-queue over several replicas: this grid only "
            f"has Poisson arrivals); ρ > {RELIABLE_MAX_UTILISATION}; "
            f"the model's probability that an arrival finds the batch full exceeds {RELIABLE_MAX_WAIT_PROBABILITY:.1%}; "
            f"with a chunk budget, more than {RELIABLE_MAX_SPLIT_FRACTION:.0%} of prompts are longer than one step's budget "
            f"at the mean occupancy (split over several steps); the prompt lengths' cv² exceeds {RELIABLE_MAX_PROMPT_CV2}. "
            "The service then runs the simulator instead of returning the analytic p99s as if they were good. "
            f"On this grid that is {len(unreliable)} of {len(in_scope)} points at ρ ≤ {TARGET_MAX_RHO} (and every point above it)."
        ),
        "",
        (
            "Why those regions (issue 14 §4 widened them to where the planner's plans operate: the earlier bound on the "
            "occupancy's burstiness, D_cluster/(1 − θ_b)² ≤ 1.6, flagged 51 of the 54 corpus plans, whose burstiness is "
            "2–15, although most of them are within 10 % with the current model). Prompts split over several chunked "
            "steps interleave with the chunks of the prompts around them in ways the one-prompt budget wait does not "
            "follow (the corpus plans with a 2,048-token budget and 1,000–6,000-token prompts: TTFT p99 12–18 % low). A "
            "prompt mix with a few prompts many times the mean (the corpus's agent mix, cv² 2.7: 10 % of prompts at 5.7 × "
            "the mean) sets the TPOT p99 of short lives by whether one of those prompts lands in them, which the "
            "lognormal sum of the stalls misses (16–28 % low). A full batch (P(wait) > 0.1 %) and ρ > 0.85 remain outside: "
            "the slot wait depends on how bursts drain, which neither Erlang C nor its Allen–Cunneen correction describes "
            "to 10 %. The bounds were read off the corpus's even-numbered questions; the odd-numbered half is the held-out "
            "check (the corpus section below)."
        ),
        "",
        (
            "What the earlier misses inside the region were (the previous run of this table had 5 of 108 p99s 10.4–12 % "
            "low, all TTFT of lognormal prompts, with simulator CIs of ±6–19 %): rerun with 3 × 40,000 requests they were "
            "−5 to −9 %, so simulation noise accounted for part; the sample of 4,096 points for up to 4 % of a long TTFT "
            "tail (now 8,192); and with a chunk budget the model left out the prompts that arrive behind a request and "
            "fill its last step's spare budget, which made that step longer — TTFT p99 of long-tailed prompts with a "
            "2,048–4,096-token budget was 10–18 % low (now −3 to +2 %). Adding them, the budget wait had to stop counting "
            "the prefill step in progress a second time (it now shares that step's uniform, and given a busy budget it is "
            "a gamma fitted to M/G/1's conditional wait instead of an exponential), which took fixed-prompt TTFT p99 with "
            "chunking from up to +7 % to within ±7 %. See `planner/queueing.py` (module docstring, item 7)."
        ),
        "",
    ]
    misses = [
        (p, m) for p in in_scope if p.reliable for m in METRICS if p.error(m) is not None and abs(p.error(m)) > TARGET_ERROR
    ]
    if misses:
        lines += [
            f"On this run, inside that region, {len(misses)} of {3 * len(flagged)} analytic p99s miss 10 %: "
            + "; ".join(
                f"{m.upper()} {_fmt_err(p.error(m))} at {p.scenario.label}, ρ = {p.rho:.2f} "
                f"(simulator CI ±{_half_width(p, m):.0%})"
                for p, m in misses
            )
            + ".",
            "",
        ]
    else:
        lines += [
            f"On this run every one of the {3 * len(flagged)} analytic p99s inside that region is within 10 % of the simulator's.",
            "",
        ]
    if corpus:
        lines += [*corpus, *CORPUS_NOTES, ""]
    lines += [
        "## Every point",
        "",
        (
            "| scenario | ρ | λ (rps) | n | TTFT p99 analytic / sim [CI] (ms) | err | TPOT p99 analytic / sim [CI] (ms) | err | "
            "E2E p99 analytic / sim [CI] (ms) | err | reliable |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        cells = []
        for metric in METRICS:
            sim, low, high = p.simulated[metric]
            cells.append(f"{_fmt_ms(p.analytic[metric])} / {_fmt_ms(sim)} [{_fmt_ms(low)}, {_fmt_ms(high)}]")
            cells.append(_fmt_err(p.error(metric)))
        lines.append(
            f"| {p.scenario.label} | {p.rho:.2f} | {p.rate_rps:.3g} | {p.requests:,} | "
            + " | ".join(cells)
            + f" | {'yes' if p.reliable else 'no'} |"
        )
    predict_ms = [p.predict_ms for p in points]
    sim_s = [p.simulate_s for p in points]
    timing = _timings()
    lines += [
        "",
        "## Speed",
        "",
        (
            f"`predict` took a median {statistics.median(predict_ms):.2f} ms per grid point (max {max(predict_ms):.2f} ms, "
            "the first call of a configuration building its rate-independent tables) "
            f"while the simulations ran beside it; the simulator a median {statistics.median(sim_s):.2f} s per point."
        ),
        "",
        (
            f"Measured after the grid by `_timings` ({timing[TIMED[0]]['repeats']:.0f} calls per scenario; 1-minute load average "
            f"{timing[TIMED[-1]]['load']:.1f} on the 2 shared cores — wall times there are mostly the other jobs, CPU time is "
            "the figure to compare):"
        ),
        "",
        "| scenario (ρ = 0.5) | `predict` CPU | `max_rps_at_slo` CPU | `predict` wall | `max_rps_at_slo` wall | before: `predict` / `max_rps_at_slo` CPU |",
        "|---|---|---|---|---|---|",
        *(
            f"| {scenario(GRID[i]).label} | {t['predict_cpu_ms']:.2f} ms | {t['max_rps_cpu_ms']:.1f} ms | {t['predict_ms']:.2f} ms | "
            f"{t['max_rps_ms']:.1f} ms | {BEFORE_CPU_MS[i][0]:.1f} / {BEFORE_CPU_MS[i][1]:.0f} ms |"
            for i, t in timing.items()
        ),
        "",
        (
            "`max_rps_at_slo` is a brentq on (0, saturation) of about 12–16 predictions, each solving the occupancy "
            "fixed point (a brentq of about 10 evaluations). What made it faster: everything that does not depend on "
            "the rate — saturation, the size-biased prompt sample, the normal quantiles of the Sobol points, the "
            "per-occupancy tables of the fixed point — is computed once per configuration (`_replica`, cached); the "
            "step-time mean at one arrival intensity is one matrix-vector product; percentiles skip `np.percentile`'s "
            "overhead; the exact small-mean Poisson quantile walks only the points still below their uniform. Predictions "
            "were unchanged by that (largest relative difference 3e-13 over this grid). Part of the gain was then spent on "
            "fidelity: the 8,192-point sample (was 4,096) and, with chunking, the behind-prompts and budget-wait terms. "
            "Medians of three rounds interleaved on this machine (single runs vary by ±30 % here): without chunking "
            "`predict` 3.6 → 2.6 ms and `max_rps_at_slo` 51 → 35 ms CPU; with chunking 4.9 → 3.8 ms and 64 → 62 ms "
            "(at the old 4,096-point sample it would be 2.7 ms and 39 ms: the larger sample costs about 40 % with "
            "chunking and little without). What is left: a third of a "
            "prediction is the occupancy fixed point (~10 evaluations), half is NumPy over the sample, and the "
            "Poisson quantiles of moderate means (1–12) are the biggest single item. Reproduce: "
            '`.venv/bin/python -c "from bench.queueing_fidelity import _timings; print(_timings())"`.'
        ),
        "",
    ]
    return "\n".join(lines)


#: What the plan corpus showed and what changed for it (issue 14 §4); the numbers of the table above
#: are this run's, the "before" ones the same corpus run on the model of commit 047a15b.
CORPUS_NOTES = (
    (
        "Before (the model of commit 047a15b, same corpus and command): 7 of 54 plans within 10 % on every p99, 3 flagged "
        "reliable, 2 of those outside 10 % (TTFT p99 −12 %, ρ 0.06 and 0.33: the flag was not honest). Almost every "
        "error was an underestimate: TTFT p99 −5 to −45 %, TPOT p99 −3 to −45 %, the simulated occupancy's Var/mean up "
        "to 2.6 × the model's. What changed in `planner/queueing*.py`, each checked against the simulator on this corpus:"
    ),
    "",
    (
        "1. *Prompts that share a step.* With a chunk budget, a prompt's last step carries every prompt that arrived from "
        "the start of the step in progress until that step starts (those ahead of it are admitted at the same step "
        "start), not only those behind it; their tokens are a sum of prompts (a lognormal factor of variance cv²/count, "
        "Fenton–Wilkinson), as are the step-mates of an unchunked prompt. TTFT p99 of plans with a 16,384-token budget "
        "went from −10..−25 % to −7..+9 %; the two dishonest reliable flags are within 1 %."
    ),
    (
        "2. *Mean step over prompt lengths.* The step time is a maximum of memory and compute time (convex in the "
        "tokens), so the step carrying k prompts is averaged over the sum of k prompt lengths (k·E[p] + √k·(p_j − p̄) at "
        "the prompt grid's mid-quantiles) instead of taken at k·E[p] (Jensen): with mixed lengths the short prompts ride "
        "a memory-bound step and the long ones stall it."
    ),
    (
        "3. *Occupancy dispersion.* D = 1 + (D_cluster/(1 − θ_b)² − 1)·κ. The prefill stalls group arrivals into "
        "Galton–Watson clusters (offspring Poisson(λS), mean θ_pf, variance θ_pf + θ_pf²·cv²(S)), whose counts have "
        "Var/mean D_cluster = (1 + θ_pf²·cv²)/(1 − θ_pf)² (Daley & Vere-Jones §6.3); the batch feedback amplifies a "
        "fluctuation by 1/(1 − θ_b), its variance by the square; and the excess over Poisson counts as far as the lives "
        "of requests held together overlap, κ = E[min(L₁, L₂)]/E[L] (M^X/G/∞, Shanbhag 1966). Chosen among derived "
        "forms, none with a fitted constant, against the simulated occupancy of the 49 corpus plans at ρ ≤ 0.85: mean "
        "|log error| 0.09 (the earlier 1/((1 − θ_b)(1 − θ_pf)²): 0.14). Fixed-length plans' TPOT p99 went from −9..−11 % "
        "to −1..−3 %."
    ),
    (
        "4. *TPOT: the arrivals during a life scale with the life's own step time* (issue 14 §4). The prefill arrivals "
        "are Poisson in time, so a life in a fuller, slower batch lets in proportionally more prompts, which slow it "
        "further: the count's mean is m₀·steps·t_decode(life)/t_decode(L), and an occupancy fluctuation reaches TPOT "
        "amplified by about 1/(1 − θ_pf), as in an M/G/1 busy period started by the decode work. Found from the "
        "simulator's requests: for the long lives of the Llama-3.1-8B/L40S chat plan, TPOT is explained (R² 0.98) by the "
        "life-average occupancy and the prompt tokens arriving per decode step, whose cv was 0.17 against the model's "
        "0.07 Poisson share. Corpus TPOT p99 within 10 %: 25 → 45 of 54 (same deployments), median error −11.6 → −8.2 %."
    ),
    (
        "5. *TTFT without chunking: the prefill is a server too.* A prompt's work is the time its tokens add to the step "
        "that carries them (λ·E[S] = θ_pf); a prompt arriving while prefill runs waits M/G/1's wait (the gamma of item "
        "7 of `planner/queueing.py`'s docstring), and as every queued prompt goes into the next step, its step-mates "
        "are those behind it. Before, only the residual of the step in progress was counted, and unchunked TTFT p99 "
        "was 12–32 % low where the twin plans with a 16,384-token budget (nearly the same in the simulator) were within "
        "10 %; counting the prompts ahead both as wait and as step-mates put them +4 to +20 % high instead."
    ),
    (
        '6. *The reliable region* (see "Regions handed to the simulator"): the burstiness bound is gone; split '
        "prompts and long-tailed prompt mixes are outside."
    ),
    "",
    (
        "Before items 4–6 (commit 5fee1a2, same command): 18 of 54 plans within 10 % on every p99, 3 (6 %) flagged "
        "reliable, all 3 within. "
        "What is left (the table above): the issue's target — 80 % of the corpus within 10 % on every p99 and flagged "
        "reliable — is not met: 35 of 54 (65 %) are within 10 %, 37 flagged reliable, 33 (61 %) both. Four plans flagged "
        "reliable are outside 10 %, each by its TTFT p99 (−15 to +13 %: a 256-token-prompt plan and a chat plan without "
        "chunking, a chat plan with a 16,384-token budget, a fixed-1,500-token plan on L4), two in each half: the TTFT "
        "of plans without a split or heavy tail is within about ±15 %, not ±10 %, and no single quantity of the model "
        "separated these four from the 33 within. TPOT p99 is still 8–10 % low on many chat plans (the interference "
        "from several prompts in one step is convex in their tokens; a per-arrival stall cv² from the step formula "
        "instead of the prompts' cv² made it worse and was not kept), so a plan at the edge of its TPOT SLO can move "
        "outside with small changes. Six plans sit at ρ 0.86–1.00 (E2E-only, loose-TTFT or TPOT-only SLOs, budgets of 512–2,048 tokens): the analytic p99s "
        "there are 20–90 % low and they are flagged; refusing ρ > 0.85 in the search is the planner's (not this "
        "module's) decision."
    ),
    "",
)


def _reflagged(p: Point) -> Point:
    """A saved point with `reliable` as `predict` now flags it (the analytic p99s, deterministic, are
    compared with the saved ones: a render must not mix models)."""
    s = p.scenario
    sm, kv = build(s)
    serving = Serving(batch_limit=s.batch_limit, chunk_tokens=s.chunk_tokens)
    workload = Workload(arrival_rate_rps=p.rate_rps, prompt_tokens=s.prompt, output_tokens=s.output)
    prediction = predict(sm, workload, serving, kv_capacity_tokens=kv)
    for metric in METRICS:
        latency = getattr(prediction, metric)
        saved = p.analytic[metric]
        if (latency is None) != (saved is None) or (
            latency is not None and saved is not None and abs(latency.p99_s / saved - 1.0) > 1e-9
        ):
            raise SystemExit(f"{s.label} ρ {p.rho}: the saved analytic {metric} p99 is not this model's; rerun the grid")
    return dataclasses.replace(p, reliable=prediction.reliable)


def _repredicted(p: Point) -> Point:
    """A saved point with the analytic p99s and flags of the current model: the simulated p99s do not
    depend on the analytic model, so a model change is compared on the same simulations (`--repredict`)."""
    s = p.scenario
    sm, kv = build(s)
    serving = Serving(batch_limit=s.batch_limit, chunk_tokens=s.chunk_tokens)
    workload = Workload(arrival_rate_rps=p.rate_rps, prompt_tokens=s.prompt, output_tokens=s.output)
    prediction = predict(sm, workload, serving, kv_capacity_tokens=kv)
    return dataclasses.replace(
        p,
        analytic={m: (getattr(prediction, m).p99_s if getattr(prediction, m) is not None else None) for m in METRICS},
        reliable=prediction.reliable,
        wait_probability=prediction.queueing.wait_probability if prediction.queueing else math.nan,
        dispersion=prediction.queueing.occupancy_dispersion if prediction.queueing else math.nan,
        prefill_feedback=prediction.queueing.prefill_feedback if prediction.queueing else math.nan,
    )


def _corpus_section(path: Path | None) -> list[str]:
    """The plan-corpus table (bench/plan_corpus.py) from its saved points; none without a path."""
    if path is None:
        return []
    from bench import plan_corpus

    corpus_points, command = pickle.loads(path.read_bytes())
    return plan_corpus.report(corpus_points, command)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a third of the grid at three utilisations")
    parser.add_argument("--requests", type=int, default=20_000, help="simulated requests at ρ ≤ 0.5 (×2 up to 0.85, ×3 above)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--save", type=Path, help="also pickle the measured points here")
    parser.add_argument("--render", type=Path, help="rewrite the report from points saved by --save, simulating nothing")
    parser.add_argument("--corpus", type=Path, help="add the plan-corpus table from points bench.plan_corpus --save wrote")
    parser.add_argument(
        "--repredict", action="store_true", help="with --render: the current model's analytic p99s on the saved simulations"
    )
    args = parser.parse_args(argv)
    corpus = _corpus_section(args.corpus)
    if args.render is not None:
        points, command, wall = pickle.loads(args.render.read_bytes())
        points = [(_repredicted if args.repredict else _reflagged)(p) for p in points]
        args.out.write_text(write_report(points, command, wall, corpus))
        print(f"wrote {args.out} from {args.render}")
        return
    rows = GRID[::3] if args.quick else GRID
    rhos = QUICK_RHOS if args.quick else RHOS
    started = time.perf_counter()
    points = []
    for row in rows:
        s = scenario(row)
        for rho in rhos:
            point = run_lengthened(s, rho, args.requests)
            points.append(point)
            errs = " ".join(f"{m}={_fmt_err(point.error(m))}" for m in METRICS)
            print(
                f"{s.label:60s} ρ={rho:.2f} {errs} P_wait {point.wait_probability:.4f} D {point.dispersion:.2f} "
                f"θ {point.prefill_feedback:.2f} n {point.requests} CI ±{_widest(point):.1%} sim {point.simulate_s:.1f}s",
                flush=True,
            )
    wall = time.perf_counter() - started
    command = ".venv/bin/python -m bench.queueing_fidelity" + (" --quick" if args.quick else "")
    if args.requests != 20_000:
        command += f" --requests {args.requests}"
    if args.save is not None:
        args.save.write_bytes(pickle.dumps((points, command, wall)))
    args.out.write_text(write_report(points, command, wall, corpus))
    print(f"wrote {args.out} in {wall:.0f} s")


if __name__ == "__main__":
    main()
