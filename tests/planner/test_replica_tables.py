"""A replica's step-time tables built the cheap way (planner/queueing_replica.py `_step_tables` through
the compiled `queueing_kernels.carry_tables`, and `life_overlap` on the once-sorted decode sample)
against the NumPy formulas they replaced (docs/prefix-caching.md, lat18c): a prefix plan builds
every option's tables again for each trial's prompt mixture, so they were made cheaper, not different."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner import queueing_kernels, queueing_replica, queueing_sample
from planner.queueing_replica import life_overlap, sorted_decodes, step_seconds, verify_seconds
from planner.step_model import Speculation, StepModel
from planner.workload import HistogramLength, LognormalLength, Serving
from tests.planner.test_queueing_model import LLAMA70B_4XH100
from tests.planner.test_queueing_numerics import MIXTRAL_LIKE

#: An EAGLE-style draft on the Mixtral-like model (test figures): k = 3, α = 0.7.
SPECULATING = dataclasses.replace(
    MIXTRAL_LIKE,
    speculation=Speculation(
        method="eagle",
        draft_tokens=3,
        acceptance_rate=0.7,
        draft_weight_bytes=0.5e9,
        draft_kv_bytes_per_token=8_192.0,
        draft_flops_per_token=1.0e9,
        draft_attention_flops_per_context_token=4_096.0,
    ),
)


def _numpy_carry(
    sm: StepModel,
    grid: np.ndarray,
    cap: np.ndarray,
    k: np.ndarray,
    spread: np.ndarray,
    mean: float,
    context: float,
    position: float,
    cached: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The carry step and spill as `_step_tables` computed them in NumPy before lat18c, verbatim."""
    n = grid[:, None, None]
    decode_kv = n * context
    arriving = np.maximum(k[..., None] * mean + np.sqrt(k[..., None]) * spread, 0.0)
    cap3 = cap[:, None, None]
    carried = np.minimum(arriving, cap3)
    spill = np.where(np.isfinite(cap3), np.maximum(arriving - cap3, 0.0) / cap3, 0.0).mean(axis=2)
    if sm.speculation is None:
        t_carry = step_seconds(sm, n + carried, decode_kv + carried * cached, decode_kv + carried * position).mean(axis=2)
    else:
        t_carry = verify_seconds(sm, n, decode_kv, carried, carried * position, carried * cached).mean(axis=2)
    return t_carry, spill


@pytest.mark.parametrize("sm", [LLAMA70B_4XH100, MIXTRAL_LIKE, SPECULATING], ids=["dense", "moe", "speculating"])
@pytest.mark.parametrize("chunk", [None, 2_048], ids=["unchunked", "chunked"])
@pytest.mark.parametrize("cached_read", [0.0, 1.7])
def test_compiled_carry_tables_are_the_numpy_formula(sm: StepModel, chunk: int | None, cached_read: float) -> None:
    prompts = HistogramLength(tokens=(64, 900, 6_000), weights=(0.3, 0.5, 0.2))
    prompt_grid = queueing_sample.length_quantiles(prompts, queueing_sample._PROMPT_GRID_U)
    grid = np.linspace(0.0, 96.0, 33)
    cap = np.full(grid.shape, np.inf) if chunk is None else np.maximum(1.0, chunk - grid * sm.verify_tokens)
    k = np.arange(40, dtype=float)[None, :]
    spread = prompt_grid - float(np.mean(prompt_grid))
    args = (prompts.mean, 1_400.0, 800.0, cached_read)
    expected_carry, expected_spill = _numpy_carry(sm, grid, cap, k, spread, *args)
    carry, spill = queueing_kernels.carry_tables(queueing_kernels.step_model_coefficients(sm), grid, cap, k[0], spread, *args)
    assert carry.shape == expected_carry.shape == (33, 40)
    np.testing.assert_allclose(carry, expected_carry, rtol=1e-12, atol=0.0)
    np.testing.assert_allclose(spill, expected_spill, rtol=1e-12, atol=1e-15)
    assert (spill > 0).any() == (chunk is not None)  # the long prompts spill past a 2,048 budget, never without one


@pytest.mark.parametrize("tokens_per_step", [None, 2.3])
def test_life_overlap_of_the_sorted_decodes_is_the_unsorted_call_bit_for_bit(tokens_per_step: float | None) -> None:
    output = LognormalLength(mean_tokens=250.0, p99_tokens=2_000.0)
    decodes = queueing_sample._output_sample(output).decodes
    if tokens_per_step is not None:
        decodes = decodes / tokens_per_step
    mean = float(np.mean(decodes))
    first = mean + 1.5  # a life: its prefill steps plus its decodes (`_replica_cached`: steps_grid[0])
    ordered = sorted_decodes(output, tokens_per_step)
    assert not ordered.flags.writeable and np.all(np.diff(ordered) >= 0)
    assert sorted_decodes(output, tokens_per_step) is ordered  # sorted once per output distribution
    unsorted = life_overlap(np.asarray(decodes) + first - mean)
    assert life_overlap(ordered + first - mean, presorted=True) == unsorted
    assert 0.0 < unsorted < 1.0  # lognormal lives overlap partly


def test_replica_tables_are_the_numpy_formulas_end_to_end() -> None:
    """A whole replica (MoE, chunked, a cached prefix) built through `_replica_cached`: its carry
    tables against the NumPy formula on the replica's own grid, arrivals and mixture."""
    prompts = HistogramLength(tokens=(64, 900, 6_000), weights=(0.3, 0.5, 0.2))
    output = LognormalLength(mean_tokens=250.0, p99_tokens=2_000.0)
    serving = Serving(batch_limit=128, chunk_tokens=2_048)
    rep = queueing_replica._replica_cached(MIXTRAL_LIKE, prompts, output, 1.0, serving, 400_000.0)
    cap = np.maximum(1.0, 2_048 - rep.grid * MIXTRAL_LIKE.verify_tokens)
    spread = rep.prompt_grid - float(np.mean(rep.prompt_grid))
    carry, spill = _numpy_carry(
        MIXTRAL_LIKE,
        rep.grid,
        cap,
        rep.k,
        spread,
        rep.prompt_mean,
        rep.decode_context_mean,
        rep.prefill_position_mean,
        rep.prefill_cached_read,
    )
    np.testing.assert_allclose(rep.carry_single_s, carry, rtol=1e-12)
    np.testing.assert_allclose(rep.spill_steps, 1.0 + spill, rtol=1e-12)
    assert rep.saturation_rps > 0.0
