"""bench/speculative_evidence.py: the evidence table covers two engines with two methods each and its
rows are Headroom's own computation (a row recomputed here by hand from the step model)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from bench.fidelity import open_reference_catalog
from bench.speculative_evidence import DRAFT_POINTS, POINTS, _speedup, draft_rows, rows
from planner.performance import build_step_model
from planner.speculative import head_speculation


@pytest.fixture(scope="module")
def catalog() -> Iterator[object]:
    with tempfile.TemporaryDirectory() as folder:
        opened = open_reference_catalog(Path(folder))
        yield opened
        opened.session.close()


def test_two_engines_with_two_methods_each() -> None:
    methods: dict[str, set[str]] = {}
    for point in POINTS:
        methods.setdefault(point.engine.split()[0], set()).add(point.method.split()[0])
    assert {"SGLang", "vLLM"} <= set(methods)
    assert len(methods["SGLang"]) >= 2 and len(methods["vLLM"]) >= 2
    assert {p.batch for p in POINTS if p.engine.startswith("vLLM")} == {1, 16, 64, 128}


def test_a_vllm_row_is_the_step_models_ratio(catalog) -> None:
    """Llama 3.1 8B on one H100 at batch 64, EAGLE at α 0.8, k 3, context 500: 1 / ((t_verify / E) / t_decode)."""
    point = next(p for p in POINTS if p.engine.startswith("vLLM") and p.model == "llama-3.1-8b" and p.batch == 64)
    gpu, model = catalog.gpu_spec("h100-sxm"), catalog.model_spec("llama-3.1-8b")
    precision = catalog.precision("bf16", "bf16")
    sm = build_step_model(gpu, model, precision, 1, gpu.efficiency)
    spec = head_speculation(model, precision, 1, method="eagle", draft_tokens=3, acceptance_rate=0.8)
    kv = 64 * 500
    plain = sm.step_s(64, kv, kv)
    e = (1 - 0.8**4) / (1 - 0.8)
    # k + 1 = 4 tokens verified per sequence, each attending (k+1)·c + k(k+1)/2; then the draft's 3 passes
    verify = sm.step_s(64 * 4, kv, 4 * kv + 64 * 6) + replace(sm, speculation=spec).draft_s(64, kv)
    assert _speedup(catalog, point) == (pytest.approx(plain / (verify / e)), 3)


def test_the_tables_print_every_point(catalog) -> None:
    table = rows(catalog)
    assert len(table) == 2 + len(POINTS)
    assert all(line.count("|") == 9 for line in table)
    draft = draft_rows(catalog)
    assert draft[0].startswith("α at which Headroom matches batch 1")
    assert len([line for line in draft if line.startswith("| ") and line[2].isdigit()]) == len(DRAFT_POINTS)
    assert "+0%" in draft[4]  # batch 1 matched by construction
