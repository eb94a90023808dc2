"""A model's public `checkpoint` and a quantization's per-engine `engine_names` (issue 15 §5): optional,
validated, and kept through create, read, update, export and import; the reference catalog carries them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog import migrate
from catalog.db import make_engine, make_session_factory
from catalog.errors import InvalidRecordError
from catalog.records import canonical_model, canonical_quantization
from catalog.repository import REFERENCE_DATA_DIR, Catalog
from tests.catalog.records import llama_70b, quantization

FP8_NAMES = {"vllm": "fp8", "sglang": "fp8", "trt-llm": "FP8"}


def test_both_fields_are_optional_and_default_to_null() -> None:
    model = {key: value for key, value in llama_70b().items() if key != "checkpoint"}
    scheme = {key: value for key, value in quantization("fp8").items() if key != "engine_names"}
    assert canonical_model(model)["checkpoint"] is None
    assert canonical_quantization(scheme)["engine_names"] is None


def test_a_checkpoint_must_be_a_hugging_face_repo_id() -> None:
    assert (
        canonical_model({**llama_70b(), "checkpoint": "meta-llama/Llama-2-70b-hf"})["checkpoint"] == "meta-llama/Llama-2-70b-hf"
    )
    for bad in ("llama-2-70b", "/models/llama", "a/b/c", "meta llama/x", ""):
        with pytest.raises(InvalidRecordError) as caught:
            canonical_model({**llama_70b(), "checkpoint": bad})
        assert [error["field"] for error in caught.value.errors] == ["checkpoint"], bad


def test_engine_names_name_known_engines_only_and_come_back_in_engine_order() -> None:
    scheme = canonical_quantization({**quantization("fp8"), "engine_names": {"trt-llm": "FP8", "vllm": "fp8"}})
    assert list(scheme["engine_names"].items()) == [("vllm", "fp8"), ("trt-llm", "FP8")]
    with pytest.raises(InvalidRecordError) as caught:
        canonical_quantization({**quantization("fp8"), "engine_names": {"llama.cpp": "Q8_0", "sglang": "", "vllm": 8}})
    assert sorted(error["field"] for error in caught.value.errors) == [
        "engine_names.llama.cpp",
        "engine_names.sglang",
        "engine_names.vllm",
    ]


def test_create_read_update_round_trip(loaded: Catalog) -> None:
    created = loaded.create_model({**llama_70b(), "slug": "llama-2-70b-chat", "checkpoint": "meta-llama/Llama-2-70b-chat-hf"})
    assert created["checkpoint"] == "meta-llama/Llama-2-70b-chat-hf"
    assert loaded.get_model("llama-2-70b-chat")["checkpoint"] == "meta-llama/Llama-2-70b-chat-hf"
    assert loaded.update_model("llama-2-70b-chat", {"checkpoint": None})["checkpoint"] is None

    loaded.update_quantization("fp8", {"engine_names": FP8_NAMES})
    assert loaded.get_quantization("fp8")["engine_names"] == FP8_NAMES
    loaded.update_quantization("fp8", {"engine_names": None})
    assert loaded.get_quantization("fp8")["engine_names"] is None


def test_export_import_keeps_both_fields(loaded: Catalog, tmp_path: Path) -> None:
    loaded.update_model("llama-2-70b", {"checkpoint": "meta-llama/Llama-2-70b-hf"})
    loaded.update_quantization("fp8", {"engine_names": FP8_NAMES})
    exported = loaded.export_catalog()
    url = f"sqlite:///{tmp_path / 'second.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            second = Catalog(session)
            second.import_catalog(json.loads(json.dumps(exported)))
            session.commit()
            assert second.get_model("llama-2-70b")["checkpoint"] == "meta-llama/Llama-2-70b-hf"
            assert second.get_quantization("fp8")["engine_names"] == FP8_NAMES
    finally:
        engine.dispose()


def test_the_reference_catalog_names_every_checkpoint_and_every_sub_16_bit_scheme() -> None:
    models = json.loads((REFERENCE_DATA_DIR / "models.json").read_text(encoding="utf-8"))
    schemes = json.loads((REFERENCE_DATA_DIR / "quantizations.json").read_text(encoding="utf-8"))
    assert all(canonical_model(model)["checkpoint"] for model in models)
    # Each checkpoint is the repo the model's shape is cited from (its config.json).
    assert all(model["source"].startswith(f"shape: {model['checkpoint']} config.json") for model in models)
    for scheme in map(canonical_quantization, schemes):
        if scheme["element_bytes"] < 2:
            assert set(scheme["engine_names"]) == {"vllm", "sglang", "trt-llm"}, scheme["slug"]
        else:
            assert scheme["engine_names"] is None, scheme["slug"]  # served unquantized with --dtype
