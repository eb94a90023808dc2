"""Cloud instance types, on both backends: the reference seed, CRUD with version checks, filters,
export → import round trips, which price a plan's instance spec takes (the list price before any
region), and the GPU foreign key's cascade."""

from __future__ import annotations

import json

import pytest

from catalog import migrate
from catalog.db import make_engine, make_session_factory
from catalog.errors import (
    AlreadyExistsError,
    InvalidRecordError,
    NotFoundError,
    VersionConflictError,
)
from catalog.instances import InstanceTypes
from catalog.repository import REFERENCE_DATA_DIR, Catalog
from planner.specs import MAX_PRICE_USD_PER_HOUR, InstanceTypeSpec

ACME_8X = {
    "provider": "acme",
    "name": "gpu.8x-h100",
    "gpu": "h100-sxm",
    "gpus": 8,
    "nvlink_domain": 8,
    "network_gbit_per_s": 3200,
    "vcpus": 192,
    "ram_gib": 2048,
    "on_demand_usd_per_hour": 40.0,
    "reserved_1y_usd_per_hour": 26.0,
    "as_of": "2026-11-01",
    "source": "acme price list (test), 2026-11-01",
}


def test_the_reference_catalog_seeds_instance_types_of_three_clouds_each_dated_and_sourced(catalog: Catalog) -> None:
    """AWS, Google Cloud and Azure each sell at least one 8-GPU and, where they publish one, a 1-GPU
    instance; every record names a GPU the catalog has, is dated and sourced, and its price per GPU
    is within the planner's bound on a GPU-hour."""
    rows = json.loads((REFERENCE_DATA_DIR / "instance_types.json").read_text(encoding="utf-8"))
    gpus = {gpu["slug"] for gpu in json.loads((REFERENCE_DATA_DIR / "gpus.json").read_text(encoding="utf-8"))}
    assert all(row["gpu"] in gpus and row["as_of"] and row["source"] for row in rows)
    assert all(0 < row["on_demand_usd_per_hour"] / row["gpus"] <= MAX_PRICE_USD_PER_HOUR for row in rows)
    sizes = {(row["provider"], row["gpus"]) for row in rows}
    assert {("aws", 8), ("aws", 1), ("gcp", 8), ("gcp", 1), ("azure", 8)} <= sizes
    assert {row["gpu"] for row in rows if row["gpu"].startswith("mi3")} == {"mi300x"}, "AMD instances are listed too"

    assert catalog.load_reference_catalog()
    instances = InstanceTypes(catalog.session)
    assert instances.list_instance_types(limit=500).total == len(rows)
    p5 = instances.get_instance_type("aws", "p5.48xlarge", "us-east-1")
    assert (p5["gpu"], p5["gpus"], p5["nvlink_domain"], p5["version"]) == ("h100-sxm", 8, 8, 1)


def test_instance_types_are_created_read_updated_and_deleted(loaded: Catalog) -> None:
    instances = InstanceTypes(loaded.session)
    version = loaded.catalog_version()
    created = instances.create_instance_type(ACME_8X)
    assert created["version"] == 1 and created["region"] is None and created["network_gbit_per_s"] == 3200
    assert loaded.catalog_version() == version + 1
    with pytest.raises(AlreadyExistsError):
        instances.create_instance_type(ACME_8X)
    regional = instances.create_instance_type({**ACME_8X, "region": "eu-west", "on_demand_usd_per_hour": 44.0})
    assert regional["region"] == "eu-west"
    assert instances.get_instance_type("acme", "gpu.8x-h100")["on_demand_usd_per_hour"] == 40.0
    assert instances.get_instance_type("acme", "gpu.8x-h100", "eu-west")["on_demand_usd_per_hour"] == 44.0

    with pytest.raises(VersionConflictError):
        instances.update_instance_type("acme", "gpu.8x-h100", None, {"on_demand_usd_per_hour": 38.0}, if_version=5)
    updated = instances.update_instance_type("acme", "gpu.8x-h100", None, {"on_demand_usd_per_hour": 38.0}, if_version=1)
    assert updated["on_demand_usd_per_hour"] == 38.0 and updated["reserved_1y_usd_per_hour"] == 26.0 and updated["version"] == 2
    with pytest.raises(InvalidRecordError) as renamed:
        instances.update_instance_type("acme", "gpu.8x-h100", None, {"name": "other"})
    assert renamed.value.errors[0]["field"] == "name"

    instances.delete_instance_type("acme", "gpu.8x-h100", if_version=2)
    with pytest.raises(NotFoundError):
        instances.get_instance_type("acme", "gpu.8x-h100")
    with pytest.raises(VersionConflictError):
        instances.delete_instance_type("acme", "gpu.8x-h100", "eu-west", if_version=9)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nvlink_domain": 16}, "nvlink_domain"),  # more GPUs in the domain than in the instance
        ({"gpus": 0}, "gpus"),
        ({"gpus": 73}, "gpus"),  # beyond the NVL72 rack
        ({"on_demand_usd_per_hour": 0}, "on_demand_usd_per_hour"),
        ({"on_demand_usd_per_hour": 8_000.01}, "on_demand_usd_per_hour"),  # > $1,000 per GPU-hour × 8
        ({"gpu": "no-such-gpu"}, "gpu"),
        ({"name": "Standard_ND96isr_H100_v5"}, "name"),  # names are stored lowercase
        ({"surprise": 1}, "surprise"),
    ],
)
def test_an_impossible_instance_type_is_refused_naming_its_field(loaded: Catalog, change: dict, field: str) -> None:
    with pytest.raises(InvalidRecordError) as refused:
        InstanceTypes(loaded.session).create_instance_type({**ACME_8X, **change})
    assert field in [error["field"] for error in refused.value.errors]


def test_listing_filters_by_provider_and_gpu_and_pages(loaded: Catalog) -> None:
    instances = InstanceTypes(loaded.session)
    instances.create_instance_type(ACME_8X)
    instances.create_instance_type(
        {**ACME_8X, "name": "gpu.1x-h100", "gpus": 1, "nvlink_domain": 1, "on_demand_usd_per_hour": 5.0}
    )
    instances.create_instance_type({**ACME_8X, "name": "gpu.8x-mi300x", "gpu": "mi300x"})
    instances.create_instance_type({**ACME_8X, "provider": "zeta"})
    assert instances.list_instance_types().total == 4
    assert [i["name"] for i in instances.list_instance_types(provider="acme").items] == [
        "gpu.1x-h100",
        "gpu.8x-h100",
        "gpu.8x-mi300x",
    ]
    assert [(i["provider"], i["name"]) for i in instances.list_instance_types(gpu="h100-sxm").items] == [
        ("acme", "gpu.1x-h100"),
        ("acme", "gpu.8x-h100"),
        ("zeta", "gpu.8x-h100"),
    ]
    page = instances.list_instance_types(provider="acme", limit=1, offset=1)
    assert page.total == 3 and [i["name"] for i in page.items] == ["gpu.8x-h100"]
    assert instances.list_instance_types(provider="acme", offset=10).total == 3
    assert instances.list_instance_types(provider="nobody").total == 0
    with pytest.raises(InvalidRecordError):
        instances.list_instance_types(limit=-1)


def test_a_plans_instance_spec_takes_the_list_price_else_the_first_region(loaded: Catalog) -> None:
    """One spec per instance name: the region-less list price wins over any region; without one,
    the alphabetically first region's price is used; `gpus` narrows to those GPU slugs."""
    instances = InstanceTypes(loaded.session)
    instances.create_instance_type({**ACME_8X, "region": "us-west", "on_demand_usd_per_hour": 41.0})
    instances.create_instance_type(ACME_8X)  # list price 40.0
    instances.create_instance_type({**ACME_8X, "region": "eu-west", "on_demand_usd_per_hour": 44.0})
    small = {**ACME_8X, "name": "gpu.1x-mi300x", "gpu": "mi300x", "gpus": 1, "nvlink_domain": 1}
    instances.create_instance_type({**small, "region": "us-west", "on_demand_usd_per_hour": 3.0})
    instances.create_instance_type({**small, "region": "ap-south", "on_demand_usd_per_hour": 3.5})
    instances.create_instance_type({**ACME_8X, "provider": "zeta", "on_demand_usd_per_hour": 30.0})

    specs = instances.instance_type_specs("acme")
    assert specs == (
        InstanceTypeSpec(
            provider="acme", name="gpu.1x-mi300x", gpu="mi300x", gpus=1, nvlink_domain=1, usd_per_hour=3.5, region="ap-south"
        ),
        InstanceTypeSpec(
            provider="acme", name="gpu.8x-h100", gpu="h100-sxm", gpus=8, nvlink_domain=8, usd_per_hour=40.0, region=""
        ),
    )
    assert [spec.name for spec in instances.instance_type_specs("acme", ["h100-sxm"])] == ["gpu.8x-h100"]
    assert instances.instance_type_specs("acme", []) == ()
    assert instances.instance_type_specs("nobody") == ()
    assert specs[1].replicas_per_instance(4) == 2


def test_deleting_a_gpu_deletes_its_instance_types(loaded: Catalog) -> None:
    instances = InstanceTypes(loaded.session)
    instances.create_instance_type(ACME_8X)
    instances.create_instance_type({**ACME_8X, "name": "gpu.8x-mi300x", "gpu": "mi300x"})
    loaded.delete_gpu("h100-sxm")
    loaded.session.expire_all()
    assert [i["name"] for i in instances.list_instance_types().items] == ["gpu.8x-mi300x"]


def test_instance_types_round_trip_through_export_and_import(loaded: Catalog, tmp_path) -> None:
    instances = InstanceTypes(loaded.session)
    instances.create_instance_type(ACME_8X)
    instances.create_instance_type({**ACME_8X, "region": "us-east", "vcpus": None, "reserved_1y_usd_per_hour": None})
    exported = loaded.export_catalog()
    assert [(i["provider"], i["name"], i["region"]) for i in exported["instance_types"]] == [
        ("acme", "gpu.8x-h100", None),
        ("acme", "gpu.8x-h100", "us-east"),
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
            changed = {**exported, "instance_types": [{**exported["instance_types"][0], "on_demand_usd_per_hour": 39.0}]}
            assert catalog.import_catalog(changed)["updated"] == 1
            with pytest.raises(InvalidRecordError) as error:
                catalog.import_catalog({"instance_types": [{**ACME_8X, "gpu": "nowhere"}]})
            assert error.value.errors[0]["field"] == "instance_types[0].gpu"
    finally:
        engine.dispose()


def test_reference_instance_prices_agree_with_the_gpu_prices_read_from_the_same_page() -> None:
    """CoreWeave's and AWS's rows in prices.json are these instances' prices ÷ their GPUs (the same
    pages): 8 × $6.155 = $49.24 for an HGX H100, 4 × $10.50 = $42.00 for a GB200 tray, 1 × $1.861 for
    a g6e.xlarge."""
    instances = json.loads((REFERENCE_DATA_DIR / "instance_types.json").read_text(encoding="utf-8"))
    prices = json.loads((REFERENCE_DATA_DIR / "prices.json").read_text(encoding="utf-8"))
    per_gpu = {(p["provider"], p["gpu"]): p["on_demand"] for p in prices}
    same_page = [i for i in instances if i["provider"] in ("coreweave", "aws") and (i["provider"], i["gpu"]) in per_gpu]
    assert len(same_page) >= 8
    for instance in same_page:
        expected = per_gpu[(instance["provider"], instance["gpu"])] * instance["gpus"]
        assert instance["on_demand_usd_per_hour"] == pytest.approx(expected, abs=0.005), instance["name"]
