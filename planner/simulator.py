"""Discrete-event simulator of continuous batching: the check of the analytic queueing model.

It runs the reference serving semantics of docs/design.md request by request and step by step:
a router spreads arrivals over replicas; each replica admits FCFS (no skipping) while a slot
is free (`batch_limit`) and its KV cache can reserve the head request's prompt + output tokens;
every step decodes one token for each running sequence whose prompt is done and prefills
admitted prompts in the same step (with `chunk_tokens`, at most that many tokens per step,
decodes counted first, prompts split FCFS); the step lasts `StepModel.step_s(new_tokens,
kv_tokens_read, attended_tokens)`. The step that finishes a prompt yields the first output
token, each later step one more; a sequence leaves at the end of the step yielding its last.

How it meets its speed target (20,000 requests of a 70B workload in ≲ 2 s of CPython):

* No per-sequence work on a step where nothing but contexts grow. Every decoding sequence
  gains one token per step, so a replica keeps only aggregates for its decoders — their count
  B and the sum K of their contexts (K += B per step) — and a heap of the step number at which
  each one finishes (the step count when it started decoding plus output − 1). A sequence is
  touched twice: when it finishes its prompt and when it leaves.
* Event-driven jumps over decode-only stretches. Between two events (a completion, or the step
  start at which the FCFS head becomes admissible) the batch is fixed and step k of the stretch
  reads context K + k·B: its duration is the step-time formula evaluated on an arithmetic
  sequence. The simulator evaluates all of them at once with numpy (the StepModel's own
  `memory_s`/`compute_s` on an array of contexts, combined as `step_s` combines them) and
  accumulates start times with one `cumsum`, then finds the first start at or after the next
  admissible arrival with `searchsorted`. The cumulative sum adds in the same order as a
  step-by-step loop, so jumped and stepped runs give the same times (tests/planner check it
  against a naive loop). Only steps that prefill are taken one at a time.
* Routing without coupling where possible: random split and round-robin are decided up front
  and each replica then runs alone to the end of its stream; join-shortest-queue advances all
  replicas to each arrival (`run_until`) to count the requests each one holds.

Speculative decoding (a step model with a `speculation`): each decoding sequence emits a drawn
number of tokens per step, so its replica keeps per-sequence state (planner/simulator_speculative.py).

Termination: every step processes at least one token (chunk_tokens > batch_limit leaves prefill
budget), so a run takes at most Σ(prompt + output) steps however unstable the load; `max_steps`
bounds it tighter with a `SimulationLimitError`. A request whose prompt + output exceeds the
whole KV cache could never be admitted: `UnsupportedConfigurationError` before anything runs.

Statistics (see `simulate`): warm-up = the first `warmup_fraction` of requests by arrival;
percentiles over the remaining requests; a 95 % confidence interval for each p99 by batch means
in the "sectioning" form (Asmussen & Glynn, Stochastic Simulation: Algorithms and Analysis,
Springer 2007): the measured requests in arrival order are cut into k consecutive blocks, the
p99 of each block gives the spread, half-width = t(0.975, k−1) · sd(block p99s) / √k around the
p99 of all of them. Time averages (occupancy, number in system, busy fraction) are taken over
the window from the first measured arrival to the last arrival, while the replicas are fed.
`stable` is False when a replica's queue never empties in the late half of that window (a
stable queue regenerates; Glynn, "Simulation algorithms for regenerative processes", Handbooks
in OR & MS vol. 13, 2006).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from heapq import heappop as _heappop
from heapq import heappush as _heappush
from typing import Any

import numpy as np
from scipy import stats

from planner.arrivals import Trace, sample_trace, static_routes
from planner.errors import PlannerInputError, SimulationLimitError, UnsupportedConfigurationError
from planner.step_model import StepModel
from planner.workload import Serving, Workload

#: Batches for the p99 confidence intervals: 20 consecutive blocks (within the 10–30 batches
#: Schmeiser, "Batch size effects in the analysis of simulation output", Oper. Res. 30(3), 1982,
#: recommends), each of at least 200 requests so a block p99 rests on two requests above it.
CI_BLOCKS = 20
#: A simulation calls its checkpoint every 4,096 steps (a few milliseconds of stepping).
CHECKPOINT_STEPS_MASK = 4095
CI_MIN_BLOCK_REQUESTS = 200
CI_MIN_BLOCKS = 5
CI_LEVEL = 0.95
CI_METHOD = (
    "batch means (sectioning): p99 of all measured requests ± t(0.975, k−1)·sd/√k over the p99s "
    "of k consecutive blocks of requests in arrival order"
)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class RequestTimes:
    """Per-request outcome, indexed like the trace (arrival order). Times in seconds from 0."""

    arrival_s: np.ndarray
    admission_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    replica: np.ndarray
    #: Steps executed by all replicas together.
    steps: int

    @property
    def ttft_s(self) -> np.ndarray:
        return np.asarray(self.first_token_s - self.arrival_s)

    @property
    def e2e_s(self) -> np.ndarray:
        return np.asarray(self.finish_s - self.arrival_s)

    @property
    def queue_wait_s(self) -> np.ndarray:
        return np.asarray(self.admission_s - self.arrival_s)

    @property
    def tpot_s(self) -> np.ndarray:
        """(E2E − TTFT)/(output − 1); NaN where output = 1 (no inter-token gap exists)."""
        gaps = (self.output_tokens - 1).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(gaps > 0, (self.finish_s - self.first_token_s) / gaps, np.nan)


@dataclass(frozen=True, slots=True, kw_only=True)
class Percentiles:
    """p50/p90/p99 of one latency (s) over the measured requests, with the p99's confidence interval
    (None when too few requests for `CI_MIN_BLOCKS` blocks). All NaN with samples = 0 when no
    request qualifies (TPOT when every output is one token)."""

    p50: float
    p90: float
    p99: float
    p99_ci_low: float | None
    p99_ci_high: float | None
    samples: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    ttft_s: Percentiles
    #: Over measured requests with more than one output token.
    tpot_s: Percentiles
    e2e_s: Percentiles
    queue_wait_s: Percentiles
    #: Time-average running sequences (admitted, not finished) per replica over the window.
    mean_occupancy: float
    #: mean_occupancy / batch_limit.
    occupancy_fraction: float
    #: Time-average requests in the whole deployment (waiting + running): Little's L.
    mean_in_system: float
    #: Mean arrival → finish of the measured requests: Little's W.
    mean_time_in_system_s: float
    #: Arrivals per second over the window (deployment): Little's λ.
    measured_arrival_rate_rps: float
    #: Fraction of the window a replica spends stepping (it steps whenever a sequence runs).
    busy_fraction: float
    #: Requests and output tokens finished per second over the window (deployment).
    throughput_rps: float
    output_tokens_per_s: float
    #: False when some replica's admission queue never emptied in the late half of the window:
    #: arrivals outpaced service and the percentiles describe a growing backlog, not a steady state.
    stable: bool
    #: Requests that arrived before the last arrival and were still waiting for admission at it.
    backlog_at_end: int
    requests: int
    measured_requests: int
    steps: int
    simulated_duration_s: float
    window_s: float
    wall_time_s: float
    ci_method: str
    detail: RequestTimes


class EngineReplica:
    """One continuous-batching engine. State lives in attributes between `run_until` calls and in
    locals inside it (attribute access is the slow part of CPython)."""

    def __init__(
        self,
        step_model: StepModel,
        *,
        batch_limit: int,
        chunk_tokens: int | None,
        kv_capacity_tokens: int,
        arrival: list[float],
        prompt: list[int],
        output: list[int],
        admission: list[float],
        first_token: list[float],
        finish: list[float],
        max_steps: int | None,
        checkpoint: Callable[[], None] | None = None,
        cached: list[int] | None = None,
    ) -> None:
        self.step_model = step_model
        #: Prompt tokens of each request found in this replica's prefix cache (planner/simulator_prefix.py):
        #: its prefill starts after them and its own KV excludes them (the cache holds those blocks).
        self.cached = cached if cached is not None else [0] * len(prompt)
        self.batch_limit = batch_limit
        self.chunk_tokens = chunk_tokens
        self.arrival, self.prompt, self.output = arrival, prompt, output
        self.admission, self.first_token, self.finish = admission, first_token, finish
        self.max_steps = max_steps
        self.checkpoint = checkpoint
        self.ids: list[int] = []  # requests routed here, arrival order
        self.head = 0  # ids[:head] are admitted (FCFS admits a prefix)
        self.t = 0.0  # when the next step may start
        self.kv_free = kv_capacity_tokens
        self.running = 0
        self.prefilling: list[list[int]] = []  # [request, tokens cached], admission order
        self.finishing: list[tuple[int, int]] = []  # heap of (step count at which it finishes, request)
        self.decoders = 0  # B: sequences past their prompt
        self.decoder_context = 0  # K: Σ (prompt + tokens generated) over decoders
        self.steps = 0
        self.finished = 0
        self.last_step_end = 0.0
        self.last_step_finished = 0
        # Coefficients of a decode-only step that do not depend on the context.
        self._overlap_weight = 1.0 - step_model.memory_compute_overlap
        #: What `_step` reads at every call, bound once (attribute access is the slow part of CPython).
        self._step_refs = (
            prompt,
            output,
            self.cached,
            first_token,
            finish,
            self.prefilling,
            self.finishing,
            step_model.step_s,
            chunk_tokens,
        )

    def in_system(self, t: float) -> int:
        """Requests routed here and not finished at time t (call after run_until(t))."""
        straddling = self.last_step_finished if self.last_step_end > t else 0
        return len(self.ids) - self.finished + straddling

    def _decode_durations(self, decoders: int, context: int, n: int) -> np.ndarray:
        """Durations of n consecutive decode-only steps of `decoders` sequences starting at total
        context `context`: exactly what `step_s` returns step by step, evaluated on the arithmetic
        sequence of contexts at once."""
        sm = self.step_model
        contexts = np.arange(context, context + decoders * n, decoders, dtype=np.float64)[:n]
        mem = sm.memory_s(decoders, contexts)
        comp = sm.compute_s(decoders, contexts)
        duration = np.maximum(mem, comp)
        if self._overlap_weight != 0.0:
            duration += self._overlap_weight * np.minimum(mem, comp)
        duration += sm.comm_s(decoders)
        duration += sm.step_overhead_s
        return np.asarray(duration)

    def _admissible_at(self, head: int, running: int, kv_free: int, t_limit: float) -> float:
        """When a decode-only stretch must stop to admit: the arrival of the FCFS head if a slot and
        KV room wait for it, else `t_limit`."""
        if head < len(self.ids) and running < self.batch_limit:
            rid = self.ids[head]
            if self.prompt[rid] + self.output[rid] - self.cached[rid] <= kv_free:
                return min(t_limit, self.arrival[rid])
        return t_limit

    def _decode_stretch(self, t: float, t_stop: float, to_completion: int, decoders: int, context: int) -> tuple[int, float]:
        """Decode-only steps from `t`: (steps taken, when the next step starts). Nothing changes but
        contexts until the next completion (`to_completion` steps away) or until a step starts at or
        after `t_stop` (the arrival of an admissible head request, or the caller's limit)."""
        first = self.step_model.step_s(decoders, context, context)
        if to_completion == 1 or t + first >= t_stop:
            return 1, t + first
        n = to_completion
        if t_stop < math.inf:
            # Steps only lengthen as contexts grow, so at most ⌈Δt/first⌉ start before t_stop.
            n = min(n, int((t_stop - t) / first) + 2)
        starts = np.empty(n + 1)
        starts[0] = t
        starts[1:] = self._decode_durations(decoders, context, n)
        np.cumsum(starts, out=starts)
        taken = n if t_stop == math.inf else int(np.searchsorted(starts[:n], t_stop, side="left"))
        return taken, float(starts[taken])

    def _step(
        self, t: float, t_stop: float, kv_free: int, running: int, decoders: int, context: int, steps: int
    ) -> tuple[float, int, int, int, int, int, int]:
        """One step from `t` and the requests it finishes: with prompts in flight a step of decodes and prefill
        chunks, else the decode-only stretch up to the next completion or the first step starting at or after
        `t_stop` (`_decode_stretch`). The admission policy is the caller's (FCFS here, priorities in
        planner/simulator_classes_step.py). Returns (t, kv_free, running, decoders, context, steps, finished)."""
        prompt, output, cached, first_token, finish, prefilling, finishing, step_s, chunk = self._step_refs
        finished = 0
        if not prefilling:
            taken, t = self._decode_stretch(t, t_stop, finishing[0][0] - steps, decoders, context)
            steps += taken
            context += decoders * taken
        else:
            # A step with prefill: decodes first, then prompts FCFS within the chunk budget.
            new_tokens, kv_read, attended, chunks = prefill_chunks(prefilling, prompt, chunk, decoders, context)
            t += step_s(new_tokens, kv_read, attended)
            steps += 1
            context += decoders
            # Prompts completed by this step yield their first token; all but possibly the last chunked one are complete.
            done = chunks if prefilling[chunks - 1][1] == prompt[prefilling[chunks - 1][0]] else chunks - 1
            for rid, _ in prefilling[:done]:
                first_token[rid] = t
                if output[rid] == 1:
                    finish[rid] = t
                    finished += 1
                    running -= 1
                    kv_free += prompt[rid] + 1 - cached[rid]
                else:
                    _heappush(finishing, (steps + output[rid] - 1, rid))
                    decoders += 1
                    context += prompt[rid] + 1  # the next step reads the prompt and the first token
            del prefilling[:done]

        while finishing and finishing[0][0] == steps:
            rid = _heappop(finishing)[1]
            finish[rid] = t
            finished += 1
            running -= 1
            decoders -= 1
            need = prompt[rid] + output[rid]
            context -= need
            kv_free += need - cached[rid]
        return t, kv_free, running, decoders, context, steps, finished

    def run_until(self, t_limit: float) -> None:
        """Execute every step that starts before `t_limit` with the requests routed so far."""
        arrival, prompt, output, cached = self.arrival, self.prompt, self.output, self.cached
        admission = self.admission
        ids, n_ids, head = self.ids, len(self.ids), self.head
        batch_limit = self.batch_limit
        prefilling = self.prefilling
        t, kv_free, running = self.t, self.kv_free, self.running
        decoders, context, steps, finished = self.decoders, self.decoder_context, self.steps, self.finished
        last_end, last_finished = self.last_step_end, self.last_step_finished
        step_cap, checkpoint = (self.max_steps if self.max_steps is not None else math.inf), self.checkpoint

        while True:
            # FCFS admission at the start of a step: a free slot and KV room for the head request.
            while head < n_ids and running < batch_limit:
                rid = ids[head]
                need = prompt[rid] + output[rid] - cached[rid]
                if arrival[rid] > t or need > kv_free:
                    break
                head += 1
                running += 1
                kv_free -= need
                admission[rid] = t
                prefilling.append([rid, cached[rid]])  # a cached prefix is not prefilled again
            if running == 0:
                if head >= n_ids:
                    break  # idle until a request is routed here
                t = max(t, arrival[ids[head]])  # idle until the head arrives (it always fits an empty cache)
                continue
            if t >= t_limit:
                break

            t_stop = t_limit if prefilling else self._admissible_at(head, running, kv_free, t_limit)
            t, kv_free, running, decoders, context, steps, step_finished = self._step(
                t, t_stop, kv_free, running, decoders, context, steps
            )
            finished += step_finished
            last_end, last_finished = t, step_finished
            if checkpoint is not None and steps & CHECKPOINT_STEPS_MASK == 0:
                checkpoint()  # the caller's deadline: a simulation its request abandoned stops here
            if steps > step_cap:
                raise SimulationLimitError(f"simulation exceeded its bound of {self.max_steps} steps", max_steps=self.max_steps)

        self.head, self.t, self.kv_free, self.running = head, t, kv_free, running
        self.decoders, self.decoder_context, self.steps, self.finished = decoders, context, steps, finished
        self.last_step_end, self.last_step_finished = last_end, last_finished


def _replica(step_model: StepModel, index: int, seed: int, **kwargs: Any) -> EngineReplica:
    """Replica `index`: plain, or speculative with its own accepted-length stream from (seed, index)."""
    if step_model.speculation is None:
        return EngineReplica(step_model, **kwargs)
    # imported here: the speculative replica subclasses this module's EngineReplica
    from planner.simulator_speculative import SpeculativeReplica

    return SpeculativeReplica(step_model, rng=np.random.default_rng([seed, index]), **kwargs)


def prefill_chunks(
    prefilling: list[list[int]], prompt: list[int], chunk: int | None, decoders: int, context: int
) -> tuple[int, int, int, int]:
    """One step's work when prompts are in flight: decodes first, then prompts FCFS within the chunk
    budget. Advances each prefilled entry's cached tokens; returns (new tokens, KV tokens read,
    attended tokens, prompts that got a chunk)."""
    budget = chunk - decoders if chunk is not None else math.inf
    new_tokens, kv_read, attended = decoders, context, context
    chunks = 0
    for entry in prefilling:
        if budget <= 0:
            break
        rid, cached = entry
        p = prompt[rid] - cached
        if p > budget:  # budget is finite here (chunked), an int
            p = int(budget)
        budget -= p
        new_tokens += p
        kv_read += cached
        attended += p * cached + p * (p + 1) // 2  # a chunk of p at position s attends p·s + p(p+1)/2
        entry[1] = cached + p
        chunks += 1
    return new_tokens, kv_read, attended, chunks


def simulate_requests(
    step_model: StepModel,
    trace: Trace,
    serving: Serving,
    *,
    kv_capacity_tokens: int,
    seed: int = 0,
    max_steps: int | None = None,
    checkpoint: Callable[[], None] | None = None,
    cached: list[int] | None = None,
) -> RequestTimes:
    """Run `trace` through `serving`; the per-request times, nothing summarised. `cached`: each
    request's prompt tokens found in its replica's prefix cache (planner/simulator_prefix.py), none without.

    `seed` only drives the random router. Join-shortest-queue sends each arrival to the replica
    holding the fewest requests (waiting + running) at that instant, the lowest index on a tie.
    """
    check_runnable(trace, kv_capacity_tokens, max_steps)
    n = len(trace)
    arrival = trace.arrival_s.tolist()
    prompt = trace.prompt_tokens.tolist()
    output = trace.output_tokens.tolist()
    admission = [math.nan] * n
    first_token = [math.nan] * n
    finish = [math.nan] * n
    replicas = [
        _replica(
            step_model,
            index,
            seed,
            batch_limit=serving.batch_limit,
            chunk_tokens=serving.chunk_tokens,
            kv_capacity_tokens=int(kv_capacity_tokens),
            arrival=arrival,
            prompt=prompt,
            output=output,
            admission=admission,
            first_token=first_token,
            finish=finish,
            max_steps=None if max_steps is None else max_steps,
            checkpoint=checkpoint,
            cached=cached,
        )
        for index in range(serving.replicas)
    ]
    if serving.router == "jsq" and serving.replicas > 1:
        route = _route_jsq(replicas, arrival, max_steps)
    else:
        route = _route_static(replicas, serving, n, seed)
    for replica in replicas:
        if max_steps is not None:
            replica.max_steps = max_steps - sum(r.steps for r in replicas if r is not replica)
        replica.run_until(math.inf)
    _check_total_steps(replicas, max_steps)

    return RequestTimes(
        arrival_s=trace.arrival_s,
        admission_s=np.array(admission),
        first_token_s=np.array(first_token),
        finish_s=np.array(finish),
        prompt_tokens=trace.prompt_tokens,
        output_tokens=trace.output_tokens,
        replica=route,
        steps=sum(r.steps for r in replicas),
    )


def check_runnable(trace: Trace, kv_capacity_tokens: int, max_steps: int | None) -> None:
    """Refuse before anything runs what could never finish: a KV cache under one token, a request
    larger than the whole cache (it could never be admitted), a step bound under one."""
    if not kv_capacity_tokens >= 1:
        raise PlannerInputError(f"KV capacity must be at least one token, got {kv_capacity_tokens}")
    need = trace.prompt_tokens + trace.output_tokens
    largest = int(need.max())
    if largest > kv_capacity_tokens:
        raise UnsupportedConfigurationError(
            f"a request of {largest} tokens (prompt + output) can never be admitted: the KV cache "
            f"holds {int(kv_capacity_tokens)} tokens per replica",
            request_tokens=largest,
            kv_capacity_tokens=int(kv_capacity_tokens),
            requests_too_large=int(np.count_nonzero(need > kv_capacity_tokens)),
        )
    if max_steps is not None and max_steps < 1:
        raise PlannerInputError(f"max_steps must be >= 1, got {max_steps}")


def _route_jsq(replicas: list[EngineReplica], arrival: list[float], max_steps: int | None) -> np.ndarray:
    """Join-shortest-queue: every replica advanced to each arrival, which goes to the one holding
    the fewest requests then (the lowest index on a tie)."""
    route = np.empty(len(arrival), dtype=np.int64)
    for rid, t_arrival in enumerate(arrival):
        counts = []
        for replica in replicas:
            if replica.t < t_arrival:  # else nothing can start before the arrival; admissions wait for the next call
                replica.run_until(t_arrival)
            counts.append(replica.in_system(t_arrival))
        chosen = counts.index(min(counts))
        replicas[chosen].ids.append(rid)
        route[rid] = chosen
        _check_total_steps(replicas, max_steps)
    return route


def _route_static(replicas: list[EngineReplica], serving: Serving, n: int, seed: int) -> np.ndarray:
    """Routes decided up front (random split or round-robin), each replica then runs alone."""
    route = (
        np.zeros(n, dtype=np.int64)
        if serving.replicas == 1
        else static_routes(serving.router, serving.replicas, n, np.random.default_rng(seed))
    )
    for rid, replica_index in enumerate(route.tolist()):
        replicas[replica_index].ids.append(rid)
    return route


def _check_total_steps(replicas: list[EngineReplica], max_steps: int | None) -> None:
    if max_steps is not None and sum(r.steps for r in replicas) > max_steps:
        raise SimulationLimitError(f"simulation exceeded its bound of {max_steps} steps", max_steps=max_steps)


def simulate(
    step_model: StepModel,
    workload: Workload,
    serving: Serving,
    *,
    kv_capacity_tokens: int,
    requests: int = 20_000,
    seed: int = 0,
    warmup_fraction: float = 0.1,
    trace: Trace | None = None,
    max_steps: int | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> SimulationResult:
    """Simulate `requests` arrivals of `workload` (or replay `trace`, which then sets the requests)
    on `serving` and summarise the steady state. Deterministic for a given seed: one generator
    draws inter-arrivals, prompts, outputs, then the random router's choices.

    Raises UnsupportedConfigurationError if a request cannot fit the KV cache, SimulationLimitError
    past `max_steps`, PlannerInputError for a rate of 0 without a trace, a warm-up fraction outside
    [0, 1) or fewer than two measured arrivals spanning a positive time.
    """
    started = time.perf_counter()
    if not 0.0 <= warmup_fraction < 1.0:
        raise PlannerInputError(f"warm-up fraction must be in [0, 1), got {warmup_fraction}")
    rng = np.random.default_rng(seed)
    if trace is None:
        trace = sample_trace(workload, requests, rng)
    detail = simulate_requests(
        step_model,
        trace,
        serving,
        kv_capacity_tokens=kv_capacity_tokens,
        seed=int(rng.integers(0, 2**63 - 1)),
        max_steps=max_steps,
        checkpoint=checkpoint,
    )
    return summarise_measurements(detail, serving, measurement_window(detail, warmup_fraction), started)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Window:
    """The measured requests (all but the first `warm` of `requests` by arrival) and the time window
    from the first measured arrival to the last arrival, over which time averages are taken."""

    requests: int
    warm: int
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def measurement_window(detail: RequestTimes, warmup_fraction: float) -> _Window:
    n = len(detail.arrival_s)
    warm = math.floor(warmup_fraction * n)
    window = _Window(requests=n, warm=warm, start_s=float(detail.arrival_s[warm]), end_s=float(detail.arrival_s[-1]))
    if n - warm < 2 or not window.duration_s > 0:
        raise PlannerInputError(
            "too few measured requests: the window after warm-up needs two arrivals at different times",
            requests=n,
            warmup_requests=warm,
        )
    return window


def summarise_measurements(detail: RequestTimes, serving: Serving, window: _Window, started: float) -> SimulationResult:
    """Percentiles over the measured requests, time averages over the window (see the module docstring)."""
    n, warm = window.requests, window.warm
    measured = slice(warm, n)
    window_start_s, window_end_s, window_s = window.start_s, window.end_s, window.duration_s
    arrival, admission, finish = detail.arrival_s, detail.admission_s, detail.finish_s
    running_s = _overlap_s(admission, finish, window_start_s, window_end_s)
    in_system_s = _overlap_s(arrival, finish, window_start_s, window_end_s)
    busy_s = sum(
        _union_s(admission[detail.replica == r], finish[detail.replica == r], window_start_s, window_end_s)
        for r in range(serving.replicas)
    )
    finished_in_window = (finish >= window_start_s) & (finish <= window_end_s)
    queue_wait = detail.queue_wait_s[measured]
    tpot = detail.tpot_s[measured]
    mean_occupancy = running_s / window_s / serving.replicas
    return SimulationResult(
        ttft_s=_percentiles(detail.ttft_s[measured]),
        tpot_s=_percentiles(tpot[~np.isnan(tpot)]),
        e2e_s=_percentiles(detail.e2e_s[measured]),
        queue_wait_s=_percentiles(queue_wait),
        mean_occupancy=mean_occupancy,
        occupancy_fraction=mean_occupancy / serving.batch_limit,
        mean_in_system=in_system_s / window_s,
        mean_time_in_system_s=float(np.mean(detail.e2e_s[measured])),
        measured_arrival_rate_rps=(n - warm - 1) / window_s,  # arrivals after the first, over their span
        busy_fraction=busy_s / window_s / serving.replicas,
        throughput_rps=int(np.count_nonzero(finished_in_window)) / window_s,
        output_tokens_per_s=float(np.sum(detail.output_tokens[finished_in_window])) / window_s,
        stable=not _queue_never_emptied(detail, window_start_s, window_end_s, serving.replicas),
        backlog_at_end=int(np.count_nonzero((arrival < window_end_s) & (admission > window_end_s))),
        requests=n,
        measured_requests=n - warm,
        steps=detail.steps,
        simulated_duration_s=float(np.max(finish)),
        window_s=window_s,
        wall_time_s=time.perf_counter() - started,
        ci_method=CI_METHOD,
        detail=detail,
    )


def _overlap_s(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> float:
    """Σ |[start_i, end_i) ∩ [lo, hi)|: the integral over the window of how many intervals are open."""
    return float(np.sum(np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)))


def _union_s(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> float:
    """|∪ [start_i, end_i) ∩ [lo, hi)| for intervals sorted by start: each interval extends the
    covered set from max(its start, the furthest end before it) to the furthest end including it."""
    if start.size == 0:
        return 0.0
    a = np.clip(start, lo, hi)
    b = np.clip(end, lo, hi)
    reach = np.maximum.accumulate(b)
    before = np.concatenate(([-math.inf], reach[:-1]))
    return float(np.sum(np.clip(reach - np.maximum(a, before), 0.0, None)))


def _percentiles(values: np.ndarray) -> Percentiles:
    """p50/p90/p99 of values (arrival order) and the batch-means interval of the p99."""
    if values.size == 0:
        return Percentiles(p50=math.nan, p90=math.nan, p99=math.nan, p99_ci_low=None, p99_ci_high=None, samples=0)
    p50, p90, p99 = (float(v) for v in np.percentile(values, [50.0, 90.0, 99.0]))
    blocks = min(CI_BLOCKS, values.size // CI_MIN_BLOCK_REQUESTS)
    low = high = None
    if blocks >= CI_MIN_BLOCKS:
        usable = values[: blocks * (values.size // blocks)].reshape(blocks, -1)
        block_p99 = np.percentile(usable, 99.0, axis=1)
        half_width = float(stats.t.ppf(0.5 + CI_LEVEL / 2, blocks - 1) * np.std(block_p99, ddof=1) / math.sqrt(blocks))  # t·s/√k
        low, high = p99 - half_width, p99 + half_width
    return Percentiles(p50=p50, p90=p90, p99=p99, p99_ci_low=low, p99_ci_high=high, samples=int(values.size))


def _queue_never_emptied(detail: RequestTimes, window_start_s: float, window_end_s: float, replicas: int) -> bool:
    """Did some replica's admission queue stay non-empty through the late half of the window?

    A stable queue keeps returning to empty (its waiting process regenerates); one that arrivals
    outpace never does once its backlog has built. So: does any replica have arrivals in the late
    half of the window and not one of them finds that replica's FCFS queue empty? Requests waiting
    when request i arrives = those routed earlier and admitted after it (admissions are in arrival
    order per replica, so a sorted search counts them)."""
    late_start_s = (window_start_s + window_end_s) / 2.0
    for r in range(replicas):
        mine = detail.replica == r
        arrival, admission = detail.arrival_s[mine], detail.admission_s[mine]
        late = np.flatnonzero(arrival >= late_start_s)
        if late.size == 0:
            continue
        admitted_before = np.searchsorted(admission, arrival[late], side="right")  # admissions at or before each arrival
        waiting = late - np.minimum(late, admitted_before)
        if np.all(waiting > 0):
            return True
    return False
