"""The bulk spec reads (`Catalog.gpu_specs`, `Catalog.precisions`) return exactly what the
per-slug reads (`gpu_spec`, `precision`) return, and fail the same way, on every backend."""

from __future__ import annotations

import pytest

from catalog.errors import NotFoundError
from catalog.repository import Catalog
from planner.errors import UnsupportedConfigurationError
from tests.catalog.records import profile


@pytest.fixture
def reference(catalog: Catalog) -> Catalog:
    assert catalog.load_reference_catalog()
    catalog.save_efficiency_profile(profile())  # a stored profile on h100-sxm only
    return catalog


def _slugs(catalog: Catalog, kind: str) -> list[str]:
    page = catalog.list_gpus(limit=1000) if kind == "gpu" else catalog.list_quantizations(limit=1000)
    return [record["slug"] for record in page.items]


@pytest.mark.parametrize("efficiency", ["calibrated", "ideal"])
def test_every_reference_gpu_equals_its_single_read(reference: Catalog, efficiency: str) -> None:
    slugs = _slugs(reference, "gpu")
    assert len(slugs) > 5
    single = tuple(reference.gpu_spec(slug, efficiency) for slug in slugs)
    assert reference.gpu_specs(efficiency) == single
    assert reference.gpu_specs(efficiency, slugs=list(reversed(slugs))) == tuple(reversed(single))
    assert reference.gpu_specs(efficiency, limit=3) == single[:3]


def test_a_stored_profile_is_read_for_the_gpus_that_have_it(reference: Catalog) -> None:
    assert reference.gpu_specs("vllm-fit") == (reference.gpu_spec("h100-sxm", "vllm-fit"),)
    assert reference.gpu_specs("vllm-fit", slugs=["h100-sxm"])[0].efficiency.memory == 0.85
    assert reference.gpu_specs("no-such-profile") == ()
    with pytest.raises(NotFoundError) as single:
        reference.gpu_spec("h200", "vllm-fit")
    with pytest.raises(NotFoundError) as bulk:
        reference.gpu_specs("vllm-fit", slugs=["h100-sxm", "h200"])
    assert (bulk.value.args, bulk.value.extensions) == (single.value.args, single.value.extensions)


@pytest.mark.parametrize("slug", ["no-such-gpu", "nul\x00slug"])
def test_an_unknown_gpu_fails_as_the_single_read_does(reference: Catalog, slug: str) -> None:
    with pytest.raises(NotFoundError) as single:
        reference.gpu_spec(slug)
    with pytest.raises(NotFoundError) as bulk:
        reference.gpu_specs(slugs=["h100-sxm", slug])
    assert (bulk.value.args, bulk.value.extensions) == (single.value.args, single.value.extensions)


def test_every_allowed_precision_equals_its_single_read(reference: Catalog) -> None:
    slugs = _slugs(reference, "quantization")
    pairs, refused = [], []
    for weights in slugs:
        for kv_cache in slugs:
            try:
                pairs.append(((weights, kv_cache), reference.precision(weights, kv_cache)))
            except UnsupportedConfigurationError:
                refused.append((weights, kv_cache))
    assert pairs and refused
    assert reference.precisions([pair for pair, _ in pairs]) == tuple(precision for _, precision in pairs)
    with pytest.raises(UnsupportedConfigurationError):
        reference.precisions([pairs[0][0], refused[0]])


def test_unknown_precisions_fail_or_are_skipped(reference: Catalog) -> None:
    with pytest.raises(NotFoundError) as single:
        reference.precision("bf16", "no-such-format")
    with pytest.raises(NotFoundError) as bulk:
        reference.precisions([("bf16", "bf16"), ("bf16", "no-such-format")])
    assert (bulk.value.args, bulk.value.extensions) == (single.value.args, single.value.extensions)
    assert reference.precisions([("bf16", "no-such-format"), ("bf16", "bf16")], skip_unknown=True) == (
        reference.precision("bf16", "bf16"),
    )
