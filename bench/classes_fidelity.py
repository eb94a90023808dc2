"""Fidelity of planner/queueing_priority.py against planner/simulator_classes.py, per class, over loads and mixes.

Two classes (chat priority 0, batch priority 1) share c = 16 slots with exponential holding times
of 1 s; total utilisation ρ ∈ {0.5, 0.7, 0.8, 0.9} and chat's share of the load ∈ {0.25, 0.5, 0.75}.
For each point the simulator runs 20,000 s of traffic (seed 0, first 10 % not measured) and the
table gives each class's mean and p99 wait, model against simulation, and the relative error of
the p99 (and of the batch class's refusal probability with an admission limit of 2c). Prints a
Markdown table.

    .venv/bin/python -m bench.classes_fidelity

With `--step`, the step-level class simulator (planner/simulator_classes_step.py) as well, in two
more tables. (1) The same two classes where all three should agree: a 10 ms step whatever the
batch, one-token prompts and geometric outputs of mean 100 tokens (a geometric number of 10 ms
steps, mean 1 s: the exponential holding time, in steps), c = 16 (batch limit), 5,000 s of
traffic per point (seed 0). (2) The worked example's classes (tests/planner/test_plan_classes.py)
on its priority pool's configuration (H100, batch 64, chunk 2,048, 7 replicas, one simulated at
step level, 20,000 requests) at three scales of both rates: the batch class's refusals under an
admission limit K, the birth–death chain's against the step-level simulator's.

    PYTHONPATH=. .venv/bin/python -m bench.classes_fidelity --step
"""

from __future__ import annotations

import sys
from dataclasses import replace

from planner.queueing_priority import ClassLoad, priority_waits, shed_probabilities
from planner.simulator_classes import simulate_classes
from planner.simulator_classes_step import StepClass, simulate_classes_step
from planner.step_model import StepModel
from planner.workload import FixedLength, HistogramLength, Workload

SLOTS = 16
LOADS = (0.5, 0.7, 0.8, 0.9)
CHAT_SHARES = (0.25, 0.5, 0.75)
DURATION_S = 20_000.0
STEP_DURATION_S = 5_000.0
STEP_S = 0.01
#: A 10 GB weight read at 1 TB/s per step and nothing else that matters: 10 ms whatever the batch.
TEN_MS_PER_STEP = StepModel(
    dense_weight_bytes=1e10,
    kv_bytes_per_token=1.0,
    flops_per_token=1.0,
    attention_flops_per_context_token=0.0,
    memory_bandwidth_bytes_per_s=1e12,
    compute_flops_per_s=1e30,
)
MEAN_OUTPUT = 100
_P = 1.0 / MEAN_OUTPUT
GEOMETRIC = HistogramLength(tokens=tuple(range(1, 2001)), weights=tuple((1 - _P) ** (n - 1) * _P for n in range(1, 2001)))


def _err(model: float, sim: float) -> str:
    if sim == 0.0 and model == 0.0:
        return "0 %"
    if sim == 0.0:
        return "n/a"
    return f"{(model - sim) / sim:+.0%}"


def main() -> None:
    print(
        "| ρ | chat share | class | mean wait model / sim (ms) | p99 wait model / sim (ms) | p99 error | shed at K = 2c model / sim |"
    )
    print("|---|---|---|---|---|---|---|")
    for rho in LOADS:
        for share in CHAT_SHARES:
            total_rps = rho * SLOTS  # s = 1 s
            chat = ClassLoad(name="chat", arrival_rate_rps=share * total_rps, service_s=1.0, priority=0)
            batch = ClassLoad(name="batch", arrival_rate_rps=(1 - share) * total_rps, service_s=1.0, priority=1)
            model = priority_waits([chat, batch], slots=SLOTS)
            sim = simulate_classes([chat, batch], slots=SLOTS, duration_s=DURATION_S, seed=0)
            limited = [
                chat,
                ClassLoad(
                    name="batch", arrival_rate_rps=batch.arrival_rate_rps, service_s=1.0, priority=1, admission_limit=2 * SLOTS
                ),
            ]
            shed_model = shed_probabilities(limited, slots=SLOTS)[1].shed_probability
            shed_sim = simulate_classes(limited, slots=SLOTS, duration_s=DURATION_S, seed=0)[1].shed_fraction
            for m, s in zip(model, sim, strict=True):
                p99 = m.wait_at_percentile_s(99.0)
                shed = f"{shed_model:.4f} / {shed_sim:.4f}" if m.name == "batch" else "—"
                print(
                    f"| {rho} | {share} | {m.name} | {m.mean_wait_s * 1e3:.0f} / {s.mean_wait_s * 1e3:.0f} "
                    f"| {p99 * 1e3:.0f} / {s.p99_wait_s * 1e3:.0f} | {_err(p99, s.p99_wait_s)} | {shed} |"
                )

    if "--step" in sys.argv:
        step_table()
        worked_example_shedding()


def step_table() -> None:
    """Model / slot-level / step-level per class (module docstring, table 1)."""
    hold_s = STEP_S * MEAN_OUTPUT
    print()
    print(
        "| ρ | chat share | class | mean wait model / slot / step (ms) | p99 wait model / slot / step (ms) "
        "| shed at K = 2c model / slot / step |"
    )
    print("|---|---|---|---|---|---|")
    one = FixedLength(tokens=1)
    for rho in LOADS:
        for share in CHAT_SHARES:
            total_rps = rho * SLOTS / hold_s
            rates = {"chat": share * total_rps, "batch": (1 - share) * total_rps}
            row = {}
            for limit in (None, 2 * SLOTS):
                loads = [
                    ClassLoad(name=n, arrival_rate_rps=r, service_s=hold_s, priority=i, admission_limit=limit if i else None)
                    for i, (n, r) in enumerate(rates.items())
                ]
                step = [
                    StepClass(
                        name=n,
                        workload=Workload(arrival_rate_rps=r, prompt_tokens=one, output_tokens=GEOMETRIC),
                        priority=i,
                        admission_limit=limit if i else None,
                    )
                    for i, (n, r) in enumerate(rates.items())
                ]
                row[limit] = (
                    priority_waits(loads, slots=SLOTS),
                    shed_probabilities(loads, slots=SLOTS),
                    simulate_classes(loads, slots=SLOTS, duration_s=STEP_DURATION_S, seed=0),
                    simulate_classes_step(
                        TEN_MS_PER_STEP,
                        step,
                        batch_limit=SLOTS,
                        chunk_tokens=None,
                        kv_capacity_tokens=10**9,
                        duration_s=STEP_DURATION_S,
                        seed=0,
                    ),
                )
            model, _, slot, stepped = row[None]
            _, shed_model, slot_k, step_k = row[2 * SLOTS]
            for i, name in enumerate(rates):
                shed = (
                    f"{shed_model[i].shed_probability:.4f} / {slot_k[i].shed_fraction:.4f} / {step_k[i].shed_fraction:.4f}"
                    if i
                    else "—"
                )
                print(
                    f"| {rho} | {share} | {name} | {model[i].mean_wait_s * 1e3:.0f} / {slot[i].mean_wait_s * 1e3:.0f} / "
                    f"{stepped[i].mean_wait_s * 1e3:.0f} | {model[i].wait_at_percentile_s(99.0) * 1e3:.0f} / "
                    f"{slot[i].p99_wait_s * 1e3:.0f} / {stepped[i].wait_s * 1e3:.0f} | {shed} |"
                )


def worked_example_shedding() -> None:
    """The birth–death chain's refusals against the step-level simulator's on the worked example's pool (table 2)."""
    from planner.plan_classes_base import _Context
    from planner.plan_classes_priority import _priority_options, _replica_prediction, _shed_fractions
    from planner.traffic_classes import merged_workload
    from tests.planner.test_plan_classes import BASE, CHAT_CLASS, INPUTS, SUMMARISE

    replicas = 7
    print()
    print(
        "| scale | ρ (model) | dispersion | K | summarisation refused: M/M/c chain / overdispersed chain / step-level | chat p99 TTFT step-level (ms) |"
    )
    print("|---|---|---|---|---|---|")
    for scale in (0.9, 1.0, 1.02):
        classes = [
            replace(k, arrival_rate_rps=k.arrival_rate_rps * scale, max_shed_fraction=0.5) for k in (CHAT_CLASS, SUMMARISE)
        ]
        ctx = _Context(classes=classes, inputs=INPUTS, base=BASE)
        option = next(o for o in _priority_options(ctx) if o.id == "h100-sxm/bf16/bf16/tp1/b64/c2048")
        q = _replica_prediction(option, merged_workload(classes), replicas, 99.0).queueing
        assert q is not None
        for limit in (56, 60, 64):
            mm = _shed_fractions(classes, replicas, q.service_s, q.slots, limit)
            model = _shed_fractions(classes, replicas, q.service_s, q.slots, limit, q.occupancy_dispersion)
            sim = {
                r.name: r
                for r in simulate_classes_step(
                    option.group.step_model,
                    [
                        StepClass(
                            name=k.name,
                            workload=k.workload.at_rate(k.arrival_rate_rps / replicas),
                            priority=k.priority,
                            admission_limit=limit if k.priority else None,
                        )
                        for k in classes
                    ],
                    batch_limit=option.batch_limit,
                    chunk_tokens=option.chunk_tokens,
                    kv_capacity_tokens=option.group.kv_capacity_tokens,
                    duration_s=20_000 / (sum(k.arrival_rate_rps for k in classes) / replicas) / 0.9,
                    seed=0,
                )
            }
            print(
                f"| {scale} | {q.utilisation:.3f} | {q.occupancy_dispersion:.2f} | {limit} | {mm['summarise']:.4f} / "
                f"{model['summarise']:.4f} / {sim['summarise'].shed_fraction:.4f} "
                f"| {sim['chat'].ttft_s * 1e3:.0f} |"
            )


if __name__ == "__main__":
    main()
