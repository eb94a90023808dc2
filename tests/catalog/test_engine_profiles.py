"""Engine profiles in the catalog (migration 0014): the reference JSON loads with the reference
catalog, reads back as planner records, picks per (GPU, engine), and goes with its GPU."""

from __future__ import annotations

import json

import pytest

from catalog.engine_profiles import REFERENCE_PATH, EngineProfiles
from catalog.errors import InvalidRecordError
from catalog.models import EngineProfileRow, LowPrecisionFactorRow
from catalog.repository import Catalog
from planner.engines import choose_profile

REFERENCE = json.loads(REFERENCE_PATH.read_text(encoding="utf-8"))


@pytest.fixture
def reference(catalog: Catalog) -> Catalog:
    assert catalog.load_reference_catalog()
    return catalog


def test_the_reference_profiles_load_and_read_back(reference: Catalog) -> None:
    store = EngineProfiles(reference.session)
    profiles = store.profiles()
    assert len(profiles) == len(REFERENCE["profiles"]) > 0
    # one profile per (GPU, engine, generation): the pooled one (`all`) and each release's own
    (l40s,) = [p for p in profiles if (p.gpu, p.engine, p.generation) == ("l40s", "trt-llm", "all")]
    (record,) = [
        r for r in REFERENCE["profiles"] if (r["gpu"], r["engine"], r["engine_generation"]) == ("l40s", "trt-llm", "all")
    ]
    assert l40s.efficiency.memory == record["memory"]
    assert l40s.efficiency.step_overhead_s == pytest.approx(record["step_overhead_ms"] / 1e3)
    keys = [(p.gpu, p.engine, p.generation) for p in profiles]
    assert len(set(keys)) == len(keys)
    assert {(f.architecture, f.engine, f.datatype) for f in store.factors()} == {
        (f["architecture"], f["engine"], f["datatype"]) for f in REFERENCE["low_precision"]
    }
    assert not store.load_reference()  # not empty any more: nothing loaded twice


def test_lookup_on_the_catalog_profile_and_fallback(reference: Catalog) -> None:
    store = EngineProfiles(reference.session)
    profiles, factors = store.profiles(), store.factors()
    l40s = reference.gpu_spec("l40s")
    own = choose_profile(l40s, "trt-llm", profiles, factors)
    assert not own.fallback and own.efficiency.peak_factor("fp8") < 1.0
    vllm = choose_profile(l40s, "vllm", profiles, factors)  # no L40S vLLM evidence: the TensorRT-LLM pooled profile stands in
    pooled = choose_profile(l40s, "trt-llm@all", profiles, factors)
    assert vllm.fallback and vllm.efficiency.memory == pooled.efficiency.memory and vllm.generation == "all"
    assert vllm.efficiency.peak_factor("fp8") == own.efficiency.peak_factor("fp8")
    a10g = reference.gpu_spec("a10g")  # no engine profile at all: its catalog calibration
    assert choose_profile(a10g, "vllm", profiles, factors).efficiency == a10g.efficiency


def test_a_bad_record_is_refused_and_profiles_go_with_their_gpu(reference: Catalog) -> None:
    store = EngineProfiles(reference.session)
    bad = {**REFERENCE["low_precision"][0], "architecture": "x", "factor": 2.0}
    with pytest.raises(InvalidRecordError):
        store.save([], [bad])
    before = len(store.profiles(["l40s"]))
    assert before >= 1
    reference.delete_gpu("l40s")
    reference.session.flush()
    reference.session.expire_all()
    assert store.profiles(["l40s"]) == ()


def test_export_carries_the_engine_profiles_and_import_upserts_them(reference: Catalog) -> None:
    exported = reference.export_catalog()["engine_profiles"]
    assert len(exported["profiles"]) == len(REFERENCE["profiles"])
    changed = {**exported["profiles"][0], "memory": 0.5}
    counts = reference.import_catalog({"engine_profiles": {"profiles": [changed], "low_precision": exported["low_precision"]}})
    assert (counts["updated"], counts["unchanged"]) == (1, len(exported["low_precision"]))
    (again,) = [
        p
        for p in EngineProfiles(reference.session).profiles([changed["gpu"]])
        if (p.engine, p.generation) == (changed["engine"], changed["engine_generation"])
    ]
    assert again.efficiency.memory == 0.5
    with pytest.raises(InvalidRecordError) as refused:
        reference.import_catalog({"engine_profiles": {"profiles": [{**changed, "gpu": "nope"}], "low_precision": []}})
    assert any(e["field"] == "engine_profiles.profiles[0].gpu" for e in refused.value.extensions["errors"])


def test_a_catalog_from_before_0014_gets_the_reference_engine_profiles_once(catalog: Catalog) -> None:
    """`headroom db seed` on a non-empty catalog whose engine tables are empty (upgraded to 0014) loads them."""
    assert catalog.load_reference_catalog()
    store = EngineProfiles(catalog.session)
    for row in store.profiles():
        assert row.points >= 8
    catalog.session.execute(EngineProfileRow.__table__.delete())
    catalog.session.execute(LowPrecisionFactorRow.__table__.delete())
    version = catalog.catalog_version()
    assert store.profiles() == ()
    assert catalog.load_reference_engine_profiles()
    assert len(store.profiles()) == len(REFERENCE["profiles"]) and catalog.catalog_version() == version + 1
    assert not catalog.load_reference_engine_profiles()
