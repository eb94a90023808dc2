"""Invariants of the performance model anyone can check by eye, over generated configurations."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.memory import kv_capacity_tokens, weight_bytes_per_gpu
from planner.parallel import valid_tensor_parallel_degrees
from planner.performance import build_step_model, decode_step
from planner.specs import MAX_MEMORY_BYTES, Efficiency, ModelSpec, MoeSpec, Precision, QuantSpec
from tests.planner.performance_specs import FP16_PRECISION, H100_SXM, LLAMA_2_70B, MIXTRAL_8X7B

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None)

efficiencies = st.builds(
    Efficiency,
    name=st.just("generated"),
    memory=st.floats(0.3, 1.0),
    compute=st.floats(0.3, 1.0),
    step_overhead_s=st.floats(0.0, 5e-3),
    memory_reserve_fraction=st.floats(0.0, 0.3),
    include_comm=st.booleans(),
    memory_compute_overlap=st.floats(0.0, 1.0),
)


@st.composite
def models(draw):
    """Dense or MoE transformers of plausible shape (heads a multiple of KV heads)."""
    layers = draw(st.integers(8, 96))
    kv_heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    heads = kv_heads * draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([64, 128]))
    hidden = heads * head_dim
    moe = None
    params_total = draw(st.floats(1e9, 400e9))
    params_active = params_total
    if draw(st.booleans()):
        experts = draw(st.sampled_from([8, 16, 64]))
        top_k = draw(st.integers(1, 4))
        expert_params = params_total * draw(st.floats(0.3, 0.9)) / (experts * layers)
        moe = MoeSpec(experts=experts, experts_per_token=top_k, shared_experts=0, expert_params=expert_params, moe_layers=layers)
        params_active = params_total - moe.routed_params + top_k * layers * expert_params
    return ModelSpec(
        slug="generated",
        params_total=params_total,
        params_active=params_active,
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        max_context_tokens=131072,
        moe=moe,
    )


def quants(slug):
    return st.builds(
        QuantSpec,
        slug=st.just(slug),
        weight_bytes_per_param=st.floats(0.25, 4.0),
        element_bytes=st.sampled_from([0.5, 1.0, 2.0, 4.0]),
        compute_dtype=st.just("fp16"),
    )


@PROPERTY_SETTINGS
@given(
    model=models(),
    efficiency=efficiencies,
    tp=st.sampled_from([1, 2, 4, 8]),
    batches=st.lists(st.integers(1, 2048), min_size=2, max_size=2),
    contexts=st.lists(st.integers(1, 131072), min_size=2, max_size=2),
)
def test_step_time_never_falls_as_batch_or_context_grows(model, efficiency, tp, batches, contexts):
    if tp not in valid_tensor_parallel_degrees(H100_SXM, model):
        tp = 1
    step_model = build_step_model(H100_SXM, model, FP16_PRECISION, tp, efficiency)
    small_batch, large_batch = sorted(batches)
    short, long = sorted(contexts)
    base = decode_step(step_model, batch=small_batch, context_tokens=short)
    for bigger in (
        decode_step(step_model, batch=large_batch, context_tokens=short),
        decode_step(step_model, batch=small_batch, context_tokens=long),
        decode_step(step_model, batch=large_batch, context_tokens=long),
    ):
        assert bigger.step_s >= base.step_s * (1 - 1e-12)
    # and the replica's throughput never falls as the batch grows (the weight read is shared)
    assert decode_step(step_model, batch=large_batch, context_tokens=short).output_tokens_per_s >= base.output_tokens_per_s * (
        1 - 1e-12
    )


@PROPERTY_SETTINGS
@given(
    memories=st.lists(st.floats(16e9, 300e9), min_size=2, max_size=2),
    efficiency=efficiencies,
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_more_memory_never_lowers_kv_capacity(memories, efficiency, tp):
    smaller, larger = sorted(memories)
    capacities = [
        kv_capacity_tokens(dataclasses.replace(H100_SXM, memory_bytes=memory), LLAMA_2_70B, FP16_PRECISION, tp, efficiency)
        for memory in (smaller, larger)
    ]
    assert capacities[0] <= capacities[1]


@PROPERTY_SETTINGS
@given(model=models(), weights=quants("w"), gpus_per_node=st.integers(1, 16))
def test_higher_tp_never_raises_per_gpu_weight_bytes(model, weights, gpus_per_node):
    gpu = dataclasses.replace(H100_SXM, gpus_per_node=gpus_per_node)
    per_gpu = [weight_bytes_per_gpu(model, weights, tp) for tp in valid_tensor_parallel_degrees(gpu, model)]
    assert per_gpu == sorted(per_gpu, reverse=True)


@PROPERTY_SETTINGS
@given(
    model=st.sampled_from([LLAMA_2_70B, MIXTRAL_8X7B]),
    first=st.tuples(quants("a"), quants("a-kv")),
    second=st.tuples(quants("b"), quants("b-kv")),
    batch=st.integers(1, 512),
    context=st.integers(1, 4096),
)
def test_lower_precision_never_raises_bytes_read(model, first, second, batch, context):
    """A format with no more bytes per weight and per KV value reads no more bytes in any step."""
    (weights_a, kv_a), (weights_b, kv_b) = first, second
    if weights_a.weight_bytes_per_param > weights_b.weight_bytes_per_param:
        weights_a, weights_b = weights_b, weights_a
    if kv_a.element_bytes > kv_b.element_bytes:
        kv_a, kv_b = kv_b, kv_a
    gpu = dataclasses.replace(H100_SXM, memory_bytes=MAX_MEMORY_BYTES)  # the property is about bytes read, not fit
    rows = [
        decode_step(
            build_step_model(gpu, model, Precision(weights=w, kv_cache=kv), 4, Efficiency()), batch=batch, context_tokens=context
        )
        for w, kv in ((weights_a, kv_a), (weights_b, kv_b))
    ]
    assert rows[0].bytes_read <= rows[1].bytes_read * (1 + 1e-12)
    assert rows[0].memory_s <= rows[1].memory_s * (1 + 1e-12)
