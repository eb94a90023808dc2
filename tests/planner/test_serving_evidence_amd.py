"""The AMD serving evidence added for issue 14 §3: InferenceX DeepSeek-R1 SGLang points on MI325X/MI300X and the
ROCm/vllm dev-docker editions of 2025-03 to 2025-05 hold the numbers their sources print, converted as stated."""

from __future__ import annotations

import math
import re

import pytest

from bench.serving_evidence import fit_data, inexpressible_reason, load

DOCUMENT = load()
INFERENCEX = (
    "inferencex-issue-890-mi325x-dsr1",
    "inferencex-pr-3318-mi325x-dsr1-baseline",
    "inferencex-blog-best-gpu-dsr1-2026-04",
)
NEW_ROCM = (
    "rocm-vllm-0.7.3-20250305-dev-docker",
    "rocm-vllm-0.7.3-20250327-dev-docker",
    "rocm-vllm-0.7.3-20250410-dev-docker",
    "rocm-vllm-0.8.5-20250519-dev-docker",
    "rocm-vllm-0.8.5-20250529-dev-docker",
)
#: Mean lengths of InferenceX's random draw on [int(0.8 L), L] (benchmark_serving.py sample_uniform, ratio 0.8).
MEAN_PROMPT = {922: 921.5, 7372: 7372.5}
MEAN_OUTPUT = 921.5


def _points(source: str) -> list[dict[str, object]]:
    return [r for r in DOCUMENT["points"] if r["source"] == source]


def _number(text: str, pattern: str) -> float:
    match = re.search(pattern, text)
    assert match, (pattern, text)
    return float(match.group(1).replace(",", ""))


def test_inferencex_points_are_one_tp8_replica_of_the_printed_per_gpu_output():
    """Issue #890 and PR #3318 print output tokens/s per GPU of a TP8 run: the replica's rate is 8 times that."""
    for source in INFERENCEX[:2]:
        rows = [r for r in _points(source) if r["kind"] == "throughput"]
        assert rows, source
        for r in rows:
            per_gpu = _number(str(r["published"]), r"Output (?:tput/gpu|tok/s/GPU) ([\d.,]+)")
            assert r["output_tokens_per_s"] == pytest.approx(8 * per_gpu, abs=0.01), r["id"]
            assert (r["tp"], r["ep"], r["model"], r["weights"], r["kv_cache"]) == (8, 1, "deepseek-v3", "fp8", "fp8")
            assert r["output_tokens"] == 922 and r["prompt_tokens"] in MEAN_PROMPT


def test_pr3318_total_to_output_ratio_is_the_mean_length_ratio():
    """PR #3318 prints Total and Output tok/s/GPU: their ratio is (mean prompt + mean output) / mean output = 9.0 for
    8k/1k at range ratio 0.8, which checks both the per-GPU output reading and the recorded mean lengths.

    A run draws n = 10 x C lengths of each kind uniformly on [0.8 L, L]: one draw's relative spread is
    0.2 / (0.9 * sqrt(12)) = 6.4 %, so the prompt/output ratio of the run's means spreads by 6.4 % * sqrt(2 / n) and
    the total/output ratio by 8/9 of that; the check allows three of those spreads (3.8 % at C = 4, 0.9 % at C = 64)."""
    expected = (MEAN_PROMPT[7372] + MEAN_OUTPUT) / MEAN_OUTPUT
    draw_spread = 0.2 / (0.9 * math.sqrt(12))
    rows = [r for r in _points(INFERENCEX[1]) if r["kind"] == "throughput"]
    assert len(rows) == 5
    for r in rows:
        total = _number(str(r["published"]), r"Total tok/s/GPU ([\d.,]+)")
        output = _number(str(r["published"]), r"Output tok/s/GPU ([\d.,]+)")
        spread = draw_spread * math.sqrt(2 / (10 * int(r["concurrency"]))) * (expected - 1) / expected
        assert total / output == pytest.approx(expected, rel=3 * spread), r["id"]


def test_inferencex_throughput_and_tpot_agree_by_littles_law():
    """At a closed-loop concurrency C each request decodes a token every TPOT, so the replica's output rate is at most
    C / TPOT and a little below it (prefill and ramp-down). Every InferenceX throughput point sits within 15 % under
    its own TPOT's bound: a per-GPU figure not multiplied by 8, or the blog's total read as output, would not."""
    pairs = 0
    for source in INFERENCEX:
        rows = _points(source)
        tpot = {(r["gpu"], r["concurrency"], r["prompt_tokens"]): r["value_ms"] for r in rows if r["kind"] == "tpot"}
        for r in rows:
            if r["kind"] != "throughput":
                continue
            bound = int(r["concurrency"]) / (float(tpot[(r["gpu"], r["concurrency"], r["prompt_tokens"])]) / 1e3)
            assert 0.85 * bound <= float(r["output_tokens_per_s"]) <= bound, (r["id"], r["output_tokens_per_s"], bound)
            pairs += 1
    assert pairs == 11


def test_inferencex_blog_rows_convert_total_per_gpu_to_replica_output():
    rows = [r for r in _points(INFERENCEX[2]) if r["kind"] == "throughput"]
    assert {r["gpu"] for r in rows} == {"mi325x", "mi300x"} and len(rows) == 4
    for r in rows:
        total = _number(str(r["published"]), r"Throughput/GPU ([\d.,]+) tok/s")
        share = MEAN_OUTPUT / (MEAN_PROMPT[int(r["prompt_tokens"])] + MEAN_OUTPUT)
        assert r["output_tokens_per_s"] == pytest.approx(8 * total * share, abs=0.01), r["id"]


def test_mi325x_has_predictable_fit_data_from_the_new_sources():
    fit = {r["id"] for r in fit_data(DOCUMENT)}
    usable = [r for r in DOCUMENT["points"] if r["gpu"] == "mi325x" and r["id"] in fit and inexpressible_reason(r) is None]
    assert {r["source"] for r in usable} == set(INFERENCEX)
    assert len(usable) == 18 and {r["kind"] for r in usable} == {"throughput", "tpot"}


def test_new_rocm_editions_pin_their_commit_and_convert_latency_to_output_rate():
    """Each 2025-03..05 edition is cited at the README commit that first printed its tables; a latency row's output
    rate is batch x OSL / latency, and the throughput rows stay ambiguous (total or output tokens/s)."""
    for source in NEW_ROCM:
        assert re.search(r"/blob/[0-9a-f]{40}/docs/dev-docker/README\.md$", DOCUMENT["sources"][source]["url"]), source
        rows = _points(source)
        assert len(rows) == 40
        for r in rows:
            if r["batching"] == "static":
                latency = _number(str(r["published"]), r"latency ([\d.]+) s")
                assert r["output_tokens_per_s"] == pytest.approx(
                    int(r["concurrency"]) * int(r["output_tokens"]) / latency, abs=0.005
                )
                assert not r.get("ambiguous")
            else:
                assert r["ambiguous"] and r["alternative_output_tokens_per_s"] > r["output_tokens_per_s"]
