"""The all-reduce as a function of message size (planner/parallel.py, issue 14 §1): one-shot for small
messages, two-shot / ring for large, fitted per NVLink generation to AIConfigurator's kernel timings."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest

from bench.kernel_fit import allreduce_class_fits
from planner.parallel import (
    ALL_REDUCE_FITS,
    STEP_TOKENS,
    all_reduce_line,
    all_reduce_s,
    nvlink_link,
    ring_all_reduce_s,
    tp_link,
)
from tests.planner.performance_specs import H100_SXM, MI300X

KERNELS = Path(__file__).resolve().parents[2] / "bench" / "kernel_measurements.json"
HIDDEN_70B = 8192  # Llama-3.1-70B's hidden size; BF16 activations, 2 bytes
H200 = dataclasses.replace(H100_SXM, slug="h200", hbm_bandwidth_bytes_per_s=4.8e12)  # same NVLink 4: 450 GB/s
PCIE = dataclasses.replace(H100_SXM, slug="h100-pcie-like", interconnect_bytes_per_s=48e9, interconnect_latency_s=42e-6)


def _measured_s(gpu: str, gpus: int, elements: int) -> float:
    rows = json.loads(KERNELS.read_text(encoding="utf-8"))["allreduce"]
    (latency_ms,) = [r[3] for r in rows if r[0] == gpu and r[1] == gpus and r[2] == elements]
    return float(latency_ms) * 1e-3


def test_tp8_one_token_of_a_70b_model_takes_the_one_shot_kernel():
    """H200, 8 GPUs, 1 token × 8,192 × 2 B = 16,384 B. One-shot (hopper fit): 2.668 + 0.079·7 µs
    + 7 × 16,384 / (0.636 × 450e9) = 3.221 + 0.401 = 3.622 µs; the ring: 26.03 + 0.019·14 µs + 1.75 × 16,384 /
    (0.793 × 450e9) = 26.38 µs; so 3.622 µs, against 3.488 µs measured (+4 %). The ring line with the
    catalog's 5 µs α said 5.06 µs (+45 %)."""
    link = nvlink_link(H200)
    t = all_reduce_s(16_384, 8, link)
    assert t == pytest.approx(2.668e-6 + 0.079e-6 * 7 + 7 * 16_384 / (0.636 * 450e9))
    measured = _measured_s("h200", 8, HIDDEN_70B)
    assert measured == pytest.approx(3.488e-6)
    assert abs(t / measured - 1) < 0.05
    assert ring_all_reduce_s(16_384, 8, 450e9, 5e-6) / measured - 1 > 0.40


def test_tp8_512_tokens_of_a_70b_model_takes_the_ring():
    """H200, 8 GPUs, 512 tokens × 8,192 × 2 B = 8,388,608 B. Ring: 26.03 + 0.019·14 µs + 1.75 × 8,388,608 /
    (0.793 × 450e9) = 26.30 + 41.14 = 67.43 µs; one-shot: 3.22 + 7 × 8,388,608 / (0.636 × 450e9) = 208.4 µs;
    so 67.43 µs against 76.69 µs measured (−12 %), where the catalog ring line said 37.6 µs (−51 %)."""
    link = nvlink_link(H200)
    message = 512 * HIDDEN_70B * 2
    t = all_reduce_s(message, 8, link)
    assert t == pytest.approx(26.03e-6 + 0.019e-6 * 14 + 1.75 * message / (0.793 * 450e9))
    measured = _measured_s("h200", 8, 512 * HIDDEN_70B)
    assert measured == pytest.approx(76.685e-6)
    assert abs(t / measured - 1) < 0.15
    assert ring_all_reduce_s(message, 8, 450e9, 5e-6) / measured - 1 < -0.45


def test_the_algorithm_switches_once_from_one_shot_to_ring():
    """The one-shot line is the cheaper at small messages, the ring at large ones (its bytes per rank are
    2/p of the one-shot's), so t(S) is the lower envelope: it rises, and its slope falls past the switch."""
    link = nvlink_link(H200)
    sizes = [2**i for i in range(8, 31)]
    times = [all_reduce_s(s, 8, link) for s in sizes]
    assert all(b > a for a, b in itertools.pairwise(times))
    slopes = [(t2 - t1) / (s2 - s1) for (s1, t1), (s2, t2) in itertools.pairwise(zip(sizes, times, strict=True))]
    assert max(slopes[:8]) > 2.0 * slopes[-1]  # one-shot reads (p−1)·S, the ring 2(p−1)/p·S: 4× at p = 8


def test_pcie_and_the_nic_keep_the_ring_line_with_the_catalog_latency():
    """A 48 GB/s PCIe link (NCCL only): 2·3/4 × 16,384 / 48e9 + 42 µs, the line's intercept is α exactly."""
    link = nvlink_link(PCIE)
    assert link.all_reduce is None
    assert all_reduce_s(16_384, 4, link) == pytest.approx(1.5 * 16_384 / 48e9 + 42e-6)
    assert all_reduce_line(link, 4, 16_384) == pytest.approx((42e-6, 1.5 * 16_384 / 48e9))
    assert tp_link(H100_SXM, 16).all_reduce is None  # across nodes: the NIC


def test_an_architecture_without_timings_takes_the_pooled_fit():
    assert nvlink_link(MI300X).all_reduce == ALL_REDUCE_FITS["pooled"]
    assert nvlink_link(H100_SXM).all_reduce == ALL_REDUCE_FITS["hopper"]


def test_the_step_models_line_is_the_least_squares_line_in_relative_error():
    """The intercept and slope minimise Σ ((a + b·n) / t(n) − 1)² over the step sizes: moving either by 1 %
    raises the sum; the intercept sits below t(1 token) plus a share of the slope (a concave t)."""
    link = nvlink_link(H200)
    per_token = HIDDEN_70B * 2
    a, b = all_reduce_line(link, 8, per_token)

    def loss(a: float, b: float) -> float:
        return sum(((a + b * n) / all_reduce_s(n * per_token, 8, link) - 1.0) ** 2 for n in STEP_TOKENS)

    best = loss(a, b)
    for da, db in ((1.01, 1.0), (0.99, 1.0), (1.0, 1.01), (1.0, 0.99)):
        assert loss(a * da, b * db) > best
    assert 0.0 < a < all_reduce_s(8 * per_token, 8, link)
    assert b > 0.0


def test_the_planner_constants_are_the_kernel_fit():
    """planner/parallel.py `ALL_REDUCE_FITS` carries what `python -m bench.kernel_fit` fits (to the 3–4
    digits written), each class better than the catalog ring line on its own timings."""
    for name, fitted in allreduce_class_fits().items():
        planner = ALL_REDUCE_FITS[name]
        carried = (
            planner.one_shot_latency_s,
            planner.one_shot_latency_per_peer_s,
            planner.one_shot_efficiency,
            planner.ring_latency_s,
            planner.ring_latency_per_step_s,
            planner.ring_efficiency,
        )
        assert carried == pytest.approx(fitted.parameters, rel=2e-2, abs=2e-9), name
        assert fitted.median_error < fitted.catalog_ring_median_error, name
