"""The reference catalog's two 70B Llamas carry each its own checkpoint's config.json: they share
the transformer shape (80 layers, hidden 8192, 64 heads, 8 KV heads, FFN 28672) and differ in
vocabulary and context, so one must never stand in for the other's limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

MODELS_JSON = Path(__file__).resolve().parents[2] / "catalog" / "data" / "models.json"

SHAPE = {"layers": 80, "hidden_size": 8192, "attention_heads": 64, "kv_heads": 8, "head_dim": 128, "intermediate_size": 28672}

#: config.json of meta-llama/Llama-2-70b-hf (num_hidden_layers 80, hidden_size 8192, num_attention_heads 64,
#: num_key_value_heads 8, intermediate_size 28672, vocab_size 32000, max_position_embeddings 4096) and of
#: meta-llama/Llama-3.1-70B (the same shape, vocab_size 128256, max_position_embeddings 131072).
CONFIGS: dict[str, dict[str, Any]] = {
    "llama-2-70b": {**SHAPE, "vocab_size": 32000, "max_context_tokens": 4096, "checkpoint": "meta-llama/Llama-2-70b-hf"},
    "llama-3.1-70b": {**SHAPE, "vocab_size": 128256, "max_context_tokens": 131072, "checkpoint": "meta-llama/Llama-3.1-70B"},
}


@pytest.mark.parametrize("slug", sorted(CONFIGS))
def test_each_70b_llama_is_its_own_config(slug: str) -> None:
    models = {m["slug"]: m for m in json.loads(MODELS_JSON.read_text(encoding="utf-8"))}
    row = models[slug]
    assert {field: row[field] for field in CONFIGS[slug]} == CONFIGS[slug]
    assert CONFIGS[slug]["checkpoint"] in row["source"]  # the row cites the config it was read from
