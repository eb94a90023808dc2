"""The catalog repository on SQLite and PostgreSQL: CRUD, listing, conflicts, validation,
the catalog version, transactions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from catalog.api_keys import ApiKeys
from catalog.db import make_session_factory
from catalog.errors import AlreadyExistsError, InvalidRecordError, NotFoundError, VersionConflictError
from catalog.models import GpuRow
from catalog.records import canonical_gpu, canonical_model, canonical_quantization
from catalog.repository import Catalog
from tests.catalog.records import deepseek_v3, fixture_records, h100, llama_70b, mi300x, profile, quantization

READ_ONLY = ("version", "created_at", "updated_at")

#: (plural, record factory, canonical form, an update that stays valid)
KINDS: list[tuple[str, Callable[[], dict[str, Any]], Callable[..., dict[str, Any]], dict[str, Any]]] = [
    ("gpus", h100, canonical_gpu, {"memory_gb": 94, "name": "NVIDIA H100 NVL-ish"}),
    ("models", llama_70b, canonical_model, {"max_context_tokens": 8192}),
    ("quantizations", lambda: quantization("int4-awq"), canonical_quantization, {"kv_cache_dtypes": ["fp16"]}),
]
SINGULAR = {"gpus": "gpu", "models": "model", "quantizations": "quantization"}


def call(catalog: Catalog, verb: str, plural: str, *args: Any, **kwargs: Any) -> Any:
    name = f"{verb}_{plural}" if verb == "list" else f"{verb}_{SINGULAR[plural]}"
    return getattr(catalog, name)(*args, **kwargs)


def without_read_only(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in READ_ONLY}


@pytest.mark.parametrize(("plural", "make", "canonical", "change"), KINDS, ids=[kind[0] for kind in KINDS])
def test_create_get_update_delete(
    catalog: Catalog,
    plural: str,
    make: Callable[[], dict[str, Any]],
    canonical: Callable[..., dict[str, Any]],
    change: dict[str, Any],
) -> None:
    record = make()
    slug = record["slug"]
    created = call(catalog, "create", plural, record)
    assert without_read_only(created) == canonical(record)
    assert created["version"] == 1
    assert created["created_at"] == created["updated_at"]
    assert call(catalog, "get", plural, slug) == created

    updated = call(catalog, "update", plural, slug, change, if_version=1)
    assert updated["version"] == 2
    assert without_read_only(updated) == canonical({**record, **change})
    assert updated["created_at"] == created["created_at"]
    assert updated["updated_at"] >= created["updated_at"]
    assert call(catalog, "get", plural, slug) == updated

    call(catalog, "delete", plural, slug, if_version=2)
    with pytest.raises(NotFoundError) as error:
        call(catalog, "get", plural, slug)
    assert error.value.extensions == {"kind": SINGULAR[plural], "slug": slug}
    assert call(catalog, "list", plural).total == 0


@pytest.mark.parametrize("plural", ["gpus", "models", "quantizations"])
def test_unknown_slug_is_not_found_for_every_verb(catalog: Catalog, plural: str) -> None:
    with pytest.raises(NotFoundError):
        call(catalog, "get", plural, "nope")
    with pytest.raises(NotFoundError):
        call(catalog, "update", plural, "nope", {"name": "x"})
    with pytest.raises(NotFoundError):
        call(catalog, "delete", plural, "nope")


def test_duplicate_slug_is_refused_and_changes_nothing(loaded: Catalog) -> None:
    before = loaded.catalog_version()
    with pytest.raises(AlreadyExistsError) as error:
        loaded.create_gpu({**h100(), "name": "another H100"})
    assert error.value.extensions == {"kind": "gpu", "slug": "h100-sxm"}
    assert loaded.get_gpu("h100-sxm")["name"] == h100()["name"]
    assert loaded.catalog_version() == before


def test_filters_and_pagination(loaded: Catalog) -> None:
    for index in range(5):
        loaded.create_gpu({**h100(), "slug": f"h100-copy-{index}"})
    everything = loaded.list_gpus(limit=100)
    assert everything.total == 7
    assert [item["slug"] for item in everything.items] == sorted(item["slug"] for item in everything.items)

    page = loaded.list_gpus(limit=3, offset=2)
    assert page.total == 7
    assert [item["slug"] for item in page.items] == [item["slug"] for item in everything.items[2:5]]
    assert loaded.list_gpus(limit=3, offset=6).items == everything.items[6:]
    assert loaded.list_gpus(limit=0).total == 7

    nvidia = loaded.list_gpus(vendor="nvidia", limit=2)
    assert nvidia.total == 6
    assert len(nvidia.items) == 2
    amd = loaded.list_gpus(vendor="amd")
    assert [item["slug"] for item in amd.items] == ["mi300x"]
    assert loaded.list_gpus(architecture="cdna3").total == 1
    assert loaded.list_gpus(vendor="amd", architecture="hopper").total == 0

    assert [item["slug"] for item in loaded.list_models(moe=True).items] == ["deepseek-v3"]
    assert [item["slug"] for item in loaded.list_models(moe=False).items] == ["llama-2-70b"]
    assert loaded.list_quantizations(compute_dtype="fp16").total == 2


def test_negative_pagination_is_an_invalid_request(catalog: Catalog) -> None:
    with pytest.raises(InvalidRecordError) as error:
        catalog.list_gpus(limit=-1, offset=-5)
    assert {item["field"] for item in error.value.errors} == {"limit", "offset"}


def test_stale_if_version_is_a_conflict(loaded: Catalog) -> None:
    loaded.update_gpu("h100-sxm", {"memory_gb": 81})
    with pytest.raises(VersionConflictError) as error:
        loaded.update_gpu("h100-sxm", {"memory_gb": 82}, if_version=1)
    assert error.value.extensions["current_version"] == 2
    assert error.value.extensions["expected_version"] == 1
    with pytest.raises(VersionConflictError):
        loaded.delete_gpu("h100-sxm", if_version=1)
    assert loaded.get_gpu("h100-sxm")["memory_gb"] == 81


def test_a_concurrent_writer_wins_and_the_stale_one_gets_a_conflict(engine: Engine) -> None:
    factory = make_session_factory(engine)
    with factory() as setup:
        Catalog(setup).create_gpu(h100())
        setup.commit()
    with factory() as first, factory() as second:
        seen = Catalog(first).get_gpu("h100-sxm")
        Catalog(second).update_gpu("h100-sxm", {"memory_gb": 96}, if_version=seen["version"])
        second.commit()
        with pytest.raises(VersionConflictError):
            Catalog(first).update_gpu("h100-sxm", {"memory_gb": 141}, if_version=seen["version"])
        first.rollback()
    with factory() as check:
        assert Catalog(check).get_gpu("h100-sxm")["memory_gb"] == 96


def test_invalid_create_lists_each_bad_field_and_writes_nothing(catalog: Catalog) -> None:
    record = llama_70b()
    record["kv_heads"] = 7
    record["layers"] = -1
    record["attention_heads"] = "sixty-four"
    with pytest.raises(InvalidRecordError) as error:
        catalog.create_model(record)
    assert sorted(error.value.errors, key=lambda item: item["field"]) == [
        {"field": "attention_heads", "message": "must be an integer"},
        {"field": "layers", "message": "must be at least 1, got -1"},
    ]
    record["attention_heads"] = 64
    record["layers"] = 80
    with pytest.raises(InvalidRecordError) as error:
        catalog.create_model(record)
    assert error.value.errors == [{"field": "kv_heads", "message": "must divide attention_heads (64), got 7"}]
    assert catalog.list_models().total == 0
    assert catalog.catalog_version() == 0


def test_update_merges_validates_and_keeps_the_slug(loaded: Catalog) -> None:
    with pytest.raises(InvalidRecordError) as error:
        loaded.update_gpu("h100-sxm", {"slug": "h100-renamed", "memory_gb": 0})
    assert {item["field"] for item in error.value.errors} == {"slug", "memory_gb"}
    assert loaded.get_gpu("h100-sxm")["version"] == 1

    updated = loaded.update_gpu("h100-sxm", {"efficiency": None, "price_usd_per_hour": {"on_demand": 4.0}})
    assert updated["efficiency"] is None
    assert updated["price_usd_per_hour"] == {"on_demand": 4.0, "reserved_1y": None, "as_of": None, "source": None}
    assert updated["peak_tflops"]["bf16"] == 989
    full = {**mi300x(), "slug": "h100-sxm", "version": 2, "created_at": "ignored"}
    replaced = loaded.update_gpu("h100-sxm", full)  # a full record (as GET returns it) replaces every field
    assert without_read_only(replaced) == canonical_gpu({**mi300x(), "slug": "h100-sxm"})


def test_catalog_version_increments_on_every_write_and_not_on_reads(catalog: Catalog) -> None:
    versions = [catalog.catalog_version()]

    def wrote() -> None:
        versions.append(catalog.catalog_version())

    catalog.create_quantization(quantization("fp16"))
    wrote()
    catalog.create_gpu(h100())
    wrote()
    catalog.create_model(deepseek_v3())
    wrote()
    catalog.update_model("deepseek-v3", {"max_context_tokens": 163840})
    wrote()
    catalog.save_efficiency_profile(profile())
    wrote()
    catalog.save_efficiency_profile(profile(memory=0.9))
    wrote()
    catalog.delete_efficiency_profile("vllm-fit", "h100-sxm")
    wrote()
    catalog.import_catalog({"models": [llama_70b()]})
    wrote()
    catalog.delete_model("llama-2-70b")
    wrote()
    assert versions == list(range(10))

    catalog.get_gpu("h100-sxm")
    catalog.list_gpus()
    catalog.list_models()
    catalog.gpu_spec("h100-sxm")
    catalog.export_catalog()
    catalog.list_efficiency_profiles()
    ApiKeys(catalog.session).create("reader")  # keys are not catalog content
    assert catalog.catalog_version() == 9


def test_rollback_after_a_failed_write_leaves_nothing_half_written(engine: Engine) -> None:
    factory = make_session_factory(engine)
    with factory() as session:
        Catalog(session).create_gpu(h100())
        session.commit()
    with factory() as session:
        catalog = Catalog(session)
        catalog.create_gpu(mi300x())  # written and flushed ...
        catalog.update_gpu("h100-sxm", {"memory_gb": 96})
        with pytest.raises(AlreadyExistsError):
            catalog.create_gpu(h100())  # ... then the request fails
        session.rollback()
    with factory() as session:
        catalog = Catalog(session)
        assert [gpu["slug"] for gpu in catalog.list_gpus().items] == ["h100-sxm"]
        assert catalog.get_gpu("h100-sxm")["memory_gb"] == 80
        assert catalog.get_gpu("h100-sxm")["version"] == 1
        assert catalog.catalog_version() == 1


def test_an_invalid_import_writes_nothing(engine: Engine) -> None:
    factory = make_session_factory(engine)
    bad_model = {**deepseek_v3(), "kv_heads": 3}
    with factory() as session:
        catalog = Catalog(session)
        with pytest.raises(InvalidRecordError) as error:
            catalog.import_catalog(
                {"gpus": fixture_records("gpus"), "models": [llama_70b(), bad_model], "quantizations": [{"slug": "x"}]}
            )
        fields = {item["field"] for item in error.value.errors}
        assert "models[1].kv_heads" in fields
        assert {"quantizations[0].name", "quantizations[0].compute_dtype", "quantizations[0].source"} <= fields
        session.rollback()
    with factory() as session:
        assert Catalog(session).is_empty()
        assert Catalog(session).catalog_version() == 0


def test_deleting_a_gpu_deletes_its_efficiency_profiles(loaded: Catalog, session: Session) -> None:
    loaded.save_efficiency_profile(profile())
    loaded.save_efficiency_profile(profile(gpu_slug="mi300x", model_slug=None, weights_slug=None))
    loaded.delete_gpu("h100-sxm")
    assert [(item["gpu_slug"], item["name"]) for item in loaded.list_efficiency_profiles()] == [("mi300x", "vllm-fit")]
    assert session.scalar(select(func.count()).select_from(GpuRow)) == 1


def test_deleting_a_model_keeps_profiles_that_name_it(loaded: Catalog) -> None:
    loaded.save_efficiency_profile(profile())
    loaded.delete_model("llama-2-70b")
    assert loaded.get_efficiency_profile("vllm-fit", "h100-sxm")["model_slug"] == "llama-2-70b"


def test_efficiency_profiles_save_replace_and_list(loaded: Catalog) -> None:
    saved = loaded.save_efficiency_profile(profile())
    assert without_read_only(saved) == profile()
    assert saved["version"] == 1
    replaced = loaded.save_efficiency_profile(profile(memory=0.9, fit=None), if_version=1)
    assert replaced["version"] == 2
    assert replaced["memory"] == 0.9
    assert replaced["fit"] is None
    with pytest.raises(VersionConflictError):
        loaded.save_efficiency_profile(profile(memory=0.95), if_version=1)
    loaded.save_efficiency_profile(profile(name="a-first", gpu_slug="mi300x"))
    assert [(item["gpu_slug"], item["name"]) for item in loaded.list_efficiency_profiles()] == [
        ("h100-sxm", "vllm-fit"),
        ("mi300x", "a-first"),
    ]
    assert len(loaded.list_efficiency_profiles(gpu_slug="mi300x")) == 1
    with pytest.raises(InvalidRecordError) as error:
        loaded.save_efficiency_profile(profile(gpu_slug="no-such-gpu"))
    assert error.value.errors == [{"field": "gpu_slug", "message": "no GPU 'no-such-gpu'"}]
    with pytest.raises(NotFoundError):
        loaded.get_efficiency_profile("missing", "h100-sxm")


def test_hostile_input_gets_typed_errors_not_database_errors(loaded: Catalog) -> None:
    """Values PostgreSQL would refuse (NUL in text, integers past the column, NaN in JSON)
    are caught before the database sees them, on both backends."""
    with pytest.raises(NotFoundError):
        loaded.get_gpu("h100\x00sxm")
    with pytest.raises(NotFoundError):
        loaded.efficiency_profile("fit\x00", "h100-sxm")
    assert loaded.list_gpus(vendor="nv\x00idia").total == 0
    assert loaded.list_efficiency_profiles(gpu_slug="\x00") == []
    with pytest.raises(InvalidRecordError) as error:
        loaded.create_model({**llama_70b(), "slug": "big", "name": "a\x00b", "hidden_size": 2**31, "params_total": 2**63})
    assert {item["field"] for item in error.value.errors} == {"name", "hidden_size", "params_total"}
    with pytest.raises(InvalidRecordError) as error:
        loaded.save_efficiency_profile(profile(fit={"residual": float("nan")}))
    assert error.value.errors[0]["field"] == "fit"
    with pytest.raises(InvalidRecordError):
        loaded.list_models(limit=10**20)
    assert loaded.catalog_version() == 1
