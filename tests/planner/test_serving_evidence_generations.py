"""bench/serving_evidence.py prices each evidence point on its own release generation's profile (issue 14 §1), as a
plan for that release asks (`engine@generation`), with the documented fallbacks: the pair's pooled profile for a
release without one of its own or an unstated release, another engine's profile for a pair without any."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.fidelity import open_reference_catalog
from bench.serving_evidence import engine_spec, evaluate, inexpressible_reason, load
from catalog.engine_profiles import EngineProfiles
from catalog.repository import Catalog
from planner.engines import choose_profile, release_generation

DOCUMENT = load()


@pytest.fixture(scope="module")
def catalog() -> Iterator[Catalog]:
    with tempfile.TemporaryDirectory() as directory:
        reference = open_reference_catalog(Path(directory))
        yield reference
        reference.session.close()


def test_a_release_reads_as_its_major_minor_generation() -> None:
    assert release_generation("0.11.1rc1") == "0.11"
    assert release_generation("v1.0.0") == "1.0"
    assert release_generation(" 0.9.1 dev docker") == "0.9"
    assert release_generation("not stated") is None and release_generation("2025-06") is None
    assert engine_spec({"engine": "vllm", "engine_release": "0.11.1rc1"}) == "vllm@0.11"
    assert engine_spec({"engine": "trt-llm", "engine_release": "not stated"}) == "trt-llm@all"


def _expressible(gpu: str, engine: str, generation: str) -> dict[str, object]:
    return next(
        r
        for r in DOCUMENT["points"]
        if (r["gpu"], r["engine"]) == (gpu, engine)
        and release_generation(str(r["engine_release"])) == generation
        and inexpressible_reason(r) is None
    )


def test_a_point_is_priced_on_its_own_release_not_the_newest(catalog: Catalog) -> None:
    """An L40S TensorRT-LLM 0.12 point: its prediction is the one with the 0.12 profile (η_mem 0.872 in the shipped
    profiles), not the newest (0.17, η_mem 0.950), which the bare engine would price."""
    record = _expressible("l40s", "trt-llm", "0.12")
    (evaluated,) = evaluate(catalog, {**DOCUMENT, "points": [record]})
    store = EngineProfiles(catalog.session)
    profiles, factors = store.profiles(), store.factors()
    spec = catalog.gpu_spec("l40s", "calibrated")
    own = choose_profile(spec, "trt-llm@0.12", profiles, factors)
    newest = choose_profile(spec, "trt-llm", profiles, factors)
    assert (own.generation, newest.generation) == ("0.12", "0.17")
    assert own.efficiency.memory != newest.efficiency.memory
    assert evaluated.measurement is not None
    assert evaluated.engine_predicted == pytest.approx(evaluated.measurement.predict_with(own.efficiency), rel=1e-12)
    assert evaluated.engine_predicted != pytest.approx(evaluated.measurement.predict_with(newest.efficiency), rel=1e-6)
    assert (evaluated.engine_generation, evaluated.engine_fallback) == ("0.12", False)


def test_fallbacks_are_the_documented_ones(catalog: Catalog) -> None:
    """H200 × vLLM has only a pooled profile: a 0.x point is priced on it (not a fallback: the pair's own); H100 × vLLM
    has no profile: the GPU's best-measured engine stands in, and the point says so."""
    (pooled,) = evaluate(
        catalog,
        {
            **DOCUMENT,
            "points": [
                next(
                    r
                    for r in DOCUMENT["points"]
                    if (r["gpu"], r["engine"]) == ("h200", "vllm") and inexpressible_reason(r) is None
                )
            ],
        },
    )
    assert (pooled.engine_generation, pooled.engine_fallback) == ("all", False)
    (donor,) = evaluate(
        catalog,
        {
            **DOCUMENT,
            "points": [
                next(
                    r
                    for r in DOCUMENT["points"]
                    if (r["gpu"], r["engine"]) == ("h100-sxm", "vllm") and inexpressible_reason(r) is None
                )
            ],
        },
    )
    assert donor.engine_fallback and donor.engine_predicted is not None
