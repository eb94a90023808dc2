"""Traffic classes on one continuous-batching replica, step by step: priorities and admission limits.

The step-level check of a shared priority pool (planner/plan_classes_priority.py). It runs the
reference serving semantics of planner/simulator.py — every step decodes one token per running
sequence and prefills admitted prompts (decodes first, prompts in admission order within the
chunk budget), lasting `StepModel.step_s` — with two changes at admission:

* **Priority.** Each class arrives as its own stream (its rate, arrival CV and lengths, sampled
  as planner/arrivals.py samples a workload). At the start of a step, while a slot is free
  (`batch_limit`) and the KV cache can reserve the head's prompt + output, the head of the
  highest-priority waiting class (0 first; FCFS within a class) is admitted. Nothing running is
  preempted; a head that does not fit the KV cache blocks every class below it (no skipping, as
  FCFS does not skip).
* **Admission limit.** A class with `admission_limit` K refuses an arrival that finds K or more
  requests in the replica (running + waiting, every class): the definition of the birth–death
  chain of planner/queueing_priority.py, so K = c (the batch limit) admits only into a free slot
  and K = c + q lets q wait. Arrivals are taken at the step boundary after them (a step's
  completions count at its end), so the count an arrival sees is at most one step old.

Steps run in planner/simulator.py's own code (`EngineReplica._step`, inherited: a prefill step, or a
decode-only stretch jumped as that module jumps them, and the completions), so only admission is this
module's; a stretch stops at the next arrival while a slot is free or a class has an admission limit
(each arrival then meets the count it must be tested against). One replica: a pool of r replicas
behind a random split gives each a 1/r thinning of every class (Poisson stays Poisson).

Per class, over the arrivals after the first `warmup_fraction` of the run's duration: arrivals,
the refused fraction, and the wait for a slot (admission − arrival), TTFT, TPOT and end-to-end
latency at a percentile, over the admitted requests.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from planner.arrivals import Trace, sample_trace
from planner.errors import PlannerInputError, SimulationLimitError
from planner.simulator import EngineReplica, check_runnable
from planner.step_model import StepModel
from planner.workload import Workload

__all__ = ["StepClass", "StepClassSimulated", "simulate_classes_step"]

#: A simulation calls its checkpoint every 4,096 steps (as planner/simulator.py does).
_CHECKPOINT_STEPS_MASK = 4095


@dataclass(frozen=True, slots=True, kw_only=True)
class StepClass:
    """One class's traffic on the replica: `workload` at the replica's share of the class's rate."""

    name: str
    workload: Workload
    priority: int
    admission_limit: int | None = None  # refuse an arrival finding this many in the replica (running + waiting)

    def __post_init__(self) -> None:
        if self.priority < 0:
            raise PlannerInputError(f"class {self.name}: priority must be >= 0, got {self.priority}")
        if self.admission_limit is not None and self.admission_limit < 1:
            raise PlannerInputError(f"class {self.name}: admission limit must be >= 1, got {self.admission_limit}")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepClassSimulated:
    name: str
    percentile: float
    arrivals: int  # measured (after warm-up)
    admitted: int
    shed_fraction: float  # refused / arrivals
    mean_wait_s: float  # admission − arrival, admitted requests
    wait_s: float  # at `percentile`
    ttft_s: float
    tpot_s: float  # over admitted requests of more than one output token (0 when none)
    e2e_s: float
    #: Requests of the class still waiting for a slot when the last arrival came: a backlog that
    #: grows through the run says the replica cannot carry the load.
    waiting_at_end: int


def _trace(classes: Sequence[StepClass], duration_s: float, rng: np.random.Generator) -> tuple[Trace, np.ndarray]:
    """Every class's arrivals over [0, duration_s), merged in time order, and each request's class index."""
    arrivals: list[np.ndarray] = []
    prompts: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    for k in classes:
        rate = k.workload.arrival_rate_rps
        if rate <= 0:
            arrivals.append(np.empty(0))
            prompts.append(np.empty(0, np.int64))
            outputs.append(np.empty(0, np.int64))
            continue
        # enough draws to pass duration_s with overwhelming probability (mean + 10 sd + 10), then cut
        expected = rate * duration_s
        n = int(expected + 10.0 * math.sqrt(expected) * max(1.0, k.workload.arrival_cv) + 10)
        t = sample_trace(k.workload, n, rng)
        keep = t.arrival_s < duration_s
        arrivals.append(t.arrival_s[keep])
        prompts.append(t.prompt_tokens[keep].astype(np.int64))
        outputs.append(t.output_tokens[keep].astype(np.int64))
    arrival = np.concatenate(arrivals)
    if arrival.size == 0:
        raise PlannerInputError("no request arrived in the simulated duration")
    which = np.concatenate([np.full(len(a), i, dtype=np.int64) for i, a in enumerate(arrivals)])
    order = np.argsort(arrival, kind="stable")
    trace = Trace(
        arrival_s=arrival[order], prompt_tokens=np.concatenate(prompts)[order], output_tokens=np.concatenate(outputs)[order]
    )
    return trace, which[order]


class _ClassReplica(EngineReplica):
    """planner/simulator.py's replica with priority admission and admission limits (`run`)."""

    def run(self, which: list[int], priority_level: list[int], limits: list[int | None]) -> list[bool]:
        """Run every request to its end; returns which were refused."""
        arrival, prompt, output = self.arrival, self.prompt, self.output
        admission = self.admission
        n = len(arrival)
        batch_limit = self.batch_limit
        prefilling = self.prefilling
        queues: list[deque[int]] = [deque() for _ in range(max(priority_level, default=0) + 1)]
        refused = [False] * n
        limited = any(limit is not None for limit in limits)
        t, kv_free, running, queued = 0.0, self.kv_free, 0, 0
        decoders = context = steps = 0
        nxt = 0
        step_cap = self.max_steps if self.max_steps is not None else math.inf
        while True:
            while nxt < n and arrival[nxt] <= t:  # arrivals up to this step's start, in order
                limit = limits[which[nxt]]
                if limit is not None and running + queued >= limit:
                    refused[nxt] = True
                else:
                    queues[priority_level[nxt]].append(nxt)
                    queued += 1
                nxt += 1
            # admission: the head of the highest-priority waiting class, while a slot and KV room allow
            while queued and running < batch_limit:
                q = next(q for q in queues if q)
                rid = q[0]
                need = prompt[rid] + output[rid]
                if need > kv_free:
                    break  # non-preemptive, no skipping: it waits for KV room
                q.popleft()
                queued -= 1
                running += 1
                kv_free -= need
                admission[rid] = t
                prefilling.append([rid, 0])
            if running == 0:
                if nxt >= n:
                    break
                t = max(t, arrival[nxt])  # idle until the next arrival
                continue
            # a decode-only stretch stops at the next arrival while a slot is free or a class has a limit
            arrives = nxt < n and (limited or running < batch_limit)
            t_stop = arrival[nxt] if arrives and not prefilling else math.inf
            t, kv_free, running, decoders, context, steps, _ = self._step(t, t_stop, kv_free, running, decoders, context, steps)
            if self.checkpoint is not None and steps & _CHECKPOINT_STEPS_MASK == 0:
                self.checkpoint()
            if steps > step_cap:
                raise SimulationLimitError(f"simulation exceeded its bound of {self.max_steps} steps", max_steps=self.max_steps)
        self.steps = steps
        return refused


def simulate_classes_step(
    step_model: StepModel,
    classes: Sequence[StepClass],
    *,
    batch_limit: int,
    chunk_tokens: int | None,
    kv_capacity_tokens: int,
    duration_s: float,
    seed: int = 0,
    warmup_fraction: float = 0.1,
    percentile: float = 99.0,
    max_steps: int | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> tuple[StepClassSimulated, ...]:
    """Per-class outcome of `duration_s` of every class's traffic on one replica (module docstring)."""
    if not classes or not duration_s > 0 or batch_limit < 1 or not 0.0 <= warmup_fraction < 1.0:
        raise PlannerInputError(
            "the step-level class simulation needs a class, a positive duration, batch_limit >= 1 and warm-up in [0, 1)"
        )
    if step_model.speculation is not None:
        raise PlannerInputError("the step-level class simulation does not model speculative decoding")
    rng = np.random.default_rng(seed)
    trace, which_arr = _trace(classes, duration_s, rng)
    check_runnable(trace, kv_capacity_tokens, max_steps)
    n = len(trace.arrival_s)
    levels = sorted({k.priority for k in classes})
    which = which_arr.tolist()
    level_of_class = [levels.index(k.priority) for k in classes]
    admission, first_token, finish = [math.nan] * n, [math.nan] * n, [math.nan] * n
    replica = _ClassReplica(
        step_model,
        batch_limit=batch_limit,
        chunk_tokens=chunk_tokens,
        kv_capacity_tokens=int(kv_capacity_tokens),
        arrival=trace.arrival_s.tolist(),
        prompt=trace.prompt_tokens.tolist(),
        output=trace.output_tokens.tolist(),
        admission=admission,
        first_token=first_token,
        finish=finish,
        max_steps=max_steps,
        checkpoint=checkpoint,
    )
    refused = np.array(replica.run(which, [level_of_class[i] for i in which], [k.admission_limit for k in classes]))
    arrival = trace.arrival_s
    adm, first, fin = np.array(admission), np.array(first_token), np.array(finish)
    measured = arrival >= warmup_fraction * duration_s
    last = float(arrival[-1])
    results = []
    for i, k in enumerate(classes):
        mine = measured & (which_arr == i)
        ok = mine & ~refused
        out = trace.output_tokens[ok]
        wait = adm[ok] - arrival[ok]
        ttft = first[ok] - arrival[ok]
        e2e = fin[ok] - arrival[ok]
        gaps = out > 1
        tpot = (fin[ok][gaps] - first[ok][gaps]) / (out[gaps] - 1)

        def at(values: np.ndarray) -> float:
            return float(np.percentile(values, percentile)) if values.size else 0.0

        arrivals = int(np.count_nonzero(mine))
        results.append(
            StepClassSimulated(
                name=k.name,
                percentile=percentile,
                arrivals=arrivals,
                admitted=int(np.count_nonzero(ok)),
                shed_fraction=int(np.count_nonzero(mine & refused)) / arrivals if arrivals else 0.0,
                mean_wait_s=float(np.mean(wait)) if wait.size else 0.0,
                wait_s=at(wait),
                ttft_s=at(ttft),
                tpot_s=at(tpot),
                e2e_s=at(e2e),
                waiting_at_end=int(np.count_nonzero((which_arr == i) & ~refused & (arrival <= last) & (adm > last))),
            )
        )
    return tuple(results)
