"""bench/queueing_fidelity.py builds its specs straight from the reference catalog's JSON; when the
model records gained catalog-only keys (checkpoint, ...) it crashed before measuring anything."""

from __future__ import annotations

import json

import pytest

from bench import queueing_fidelity

MODELS = [r["slug"] for r in json.loads((queueing_fidelity.DATA / "models.json").read_text())]


@pytest.mark.parametrize("slug", MODELS)
def test_the_fidelity_bench_builds_a_spec_for_every_reference_model(slug: str) -> None:
    record = next(r for r in json.loads((queueing_fidelity.DATA / "models.json").read_text()) if r["slug"] == slug)
    spec = queueing_fidelity.model_spec(slug)
    assert spec.layers == record["layers"]
    assert spec.params_total == record["params_total"]
    assert (spec.moe is None) == (record["moe"] is None)
