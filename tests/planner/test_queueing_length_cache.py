"""The per-distribution Sobol-sample cache of the queueing model: cached and freshly built tables give the same predictions, and the shared arrays cannot be written."""

from __future__ import annotations

import pytest

from planner import queueing_replica, queueing_sample
from planner.queueing import max_rps_at_slo, predict
from planner.step_model import StepModel
from planner.workload import FixedLength, HistogramLength, LengthDistribution, LognormalLength, Serving, Slo, Workload
from tests.planner.test_queueing_model import KV_TOKENS, LLAMA70B_4XH100

WORKLOADS = (
    Workload(arrival_rate_rps=2.0, prompt_tokens=FixedLength(tokens=1000), output_tokens=FixedLength(tokens=200)),
    Workload(
        arrival_rate_rps=3.0,
        prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=4000),
        output_tokens=LognormalLength(mean_tokens=200, p99_tokens=800),
    ),
    Workload(
        arrival_rate_rps=1.5,
        prompt_tokens=HistogramLength(tokens=(200, 2000, 8000), weights=(0.5, 0.4, 0.1)),
        output_tokens=HistogramLength(tokens=(1, 50, 400), weights=(0.1, 0.6, 0.3)),
    ),
)
SERVINGS = (Serving(batch_limit=64), Serving(batch_limit=32, chunk_tokens=2048))
SLO = Slo(ttft_s=2.0, tpot_s=0.08)
#: The replica-table builder itself, without its lru_cache.
REPLICA_CACHE = queueing_replica._replica_cached
BUILD_REPLICA = REPLICA_CACHE.__wrapped__


def _clear() -> None:
    for cache in (queueing_sample._prompt_sample, queueing_sample._output_sample, REPLICA_CACHE):
        cache.cache_clear()


def _uncached_replica(
    sm: StepModel,
    prompt: LengthDistribution,
    output: LengthDistribution,
    arrival_cv: float,
    serving: Serving,
    kv_capacity_tokens: float,
) -> queueing_replica._Replica:
    """`_replica_cached` with both length-sample caches emptied first: every array built afresh."""
    queueing_sample._prompt_sample.cache_clear()
    queueing_sample._output_sample.cache_clear()
    return BUILD_REPLICA(sm, prompt, output, arrival_cv, serving, kv_capacity_tokens)


def _predictions() -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for workload in WORKLOADS:
        for serving in SERVINGS:
            prediction = predict(LLAMA70B_4XH100, workload, serving, kv_capacity_tokens=KV_TOKENS)
            out.append((prediction.saturation_rps, prediction.ttft, prediction.tpot, prediction.e2e, prediction.queueing))
            out.append((max_rps_at_slo(LLAMA70B_4XH100, workload, serving, SLO, kv_capacity_tokens=KV_TOKENS),))
    return out


def test_cached_and_freshly_built_samples_predict_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear()
    cached = _predictions()  # every configuration shares one prompt and one output sample per workload
    assert queueing_sample._prompt_sample.cache_info().hits > 0  # the sharing happened
    _clear()
    monkeypatch.setattr(queueing_replica, "_replica_cached", _uncached_replica)  # where _replica looks it up
    fresh = _predictions()  # every replica table built with its own arrays
    assert fresh == cached  # bit-identical: the cache only skips recomputing the same arrays
    _clear()


def test_cached_sample_arrays_are_read_only() -> None:
    _clear()
    workload, serving = WORKLOADS[1], SERVINGS[1]
    rep = queueing_replica._replica(LLAMA70B_4XH100, workload, serving, KV_TOKENS)
    other = queueing_replica._replica(LLAMA70B_4XH100, workload, Serving(batch_limit=8), KV_TOKENS)
    assert rep.prompts is other.prompts  # one shared array per distribution
    shared = (rep.prompts, rep.outputs, rep.size_biased_prompts, rep.own_attended, rep.decodes, rep.has_tpot, rep.prompt_grid)
    for values in shared:
        assert not values.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            values[0] = 0
    _clear()
