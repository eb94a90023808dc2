"""Fit the step model's operation-level terms to published kernel timings (bench/kernel_measurements.json).

    .venv/bin/python -m bench.kernel_fit          # print the fitted terms and how well they reproduce the kernels

Three fits per GPU, each on NVIDIA AIConfigurator's kernel database (sources in bench/kernel_extract.py):

- GEMM of M tokens × (N × K) weights, per datatype: t = max(bytes / (η_mem·BW), 2·N·K·(M + M½) / (η_peak·peak)) + t₀,
  bytes = N·K·b_w + 2·(M·K + M·N): the roofline with a saturating efficiency η(M) = η_peak·M / (M + M½).
  M½ is the step model's `gemm_half_tokens`; η_peak the large-M GEMM efficiency.
- Decode attention of B sequences at context s (one layer, 8 query heads / 1 KV head / dim 128, BF16 KV):
  t = t₀ + B·c_att + B·s·kv_bytes / (η_kv·BW), c_att the per-sequence setup of the kernel: the kernel-level
  part of the step model's `sequence_overhead_s` (times the layers of the model).
- All-reduce of S elements (BF16) over n GPUs: t = α + 2·(n−1)/n · 2S / B_bus (the ring form),
  α and B_bus per n; and planner/parallel.py's message-size model per link class (the GPU's architecture,
  i.e. its NVLink generation, and all of them pooled), six parameters shared by n = 2, 4, 8:
  t = min(a₀ + a₁·(n−1) + (n−1)·S_bytes / (e₁·B), b₀ + b₁·2(n−1) + 2(n−1)/n · S_bytes / (e₂·B)),
  B the catalog link bandwidth: the constants of planner/parallel.py `ALL_REDUCE_FITS`.

- One MoE layer's grouped expert GEMMs (issue 14 §3) at t tokens over ep expert-parallel GPUs, each expert's
  intermediate split over tp: each GPU runs its E/ep experts (of i = I/tp) on t·k/ep (token, expert) pairs
  (balanced routing), touching x = min(E/ep, max(1, ⌈t·k/ep⌉)) experts of 3·h·i weights, per-expert M = t·k/E:
  t = max(bytes / (η_mem·BW), 2·3·h·i·(t·k/ep + x·M½) / (η_peak·peak)) + t₀ — the GEMM curve η(M) paid
  per expert (each touched expert's GEMM pays its M½). Read three ways: the dense GEMM fit with M½ = 0
  (the step model's one-η form), the dense GEMM fit with its M½ per expert, and the same form refitted
  on the MoE timings themselves.

Fitted by least squares on log(predicted / measured) (every kernel counts by its relative error).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from planner.parallel import ALL_REDUCE_FITS, Link, all_reduce_s

KERNELS = Path(__file__).with_name("kernel_measurements.json")
GPUS_JSON = Path(__file__).resolve().parent.parent / "catalog" / "data" / "gpus.json"
#: Catalog datatype of each kernel datatype, for the datasheet peak.
PEAK_DTYPE = {"bfloat16": "bf16", "fp8": "fp8"}
#: Weight bytes per element of each kernel datatype.
WEIGHT_BYTES = {"bfloat16": 2, "fp8": 1}
#: GPUs with no kernel table of their own that take another's GEMM curve (same die generation).
CARRY_OVER = {"gb200": "b200"}


@dataclass(frozen=True, slots=True)
class GemmFit:
    gpu: str
    dtype: str
    eta_peak: float
    half_tokens: float
    eta_mem: float
    launch_s: float
    points: int
    median_error: float
    p90_error: float


@dataclass(frozen=True, slots=True)
class AttentionFit:
    gpu: str
    launch_s: float
    per_sequence_s: float
    eta_kv: float
    points: int
    median_error: float


@dataclass(frozen=True, slots=True)
class AllReduceFit:
    gpu: str
    gpus: int
    latency_s: float
    bus_bytes_per_s: float
    points: int
    median_error: float


def _catalog() -> dict[str, dict[str, object]]:
    return {str(g["slug"]): g for g in json.loads(GPUS_JSON.read_text(encoding="utf-8"))}


def _fit_log(
    model: Callable[[np.ndarray], np.ndarray], measured: np.ndarray, x0: list[float], low: list[float], high: list[float]
) -> tuple[np.ndarray, np.ndarray]:
    result = least_squares(lambda x: np.log(model(x) / measured), x0, bounds=(low, high))
    return result.x, np.abs(model(result.x) / measured - 1.0)


@cache
def gemm_fits() -> dict[tuple[str, str], GemmFit]:
    document = json.loads(KERNELS.read_text(encoding="utf-8"))
    catalog = _catalog()
    groups: dict[tuple[str, str], list[list[float]]] = {}
    for gpu, dtype, m, n, k, latency_ms in document["gemm"]:
        groups.setdefault((gpu, dtype), []).append([m, n, k, latency_ms * 1e-3])
    fits = {}
    for (gpu, dtype), rows in sorted(groups.items()):
        spec = catalog[gpu]
        peak = float(spec["peak_tflops"][PEAK_DTYPE[dtype]]) * 1e12  # type: ignore[index]
        bandwidth = float(spec["memory_bandwidth_gb_per_s"]) * 1e9  # type: ignore[arg-type]
        m, n, k, t = np.array(rows).T
        bytes_moved = WEIGHT_BYTES[dtype] * n * k + 2.0 * (m * k + m * n)  # weights + BF16 activations in and out

        def model(
            x: np.ndarray,
            m: np.ndarray = m,
            n: np.ndarray = n,
            k: np.ndarray = k,
            b: np.ndarray = bytes_moved,
            peak: float = peak,
            bandwidth: float = bandwidth,
        ) -> np.ndarray:
            eta_peak, half, eta_mem, launch_us = x
            return np.maximum(2.0 * n * k * (m + half) / (eta_peak * peak), b / (eta_mem * bandwidth)) + launch_us * 1e-6

        x, err = _fit_log(model, t, [0.7, 64.0, 0.8, 5.0], [0.05, 0.0, 0.05, 0.0], [1.0, 4096.0, 1.0, 100.0])
        fits[(gpu, dtype)] = GemmFit(
            gpu,
            dtype,
            float(x[0]),
            float(x[1]),
            float(x[2]),
            float(x[3]) * 1e-6,
            len(t),
            float(np.median(err)),
            float(np.percentile(err, 90)),
        )
    return fits


@cache
def attention_fits() -> dict[str, AttentionFit]:
    document = json.loads(KERNELS.read_text(encoding="utf-8"))
    catalog = _catalog()
    kv_bytes = 2 * 1 * 128 * 2  # K and V × 1 KV head × 128 dims × 2 bytes, per token and layer
    groups: dict[str, list[list[float]]] = {}
    for gpu, batch, context, latency_ms in document["decode_attention"]:
        groups.setdefault(gpu, []).append([batch, context, latency_ms * 1e-3])
    fits = {}
    for gpu, rows in sorted(groups.items()):
        bandwidth = float(catalog[gpu]["memory_bandwidth_gb_per_s"]) * 1e9  # type: ignore[arg-type]
        b, s, t = np.array(rows).T

        def model(x: np.ndarray, b: np.ndarray = b, s: np.ndarray = s, bw: float = bandwidth) -> np.ndarray:
            launch_us, per_seq_ns, eta = x
            return launch_us * 1e-6 + b * per_seq_ns * 1e-9 + b * s * kv_bytes / (eta * bw)

        x, err = _fit_log(model, t, [5.0, 20.0, 0.7], [0.0, 0.0, 0.01], [100.0, 10000.0, 1.0])
        fits[gpu] = AttentionFit(gpu, float(x[0]) * 1e-6, float(x[1]) * 1e-9, float(x[2]), len(t), float(np.median(err)))
    return fits


@cache
def allreduce_fits() -> dict[tuple[str, int], AllReduceFit]:
    document = json.loads(KERNELS.read_text(encoding="utf-8"))
    groups: dict[tuple[str, int], list[list[float]]] = {}
    for gpu, gpus, elements, latency_ms in document["allreduce"]:
        groups.setdefault((gpu, int(gpus)), []).append([elements * 2.0, latency_ms * 1e-3])  # BF16: 2 bytes
    fits = {}
    for (gpu, gpus), rows in sorted(groups.items()):
        size, t = np.array(rows).T
        ring = 2.0 * (gpus - 1) / gpus

        def model(x: np.ndarray, size: np.ndarray = size, ring: float = ring) -> np.ndarray:
            latency_us, bus_gb_s = x
            return latency_us * 1e-6 + ring * size / (bus_gb_s * 1e9)

        x, err = _fit_log(model, t, [5.0, 200.0], [0.0, 1.0], [1000.0, 5000.0])
        fits[(gpu, gpus)] = AllReduceFit(gpu, gpus, float(x[0]) * 1e-6, float(x[1]) * 1e9, len(t), float(np.median(err)))
    return fits


@dataclass(frozen=True, slots=True)
class AllReduceClassFit:
    link_class: str
    #: a₀ (s), a₁ (s per peer), e₁, b₀ (s), b₁ (s per ring step), e₂: planner/parallel.py `AllReduceFit`'s order.
    parameters: tuple[float, float, float, float, float, float]
    points: int
    median_error: float
    p90_error: float
    #: The median error of the ring line with the catalog α and link bandwidth on the same timings.
    catalog_ring_median_error: float


def _two_algorithms(x: np.ndarray, link: np.ndarray, n: np.ndarray, size: np.ndarray) -> np.ndarray:
    a0, a1, e1, b0, b1, e2 = x
    one_shot = (a0 + a1 * (n - 1)) * 1e-6 + (n - 1) * size / (e1 * link)
    ring = (b0 + b1 * 2 * (n - 1)) * 1e-6 + 2 * (n - 1) / n * size / (e2 * link)
    return np.minimum(one_shot, ring)


@cache
def allreduce_class_fits() -> dict[str, AllReduceClassFit]:
    """planner/parallel.py's one-shot / ring model fitted per link class (the GPU's architecture) and pooled."""
    document = json.loads(KERNELS.read_text(encoding="utf-8"))
    catalog = _catalog()
    rows = [
        (
            str(catalog[gpu]["architecture"]),
            float(catalog[gpu]["interconnect_gb_per_s"]) * 1e9,  # type: ignore[arg-type]
            float(catalog[gpu]["interconnect_latency_us"]) * 1e-6,  # type: ignore[arg-type]
            float(gpus),
            elements * 2.0,  # BF16: 2 bytes
            latency_ms * 1e-3,
        )
        for gpu, gpus, elements, latency_ms in document["allreduce"]
    ]
    fits = {}
    for link_class in sorted({r[0] for r in rows}) + ["pooled"]:
        chosen = [r[1:] for r in rows if link_class in (r[0], "pooled")]
        link, alpha, n, size, t = np.array(chosen).T
        x, err = _fit_log(
            lambda x, link=link, n=n, size=size: _two_algorithms(x, link, n, size),
            t,
            [2.0, 0.2, 0.5, 5.0, 2.0, 0.8],
            [0.0, 0.0, 0.01, 0.0, 0.0, 0.01],
            [50.0, 20.0, 2.0, 200.0, 50.0, 2.0],
        )
        ring = alpha + 2.0 * (n - 1) / n * size / link
        fits[link_class] = AllReduceClassFit(
            link_class,
            (x[0] * 1e-6, x[1] * 1e-6, x[2], x[3] * 1e-6, x[4] * 1e-6, x[5]),
            len(t),
            float(np.median(err)),
            float(np.percentile(err, 90)),
            float(np.median(np.abs(ring / t - 1.0))),
        )
    return fits


#: (hidden, expert intermediate, experts per token, experts) of the MoE shapes in kernel_measurements.json
#: (bench/kernel_extract.py `MOE_SHAPES`), and the GEMM table each datatype is read against.
MOE_MODELS: dict[str, tuple[int, int, int, int]] = {
    "mixtral-8x7b": (4096, 14336, 2, 8),
    "qwen3-30b-a3b": (2048, 768, 8, 128),
    "deepseek-v3": (7168, 2048, 8, 256),
}
MOE_GEMM_DTYPE = {"bfloat16": "bfloat16", "fp8_block": "fp8"}


@dataclass(frozen=True, slots=True)
class MoeCheck:
    gpu: str
    model: str
    dtype: str
    points: int
    #: Median |predicted / measured − 1|: dense GEMM fit with M½ = 0; with its M½ per expert; refitted on MoE.
    one_eta_error: float
    per_expert_error: float
    refit_error: float
    dense_half_tokens: float
    refit_half_tokens: float
    refit_eta_peak: float
    #: Median signed error of the one-η form at per-expert M ≤ 16 and M ≥ 64 (small / large expert batches).
    one_eta_small_m_bias: float
    one_eta_large_m_bias: float


def _moe_model(
    x: np.ndarray, pairs: np.ndarray, touched: np.ndarray, h: int, i: int, wbytes: int, peak: float, bandwidth: float
) -> np.ndarray:
    eta_peak, half, eta_mem, launch_us = x
    bytes_moved = touched * 3.0 * h * i * wbytes + 2.0 * pairs * (2.0 * h + 3.0 * i)  # expert weights + BF16 activations
    flops = 2.0 * 3.0 * h * i * (pairs + touched * half)  # gate, up, down per pair, plus M½ per touched expert
    return np.maximum(flops / (eta_peak * peak), bytes_moved / (eta_mem * bandwidth)) + launch_us * 1e-6


@cache
def moe_checks() -> list[MoeCheck]:
    """The MoE timings against the dense GEMM fits (M½ = 0 and per expert) and a refit on themselves."""
    document = json.loads(KERNELS.read_text(encoding="utf-8"))
    catalog = _catalog()
    dense = gemm_fits()
    groups: dict[tuple[str, str, str], list[list[float]]] = {}
    for gpu, model, dtype, tp, ep, tokens, latency_ms in document.get("moe", []):
        if tp == 1:  # the expert's whole intermediate on one GPU; moe_shape_efficiency reads the tp splits
            groups.setdefault((gpu, model, dtype), []).append([ep, tokens, latency_ms * 1e-3])
    out = []
    for (gpu, model, dtype), rows in sorted(groups.items()):
        h, i, k, experts = MOE_MODELS[model]
        gemm_dtype = MOE_GEMM_DTYPE[dtype]
        fit = dense[(gpu, gemm_dtype)]
        peak = float(catalog[gpu]["peak_tflops"][PEAK_DTYPE[gemm_dtype]]) * 1e12  # type: ignore[index]
        bandwidth = float(catalog[gpu]["memory_bandwidth_gb_per_s"]) * 1e9  # type: ignore[arg-type]
        ep, tokens, t = np.array(rows).T
        pairs = tokens * k / ep
        touched = np.minimum(experts / ep, np.maximum(1.0, np.ceil(pairs)))
        per_expert_m = tokens * k / experts
        wbytes = WEIGHT_BYTES[gemm_dtype]

        def model_of(
            x: np.ndarray,
            shape: tuple[np.ndarray, np.ndarray, int, int, int, float, float] = (pairs, touched, h, i, wbytes, peak, bandwidth),
        ) -> np.ndarray:
            return _moe_model(x, *shape)

        one_eta = model_of(np.array([fit.eta_peak, 0.0, fit.eta_mem, fit.launch_s * 1e6])) / t - 1.0
        per_expert = model_of(np.array([fit.eta_peak, fit.half_tokens, fit.eta_mem, fit.launch_s * 1e6])) / t - 1.0
        x, refit = _fit_log(model_of, t, [0.7, 64.0, 0.8, 5.0], [0.05, 0.0, 0.05, 0.0], [1.0, 4096.0, 1.0, 100.0])
        out.append(
            MoeCheck(
                gpu,
                model,
                dtype,
                len(t),
                float(np.median(np.abs(one_eta))),
                float(np.median(np.abs(per_expert))),
                float(np.median(refit)),
                fit.half_tokens,
                float(x[1]),
                float(x[0]),
                float(np.median(one_eta[per_expert_m <= 16])),
                float(np.median(one_eta[per_expert_m >= 64])),
            )
        )
    return out


@cache
def moe_shape_efficiency() -> list[tuple[str, str, str, int, int, float, int]]:
    """(GPU, model, datatype, expert tp, expert intermediate per GPU i = I/tp, realised / dense-fit compute rate,
    kernels) of the compute-bound MoE timings (per-expert M ≥ 256, ep 1): the grouped expert GEMM's rate
    against the dense GEMM fit of the same GPU and datatype (median over those timings), by expert shape."""
    document = json.loads(KERNELS.read_text(encoding="utf-8"))
    catalog = _catalog()
    dense = gemm_fits()
    groups: dict[tuple[str, str, str, int], list[float]] = {}
    for gpu, model, dtype, tp, ep, tokens, latency_ms in document.get("moe", []):
        h, i, k, experts = MOE_MODELS[model]
        if ep != 1 or tokens * k / experts < 256:
            continue
        fit = dense[(gpu, MOE_GEMM_DTYPE[dtype])]
        peak = float(catalog[gpu]["peak_tflops"][PEAK_DTYPE[MOE_GEMM_DTYPE[dtype]]]) * 1e12  # type: ignore[index]
        dense_s = 2.0 * 3.0 * h * (i / tp) * tokens * k / (fit.eta_peak * peak)  # at the dense GEMM's large-M rate
        groups.setdefault((gpu, model, dtype, int(tp)), []).append(dense_s / (latency_ms * 1e-3 - fit.launch_s))
    return [
        (gpu, model, dtype, tp, MOE_MODELS[model][1] // tp, float(np.median(r)), len(r))
        for (gpu, model, dtype, tp), r in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][3]))
    ]


#: GPUs pooled into each architecture's expert-GEMM fit (planner/performance.py `EXPERT_GEMM_HALF_INTERMEDIATE`).
EXPERT_GEMM_CLASSES = {"hopper": ("h100-sxm", "h200"), "blackwell": ("b200",)}


def expert_gemm_half_intermediate() -> dict[tuple[str, str], tuple[float, float, int]]:
    """(class, datatype) → (i½, median |error|, kernel groups): the grouped expert GEMM's rate / the dense GEMM
    rate = i / (i + i½), i the expert intermediate per GPU, fitted by least squares on log ratio over
    `moe_shape_efficiency`; classes per `EXPERT_GEMM_CLASSES` plus every GPU's BF16 pooled."""
    rows = moe_shape_efficiency()
    classes = {
        (c, d): [r for r in rows if r[0] in gpus and r[2] == d]
        for c, gpus in EXPERT_GEMM_CLASSES.items()
        for d in ("bfloat16", "fp8_block")
    }
    classes[("pooled", "bfloat16")] = [r for r in rows if r[2] == "bfloat16"]
    out = {}
    for key, chosen in classes.items():
        if not chosen:
            continue
        inter = np.array([r[4] for r in chosen], dtype=float)
        ratio = np.array([r[5] for r in chosen])
        result = least_squares(lambda x, i=inter, r=ratio: np.log(i / (i + x[0]) / r), [500.0], bounds=([0.0], [1e5]))
        err = np.abs(inter / (inter + result.x[0]) / ratio - 1.0)
        out[key] = (float(result.x[0]), float(np.median(err)), len(chosen))
    return out


#: Message sizes the check of planner/parallel.py's all-reduce is read at: tokens × Llama-70B's hidden 8192.
CHECK_TOKENS: tuple[int, ...] = (1, 64, 512, 4096)
CHECK_HIDDEN = 8192


def allreduce_check() -> list[tuple[str, int, int, float, float, float]]:
    """(GPU, GPUs, tokens, measured s, the ring form with the catalog's α and NVLink figures s, planner/parallel.py
    `all_reduce_s` s) at the measured message nearest to tokens × 8192 BF16 elements. The ring form is
    α + 2·(n−1)/n · bytes / link bandwidth (the all-reduce before issue 14's message-size model)."""
    document = json.loads(KERNELS.read_text(encoding="utf-8"))
    catalog = _catalog()
    rows = []
    for gpu, gpus in sorted({(r[0], int(r[1])) for r in document["allreduce"]}):
        spec = catalog[gpu]
        bandwidth = float(spec["interconnect_gb_per_s"]) * 1e9  # type: ignore[arg-type]
        alpha = float(spec["interconnect_latency_us"]) * 1e-6  # type: ignore[arg-type]
        link = Link(
            name=gpu,
            bytes_per_s=bandwidth,
            latency_s=alpha,
            source="catalog",
            all_reduce=ALL_REDUCE_FITS[str(spec["architecture"])],
        )
        table = [r for r in document["allreduce"] if r[0] == gpu and int(r[1]) == gpus]
        for tokens in CHECK_TOKENS:
            _, _, elements, latency_ms = min(table, key=lambda r: abs(r[2] - tokens * CHECK_HIDDEN))
            ring = alpha + 2.0 * (gpus - 1) / gpus * 2.0 * elements / bandwidth
            rows.append((gpu, gpus, tokens, latency_ms * 1e-3, ring, all_reduce_s(2.0 * elements, gpus, link)))
    return rows


def gemm_half_tokens(gpu: str, compute_dtype: str) -> float:
    """M½ for `gpu` running GEMMs in catalog datatype `compute_dtype` (fp8 → the FP8 table, else BF16);
    0 (η flat in M: the one-η form) where no kernel table covers the GPU."""
    fits = gemm_fits()
    donor = gpu if any(g == gpu for g, _ in fits) else CARRY_OVER.get(gpu)
    if donor is None:
        return 0.0
    dtype = "fp8" if compute_dtype == "fp8" and (donor, "fp8") in fits else "bfloat16"
    return fits[(donor, dtype)].half_tokens if (donor, dtype) in fits else 0.0


def kernel_tables() -> list[str]:
    """The fits and the all-reduce check as markdown lines."""
    out: list[str] = []
    add = out.append  # the tables, line by line
    add("| GPU | datatype | kernels | η_peak | M½ (tokens) | η_mem | t₀ (µs) | median / p90 error |")
    add("|---|---|---|---|---|---|---|---|")
    for fit in gemm_fits().values():
        add(
            f"| {fit.gpu} | {fit.dtype} | {fit.points} | {fit.eta_peak:.3f} | {fit.half_tokens:.0f} | {fit.eta_mem:.3f} | "
            f"{fit.launch_s * 1e6:.1f} | {fit.median_error:.1%} / {fit.p90_error:.1%} |"
        )
    add("")
    add("| GPU | kernels | launch (µs) | per sequence (ns, one layer) | η_kv | median error |")
    add("|---|---|---|---|---|---|")
    for att in attention_fits().values():
        add(
            f"| {att.gpu} | {att.points} | {att.launch_s * 1e6:.1f} | {att.per_sequence_s * 1e9:.1f} | {att.eta_kv:.3f} | {att.median_error:.1%} |"
        )
    add("")
    add("| GPU | GPUs | kernels | α (µs) | bus bandwidth (GB/s) | median error |")
    add("|---|---|---|---|---|---|")
    for ar in allreduce_fits().values():
        add(
            f"| {ar.gpu} | {ar.gpus} | {ar.points} | {ar.latency_s * 1e6:.2f} | {ar.bus_bytes_per_s / 1e9:.0f} | {ar.median_error:.1%} |"
        )
    add("")
    add("planner/parallel.py's all-reduce model per link class (`ALL_REDUCE_FITS`), shared by 2, 4 and 8 GPUs:")
    add("")
    add(
        "| link class | kernels | a₀ (µs) | a₁ (µs/peer) | e₁ | b₀ (µs) | b₁ (µs/step) | e₂ | median / p90 error | catalog ring line |"
    )
    add("|---|---|---|---|---|---|---|---|---|---|")
    for cf in allreduce_class_fits().values():
        a0, a1, e1, b0, b1, e2 = cf.parameters
        add(
            f"| {cf.link_class} | {cf.points} | {a0 * 1e6:.3f} | {a1 * 1e6:.3f} | {e1:.3f} | {b0 * 1e6:.2f} | {b1 * 1e6:.3f} | "
            f"{e2:.3f} | {cf.median_error:.1%} / {cf.p90_error:.1%} | {cf.catalog_ring_median_error:.1%} |"
        )
    add("")
    add("The measured all-reduce against the ring line with the catalog α and link bandwidth, then against")
    add("planner/parallel.py `all_reduce_s`, µs (messages of tokens × 8,192 BF16 elements):")
    add("")
    add("| GPU | GPUs | " + " | ".join(f"{t} tokens: measured / ring / model" for t in CHECK_TOKENS) + " |")
    add("|---|---|" + "---|" * len(CHECK_TOKENS))
    check = allreduce_check()
    for i in range(0, len(check), len(CHECK_TOKENS)):
        group = check[i : i + len(CHECK_TOKENS)]
        cells = " | ".join(
            f"{m * 1e6:.1f} / {r * 1e6:.1f} ({r / m - 1:+.0%}) / {p * 1e6:.1f} ({p / m - 1:+.0%})" for _, _, _, m, r, p in group
        )
        add(f"| {group[0][0]} | {group[0][1]} | {cells} |")
    add("")
    add("MoE layers (grouped expert GEMMs, balanced routing, every expert-parallel degree) against the GEMM curve:")
    add("median |error| of the dense GEMM fit with M½ = 0 (one-η), with its M½ paid per touched expert, and of the")
    add("same form refitted on the MoE timings; then the one-η form's median signed error at small and large per-expert M.")
    add("")
    add(
        "| GPU | model | datatype | kernels | one-η | η(M) per expert | refit | dense M½ | refit M½ | refit η_peak | "
        "one-η at M ≤ 16 | one-η at M ≥ 64 |"
    )
    add("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mc in moe_checks():
        add(
            f"| {mc.gpu} | {mc.model} | {mc.dtype} | {mc.points} | {mc.one_eta_error:.1%} | {mc.per_expert_error:.1%} | "
            f"{mc.refit_error:.1%} | {mc.dense_half_tokens:.0f} | {mc.refit_half_tokens:.0f} | {mc.refit_eta_peak:.3f} | "
            f"{mc.one_eta_small_m_bias:+.1%} | {mc.one_eta_large_m_bias:+.1%} |"
        )
    add("")
    add("Compute-bound MoE layers (per-expert M ≥ 256, ep 1) by the expert's intermediate per GPU (I / expert tp): the")
    add("grouped GEMM's rate as a fraction of the dense GEMM fit's large-M rate on the same GPU and datatype.")
    add("")
    add("| GPU | model | datatype | expert tp | intermediate per GPU | rate / dense rate | kernels |")
    add("|---|---|---|---|---|---|---|")
    for gpu, model, dtype, tp, inter, ratio, count in moe_shape_efficiency():
        add(f"| {gpu} | {model} | {dtype} | {tp} | {inter} | {ratio:.2f} | {count} |")
    add("")
    add("Fitted rate / dense rate = i / (i + i½), i the expert intermediate per GPU:")
    add("")
    add("| class | datatype | i½ | median error | groups |")
    add("|---|---|---|---|---|")
    for (name, dtype), (half, error, groups) in expert_gemm_half_intermediate().items():
        add(f"| {name} | {dtype} | {half:.0f} | {error:.1%} | {groups} |")
    add("")
    latencies = [ar.latency_s for ar in allreduce_fits().values()]
    add(f"all-reduce α median {statistics.median(latencies) * 1e6:.2f} µs over {len(latencies)} (GPU, n) pairs")
    return out


def main() -> int:
    for line in kernel_tables():
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
