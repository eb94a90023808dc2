"""Fidelity of planner/queueing_priority.py against planner/simulator_classes.py, per class, over loads and mixes.

Two classes (chat priority 0, batch priority 1) share c = 16 slots with exponential holding times
of 1 s; total utilisation ρ ∈ {0.5, 0.7, 0.8, 0.9} and chat's share of the load ∈ {0.25, 0.5, 0.75}.
For each point the simulator runs 20,000 s of traffic (seed 0, first 10 % not measured) and the
table gives each class's mean and p99 wait, model against simulation, and the relative error of
the p99 (and of the batch class's refusal probability with an admission limit of 2c). Prints a
Markdown table.

    .venv/bin/python -m bench.classes_fidelity
"""

from __future__ import annotations

from planner.queueing_priority import ClassLoad, priority_waits, shed_probabilities
from planner.simulator_classes import simulate_classes

SLOTS = 16
LOADS = (0.5, 0.7, 0.8, 0.9)
CHAT_SHARES = (0.25, 0.5, 0.75)
DURATION_S = 20_000.0


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


if __name__ == "__main__":
    main()
