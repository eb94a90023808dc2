"""Discrete-event simulation of a disaggregated deployment, from the same step models as planner/disagg.py.

Prefill servers take prompts FCFS from one shared queue and batch them up to a token budget
(a prompt longer than the budget runs alone, in chunks of the budget, each chunk reading the
cache of the chunks before it). A finished prompt waits for a decode slot (the least-loaded
replica with one free; its KV memory is reserved from then on), crosses the link in
t_transfer(p), and joins that replica's batch at the next step boundary. A decode replica steps
while it has sequences: t_step(n, Σc, Σc) over its batch, one token per sequence per step.
The first token is the prefill's; it reaches the client when the decode replica has the KV
(so TTFT ends at the transfer's end) and each decode step adds one more.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from planner.disagg import DecodePool, KvLink, PrefillPool, decode_slots, kv_transfer_s
from planner.errors import PlannerInputError
from planner.workload import Workload

_ARRIVAL, _PREFILL_DONE, _TRANSFER_DONE, _STEP_DONE = 0, 1, 2, 3


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggSimulation:
    """Per-request times (s) of the simulated requests after the warm-up, and their percentiles."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray

    def percentile(self, percentile: float) -> tuple[float, float, float]:
        """(TTFT, TPOT, E2E) at `percentile`."""
        return (
            float(np.percentile(self.ttft_s, percentile)),
            float(np.percentile(self.tpot_s, percentile)) if self.tpot_s.size else 0.0,
            float(np.percentile(self.e2e_s, percentile)),
        )


def simulate_disagg(
    prefill_pool: PrefillPool,
    decode_pool: DecodePool,
    workload: Workload,
    *,
    link: KvLink,
    kv_bytes_per_token: float,
    prefill_token_budget: int,
    requests: int = 20_000,
    warmup_fraction: float = 0.1,
    seed: int = 0,
) -> DisaggSimulation:
    """Simulate `requests` arrivals and return the times of those after the first `warmup_fraction`."""
    if requests < 10 or prefill_token_budget < 1 or not 0.0 <= warmup_fraction < 1.0:
        raise PlannerInputError("simulate_disagg needs >= 10 requests, a token budget >= 1, warm-up in [0, 1)")
    rng = np.random.default_rng(seed)
    lam = workload.arrival_rate_rps
    if lam <= 0:
        raise PlannerInputError("simulate_disagg needs a positive arrival rate", field="arrival_rate_rps")
    cv2 = workload.arrival_cv**2
    gaps = rng.gamma(1.0 / cv2, cv2 / lam, size=requests)  # mean 1/λ, CV c_a
    arrival = np.cumsum(gaps)
    prompt = workload.prompt_tokens.sample(rng, requests).astype(np.int64)
    output = workload.output_tokens.sample(rng, requests).astype(np.int64)
    gpus = min(prefill_pool.tp, decode_pool.tp)
    slots, _ = decode_slots(decode_pool, workload)
    psm, dsm = prefill_pool.step_model, decode_pool.step_model

    first_token = np.zeros(requests)
    finish = np.zeros(requests)
    events: list[tuple[float, int, int, int]] = [(float(arrival[0]), 0, _ARRIVAL, 0)]
    seq = 1
    prefill_queue: deque[int] = deque()
    prefill_free = prefill_pool.replicas
    admit_queue: deque[int] = deque()
    used = [0] * decode_pool.replicas  # slots reserved per replica (transferring or decoding)
    batch: list[dict[int, int]] = [{} for _ in range(decode_pool.replicas)]  # request → context tokens
    joining: list[list[int]] = [[] for _ in range(decode_pool.replicas)]
    context_sum = [0] * decode_pool.replicas
    stepping = [False] * decode_pool.replicas
    remaining = output - 1  # decode steps each request still needs (the first token is the prefill's)
    next_arrival = 1

    def push(t: float, kind: int, payload: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, payload))  # seq breaks ties in arrival order
        seq += 1

    def start_prefill(now: float) -> None:
        nonlocal prefill_free
        while prefill_free > 0 and prefill_queue:
            taken = [prefill_queue.popleft()]
            tokens = int(prompt[taken[0]])
            while prefill_queue and tokens + int(prompt[prefill_queue[0]]) <= prefill_token_budget:
                nxt = prefill_queue.popleft()
                taken.append(nxt)
                tokens += int(prompt[nxt])
            if len(taken) == 1 and tokens > prefill_token_budget:
                duration, start = 0.0, 0
                while start < tokens:
                    chunk = min(prefill_token_budget, tokens - start)
                    duration += psm.step_s(chunk, start, chunk * start + chunk * (chunk + 1) / 2.0)
                    start += chunk
            else:
                attended = sum(float(prompt[r]) * (float(prompt[r]) + 1.0) / 2.0 for r in taken)
                duration = psm.step_s(tokens, 0.0, attended)
            prefill_free -= 1
            for r in taken[:-1]:
                push(now + duration, _PREFILL_DONE, r)
            push(now + duration, _PREFILL_DONE, taken[-1] + requests)  # the batch's last frees the server

    def admit(now: float) -> None:
        while admit_queue:
            replica = min(range(decode_pool.replicas), key=lambda i: used[i])
            if used[replica] >= slots:
                return
            r = admit_queue.popleft()
            used[replica] += 1
            x = kv_transfer_s(prompt_tokens=float(prompt[r]), kv_bytes_per_token=kv_bytes_per_token, link=link, gpus=gpus)
            push(now + x, _TRANSFER_DONE, r * decode_pool.replicas + replica)

    def release(now: float, replica: int, r: int) -> None:
        finish[r] = now
        used[replica] -= 1

    def step(now: float, replica: int) -> None:
        members = batch[replica]
        for r in joining[replica]:
            members[r] = int(prompt[r]) + 1
            context_sum[replica] += members[r]
        joining[replica].clear()
        if not members:
            stepping[replica] = False
            return
        n = len(members)
        duration = dsm.step_s(n, context_sum[replica], context_sum[replica])
        stepping[replica] = True
        push(now + duration, _STEP_DONE, replica)

    while events:
        now, _, kind, payload = heapq.heappop(events)
        if kind == _ARRIVAL:
            prefill_queue.append(payload)
            if next_arrival < requests:
                push(float(arrival[next_arrival]), _ARRIVAL, next_arrival)
                next_arrival += 1
            start_prefill(now)
        elif kind == _PREFILL_DONE:
            r = payload - requests if payload >= requests else payload
            admit_queue.append(r)
            admit(now)
            if payload >= requests:
                prefill_free += 1
                start_prefill(now)
        elif kind == _TRANSFER_DONE:
            r, replica = divmod(payload, decode_pool.replicas)
            first_token[r] = now
            if remaining[r] <= 0:
                release(now, replica, r)
                admit(now)
                continue
            joining[replica].append(r)
            if not stepping[replica]:
                step(now, replica)
        else:
            replica = payload
            members = batch[replica]
            done = []
            for r in members:
                members[r] += 1
                remaining[r] -= 1
                if remaining[r] <= 0:
                    done.append(r)
            context_sum[replica] += len(members)
            for r in done:
                context_sum[replica] -= members.pop(r)
                release(now, replica, r)
            if done:
                admit(now)
            step(now, replica)

    keep = np.arange(requests) >= math.floor(warmup_fraction * requests)
    ttft = (first_token - arrival)[keep]
    e2e = (finish - arrival)[keep]
    steps = (output - 1)[keep]
    multi = steps > 0
    tpot = (finish[keep][multi] - first_token[keep][multi]) / steps[multi]
    return DisaggSimulation(ttft_s=ttft, tpot_s=tpot, e2e_s=e2e)
