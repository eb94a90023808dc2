"""Export → import → export gives the same catalog, on both backends; the reference catalog loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog import migrate
from catalog.db import make_engine, make_session_factory
from catalog.errors import InvalidRecordError
from catalog.repository import REFERENCE_DATA_DIR, Catalog
from tests.catalog.records import FIXTURE_DATA_DIR, h100, profile


def fresh_catalog_export(url: str, data: dict) -> dict:
    """Import `data` into the empty, migrated database at `url` and export it again."""
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            assert catalog.is_empty()
            catalog.import_catalog(json.loads(json.dumps(data)))  # through JSON, as the CLI does
            session.commit()
            return catalog.export_catalog()
    finally:
        engine.dispose()


def second_database(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'second.db'}"
    migrate.upgrade(url)
    return url


def test_export_import_round_trip(loaded: Catalog, tmp_path: Path) -> None:
    loaded.save_efficiency_profile(profile())
    loaded.update_gpu("mi300x", {"memory_gb": 192.5})
    loaded.update_gpu("h100-sxm", {"efficiency": {**loaded.get_gpu("h100-sxm")["efficiency"], "memory_compute_overlap": 0.4}})
    loaded.session.commit()
    exported = loaded.export_catalog()
    assert exported["catalog_version"] == 4
    assert exported["gpus"][0]["efficiency"]["memory_compute_overlap"] == 0.4  # the overlap survives the round trip below
    assert [gpu["slug"] for gpu in exported["gpus"]] == ["h100-sxm", "mi300x"]
    assert [model["slug"] for model in exported["models"]] == ["deepseek-v3", "llama-2-70b"]
    assert [scheme["slug"] for scheme in exported["quantizations"]] == ["fp16", "fp8", "int4-awq"]
    assert exported["efficiency_profiles"][0]["fit"] == profile()["fit"]
    assert all("version" not in record for record in exported["gpus"] + exported["efficiency_profiles"])

    # Into an empty database of the other kind of storage: SQLite here, whatever the source was.
    assert fresh_catalog_export(second_database(tmp_path), exported) == exported


def test_export_import_round_trip_into_the_same_backend(loaded: Catalog, database_url: str) -> None:
    loaded.save_efficiency_profile(profile())
    exported = loaded.export_catalog()
    loaded.session.rollback()
    migrate.downgrade(database_url, "base")
    migrate.upgrade(database_url)
    assert fresh_catalog_export(database_url, exported) == exported


def test_import_upserts_and_leaves_other_rows(loaded: Catalog) -> None:
    changed = {**h100(), "memory_gb": 94}
    new = {**h100(), "slug": "h100-nvl"}
    unchanged = json.loads((FIXTURE_DATA_DIR / "quantizations.json").read_text())[0]
    result = loaded.import_catalog({"gpus": [changed, new], "quantizations": [unchanged]})
    assert result == {"created": 1, "updated": 1, "unchanged": 1, "catalog_version": 2}
    assert loaded.get_gpu("h100-sxm")["memory_gb"] == 94
    assert loaded.get_gpu("h100-sxm")["version"] == 2
    assert loaded.get_gpu("h100-nvl")["version"] == 1
    assert loaded.get_gpu("mi300x")["version"] == 1  # not in the import: untouched
    again = loaded.import_catalog(loaded.export_catalog())
    assert again["created"] == again["updated"] == 0


def test_import_version_never_goes_backwards(loaded: Catalog) -> None:
    assert loaded.import_catalog({"catalog_version": 40})["catalog_version"] == 40
    assert loaded.import_catalog({"catalog_version": 3})["catalog_version"] == 41


def test_import_reports_every_problem_with_its_path(catalog: Catalog) -> None:
    with pytest.raises(InvalidRecordError) as error:
        catalog.import_catalog(
            {
                "gpus": [h100(), h100(), {**h100(), "slug": "Bad Slug"}],
                "efficiency_profiles": [profile(gpu_slug="ghost")],
                "catalog_version": -1,
                "plans": [],
            }
        )
    fields = {item["field"] for item in error.value.errors}
    assert fields == {"gpus[1]", "gpus[2].slug", "efficiency_profiles[0].gpu_slug", "catalog_version", "plans"}
    assert catalog.is_empty()


def test_reference_data_loads_only_into_an_empty_catalog(catalog: Catalog) -> None:
    assert catalog.load_reference_catalog(FIXTURE_DATA_DIR) is True
    catalog.update_gpu("h100-sxm", {"memory_gb": 96})
    assert catalog.load_reference_catalog(FIXTURE_DATA_DIR) is False
    assert catalog.get_gpu("h100-sxm")["memory_gb"] == 96
    assert catalog.catalog_version() == 2


def test_the_shipped_reference_catalog_loads_and_round_trips(catalog: Catalog, tmp_path: Path) -> None:
    """catalog/data/*.json: at least 12 GPUs and 12 models, the 6 schemes, every record valid."""
    assert catalog.load_reference_catalog() is True
    exported = catalog.export_catalog()
    assert len(exported["gpus"]) >= 12
    assert len(exported["models"]) >= 12
    assert {scheme["slug"] for scheme in exported["quantizations"]} >= {"fp16", "bf16", "fp8", "int8", "int4-awq", "nvfp4"}
    assert all(record["source"] for kind in ("gpus", "models", "quantizations") for record in exported[kind])
    h100_spec = catalog.gpu_spec("h100-sxm", efficiency="ideal")
    assert h100_spec.memory_bytes == pytest.approx(80e9)
    assert h100_spec.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h100_spec.peak_flops("bf16") == pytest.approx(989e12)
    for gpu in exported["gpus"]:
        catalog.gpu_spec(gpu["slug"])  # every row builds a valid planner spec
    for model in exported["models"]:
        catalog.model_spec(model["slug"])
    assert fresh_catalog_export(second_database(tmp_path), exported) == exported


def test_reference_data_dir_is_next_to_the_package() -> None:
    assert REFERENCE_DATA_DIR == Path(__file__).resolve().parents[2] / "catalog" / "data"
