"""A deliberately naive continuous-batching simulator: per-sequence state, one step at a time,
one global event loop over all replicas. It shares no code with planner/simulator.py beyond
`StepModel.step_s`; tests hold the fast, jumping simulator against it."""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from planner.arrivals import Trace
from planner.step_model import StepModel
from planner.workload import Serving


class _NaiveReplica:
    def __init__(self, step_model: StepModel, serving: Serving, kv_capacity_tokens: int, trace: Trace, out: dict) -> None:
        self.step_model = step_model
        self.batch_limit = serving.batch_limit
        self.chunk = serving.chunk_tokens
        self.kv_free = kv_capacity_tokens
        self.trace = trace
        self.out = out
        self.t = 0.0
        self.queue: deque[int] = deque()
        self.running: list[dict] = []
        self.routed: list[int] = []
        self.steps = 0

    def next_start(self) -> float:
        if self.running:
            return self.t
        if self.queue:
            return max(self.t, float(self.trace.arrival_s[self.queue[0]]))
        return math.inf

    def in_system(self, t: float) -> int:
        finish = self.out["finish"]
        return sum(1 for rid in self.routed if not finish[rid] <= t)

    def step(self) -> None:
        trace, out = self.trace, self.out
        self.t = self.next_start()
        while self.queue and len(self.running) < self.batch_limit:
            rid = self.queue[0]
            need = int(trace.prompt_tokens[rid] + trace.output_tokens[rid])
            if trace.arrival_s[rid] > self.t or need > self.kv_free:
                break
            self.queue.popleft()
            self.kv_free -= need
            out["admission"][rid] = self.t
            self.running.append(
                {
                    "rid": rid,
                    "prompt": int(trace.prompt_tokens[rid]),
                    "output": int(trace.output_tokens[rid]),
                    "cached": 0,
                    "generated": 0,
                }
            )
        decoding = [seq for seq in self.running if seq["cached"] == seq["prompt"]]
        prefilling = [seq for seq in self.running if seq["cached"] < seq["prompt"]]
        new_tokens = len(decoding)
        kv_read = sum(seq["prompt"] + seq["generated"] for seq in decoding)
        attended = kv_read
        budget = math.inf if self.chunk is None else self.chunk - len(decoding)
        chunks = []
        for seq in prefilling:
            if budget <= 0:
                break
            p = min(seq["prompt"] - seq["cached"], budget)
            budget -= p
            s = seq["cached"]
            new_tokens += p
            kv_read += s
            attended += p * s + p * (p + 1) // 2
            chunks.append((seq, p))
        self.t += self.step_model.step_s(new_tokens, kv_read, attended)
        self.steps += 1
        for seq in decoding:
            seq["generated"] += 1
        for seq, p in chunks:
            seq["cached"] += p
            if seq["cached"] == seq["prompt"]:
                seq["generated"] = 1
                out["first_token"][seq["rid"]] = self.t
        for seq in list(self.running):
            if seq["generated"] == seq["output"]:
                out["finish"][seq["rid"]] = self.t
                self.kv_free += seq["prompt"] + seq["output"]
                self.running.remove(seq)


def naive_simulate(
    step_model: StepModel, trace: Trace, serving: Serving, *, kv_capacity_tokens: int, route: np.ndarray | None = None
) -> dict:
    """Per-request admission, first-token and finish times, the route and the step count.
    `route` fixes the replica per request (random / round-robin); None with router jsq routes to
    the replica holding the fewest unfinished requests at the arrival, the lowest index on a tie."""
    n = len(trace)
    out = {"admission": [math.nan] * n, "first_token": [math.nan] * n, "finish": [math.nan] * n}
    replicas = [_NaiveReplica(step_model, serving, kv_capacity_tokens, trace, out) for _ in range(serving.replicas)]
    chosen = np.zeros(n, dtype=np.int64)
    next_request = 0
    while True:
        t_arrival = float(trace.arrival_s[next_request]) if next_request < n else math.inf
        starts = [replica.next_start() for replica in replicas]
        earliest = min(range(len(replicas)), key=lambda r: starts[r])
        if t_arrival == math.inf and starts[earliest] == math.inf:
            break
        if t_arrival <= starts[earliest]:
            if route is not None:
                target = int(route[next_request])
            else:
                counts = [replica.in_system(t_arrival) for replica in replicas]
                target = counts.index(min(counts))
            replicas[target].queue.append(next_request)
            replicas[target].routed.append(next_request)
            chosen[next_request] = target
            next_request += 1
        else:
            replicas[earliest].step()
    return {
        "admission": np.array(out["admission"]),
        "first_token": np.array(out["first_token"]),
        "finish": np.array(out["finish"]),
        "route": chosen,
        "steps": sum(replica.steps for replica in replicas),
    }
