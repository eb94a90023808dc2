"""The step-level class simulator (planner/simulator_classes_step.py) against the analytic class model
(planner/queueing_priority.py) and the slot-level class simulator (planner/simulator_classes.py).

The small case where all three should agree: a step of 10 ms whatever the batch (a 10 GB weight read
at 1 TB/s, nothing else that matters), one-token prompts and geometric outputs of mean 50 tokens, so
a request holds its slot for a geometric number of 10 ms steps, mean 0.5 s — the exponential holding
time of the analytic model, in steps. 8 slots at ρ 0.8, chat (priority 0) and batch (priority 1) half
the load each, 4,000 s of traffic (about 46,000 requests, seed 0).

Tolerances, from what the three can differ by: the step simulator admits at step starts (an
arrival into a free slot waits up to one 10 ms step, which the others count as 0) and its holding
times are geometric, not exponential; the low class's tail is heavier than the model's exponential
(docs/traffic-classes.md, Fidelity). So: the top class's mean and p99 wait within 15 % + one step of
the model and of the slot simulator; the low class's mean wait within 20 % of the model (the model
is optimistic for it at 8 slots) and 10 % of the slot simulator; refusal fractions within 15 %
(relative) of the birth–death chain and of the slot simulator.
"""

from __future__ import annotations

import pytest

from planner.errors import PlannerInputError
from planner.queueing_priority import ClassLoad, priority_waits, shed_probabilities
from planner.simulator_classes import ClassSimulated, simulate_classes
from planner.simulator_classes_step import StepClass, StepClassSimulated, simulate_classes_step
from planner.step_model import StepModel
from planner.workload import FixedLength, HistogramLength, Workload

STEP_S = 0.01
TEN_MS_PER_STEP = StepModel(
    dense_weight_bytes=1e10,
    kv_bytes_per_token=1.0,
    flops_per_token=1.0,
    attention_flops_per_context_token=0.0,
    memory_bandwidth_bytes_per_s=1e12,
    compute_flops_per_s=1e30,
)
MEAN_OUTPUT = 50
_P = 1.0 / MEAN_OUTPUT
#: Geometric outputs (P(n) = (1 − p)^(n−1)·p), cut at 1,000 tokens (a 2·10⁻⁹ tail).
GEOMETRIC = HistogramLength(tokens=tuple(range(1, 1001)), weights=tuple((1 - _P) ** (n - 1) * _P for n in range(1, 1001)))
#: The prefill step yields the first token, then one step per further token: output steps in all.
HOLD_S = STEP_S * MEAN_OUTPUT
SLOTS = 8
DURATION_S = 4000.0


def _classes(limit: int | None) -> list[StepClass]:
    rate = 0.8 * SLOTS / HOLD_S / 2  # ρ 0.8, half each
    one = FixedLength(tokens=1)
    return [
        StepClass(name="chat", workload=Workload(arrival_rate_rps=rate, prompt_tokens=one, output_tokens=GEOMETRIC), priority=0),
        StepClass(
            name="batch",
            workload=Workload(arrival_rate_rps=rate, prompt_tokens=one, output_tokens=GEOMETRIC),
            priority=1,
            admission_limit=limit,
        ),
    ]


def _run(limit: int | None) -> tuple[dict[str, StepClassSimulated], dict[str, ClassSimulated], list[ClassLoad]]:
    classes = _classes(limit)
    step = {
        r.name: r
        for r in simulate_classes_step(
            TEN_MS_PER_STEP, classes, batch_limit=SLOTS, chunk_tokens=None, kv_capacity_tokens=10**9, duration_s=DURATION_S
        )
    }
    loads = [
        ClassLoad(
            name=k.name,
            arrival_rate_rps=k.workload.arrival_rate_rps,
            service_s=HOLD_S,
            priority=k.priority,
            admission_limit=k.admission_limit,
        )
        for k in classes
    ]
    slot = {r.name: r for r in simulate_classes(loads, slots=SLOTS, duration_s=DURATION_S)}
    return step, slot, loads


def test_step_level_waits_match_cobham_and_the_slot_simulator() -> None:
    step, slot, loads = _run(None)
    model = {w.name: w for w in priority_waits(loads, slots=SLOTS)}
    chat, batch = step["chat"], step["batch"]
    assert chat.arrivals > 18_000 and batch.arrivals > 18_000
    assert chat.shed_fraction == 0.0 and batch.shed_fraction == 0.0
    for reference in (model["chat"].mean_wait_s, slot["chat"].mean_wait_s):
        assert abs(chat.mean_wait_s - reference) <= 0.15 * reference + STEP_S
    for reference in (model["chat"].wait_at_percentile_s(99.0), slot["chat"].p99_wait_s):
        assert abs(chat.wait_s - reference) <= 0.15 * reference + STEP_S
    assert abs(batch.mean_wait_s - model["batch"].mean_wait_s) <= 0.20 * model["batch"].mean_wait_s
    assert abs(batch.mean_wait_s - slot["batch"].mean_wait_s) <= 0.10 * slot["batch"].mean_wait_s
    # priority shows: the low class waits several times longer than the top one at the same load
    assert batch.mean_wait_s > 3 * chat.mean_wait_s
    # TTFT = wait + the one prefill step (+ the wait for the next step start); E2E adds the decode
    assert chat.wait_s < chat.ttft_s <= chat.wait_s + 2 * STEP_S + 1e-9
    assert chat.e2e_s > chat.ttft_s
    assert chat.tpot_s == pytest.approx(STEP_S)  # every step is 10 ms


@pytest.mark.parametrize("limit", [2 * SLOTS, SLOTS])
def test_step_level_refusals_match_the_birth_death_chain(limit: int) -> None:
    step, slot, loads = _run(limit)
    shed = {r.name: r.shed_probability for r in shed_probabilities(loads, slots=SLOTS)}
    assert step["chat"].shed_fraction == 0.0
    batch = step["batch"].shed_fraction
    assert batch > 0.01
    assert abs(batch - shed["batch"]) <= 0.15 * shed["batch"]
    assert abs(batch - slot["batch"].shed_fraction) <= 0.15 * slot["batch"].shed_fraction
    if limit == SLOTS:
        # admitted only into a free slot: it never waits longer than the step start
        assert step["batch"].wait_s <= STEP_S + 1e-9


def test_refuses_bad_input() -> None:
    with pytest.raises(PlannerInputError):
        simulate_classes_step(TEN_MS_PER_STEP, [], batch_limit=8, chunk_tokens=None, kv_capacity_tokens=10, duration_s=1.0)
    with pytest.raises(PlannerInputError):
        StepClass(name="x", workload=_classes(None)[0].workload, priority=0, admission_limit=0)


@pytest.mark.parametrize("chunk_tokens", [None, 2048])
def test_one_class_runs_exactly_as_the_fcfs_simulator(chunk_tokens: int | None) -> None:
    """With one class and no limit the step-level class simulator is planner/simulator.py's replica:
    the same trace (a 70B chat workload at 4 req/s on a 16-slot replica, hundreds of requests
    waiting over half a second for a slot) gives the same admission, first token and finish time
    for every request."""
    import math

    import numpy as np

    from planner.arrivals import sample_trace
    from planner.simulator import simulate_requests
    from planner.simulator_classes_step import _ClassReplica
    from planner.workload import Serving
    from tests.planner.test_simulator import CHAT, LLAMA2_70B_4XH100

    trace = sample_trace(CHAT.at_rate(4.0), 3000, np.random.default_rng(1))
    kv = 60_000
    fcfs = simulate_requests(
        LLAMA2_70B_4XH100, trace, Serving(replicas=1, batch_limit=16, chunk_tokens=chunk_tokens), kv_capacity_tokens=kv
    )
    n = len(trace.arrival_s)
    admission, first, finish = [math.nan] * n, [math.nan] * n, [math.nan] * n
    replica = _ClassReplica(
        LLAMA2_70B_4XH100,
        batch_limit=16,
        chunk_tokens=chunk_tokens,
        kv_capacity_tokens=kv,
        arrival=trace.arrival_s.tolist(),
        prompt=trace.prompt_tokens.tolist(),
        output=trace.output_tokens.tolist(),
        admission=admission,
        first_token=first,
        finish=finish,
        max_steps=None,
    )
    refused = replica.run([0] * n, [0] * n, [None])
    assert not any(refused)
    assert np.count_nonzero(fcfs.admission_s > fcfs.arrival_s + 0.5) > 10  # some did wait
    np.testing.assert_allclose(admission, fcfs.admission_s, rtol=0, atol=1e-9)
    np.testing.assert_allclose(first, fcfs.first_token_s, rtol=0, atol=1e-9)
    np.testing.assert_allclose(finish, fcfs.finish_s, rtol=0, atol=1e-9)
