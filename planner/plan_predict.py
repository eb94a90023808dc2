"""What the plan search asks of the models, cached: the queueing model's saturation, μ and
predictions per configuration and rate (planner/queueing.py), and the simulator's run of one
replica at its share of the traffic (planner/simulator.py).

Every answer here is a pure function of frozen, hashable inputs (step model, unit-rate workload,
serving settings, KV capacity), so the caches are shared by every request in the process: an
impossible request's advice and the justification's re-plans ask the same questions again.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from functools import lru_cache
from typing import Any

import numpy as np

from planner.candidates import Option
from planner.errors import ConvergenceError, InfeasiblePlanError
from planner.plan_result import Metric
from planner.queueing import PercentileBounds, Prediction, max_rps_at_slo, predict, saturation_rps, screen
from planner.simulator import simulate
from planner.step_model import StepModel
from planner.workload import Serving, Slo, Workload


def unit_rate_mix(workload: Workload) -> Workload:
    """The workload at a unit rate: per-replica μ and saturation do not depend on the offered rate."""
    return workload.at_rate(1.0)


@lru_cache(maxsize=8192)
def cached_saturation_rps(sm: StepModel, mix: Workload, serving: Serving, capacity: int) -> float:
    return saturation_rps(sm, mix, serving, kv_capacity_tokens=capacity)


@lru_cache(maxsize=8192)
def cached_max_rps(
    sm: StepModel, mix: Workload, serving: Serving, slo: Slo, capacity: int
) -> float | tuple[str, str, float | None]:
    """μ, or (constraint, reason, predicted_s) when no rate meets the SLO on this configuration."""
    try:
        return max_rps_at_slo(sm, mix, serving, slo, kv_capacity_tokens=capacity)
    except InfeasiblePlanError as exc:
        predicted = exc.extensions.get("predicted_s")
        return str(exc.extensions.get("constraint", "slo")), exc.detail, None if predicted is None else float(predicted)
    except ConvergenceError as exc:
        return "queueing", f"the queueing model did not converge on this configuration ({exc.detail})", None


class _PredictionCache:
    """The queueing model's answers per (configuration, rate, percentile), shared by every request in
    the process (pure functions of frozen specs): full predictions per percentile, and screens per
    whole SLO (where `queueing.screen` proved a miss on a slice of the sample, the lower bounds on the
    percentiles that did; within one request `plan_search.Planner._proven_missed` lets them settle a looser
    SLO too). A screened rate that is not proven missed yields the very prediction `predict` makes,
    so it is kept as that as well. Bounded, least recently used out first, and safe across request threads, as
    `functools.lru_cache` is."""

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._answers: OrderedDict[tuple[Any, ...], Prediction | PercentileBounds] = OrderedDict()
        self._lock = threading.Lock()

    def _find(self, key: tuple[Any, ...]) -> Prediction | PercentileBounds | None:
        with self._lock:
            found = self._answers.get(key)
            if found is not None:
                self._answers.move_to_end(key)
            return found

    def _keep(self, key: tuple[Any, ...], answer: Prediction | PercentileBounds) -> None:
        with self._lock:
            if isinstance(answer, PercentileBounds) and isinstance(self._answers.get(key), Prediction):
                return  # a whole prediction (another thread's) says more than bounds
            self._answers[key] = answer
            self._answers.move_to_end(key)
            if len(self._answers) > self._maxsize:
                self._answers.popitem(last=False)

    def prediction(
        self, sm: StepModel, mix: Workload, serving: Serving, capacity: int, rate_rps: float, percentile: float
    ) -> Prediction:
        key = (sm, mix, serving, capacity, rate_rps, percentile)
        found = self._find(key)
        if isinstance(found, Prediction):
            return found
        prediction = predict(sm, mix.at_rate(rate_rps), serving, kv_capacity_tokens=capacity, percentile=percentile)
        self._keep(key, prediction)
        return prediction

    def screened(
        self, sm: StepModel, mix: Workload, serving: Serving, capacity: int, rate_rps: float, slo: Slo
    ) -> Prediction | PercentileBounds:
        # Keyed by the whole SLO and kept apart from the full predictions, so the answer is the same
        # pure function of its arguments whatever this process asked before: a cached full prediction
        # (exact excess) or another SLO's bounds in its place would record another slack in the μ
        # bracket, move the next probe, and let the same request plan differently in a warm process.
        key = ("screen", sm, mix, serving, capacity, rate_rps, slo)
        found = self._find(key)
        if found is not None:
            return found
        answer = screen(sm, mix.at_rate(rate_rps), serving, slo, kv_capacity_tokens=capacity)
        self._keep(key, answer)
        if isinstance(answer, Prediction):
            self._keep((sm, mix, serving, capacity, rate_rps, slo.percentile), answer)
        return answer

    def cache_clear(self) -> None:
        with self._lock:
            self._answers.clear()


PREDICTIONS = _PredictionCache(maxsize=16384)


def cached_prediction(
    sm: StepModel, mix: Workload, serving: Serving, capacity: int, rate_rps: float, percentile: float
) -> Prediction:
    return PREDICTIONS.prediction(sm, mix, serving, capacity, rate_rps, percentile)


def prediction_meets_slo(prediction: Prediction, slo: Slo) -> bool:
    if prediction.unstable:
        return False
    return all(predicted_at(prediction, metric) <= target for metric, target in slo_targets(slo).items())


def slo_excess(prediction: Prediction, slo: Slo) -> float:
    """max over the SLO's targets of predicted/target − 1 (≤ 0 exactly when `prediction_meets_slo`; inf when unstable)."""
    if prediction.unstable:
        return math.inf
    return max(predicted_at(prediction, metric) / target - 1.0 for metric, target in slo_targets(slo).items())


def slo_stricter_or_equal(a: Slo, b: Slo) -> bool:
    """Whether meeting `a` implies meeting `b`: same percentile, each target of `b` set in `a` no looser."""
    if a.percentile != b.percentile:
        return False
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        target_b = getattr(b, metric)
        target_a = getattr(a, metric)
        if target_b is not None and (target_a is None or target_a > target_b):
            return False
    return True


def option_serving(option: Option, replicas: int = 1) -> Serving:
    return Serving(replicas=replicas, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)


def slo_targets(slo: Slo) -> dict[Metric, float]:
    """The targets the SLO sets, by metric (an unset target is no constraint)."""
    targets: tuple[tuple[Metric, float | None], ...] = (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s))
    return {m: t for m, t in targets if t is not None}


def predicted_at(p: Prediction, metric: str) -> float:
    latency = getattr(p, metric)
    return 0.0 if latency is None else latency.at_percentile_s


def per_replica_arrival_cv(arrival_cv: float, replicas: int) -> float:
    """A random split of a renewal stream into r parts: c² = c²/r + (r − 1)/r (thinning; Poisson stays Poisson)."""
    return math.sqrt(arrival_cv**2 / replicas + (replicas - 1) / replicas)


def option_prediction(
    option: Option, workload: Workload, rate_rps: float, replicas: int, percentile: float, *, curve: bool
) -> Prediction:
    serving = option_serving(option, replicas)
    return predict(
        option.group.step_model,
        workload.at_rate(rate_rps),
        serving,
        kv_capacity_tokens=option.group.kv_capacity_tokens,
        percentile=percentile,
        curve=curve,
    )


@lru_cache(maxsize=512)
def _simulated_share(
    sm: StepModel, per_replica: Workload, serving: Serving, capacity: int, requests: int, seed: int
) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """One replica simulated at its share of the traffic: the result and its measured (post warm-up)
    TTFT, TPOT and E2E samples. A pure function of frozen inputs, shared by every request in the
    process (an impossible request's advice re-plans the same configurations at the same loads)."""
    result = simulate(sm, per_replica, serving, kv_capacity_tokens=capacity, requests=requests, seed=seed)
    detail = result.detail
    warm = math.floor(0.1 * result.requests)
    tpot = detail.tpot_s[warm:]
    samples = (detail.ttft_s[warm:].copy(), tpot[~np.isnan(tpot)].copy(), detail.e2e_s[warm:].copy())
    for sample in samples:
        sample.setflags(write=False)
    return (result, *samples)


def verify_replica_share(
    option: Option, workload: Workload, rate_rps: float, replicas: int, slo: Slo, requests: int, seed: int
) -> dict[str, Any]:
    """Simulate one replica at its share of the traffic (random split) and compare with the SLOs."""
    per_replica = Workload(
        arrival_rate_rps=rate_rps / replicas,
        prompt_tokens=workload.prompt_tokens,
        output_tokens=workload.output_tokens,
        arrival_cv=per_replica_arrival_cv(workload.arrival_cv, replicas),
    )
    result, ttft, tpot, e2e = _simulated_share(
        option.group.step_model, per_replica, option_serving(option), option.group.kv_capacity_tokens, requests, seed
    )
    return simulation_report(result, ttft, tpot, e2e, slo, per_replica.arrival_rate_rps)


def simulation_report(
    result: Any, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray, slo: Slo, per_replica_rate_rps: float
) -> dict[str, Any]:
    """One simulated replica against the SLOs, from its measured TTFT, TPOT (decoding requests only)
    and E2E samples: the report a verification record is built from (planner/plan_verify.py)."""
    values = {
        "ttft": float(np.percentile(ttft, slo.percentile)),
        "tpot": float(np.percentile(tpot, slo.percentile)) if tpot.size else 0.0,
        "e2e": float(np.percentile(e2e, slo.percentile)),
    }
    misses: list[str] = [m for m, target in slo_targets(slo).items() if values[m] > target]
    if not result.stable:
        misses.append("stability")
    return {
        "simulated": {
            "percentile": slo.percentile,
            "ttft_s": {"p50": result.ttft_s.p50, "p99": result.ttft_s.p99, "at_percentile": values["ttft"]},
            "tpot_s": {"p50": result.tpot_s.p50, "p99": result.tpot_s.p99, "at_percentile": values["tpot"]},
            "e2e_s": {"p50": result.e2e_s.p50, "p99": result.e2e_s.p99, "at_percentile": values["e2e"]},
            "p99_ci_s": {
                "ttft": [result.ttft_s.p99_ci_low, result.ttft_s.p99_ci_high],
                "tpot": [result.tpot_s.p99_ci_low, result.tpot_s.p99_ci_high],
                "e2e": [result.e2e_s.p99_ci_low, result.e2e_s.p99_ci_high],
            },
            "mean_occupancy": result.mean_occupancy,
            "stable": result.stable,
        },
        "misses": misses,
        "meets_slo": not misses,
        "requests_simulated": result.requests,
        "replicas_simulated": 1,
        "per_replica_rate_rps": per_replica_rate_rps,
        "wall_time_s": result.wall_time_s,
    }
