"""Issue 14 §5's worst points, checked against their sources (docs/fidelity-performance.md, 2026-12-04): where a point's
concurrency was not what its run held, the corrected value follows from numbers the source prints, by a stated rule."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.fidelity import open_reference_catalog
from bench.serving_evidence import fit_data, inexpressible_reason, load, vllm_max_num_seqs_concurrency
from catalog.repository import Catalog
from planner.memory import replica_kv_bytes_per_token, weight_bytes

DOCUMENT = load()
POINTS = {r["id"]: r for r in DOCUMENT["points"]}
#: GPUStack's vLLM 0.11 burst runs on 8 x H200: (throughput id, TPOT id) → Mean ITL (ms) printed in the same result
#: block (docs/performance-lab/deepseek-r1/h200.md at a5c9faf); the output rate is in each point's `published`.
GPUSTACK_MEAN_ITL_MS = {
    ("e1425", "e1426"): 119.29,
    ("e1435", "e1436"): 362.20,
    ("e1437", "e1438"): 163.74,
    ("e1439", "e1440"): 235.10,
}
DSTACK_ONLINE_CAP = 128  # --max-concurrency of dstack's online vLLM rows (Deepseek-R1/README.md)


@pytest.fixture(scope="module")
def catalog() -> Iterator[Catalog]:
    with tempfile.TemporaryDirectory() as directory:
        reference = open_reference_catalog(Path(directory))
        yield reference
        reference.session.close()


def _printed_rate(record: dict[str, object]) -> float:
    match = re.search(r"Output token throughput ([\d.]+) tok/s", str(record["published"]))
    assert match, record["id"]
    return float(match.group(1))


def test_gpustack_bursts_take_the_decoding_concurrency_of_their_printed_rate_and_itl():
    """Every prompt was sent at once (peak concurrency = prompts, mean TTFT 18-101 s of queueing), so the run holds no
    steady state at the admission limit: rate x Mean ITL is the mean number decoding, and both points of a run use it."""
    for (throughput_id, tpot_id), itl_ms in GPUSTACK_MEAN_ITL_MS.items():
        throughput, tpot = POINTS[throughput_id], POINTS[tpot_id]
        expected = round(_printed_rate(throughput) * itl_ms / 1e3)
        assert throughput["concurrency"] == tpot["concurrency"] == expected
        assert f"{itl_ms} ms Mean ITL" in str(throughput["derived"]) and "worst14" in str(throughput["note"])
        requests = int(re.search(r"Successful requests (\d+)", str(throughput["published"])).group(1))  # type: ignore[union-attr]
        assert expected < requests
        assert inexpressible_reason(throughput) is None and throughput in fit_data(DOCUMENT)
    # the ShareGPT burst is where the admission rule was furthest off: 313 decoding of 1000 admitted
    assert POINTS["e1425"]["concurrency"] == 313


def test_dstack_online_vllm_rows_hold_what_the_kv_cache_holds_below_the_client_cap(catalog: Catalog):
    """At --max-concurrency 128, 3200 + 1600/3200/6400 tokens overflow vLLM's KV cache on 8 x H200; those rows take the
    set's vLLM admission rule (the offline rows of the same study already do), every other vLLM row keeps the cap."""
    rows = [r for r in DOCUMENT["points"] if r["source"] == "dstack-deepseek-r1-h200-mi300x" and r["engine"] == "vllm"]
    lowered = set()
    for record in rows:
        cap = int(re.search(r"max_concurrency (\d+)", str(record["published"])).group(1))  # type: ignore[union-attr]
        gpu = catalog.gpu_spec(str(record["gpu"]), "ideal")
        model = catalog.model_spec(str(record["model"]))
        precision = catalog.precision(str(record["weights"]), str(record["kv_cache"]))
        sequence = int(record["prompt_tokens"]) + int(record["output_tokens"])
        held = vllm_max_num_seqs_concurrency(gpu, model, precision, int(record["tp"]), sequence, cap)
        assert record["concurrency"] == held
        if held < cap:
            lowered.add(record["id"])
            assert cap == DSTACK_ONLINE_CAP and "worst14" in str(record["note"])
    assert lowered == {"e1258", "e1259", "e1260", "e1261", "e1262", "e1263"}
    assert [POINTS[i]["concurrency"] for i in ("e1258", "e1260", "e1262")] == [127, 95, 63]
    # the offline vLLM rows of the same study at 3200/1600 on H200 are priced at the same rule's 127
    assert POINTS["e1387"]["concurrency"] == "vllm-max-num-seqs-kv-limited"


#: comparison/h100sxm5_vs_mi300x/raw_data/gpu-usage.md: 'Loading model weights took X GB in each GPU' (vLLM prints GiB).
DSTACK_405B_LOADED_GIB = {
    "8xH100 1FP8-meta": 56.7677,
    "8xMi300x 1FP8-meta": 56.7677,
    "8xMi300 1FP8-amd": 49.3235,
    "4xMi300x 1FP8-amd": 97.4347,
}


def test_dstack_405b_rows_admit_what_fits_beside_the_weights_the_source_printed(catalog: Catalog):
    """vLLM admits min(--max-num-seqs, prompts, requests whose bf16 KV fits 0.9 of memory less the loaded weights); the
    weights are the per-GPU figure the source prints for each checkpoint, not the catalog's all-FP8 405B (meta's loads 20 %
    more), so on 8 x H100 the 2048/2048 runs of 128 and 256 prompts hold 41, not the 80 all-FP8 weights would leave."""
    rows = [r for r in DOCUMENT["points"] if r["source"] == "dstack-llama405b-h100-mi300x-offline"]
    assert len(rows) == 74
    model = catalog.model_spec("llama-3.1-405b")
    for record in rows:
        label = re.search(r"\(gpu ([^,]+),", str(record["published"])).group(1)  # type: ignore[union-attr]
        gpu = catalog.gpu_spec(str(record["gpu"]), "ideal")
        precision = catalog.precision(str(record["weights"]), str(record["kv_cache"]))
        tp = int(record["tp"])
        free = 0.9 * tp * gpu.memory_bytes - tp * DSTACK_405B_LOADED_GIB[label] * 2**30
        per_request = replica_kv_bytes_per_token(model, precision.kv_cache, tp) * (
            int(record["prompt_tokens"]) + int(record["output_tokens"])
        )
        assert record["concurrency"] == max(1, min(256, int(record["num_prompts"]), int(free / per_request))), record["id"]
    # meta's checkpoint is heavier than the catalog's all-FP8 weights: the source's figure, not the catalog's, sets the batch
    assert DSTACK_405B_LOADED_GIB["8xH100 1FP8-meta"] * 2**30 > 1.15 * weight_bytes(model, precision.weights) / 8
    assert [POINTS[i]["concurrency"] for i in ("e1890", "e1891", "e1898")] == [41, 41, 78]
