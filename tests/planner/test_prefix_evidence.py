"""bench/prefix_evidence.py (docs/prefix-caching.md's evidence table): each row is Headroom's cached prefill
against the uncached one, a gain above 1 and below the token ratio P/(P − C) — the cached tokens skip the GEMMs
but are still read and attended — that grows with the tokens cached."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.fidelity import open_reference_catalog
from bench.prefix_evidence import POINTS, predicted, rows


@pytest.fixture(scope="module")
def catalog() -> Iterator[object]:
    with tempfile.TemporaryDirectory() as folder:
        opened = open_reference_catalog(Path(folder))
        yield opened
        opened.session.close()


@pytest.mark.parametrize("point", POINTS, ids=[p[0].split(" (")[0] for p in POINTS])
def test_a_rows_gain_lies_between_one_and_the_token_ratio_and_grows_with_the_cache(catalog, point) -> None:
    _, gpu, model, tp, prompt, cached, _, _ = point
    full, part = predicted(catalog, gpu, model, tp, prompt, cached)
    assert 1.0 < full / part < prompt / (prompt - cached)
    less_full, less_part = predicted(catalog, gpu, model, tp, prompt, cached // 2)
    assert less_full == pytest.approx(full)
    assert less_full / less_part < full / part


def test_the_table_predicts_each_point_at_its_stated_reuse(catalog) -> None:
    lines = rows(catalog)[2:]
    assert len(lines) == len(POINTS) >= 2
    for (_, gpu, model, tp, prompt, cached, published, _), line in zip(POINTS, lines, strict=True):
        full, part = predicted(catalog, gpu, model, tp, prompt, cached)
        assert f"| {prompt:,} | {cached:,} | {published:.2f}× | {full / part:.2f}× " in line
