"""Migrations: up → down → up on both backends, and the ORM models equal what the migrations build."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from catalog import migrate
from catalog.db import make_engine
from catalog.models import Base

CATALOG_TABLES = {"gpus", "models", "quantizations", "efficiency_profiles", "api_keys", "catalog_meta"}


def table_names(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def model_diff(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade_round_trip(database_url: str) -> None:
    assert migrate.current_revision(database_url) is None
    assert not migrate.is_at_head(database_url)
    migrate.upgrade(database_url)
    assert migrate.current_revision(database_url) == migrate.head_revision()
    assert migrate.is_at_head(database_url)
    assert CATALOG_TABLES <= table_names(database_url)
    migrate.downgrade(database_url, "base")
    assert migrate.current_revision(database_url) is None
    assert table_names(database_url) <= {"alembic_version"}
    migrate.upgrade(database_url, "head")
    assert migrate.is_at_head(database_url)
    assert model_diff(database_url) == []


def test_orm_models_match_the_migrations(migrated_database_url: str) -> None:
    """alembic's autogenerate comparison finds nothing to add, drop or retype."""
    assert model_diff(migrated_database_url) == []


def test_migrations_do_not_depend_on_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    migrate.upgrade("sqlite:///./relative.db")
    assert (tmp_path / "relative.db").exists()
    assert migrate.is_at_head(f"sqlite:///{tmp_path / 'relative.db'}")


def test_a_fresh_migration_starts_the_catalog_at_version_zero(catalog) -> None:
    assert catalog.catalog_version() == 0
    assert catalog.is_empty()


def _gpu_columns(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return {column["name"] for column in inspect(engine).get_columns("gpus")}
    finally:
        engine.dispose()


def test_0005_adds_the_overlap_column_reads_old_rows_as_max_and_downgrades(database_url: str) -> None:
    """A GPU stored before 0005 (no overlap column) reads as overlap 1 after the upgrade; the
    downgrade drops the column and keeps the row (batch mode on SQLite, ALTER TABLE on PostgreSQL)."""
    from catalog.db import make_session_factory
    from catalog.repository import Catalog

    migrate.upgrade(database_url, "0004_deployments")
    assert "efficiency_memory_compute_overlap" not in _gpu_columns(database_url)
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO gpus (slug, name, vendor, architecture, memory_gb, memory_bandwidth_gb_per_s, "
                    "interconnect_gb_per_s, gpus_per_node, efficiency_memory, efficiency_compute, source, version, "
                    "created_at, updated_at) VALUES ('old-gpu', 'Old GPU', 'nvidia', 'hopper', 80, 3350, 450, 8, "
                    "0.6, 0.4, 'test', 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                )
            )
    finally:
        engine.dispose()
    migrate.upgrade(database_url)
    assert "efficiency_memory_compute_overlap" in _gpu_columns(database_url)
    engine = make_engine(database_url)
    try:
        session = make_session_factory(engine)()
        catalog = Catalog(session)
        assert catalog.get_gpu("old-gpu")["efficiency"]["memory_compute_overlap"] == 1.0
        assert catalog.efficiency_profile("calibrated", "old-gpu").memory_compute_overlap == 1.0
        session.close()
    finally:
        engine.dispose()
    migrate.downgrade(database_url, "0004_deployments")
    assert "efficiency_memory_compute_overlap" not in _gpu_columns(database_url)
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("SELECT efficiency_memory FROM gpus WHERE slug = 'old-gpu'")).scalar_one() == 0.6
    finally:
        engine.dispose()


def _export(url: str) -> dict[str, object]:
    from catalog.db import make_session_factory
    from catalog.repository import Catalog

    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            return Catalog(session).export_catalog()
    finally:
        engine.dispose()


def test_a_round_trip_through_0004_keeps_the_reference_calibrations(database_url: str) -> None:
    """head → 0004 → head on the reference catalog: every GPU comes back with its calibrated
    overlap (0005 restores it from the reference fit it belongs to), its confidence (0007), and
    every other record unchanged. Only what 0010 drops (checkpoints, engine names) and what 0006's docstring says its downgrade loses (prices of
    providers a GPU's own columns do not carry) may differ, and nothing else is compared there."""
    from catalog.db import make_session_factory
    from catalog.repository import Catalog

    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session, session.begin():
            assert Catalog(session).load_reference_catalog()
    finally:
        engine.dispose()
    before = _export(database_url)
    assert {gpu["slug"]: gpu["efficiency"]["memory_compute_overlap"] for gpu in before["gpus"]}["h100-sxm"] == 0.2652

    migrate.downgrade(database_url, "0004_deployments")
    migrate.upgrade(database_url, "head")
    after = _export(database_url)

    for section in ("gpus", "efficiency_profiles"):
        assert after[section] == before[section], section
    # 0010's downgrade drops models.checkpoint and quantizations.engine_names (its docstring): they
    # come back empty, and every other member of those records unchanged.
    for section, lost in (("models", "checkpoint"), ("quantizations", "engine_names")):
        assert all(record[lost] is None for record in after[section]), section
        assert any(record[lost] is not None for record in before[section]), section
        assert [{**r, lost: None} for r in after[section]] == [{**r, lost: None} for r in before[section]], section
    overlaps = {gpu["slug"]: gpu["efficiency"]["memory_compute_overlap"] for gpu in after["gpus"]}
    assert overlaps["h100-sxm"] == 0.2652 and overlaps["b200"] == 0.0 and overlaps["mi300x"] == 0.6948


def test_0005_restores_no_overlap_to_a_calibration_someone_changed(database_url: str) -> None:
    """The restore rule: a reference slug whose fit was changed (η_mem here) reads 1.0 after the round trip."""
    from catalog.db import make_session_factory
    from catalog.repository import Catalog

    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session, session.begin():
            catalog = Catalog(session)
            catalog.load_reference_catalog()
            efficiency = catalog.get_gpu("h100-sxm")["efficiency"]
            catalog.update_gpu("h100-sxm", {"efficiency": {**efficiency, "memory": 0.7}})
    finally:
        engine.dispose()
    migrate.downgrade(database_url, "0004_deployments")
    migrate.upgrade(database_url, "head")
    gpus = {gpu["slug"]: gpu for gpu in _export(database_url)["gpus"]}
    assert gpus["h100-sxm"]["efficiency"]["memory"] == 0.7
    assert gpus["h100-sxm"]["efficiency"]["memory_compute_overlap"] == 1.0
    assert gpus["h100-pcie"]["efficiency"]["memory_compute_overlap"] == 0.2652


def test_0012_reprices_pcie_collectives_only_where_the_old_reference_values_still_stand(database_url: str) -> None:
    """A catalog holding the shipped PCIe values of before 0012 (l40s at 32 GB/s and 10 µs with
    the old source) gets NCCL's figures (24 GB/s, 42 µs, the new source); an l4 whose latency
    someone edited keeps its edit; the downgrade restores l40s's old values, the edited l4 again
    untouched."""
    import importlib

    from catalog.db import make_session_factory
    from catalog.repository import Catalog

    reference = {
        slug: (old, new) for slug, old, new in importlib.import_module("migrations.versions.0012_pcie_collectives").REFERENCE
    }
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session, session.begin():
            assert Catalog(session).load_reference_catalog()
    finally:
        engine.dispose()
    migrate.downgrade(database_url, "0011_operations")
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            rows = {
                slug: (bandwidth, latency, source)
                for slug, bandwidth, latency, source in connection.execute(
                    text("SELECT slug, interconnect_gb_per_s, interconnect_latency_us, source FROM gpus")
                )
            }
            assert rows["l40s"] == reference["l40s"][0]  # the downgrade put the old reference back
            connection.execute(text("UPDATE gpus SET interconnect_latency_us = 15 WHERE slug = 'l4'"))
    finally:
        engine.dispose()

    migrate.upgrade(database_url, "head")
    gpus = {gpu["slug"]: gpu for gpu in _export(database_url)["gpus"]}
    assert (gpus["l40s"]["interconnect_gb_per_s"], gpus["l40s"]["interconnect_latency_us"]) == (24, 42)
    assert gpus["l40s"]["source"] == reference["l40s"][1][2]
    assert (gpus["h100-pcie"]["interconnect_gb_per_s"], gpus["h100-pcie"]["interconnect_latency_us"]) == (48, 42)
    assert (gpus["l4"]["interconnect_gb_per_s"], gpus["l4"]["interconnect_latency_us"]) == (32, 15)  # edited: kept
    assert gpus["h100-sxm"]["interconnect_gb_per_s"] == 450  # NVLink GPUs are not 0012's

    migrate.downgrade(database_url, "0011_operations")
    engine = make_engine(database_url)
    try:  # by SQL: the ORM knows later revisions' columns (0013), which this schema lacks
        with engine.connect() as connection:
            rows = {
                slug: (bandwidth, latency)
                for slug, bandwidth, latency in connection.execute(
                    text("SELECT slug, interconnect_gb_per_s, interconnect_latency_us FROM gpus")
                )
            }
    finally:
        engine.dispose()
    assert rows["l40s"] == (32, 10)
    assert rows["l4"] == (32, 15)


SCALE_OUT_COLUMNS = {"scale_out_gbit_per_s", "scale_out_latency_us", "scale_out_source"}


def _gpu_columns(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return {column["name"] for column in inspect(engine).get_columns("gpus")}
    finally:
        engine.dispose()


def test_0013_adds_each_gpus_scale_out_network_seeds_the_reference_and_downgrades(database_url: str) -> None:
    """0013 adds scale_out_gbit_per_s / _latency_us / _source; the reference rows get their cited NIC share (l40s:
    g6e.48xlarge's 400 Gbps over 8 GPUs = 50 Gb/s; h100-sxm: one ConnectX-7 NDR 400 Gb/s), a GPU nobody could source
    (h100-pcie, mi325x) stays NULL; the downgrade drops the columns, and an upgrade seeds the reference rows again."""
    import importlib

    from catalog.db import make_session_factory
    from catalog.repository import Catalog

    reference = {
        slug: (gbit, latency, source)
        for slug, gbit, latency, source in importlib.import_module("migrations.versions.0013_scale_out_network").REFERENCE
    }
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session, session.begin():
            assert Catalog(session).load_reference_catalog()
    finally:
        engine.dispose()
    migrate.downgrade(database_url, "0012_pcie_collectives")  # the figures go with the columns
    assert not SCALE_OUT_COLUMNS & _gpu_columns(database_url)

    migrate.upgrade(database_url, "head")  # the seed, not the reference catalog, puts them back
    assert SCALE_OUT_COLUMNS <= _gpu_columns(database_url)
    gpus = {gpu["slug"]: gpu for gpu in _export(database_url)["gpus"]}
    assert (gpus["l40s"]["scale_out_gbit_per_s"], gpus["l40s"]["scale_out_latency_us"]) == (50, None)
    assert gpus["l40s"]["scale_out_source"] == reference["l40s"][2]
    assert (gpus["h100-sxm"]["scale_out_gbit_per_s"], gpus["h100-sxm"]["scale_out_latency_us"]) == (400, 10)
    assert (gpus["l4"]["scale_out_gbit_per_s"], gpus["a10g"]["scale_out_gbit_per_s"]) == (12.5, 12.5)
    assert gpus["h100-pcie"]["scale_out_gbit_per_s"] is None and gpus["mi325x"]["scale_out_source"] is None
    assert model_diff(database_url) == []

    migrate.downgrade(database_url, "0012_pcie_collectives")
    assert not SCALE_OUT_COLUMNS & _gpu_columns(database_url)
    migrate.upgrade(database_url, "head")
    gpus = {gpu["slug"]: gpu for gpu in _export(database_url)["gpus"]}
    assert gpus["l40s"]["scale_out_gbit_per_s"] == 50 and gpus["mi300x"]["scale_out_gbit_per_s"] == 400
