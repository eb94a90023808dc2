"""Two versions of the step loop side by side: every request's times and the CPU time of the FCFS replica
(planner/simulator.py) and the step-level class replica (planner/simulator_classes_step.py).

    PYTHONPATH=<checkout A> .venv/bin/python -m bench.simulator_step_ab --dump a.npz   # once per version,
    PYTHONPATH=<checkout B> .venv/bin/python -m bench.simulator_step_ab --dump b.npz   # alternating, a few times
    .venv/bin/python -m bench.simulator_step_ab --compare a.npz b.npz

`--dump` runs each case `--repeats` times and keeps its least CPU time (time.process_time: the machine is
shared); `--compare` says whether every request's admission, first-token and finish time (and the step count)
are identical, and the CPU-time ratio B/A per case. The workload is bench/simulator_speed.py's (Llama-2-70B
fp16 on 4×H100, chat lengths); the rates put each case near its saturation, where both admission and
decode-only stretches occur.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.simulator_speed import CHAT, KV_CAPACITY_TOKENS, LLAMA2_70B_4XH100
from planner.arrivals import sample_trace
from planner.simulator import simulate_requests
from planner.simulator_classes_step import StepClass, simulate_classes_step
from planner.workload import Serving

REQUESTS = 8000
#: (name, serving, arrival rate in req/s) of the FCFS cases.
FCFS_CASES = (
    ("batch 64", Serving(batch_limit=64), 8.5),
    ("batch 128, chunk 512", Serving(batch_limit=128, chunk_tokens=512), 14.0),
    ("4 replicas, join-shortest-queue", Serving(replicas=4, batch_limit=128, router="jsq"), 45.0),
    ("3 replicas, random, batch 32", Serving(replicas=3, batch_limit=32), 15.0),
)
#: Two classes, the second below the first and refused past 140 in the replica.
CLASSES = (
    StepClass(name="chat", workload=CHAT.at_rate(6.0), priority=0),
    StepClass(name="batch", workload=CHAT.at_rate(5.0), priority=1, admission_limit=140),
)
CLASS_CASES = (("classes, batch 128", None), ("classes, batch 128, chunk 2048", 2048))
CLASS_DURATION_S = 600.0


def dump(repeats: int) -> dict[str, np.ndarray]:
    """Per case: the request times (or per-class figures) and, under `cpu:<case>`, the least CPU time."""
    out: dict[str, np.ndarray] = {}
    for name, serving, rate in FCFS_CASES:
        trace = sample_trace(CHAT.at_rate(rate), REQUESTS, np.random.default_rng(7))
        best = np.inf
        for _ in range(repeats):
            started = time.process_time()
            r = simulate_requests(LLAMA2_70B_4XH100, trace, serving, kv_capacity_tokens=KV_CAPACITY_TOKENS)
            best = min(best, time.process_time() - started)
        out[name] = np.concatenate([r.admission_s, r.first_token_s, r.finish_s, [r.steps]])
        out[f"cpu:{name}"] = np.array([best])
    for name, chunk in CLASS_CASES:
        best = np.inf
        for _ in range(repeats):
            started = time.process_time()
            res = simulate_classes_step(
                LLAMA2_70B_4XH100,
                CLASSES,
                batch_limit=128,
                chunk_tokens=chunk,
                kv_capacity_tokens=KV_CAPACITY_TOKENS,
                duration_s=CLASS_DURATION_S,
                seed=3,
            )
            best = min(best, time.process_time() - started)
        out[name] = np.array(
            [
                v
                for k in res
                for v in (k.arrivals, k.admitted, k.shed_fraction, k.mean_wait_s, k.wait_s, k.ttft_s, k.tpot_s, k.e2e_s)
            ],
            dtype=float,
        )
        out[f"cpu:{name}"] = np.array([best])
    return out


def compare(a: Path, b: Path) -> None:
    first, second = np.load(a), np.load(b)
    for name in (n for n in first.files if not n.startswith("cpu:")):
        same = bool(np.array_equal(first[name], second[name], equal_nan=True))
        ratio = float(second[f"cpu:{name}"][0] / first[f"cpu:{name}"][0])
        print(f"{name}: identical {same}, CPU {first[f'cpu:{name}'][0]:.3f} s → {second[f'cpu:{name}'][0]:.3f} s ({ratio:.3f}×)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, help="write this version's times and CPU times here (.npz)")
    parser.add_argument("--compare", type=Path, nargs=2, help="two --dump files")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.dump is not None:
        np.savez(args.dump, **dump(args.repeats))
    if args.compare is not None:
        compare(*args.compare)


if __name__ == "__main__":
    main()
