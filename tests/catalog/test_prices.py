"""GPU prices by provider, on both backends: migration 0006 carries each GPU's price block over,
the price records' CRUD, export → import round trips, the reference prices, and how a plan's
prices are chosen (one provider, overrides on top, unpriced GPUs left out)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from catalog import migrate
from catalog.db import make_engine, make_session_factory
from catalog.errors import (
    AlreadyExistsError,
    InvalidRecordError,
    NotFoundError,
    VersionConflictError,
)
from catalog.prices import PriceOverride, Prices
from catalog.repository import REFERENCE_DATA_DIR, Catalog
from planner.errors import PlannerInputError

ACME_H100 = {
    "provider": "acme",
    "gpu": "h100-sxm",
    "on_demand": 2.5,
    "reserved_1y": 1.6,
    "as_of": "2026-11-01",
    "source": "acme price list (test), 2026-11-01",
}


def _insert_gpu(connection, slug: str, source: str | None, on_demand: float | None) -> None:
    connection.execute(
        text(
            "INSERT INTO gpus (slug, name, vendor, architecture, memory_gb, memory_bandwidth_gb_per_s, interconnect_gb_per_s, "
            "gpus_per_node, price_on_demand_usd_per_hour, price_reserved_1y_usd_per_hour, price_as_of, price_source, source, "
            "version, created_at, updated_at) VALUES (:slug, :slug, 'nvidia', 'hopper', 80, 3350, 450, 8, :od, :r1, "
            ":as_of, :src, 'test', 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
        ),
        {
            "slug": slug,
            "od": on_demand,
            "r1": None if on_demand is None else on_demand * 0.5,
            "as_of": None if on_demand is None else "2026-02-01",
            "src": source,
        },
    )


def test_0006_carries_each_gpu_price_over_to_the_provider_its_source_names(database_url: str) -> None:
    """The provider is the first of coreweave, lambda, tensorwave, aws the source names (a derived
    reserved price cites AWS after the seller); an unpriced GPU gets no row. The downgrade keeps
    the GPU rows and their prices."""
    migrate.upgrade(database_url, "0005_gpu_efficiency_overlap")
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            _insert_gpu(connection, "cw", "CoreWeave on-demand (8-GPU instance / 8); reserved derived from the AWS g6e rate", 6.0)
            _insert_gpu(connection, "lam", "Lambda on-demand 1x; reserved derived from the published AWS rate", 2.0)
            _insert_gpu(connection, "ec2", "AWS EC2 g6.xlarge on-demand", 0.8)
            _insert_gpu(connection, "odd", "a reseller's quote", 1.0)
            _insert_gpu(connection, "free", None, None)
        migrate.upgrade(database_url, "0006_gpu_prices")
        with make_session_factory(engine)() as session:
            prices = {p["gpu"]: p for p in Prices(session).list_prices(limit=100).items}
        assert {gpu: p["provider"] for gpu, p in prices.items()} == {
            "cw": "coreweave",
            "lam": "lambda",
            "ec2": "aws",
            "odd": "unattributed",
        }
        assert prices["cw"]["on_demand"] == 6.0 and prices["cw"]["reserved_1y"] == 3.0
        assert prices["cw"]["as_of"] == "2026-02-01" and prices["cw"]["region"] is None
        assert prices["cw"]["source"].startswith("CoreWeave")
        migrate.downgrade(database_url, "0005_gpu_efficiency_overlap")
        with engine.connect() as connection:
            assert connection.execute(text("SELECT price_on_demand_usd_per_hour FROM gpus WHERE slug = 'cw'")).scalar_one() == 6.0
    finally:
        engine.dispose()


def test_0006_downgrade_gives_a_gpu_without_its_own_price_one_of_its_table_prices(database_url: str) -> None:
    """A GPU whose price lives only in the table (added after 0006) keeps the region-less price
    of the alphabetically first provider when the table is dropped."""
    migrate.upgrade(database_url, "0006_gpu_prices")
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            _insert_gpu(connection, "h100-sxm", None, None)
            for provider, on_demand in (("zeta", 9.0), ("acme", 2.5)):  # raw SQL: the ORM maps later revisions' columns
                connection.execute(
                    text(
                        "INSERT INTO gpu_prices (provider, gpu_id, region, on_demand_usd_per_hour, as_of, source, version, "
                        "created_at, updated_at) SELECT :provider, id, '', :od, '2026-11-01', 'price list (test)', 1, "
                        "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP FROM gpus WHERE slug = 'h100-sxm'"
                    ),
                    {"provider": provider, "od": on_demand},
                )
        migrate.downgrade(database_url, "0005_gpu_efficiency_overlap")
        with engine.connect() as connection:
            row = connection.execute(
                text("SELECT price_on_demand_usd_per_hour, price_source FROM gpus WHERE slug = 'h100-sxm'")
            ).one()
        assert row[0] == 2.5 and row[1].startswith("acme: ")
    finally:
        engine.dispose()


def test_price_records_are_created_read_updated_and_deleted(loaded: Catalog) -> None:
    prices = Prices(loaded.session)
    version = loaded.catalog_version()
    created = prices.create_price(ACME_H100)
    assert created["version"] == 1 and created["region"] is None and created["spot"] is None
    assert loaded.catalog_version() == version + 1
    with pytest.raises(AlreadyExistsError):
        prices.create_price(ACME_H100)
    regional = prices.create_price({**ACME_H100, "region": "eu-west", "on_demand": 2.9})
    assert regional["region"] == "eu-west"
    assert prices.get_price("acme", "h100-sxm")["on_demand"] == 2.5
    assert prices.get_price("acme", "h100-sxm", "eu-west")["on_demand"] == 2.9

    with pytest.raises(VersionConflictError):
        prices.update_price("acme", "h100-sxm", None, {"on_demand": 2.0}, if_version=5)
    updated = prices.update_price("acme", "h100-sxm", None, {"on_demand": 2.0, "spot": 0.9}, if_version=1)
    assert updated["on_demand"] == 2.0 and updated["reserved_1y"] == 1.6 and updated["version"] == 2
    with pytest.raises(InvalidRecordError) as error:
        prices.update_price("acme", "h100-sxm", None, {"provider": "other"})
    assert error.value.errors[0]["field"] == "provider"
    with pytest.raises(InvalidRecordError):
        prices.create_price({**ACME_H100, "gpu": "no-such-gpu"})
    with pytest.raises(InvalidRecordError):
        prices.create_price({**ACME_H100, "on_demand": -1})

    assert [p["region"] for p in prices.list_prices(provider="acme").items] == [None, "eu-west"]
    prices.delete_price("acme", "h100-sxm")
    with pytest.raises(NotFoundError):
        prices.get_price("acme", "h100-sxm")
    loaded.delete_gpu("h100-sxm")
    assert prices.list_prices(provider="acme").total == 0, "deleting the GPU deletes its prices"


def test_prices_round_trip_through_export_and_import(loaded: Catalog, tmp_path) -> None:
    prices = Prices(loaded.session)
    prices.create_price(ACME_H100)
    prices.create_price({**ACME_H100, "gpu": "mi300x", "region": "us-east", "spot": 1.0, "reserved_3y": 1.2})
    exported = loaded.export_catalog()
    assert [(p["provider"], p["gpu"], p["region"]) for p in exported["prices"]] == [
        ("acme", "h100-sxm", None),
        ("acme", "mi300x", "us-east"),
    ]
    url = f"sqlite:///{tmp_path / 'second.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            counts = catalog.import_catalog(json.loads(json.dumps(exported)))
            assert catalog.export_catalog() == exported
            assert catalog.import_catalog(exported)["unchanged"] == counts["created"]
            with pytest.raises(InvalidRecordError) as error:
                catalog.import_catalog({"prices": [{**ACME_H100, "gpu": "nowhere"}]})
            assert error.value.errors[0]["field"] == "prices[0].gpu"
    finally:
        engine.dispose()


def test_the_reference_prices_come_from_three_or_more_providers_each_dated_and_sourced() -> None:
    rows = json.loads((REFERENCE_DATA_DIR / "prices.json").read_text(encoding="utf-8"))
    gpus = {gpu["slug"] for gpu in json.loads((REFERENCE_DATA_DIR / "gpus.json").read_text(encoding="utf-8"))}
    providers = {row["provider"] for row in rows}
    assert len(providers) >= 3
    assert all(row["gpu"] in gpus and row["as_of"] and row["source"] for row in rows)
    per_provider = {provider: {row["gpu"] for row in rows if row["provider"] == provider} for provider in providers}
    assert max(per_provider, key=lambda provider: len(per_provider[provider])) == "runpod", "the default covers the most GPUs"


def test_a_plan_takes_one_providers_prices_with_overrides_on_top(catalog: Catalog) -> None:
    assert catalog.load_reference_catalog()
    prices = Prices(catalog.session)
    specs = catalog.gpu_specs(slugs=["h100-sxm", "mi300x", "l40s"])
    pricing = prices.price_specs(specs, "coreweave", {"l40s": PriceOverride(on_demand=1.0)})
    assert [spec.slug for spec in pricing.specs] == ["h100-sxm", "l40s"]
    h100 = pricing.specs[0]
    assert h100.price_usd_per_hour_on_demand == 6.155 and h100.price_usd_per_hour_reserved_1y == 3.8777
    assert pricing.prices["l40s"].override and pricing.prices["l40s"].source == "request"
    assert len(pricing.notes) == 1 and pricing.notes[0].startswith("mi300x has no price at coreweave")
    with pytest.raises(NotFoundError) as unknown:
        prices.price_specs(specs, "nobody")
    assert unknown.value.extensions["known_providers"] == ["aws", "coreweave", "lambda", "runpod", "tensorwave"]
    with pytest.raises(PlannerInputError):
        prices.price_specs(catalog.gpu_specs(slugs=["mi300x"]), "coreweave")
