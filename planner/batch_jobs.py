"""Batch jobs: the cheapest way to push a fixed job of N requests through a model by a deadline or
within a GPU budget, with no latency SLO.

An offline job keeps every replica's batch full: the requests are all there at the start, so a
replica admits the next one the step after a slot frees. Its throughput is therefore the queueing
model's saturation rate at that setting (planner/queueing.py `saturation_rps`: every one of the c
slots busy, c = min(batch limit, ⌊KV capacity / E[p + o]⌋), each request holding one for `steps`
steps of mean duration T̄(c), with chunked prefill's budget limit on top):

    X = min(c / (steps · T̄(c)), (C − c) / (E[p] · t_full))        requests per second per replica

A job of N requests on r replicas gives each at most n = ⌈N/r⌉ of them. The bulk completes at X;
the last requests admitted then run out their lives in a shrinking batch, at most one full-batch
lifetime c/X (Little's law: c requests in service, X leaving per second), because a smaller batch
steps no slower than a full one. So the job finishes by

    finish = (n + c) / X          (the simulator checks it: tests/planner/test_batch_jobs.py)

With a deadline D the plan takes the fewest replicas whose finish is within D; with a GPU budget
alone (`max_gpus`) the most replicas that fit (no more than N), which finishes soonest. Every
replica bills from the start to the job's finish, per second with a 60-second minimum: RunPod
bills pods per second (https://docs.runpod.io/accounts-billing/billing, the default price list)
and AWS EC2 Linux instances per second with a 60-second minimum
(https://aws.amazon.com/about-aws/whats-new/2017/10/announcing-amazon-ec2-per-second-billing/), so
whole hours would overstate what a provider charges. Cost per job = GPU-hours × price per GPU-hour.
Model loading before the first request is not counted (it depends on storage, not on the plan).

The search: every (GPU, precision, tp, batch limit, chunk budget) that holds the model
(planner/candidates.py) is a candidate. Its cost is at least price · (N + c) / X_bound (r·⌈N/r⌉ ≥ N,
r·c ≥ c, and the closed-form bound X_bound ≥ X), so candidates are taken cheapest bound first and
the exact X computed until the next bound exceeds the cheapest job found. The winner is simulated
(`simulate_offline`: one replica, a sample of the job all present at t = 0) and the plan uses the
lower of the analytic and the simulated rate; a lowered winner goes back among the others, so the
first winner the simulator accepts is the cheapest verified job. Ties → earlier finish, then
fewer GPUs, then the candidate id.
"""

from __future__ import annotations

import heapq
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import stats

from planner.arrivals import Trace
from planner.candidates import BATCH_LIMITS, CHUNK_BUDGETS, TP_DEGREES, Drop, Option, enumerate_all_options, enumerate_groups
from planner.errors import InfeasiblePlanError, PlannerInputError, UnsupportedConfigurationError
from planner.queueing import saturation_rps
from planner.simulator import simulate_requests
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.units import SECONDS_PER_HOUR
from planner.workload import LengthDistribution, Serving, Slo, Workload

#: Billing granularity: per second with a 60-second minimum per instance (module docstring: RunPod
#: per second, AWS EC2 per second with a 60-second minimum; the stricter of the two).
MIN_BILLED_S = 60.0
#: Batch limits for offline jobs: the interactive grid continued by powers of two to 1,024, so the
#: KV cache rather than the grid sets a large replica's batch (no latency target holds it back;
#: vLLM's `--max-num-seqs` takes any value).
BATCH_JOB_BATCH_LIMITS: tuple[int, ...] = (*BATCH_LIMITS, 512, 1024)
#: Requests simulated per verification: 4,000, as the interactive plan's verification
#: (planner/planning.py VERIFY_REQUESTS), at least 16 full-batch lifetimes at the 256-sequence
#: default batch limit; fewer when a replica's whole share of the job is smaller (then it is simulated whole).
VERIFY_REQUESTS = 4_000
#: The completion rate is read between the 10th and 90th percentile of completion times, leaving
#: out the start (every slot prefilling at once) and the drain (the batch emptying).
VERIFY_WINDOW = (0.10, 0.90)
#: Time blocks of the window for the rate's confidence interval (batch means; 10 within the 10–30
#: Schmeiser, Oper. Res. 30(3), 1982, recommends, as planner/simulator.py's intervals).
VERIFY_BLOCKS = 10
CONFIDENCE_LEVEL = 0.95
#: Most simulations per plan: each lowered winner costs one more; past this the plan is refused.
MAX_VERIFICATIONS = 8
#: Relative tolerance of cost comparisons (rounding), as the interactive search's.
_COST_TOLERANCE = 1e-9
#: Most replica counts one candidate's cheapest count is sought among (8 MB of float64), so a job of
#: billions of tiny requests stays bounded; beyond it the cheapest count found so far is kept.
_MAX_REPLICA_COUNTS = 1_000_000
#: The SLO handed to the candidate enumeration when a job has no deadline: no latency target, so
#: no group is refused for latency (the largest finite float; `Slo` needs a finite target).
_NO_TARGET_S = sys.float_info.max


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchJob:
    """N requests with their length distributions, due by `deadline_s` and/or within `max_gpus` GPUs."""

    requests: int
    prompt_tokens: LengthDistribution
    output_tokens: LengthDistribution
    deadline_s: float | None = None
    max_gpus: int | None = None
    min_confidence: str | None = None

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise PlannerInputError(f"a batch job needs at least one request, got {self.requests}", constraint="requests")
        if self.deadline_s is None and self.max_gpus is None:
            raise PlannerInputError(
                "a batch job needs a deadline or a GPU budget (max_gpus): without either its cheapest plan is one replica "
                "running for as long as it takes",
                constraint="deadline_h",
            )
        if self.deadline_s is not None and not (self.deadline_s > 0 and math.isfinite(self.deadline_s)):
            raise PlannerInputError(f"deadline must be positive and finite, got {self.deadline_s} s", constraint="deadline_h")
        if self.max_gpus is not None and self.max_gpus < 1:
            raise PlannerInputError(f"max_gpus must be >= 1, got {self.max_gpus}", constraint="max_gpus")

    @property
    def mix(self) -> Workload:
        """The job's lengths as a workload at a unit rate (saturation does not depend on the rate)."""
        return Workload(arrival_rate_rps=1.0, prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens)

    @property
    def prompt_tokens_total(self) -> float:
        return self.requests * self.prompt_tokens.mean  # N · E[p]

    @property
    def output_tokens_total(self) -> float:
        return self.requests * self.output_tokens.mean  # N · E[o]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSizing:
    """One candidate's answer for the job at throughput X per replica."""

    replicas: int
    gpus: int
    requests_per_replica: int  # n = ⌈N/r⌉, the busiest replica's share
    finish_s: float  # (n + c) / X
    billed_s: float  # max(60, ⌈finish⌉) per replica
    gpu_hours: float  # r · tp · billed / 3600
    cost_usd: float  # gpu_hours × $/GPU-h


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulatedThroughput:
    """One replica simulated on a sample of the job, every request present at t = 0."""

    requests: int
    seed: int
    completion_rate_rps: float  # completions per second inside the window
    ci_low_rps: float | None
    ci_high_rps: float | None
    confidence_level: float
    window_completions: int
    window_s: float
    makespan_s: float  # the sample's last completion
    #: (sample + c) / makespan: the rate at which the finish formula reproduces the sample's makespan.
    #: Below the window's rate when the last batch drains for longer than c/X (its longest outputs).
    makespan_rate_rps: float
    predicted_makespan_s: float  # (sample + c) / X used: the finish formula on the sample

    @property
    def trusted_rps(self) -> float:
        """The rate the sample supports: its steady window's, or lower where its makespan says the
        drain outlasts the formula's c/X (seen: 0.5 % on a 70B job at batch 256, chunk 2,048)."""
        return min(self.completion_rate_rps, self.makespan_rate_rps)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPlan:
    """The cheapest (verified) job plan and how it was found. SI units."""

    option: Option
    job: BatchJob
    analytic_throughput_rps: float  # X, the queueing model's saturation rate
    simulated: SimulatedThroughput | None
    sizing: JobSizing
    binding: str  # "deadline", "max_gpus" or "deadline_and_max_gpus"
    candidates_total: int
    candidates_evaluated: int
    verifications: int
    drops: tuple[Drop, ...] = field(default=())

    @property
    def throughput_rps(self) -> float:
        """The rate the plan is sized with: the lower of the analytic and the simulated one."""
        if self.simulated is None:
            return self.analytic_throughput_rps
        return min(self.analytic_throughput_rps, self.simulated.trusted_rps)

    @property
    def usd_per_million_output_tokens(self) -> float:
        return self.sizing.cost_usd / self.job.output_tokens_total * 1e6  # $ / (N·E[o]) × 1e6


def offline_throughput_rps(option: Option, job: BatchJob) -> float:
    """X of one candidate: the queueing model's saturation rate (module docstring)."""
    serving = Serving(batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
    return saturation_rps(option.group.step_model, job.mix, serving, kv_capacity_tokens=option.group.kv_capacity_tokens)


def _sizing(job: BatchJob, replicas: int, throughput_rps: float, slots: int, tp: int, price_usd_per_gpu_hour: float) -> JobSizing:
    share = math.ceil(job.requests / replicas)
    finish_s = (share + slots) / throughput_rps  # (n + c) / X
    billed_s = max(MIN_BILLED_S, math.ceil(finish_s))
    gpu_hours = replicas * tp * billed_s / SECONDS_PER_HOUR
    return JobSizing(
        replicas=replicas,
        gpus=replicas * tp,
        requests_per_replica=share,
        finish_s=finish_s,
        billed_s=billed_s,
        gpu_hours=gpu_hours,
        cost_usd=gpu_hours * price_usd_per_gpu_hour,
    )


def _replicas_by_deadline(job: BatchJob, deadline_s: float, throughput_rps: float, slots: int) -> int | None:
    """Fewest replicas r with (⌈N/r⌉ + c)/X ≤ D; None when even one request per replica is too slow."""
    per_replica = deadline_s * throughput_rps - slots  # requests one replica finishes by D: X·D − c
    if per_replica < 1.0:
        return None
    replicas = max(1, math.ceil(job.requests / math.floor(per_replica)))  # ⌈N / ⌊X·D − c⌋⌉
    while replicas > 1 and (math.ceil(job.requests / (replicas - 1)) + slots) / throughput_rps <= deadline_s:
        replicas -= 1  # ⌊X·D − c⌋ rounds down: a replica fewer may still fit
    return min(replicas, job.requests)


def _cheapest_replicas(job: BatchJob, fewest: int, most: int, throughput_rps: float, slots: int) -> int:
    """The replica count in [fewest, most] with the fewest billed replica-seconds r · max(60, ⌈(⌈N/r⌉ + c)/X⌉),
    ties to the most replicas (the earlier finish). r·⌈N/r⌉ is not monotone in r (N = 10: r = 4 bills 12
    requests' time, r = 5 only 10), so the fewest replicas are not always the cheapest. Every r costs at least
    (N + r·c)/X, so none beyond (fewest's cost · X − N)/c can be cheaper: only those are tried."""

    def billed(r: np.ndarray) -> np.ndarray:
        finish = (np.ceil(job.requests / r) + slots) / throughput_rps
        return r * np.maximum(MIN_BILLED_S, np.ceil(finish))

    first = float(billed(np.array([fewest], dtype=float))[0])
    beyond = math.floor((first * throughput_rps - job.requests) / slots) if slots > 0 else most
    last = min(most, max(beyond, fewest), fewest + _MAX_REPLICA_COUNTS)
    replicas = np.arange(fewest, last + 1, dtype=float)
    costs = billed(replicas)
    cheapest = np.flatnonzero(costs <= costs.min() * (1 + _COST_TOLERANCE))
    return int(replicas[cheapest[-1]])


def size_job(job: BatchJob, throughput_rps: float, *, slots: int, tp: int, price_usd_per_gpu_hour: float) -> JobSizing | None:
    """Replicas, finish, GPU-hours and cost of the job at X per replica, or None when the deadline
    cannot be met within `max_gpus` (or at all). With a deadline, the cheapest replica count that
    meets it; with a GPU budget alone, the most replicas that fit (no more than N), finishing soonest."""
    most = job.requests if job.max_gpus is None else min(job.max_gpus // tp, job.requests)
    if most < 1:
        return None
    if job.deadline_s is None:
        replicas = most
    else:
        fewest = _replicas_by_deadline(job, job.deadline_s, throughput_rps, slots)
        if fewest is None or fewest > most:
            return None
        replicas = _cheapest_replicas(job, fewest, most, throughput_rps, slots)
    return _sizing(job, replicas, throughput_rps, slots, tp, price_usd_per_gpu_hour)


def _window_rate(finish: np.ndarray) -> tuple[float, float, float, float | None, float | None, int]:
    """Completion rate between the window's completion-time percentiles, with a batch-means interval:
    (rate, window start, window length, ci low, ci high, completions in the window)."""
    ordered = np.sort(finish)
    n = ordered.size
    lo = float(ordered[math.floor(VERIFY_WINDOW[0] * n)])
    hi = float(ordered[max(math.ceil(VERIFY_WINDOW[1] * n) - 1, 0)])
    if not hi > lo:  # the sample finishes in one wave (fewer requests than slots): the whole run's rate
        return n / float(ordered[-1]), 0.0, float(ordered[-1]), None, None, n
    inside = int(np.searchsorted(ordered, hi, side="right") - np.searchsorted(ordered, lo, side="right"))
    edges = np.linspace(lo, hi, VERIFY_BLOCKS + 1)
    counts = np.diff(np.searchsorted(ordered, edges, side="right"))
    rates = counts / np.diff(edges)  # equal widths: their mean is the window's rate
    half = float(stats.t.ppf(0.5 + CONFIDENCE_LEVEL / 2, VERIFY_BLOCKS - 1) * rates.std(ddof=1) / math.sqrt(VERIFY_BLOCKS))
    rate = inside / (hi - lo)
    return rate, lo, hi - lo, max(rate - half, 0.0), rate + half, inside


def simulate_offline(
    option: Option,
    job: BatchJob,
    *,
    requests: int,
    seed: int = 0,
    predicted_rps: float,
    checkpoint: Callable[[], None] | None = None,
) -> SimulatedThroughput:
    """One replica of `option` fed `requests` requests of the job, all present at t = 0 (the
    simulator admits them FCFS as slots and KV free up). Raises UnsupportedConfigurationError when
    a sampled request cannot fit the KV cache."""
    rng = np.random.default_rng(seed)
    trace = Trace(
        arrival_s=np.zeros(requests),
        prompt_tokens=job.prompt_tokens.sample(rng, requests),
        output_tokens=job.output_tokens.sample(rng, requests),
    )
    serving = Serving(batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
    times = simulate_requests(
        option.group.step_model, trace, serving, kv_capacity_tokens=option.group.kv_capacity_tokens, checkpoint=checkpoint
    )
    rate, _, window_s, low, high, inside = _window_rate(times.finish_s)
    makespan = float(np.max(times.finish_s))
    makespan_rate = (requests + option.slots) / makespan
    used = min(rate, makespan_rate, predicted_rps)
    return SimulatedThroughput(
        requests=requests,
        seed=seed,
        completion_rate_rps=rate,
        ci_low_rps=low,
        ci_high_rps=high,
        confidence_level=CONFIDENCE_LEVEL,
        window_completions=inside,
        window_s=window_s,
        makespan_s=makespan,
        makespan_rate_rps=makespan_rate,
        predicted_makespan_s=(requests + option.slots) / used,  # the finish formula on the sample: ≥ makespan
    )


@dataclass(slots=True)
class _Evaluated:
    """A candidate whose exact X is known, with its sizing at the rate it is currently trusted at."""

    option: Option
    analytic_rps: float
    simulated: SimulatedThroughput | None
    sizing: JobSizing

    def key(self) -> tuple[float, float, int, str]:
        return (self.sizing.cost_usd, self.sizing.finish_s, self.sizing.gpus, self.option.id)


def _price_per_gpu_hour(option: Option) -> float:
    return option.group.price_usd_per_hour / option.group.tp  # Group prices tp GPUs


def _cost_floor(option: Option, job: BatchJob) -> float:
    """A lower bound on the candidate's job cost: price · (N + c) / X_bound (module docstring)."""
    return option.group.price_usd_per_hour * (job.requests + option.slots) / option.saturation_bound_rps / SECONDS_PER_HOUR


def _options(
    job: BatchJob, model: ModelSpec, gpus: Sequence[GpuSpec], precisions: Sequence[Precision], tp_degrees: Sequence[int]
) -> tuple[list[Option], list[Drop]]:
    """Every candidate that holds the model, and the groups dropped with why. The only latency floor is
    the deadline itself: a group whose single request outlasts it (at the median lengths) cannot help."""
    slo = Slo(e2e_s=job.deadline_s if job.deadline_s is not None else _NO_TARGET_S, percentile=50.0)
    groups, drops = enumerate_groups(
        model=model,
        gpus=gpus,
        precisions=precisions,
        workload=job.mix,
        slo=slo,
        tp_degrees=tp_degrees,
        min_confidence=job.min_confidence,
    )
    options = enumerate_all_options(groups, job.mix, batch_limits=BATCH_JOB_BATCH_LIMITS, chunk_budgets=CHUNK_BUDGETS)
    return [o for o in options if o.saturation_bound_rps > 0], drops


def _evaluate(option: Option, job: BatchJob, simulated: SimulatedThroughput | None = None) -> _Evaluated | None:
    analytic = offline_throughput_rps(option, job)
    if not analytic > 0:
        return None
    rate = analytic if simulated is None else min(analytic, simulated.trusted_rps)
    sizing = size_job(job, rate, slots=option.slots, tp=option.group.tp, price_usd_per_gpu_hour=_price_per_gpu_hour(option))
    return None if sizing is None else _Evaluated(option, analytic, simulated, sizing)


@dataclass(slots=True)
class _Search:
    """Candidates in order of their cost floor; the evaluated ones in order of their cost."""

    job: BatchJob
    pending: list[tuple[float, str, Option]]
    found: list[tuple[tuple[float, float, int, str], _Evaluated]] = field(default_factory=list)
    evaluated: int = 0
    infeasible: list[Option] = field(default_factory=list)

    def best(self) -> _Evaluated | None:
        """Evaluate candidates until no floor left can beat the cheapest found; that cheapest."""
        while self.pending and (not self.found or self.pending[0][0] <= self.found[0][0][0] * (1 + _COST_TOLERANCE)):
            _, _, option = heapq.heappop(self.pending)
            self.evaluated += 1
            entry = _evaluate(option, self.job)
            if entry is None:
                self.infeasible.append(option)
                continue
            heapq.heappush(self.found, (entry.key(), entry))
        return self.found[0][1] if self.found else None

    def lower(self, entry: _Evaluated, simulated: SimulatedThroughput) -> None:
        """Put the winner back at its simulated rate (or drop it when that rate misses the deadline)."""
        heapq.heappop(self.found)
        lowered = _evaluate(entry.option, self.job, simulated)
        if lowered is None:
            self.infeasible.append(entry.option)
            return
        heapq.heappush(self.found, (lowered.key(), lowered))


def _verify(search: _Search, job: BatchJob, seed: int, checkpoint: Callable[[], None] | None) -> tuple[_Evaluated | None, int]:
    """The first winner whose simulated rate confirms it (the winner again after its rate is lowered)."""
    for verifications in range(1, MAX_VERIFICATIONS + 1):
        best = search.best()
        if best is None or best.simulated is not None:
            return best, verifications - 1
        if checkpoint is not None:
            checkpoint()
        sample = min(VERIFY_REQUESTS, best.sizing.requests_per_replica)
        try:
            simulated = simulate_offline(
                best.option, job, requests=sample, seed=seed, predicted_rps=best.analytic_rps, checkpoint=checkpoint
            )
        except UnsupportedConfigurationError:  # a sampled request outgrows this replica's KV cache
            heapq.heappop(search.found)
            search.infeasible.append(best.option)
            continue
        search.lower(best, simulated)
    best = search.best()
    if best is not None and best.simulated is None:
        raise InfeasiblePlanError(
            f"the simulator lowered {MAX_VERIFICATIONS} winners in turn; no plan was confirmed",
            constraint="verification",
        )
    return best, MAX_VERIFICATIONS


def _binding(job: BatchJob) -> str:
    if job.deadline_s is not None and job.max_gpus is not None:
        return "deadline_and_max_gpus"
    return "deadline" if job.deadline_s is not None else "max_gpus"


def plan_batch_job(
    job: BatchJob,
    *,
    model: ModelSpec,
    gpus: Sequence[GpuSpec],
    precisions: Sequence[Precision],
    tp_degrees: Sequence[int] = TP_DEGREES,
    verify: bool = True,
    seed: int = 0,
    checkpoint: Callable[[], None] | None = None,
) -> BatchPlan:
    """The cheapest plan for the job (module docstring); InfeasiblePlanError naming the limit when none."""
    options, drops = _options(job, model, gpus, precisions, tp_degrees)
    if not options:
        reasons = "; ".join(sorted({d.reason for d in drops})[:5]) or "no GPU type or precision allowed"
        raise InfeasiblePlanError(f"no configuration can run {model.slug} for this job: {reasons}", constraint="memory")
    pending = [(_cost_floor(o, job), o.id, o) for o in options]
    heapq.heapify(pending)
    search = _Search(job=job, pending=pending)
    if verify:
        best, verifications = _verify(search, job, seed, checkpoint)
    else:
        best, verifications = search.best(), 0
    if best is None:
        raise _infeasible(job, search.infeasible)
    return BatchPlan(
        option=best.option,
        job=job,
        analytic_throughput_rps=best.analytic_rps,
        simulated=best.simulated,
        sizing=best.sizing,
        binding=_binding(job),
        candidates_total=len(options),
        candidates_evaluated=search.evaluated,
        verifications=verifications,
        drops=tuple(drops),
    )


def _infeasible(job: BatchJob, options: Sequence[Option]) -> InfeasiblePlanError:
    """Why no candidate fits, with the relaxation that would work: the earliest finish within the GPU
    budget (a later deadline), and the fewest GPUs that meet the deadline (a larger budget)."""
    relaxations = []
    rates = [(o, offline_throughput_rps(o, job)) for o in options]
    rates = [(o, x) for o, x in rates if x > 0]
    if job.max_gpus is not None and job.deadline_s is not None:
        budget_only = replace(job, deadline_s=None)
        finishes = [
            s.finish_s
            for o, x in rates
            if (s := size_job(budget_only, x, slots=o.slots, tp=o.group.tp, price_usd_per_gpu_hour=0.0)) is not None
        ]
        if finishes:
            relaxations.append({"constraint": "workload.deadline_h", "current": job.deadline_s / SECONDS_PER_HOUR,
                                "value": min(finishes) / SECONDS_PER_HOUR, "unit": "h"})  # fmt: skip
    if job.deadline_s is not None:
        unlimited = replace(job, max_gpus=None)
        needed = [
            s.gpus
            for o, x in rates
            if (s := size_job(unlimited, x, slots=o.slots, tp=o.group.tp, price_usd_per_gpu_hour=0.0)) is not None
        ]
        if needed and job.max_gpus is not None:
            relaxations.append(
                {"constraint": "constraints.max_gpus", "current": job.max_gpus, "value": min(needed), "unit": "GPUs"}
            )
    if job.max_gpus is not None and options and job.max_gpus < min(o.group.tp for o in options):
        smallest = min(o.group.tp for o in options)  # not one replica fits the budget
        relaxations.append({"constraint": "constraints.max_gpus", "current": job.max_gpus, "value": smallest, "unit": "GPUs"})
    constraint = "max_gpus" if job.deadline_s is None else "deadline_h"
    detail = (
        f"no configuration finishes {job.requests:,} requests"
        + (f" within {job.deadline_s / SECONDS_PER_HOUR:.4g} h" if job.deadline_s is not None else "")
        + (f" on at most {job.max_gpus} GPUs" if job.max_gpus is not None else "")
    )
    return InfeasiblePlanError(detail, constraint=constraint, relaxations=relaxations, relaxations_apply="any")
