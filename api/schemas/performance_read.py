"""From the planner's evaluation, simulation and prefix-cache results to the bodies answered by
`POST /v1/evaluate` and `POST /v1/simulate` (api/schemas/performance_response.py), in the edge's
units (milliseconds for steps and latencies, seconds end to end).
"""

from __future__ import annotations

import math
from typing import Any

from api.evaluation import Configuration, LatencyEstimate, PrefixSetup
from api.schemas.performance import PrecisionSpec
from api.schemas.performance_response import (
    CachedPrefillRead,
    CurvePoint,
    DecodeRow,
    EfficiencyUsed,
    EvaluateResponse,
    LittlesLaw,
    PercentilesMs,
    PercentilesS,
    Predicted,
    PrefillRead,
    PrefixCacheRead,
    PrefixCacheSimulated,
    QueueingRead,
    RhoCurvePoint,
    SimulatedPercentiles,
    SimulateResponse,
    StepModelRead,
    ThroughputCurveRead,
)
from planner.performance import DecodeStep, Evaluation, Prefill, ThroughputCurve
from planner.queueing import FORMULA, Latency, Prediction, RhoPoint
from planner.simulator import CI_LEVEL, Percentiles, SimulationResult
from planner.simulator_prefix import PrefixSimulation
from planner.step_model import StepModel
from planner.units import MS_PER_S


def _ms(seconds: float) -> float:
    return seconds * MS_PER_S


def efficiency_used(config: Configuration) -> EfficiencyUsed:
    eff = config.efficiency.efficiency
    return EfficiencyUsed(
        profile=eff.name,
        memory=eff.memory,
        compute=eff.compute,
        step_overhead_ms=_ms(eff.step_overhead_s),
        memory_reserve_fraction=eff.memory_reserve_fraction,
        include_comm=eff.include_comm,
        memory_compute_overlap=eff.memory_compute_overlap,
        source=eff.source,
        overridden=list(config.efficiency.overridden),
    )


def _precision(config: Configuration) -> PrecisionSpec:
    return PrecisionSpec(weights=config.precision.weights.slug, kv_cache=config.precision.kv_cache.slug)


def _latency_ms(latency: Latency | None) -> PercentilesMs:
    if latency is None:
        return PercentilesMs(p50=None, p90=None, p99=None)
    return PercentilesMs(p50=_ms(latency.p50_s), p90=_ms(latency.p90_s), p99=_ms(latency.p99_s))


def _latency_s(latency: Latency | None) -> PercentilesS:
    if latency is None:
        return PercentilesS(p50=None, p90=None, p99=None)
    return PercentilesS(p50=latency.p50_s, p90=latency.p90_s, p99=latency.p99_s)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _simulated(p: Percentiles, scale: float, *, stable: bool) -> SimulatedPercentiles:
    def value(v: float | None) -> float | None:
        return None if v is None or not stable or not math.isfinite(v) else v * scale

    return SimulatedPercentiles(
        p50=value(p.p50),
        p90=value(p.p90),
        p99=value(p.p99),
        p99_ci_low=value(p.p99_ci_low),
        p99_ci_high=value(p.p99_ci_high),
        samples=p.samples,
    )


def _predicted(estimate: LatencyEstimate, replicas: int) -> Predicted:
    p = estimate.prediction
    sim = estimate.simulation
    simulated = 1 if estimate.one_replica else replicas  # the replicas the simulation's totals cover
    if sim is None:
        ttft, tpot, e2e = _latency_ms(p.ttft), _latency_ms(p.tpot), _latency_s(p.e2e)
        unstable = p.unstable
    else:
        unstable = not sim.stable
        ttft_sim, tpot_sim, e2e_sim = (
            _simulated(x, s, stable=sim.stable) for x, s in ((sim.ttft_s, MS_PER_S), (sim.tpot_s, MS_PER_S), (sim.e2e_s, 1.0))
        )
        ttft = PercentilesMs(p50=ttft_sim.p50, p90=ttft_sim.p90, p99=ttft_sim.p99)
        tpot = PercentilesMs(p50=tpot_sim.p50, p90=tpot_sim.p90, p99=tpot_sim.p99)
        e2e = PercentilesS(p50=e2e_sim.p50, p90=e2e_sim.p90, p99=e2e_sim.p99)
    return Predicted(
        method=estimate.method,
        unstable=unstable,
        utilisation=_finite(p.utilisation),
        saturation_rps=p.saturation_rps,
        max_deployment_rps=p.saturation_rps * replicas,
        arrival_rate_rps_per_replica=p.arrival_rate_rps,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_s=e2e,
        throughput_rps=p.throughput_rps if sim is None else sim.throughput_rps / simulated,
        output_tokens_per_s=p.output_tokens_per_s if sim is None else sim.output_tokens_per_s / simulated,
        fidelity_note=p.fidelity_note,
        simulated_requests=None if sim is None else sim.requests,
    )


def _curve_point(point: RhoPoint) -> RhoCurvePoint:
    return RhoCurvePoint(
        utilisation=point.utilisation,
        arrival_rate_rps=point.arrival_rate_rps,
        ttft_p99_ms=None if point.ttft_s is None else _ms(point.ttft_s),
        tpot_p99_ms=None if point.tpot_s is None else _ms(point.tpot_s),
        e2e_p99_s=point.e2e_s,
    )


def _queueing(prediction: Prediction, curve: tuple[RhoPoint, ...]) -> QueueingRead:
    q = prediction.queueing
    common: dict[str, Any] = {
        "reliable": prediction.reliable,
        "arrival_rate_rps": prediction.arrival_rate_rps,
        "utilisation": _finite(prediction.utilisation),
        "saturation_rps": prediction.saturation_rps,
        "rho_curve": [_curve_point(point) for point in curve],
    }
    if q is None:
        return QueueingRead(
            formula=FORMULA,
            arrival_cv=None,
            service_time_s=None,
            mean_step_ms=None,
            steps_per_request=None,
            slots=None,
            slots_limited_by=None,
            littles_law=None,
            wait_probability=None,
            mean_wait_ms=None,
            p99_wait_ms=None,
            **common,
        )
    occupancy, lam, service_s = q.littles_law
    return QueueingRead(
        formula=q.formula,
        arrival_cv=q.arrival_cv,
        service_time_s=q.service_s,
        mean_step_ms=_ms(q.mean_step_s),
        steps_per_request=q.steps_per_request,
        slots=q.slots,
        slots_limited_by=q.slots_limited_by,
        littles_law=LittlesLaw(occupancy=occupancy, arrival_rate_rps=lam, time_in_service_s=service_s),
        wait_probability=q.wait_probability,
        mean_wait_ms=_ms(q.mean_wait_s),
        p99_wait_ms=_ms(q.wait_at_percentile_s),
        **common,
    )


def _queueing_notes(estimate: LatencyEstimate | None, kv_capacity_tokens: int) -> list[str]:
    if estimate is None or estimate.prediction.saturation_rps > 0:
        return []
    return [
        (
            f"the KV cache ({kv_capacity_tokens:,} tokens per replica) cannot hold one request of the workload's mix "
            "(prompt + output): no arrival rate is sustainable on this configuration"
        )
    ]


def prefix_cache_read(setup: PrefixSetup, step_model: StepModel, prompt_tokens: int) -> PrefixCacheRead:
    return PrefixCacheRead(
        routing=setup.routing,
        cache_tokens=setup.cache_tokens,
        working_set_tokens=setup.working_set_tokens,
        kv_capacity_tokens=setup.kv_capacity_tokens,
        hit_rate=setup.hit_rate,
        prefill_tokens_saved_fraction=setup.prefill_tokens_saved_fraction,
        cached_prefill=[
            CachedPrefillRead(
                requests_fraction=row.requests_fraction,
                cached_tokens=row.cached_tokens,
                prompt_tokens=row.prompt_tokens,
                time_ms=_ms(row.time_s),
                uncached_time_ms=_ms(row.uncached_time_s),
            )
            for row in setup.cached_prefills(step_model, prompt_tokens)
        ],
    )


def prefix_cache_simulated(setup: PrefixSetup, simulation: PrefixSimulation, *, share: float) -> PrefixCacheSimulated:
    return PrefixCacheSimulated(
        routing=setup.routing,
        cache_tokens=setup.cache_tokens,
        working_set_tokens=setup.working_set_tokens,
        kv_capacity_tokens=setup.kv_capacity_tokens,
        replica=0,
        arrival_share=share,
        arrival_rate_rps=simulation.rate_rps,
        hit_rate=simulation.hit_rate,
        predicted_hit_rate=setup.hit_rate,
        prefill_tokens_saved_fraction=simulation.prefill_tokens_saved_fraction,
    )


def evaluate_response(
    config: Configuration,
    evaluation: Evaluation,
    estimate: LatencyEstimate | None,
    *,
    replicas: int,
    prefix_cache: PrefixCacheRead | None = None,
) -> EvaluateResponse:
    ev = evaluation
    return EvaluateResponse(
        gpu=ev.gpu,
        model=ev.model,
        tp=ev.tp,
        precision=_precision(config),
        efficiency=efficiency_used(config),
        catalog_version=config.catalog_version,
        engine=config.engine,
        context_tokens=ev.context_tokens,
        usable_memory_bytes=ev.usable_memory_bytes,
        weights_bytes=ev.weights_bytes,
        weights_bytes_per_gpu=ev.weights_bytes_per_gpu,
        kv_bytes_per_token=ev.kv_bytes_per_token,
        kv_bytes_per_token_one_copy=ev.kv_bytes_per_token_one_copy,
        kv_copies=ev.kv_copies,
        kv_bytes_per_request=ev.kv_bytes_per_request,
        kv_capacity_tokens=ev.kv_capacity_tokens,
        max_batch_by_memory=ev.max_batch_by_memory,
        break_even_flops_per_byte=ev.break_even_flops_per_byte,
        prefill=_prefill_read(ev.prefill),
        decode=[_decode_row(row) for row in ev.decode],
        step_model=_step_model_read(ev.step_model),
        throughput_curve=_throughput_curve_read(ev.throughput_curve),
        notes=list(ev.notes) + _queueing_notes(estimate, ev.kv_capacity_tokens),
        predicted=None if estimate is None else _predicted(estimate, replicas),
        queueing=None if estimate is None else _queueing(estimate.prediction, estimate.curve),
        prefix_cache=prefix_cache,
    )


def _prefill_read(pre: Prefill) -> PrefillRead:
    return PrefillRead(
        tokens=pre.tokens,
        time_ms=_ms(pre.time_s),
        linear_time_ms=_ms(pre.linear_time_s),
        attention_time_ms=_ms(pre.attention_time_s),
        weight_read_ms=_ms(pre.weight_read_s),
        comm_ms=_ms(pre.comm_s),
        linear_flops=pre.linear_flops,
        attention_flops=pre.attention_flops,
        kv_bytes_written=pre.kv_bytes_written,
        bound=pre.bound,
        fits_in_memory=pre.fits_in_memory,
    )


def _decode_row(row: DecodeStep) -> DecodeRow:
    return DecodeRow(
        batch=row.batch,
        context_tokens=row.context_tokens,
        step_ms=_ms(row.step_s),
        memory_ms=_ms(row.memory_s),
        compute_ms=_ms(row.compute_s),
        comm_ms=_ms(row.comm_s),
        output_tokens_per_s=row.output_tokens_per_s,
        output_tokens_per_s_per_request=row.output_tokens_per_s_per_request,
        weight_bytes_read=row.weight_bytes_read,
        kv_bytes=row.kv_bytes,
        bytes_read=row.bytes_read,
        linear_flops=row.linear_flops,
        attention_flops=row.attention_flops,
        flops_per_byte=row.flops_per_byte,
        flops_per_byte_with_attention=row.flops_per_byte_with_attention,
        bound=row.bound,
        fits_in_memory=row.fits_in_memory,
    )


def _step_model_read(sm: StepModel) -> StepModelRead:
    """The planner's SI coefficients as they are, so a client can recompute a step (see STEP_FORMULA)."""
    return StepModelRead(
        weight_bytes=sm.weight_bytes,
        dense_weight_bytes=sm.dense_weight_bytes,
        expert_weight_bytes=sm.expert_weight_bytes,
        experts=sm.experts,
        experts_per_token=sm.experts_per_token,
        moe_layers=sm.moe_layers,
        kv_bytes_per_token=sm.kv_bytes_per_token,
        flops_per_token=sm.flops_per_token,
        attention_flops_per_context_token=sm.attention_flops_per_context_token,
        memory_bandwidth_bytes_per_s=sm.memory_bandwidth_bytes_per_s,
        compute_flops_per_s=sm.compute_flops_per_s,
        comm_s_per_token=sm.comm_s_per_token,
        comm_latency_s=sm.comm_latency_s,
        step_overhead_s=sm.step_overhead_s,
        memory_compute_overlap=sm.memory_compute_overlap,
        break_even_flops_per_byte=sm.break_even_flops_per_byte,
    )


def _throughput_curve_read(curve: ThroughputCurve) -> ThroughputCurveRead:
    return ThroughputCurveRead(
        context_tokens=curve.context_tokens,
        memory_limit_batch=curve.memory_limit_batch,
        ceiling_tokens_per_s=curve.ceiling_tokens_per_s,
        knee_batch=curve.knee_batch,
        points=[
            CurvePoint(
                batch=p.batch,
                step_ms=_ms(p.step_s),
                output_tokens_per_s=p.output_tokens_per_s,
                output_tokens_per_s_per_request=p.output_tokens_per_s_per_request,
                bound=p.bound,
            )
            for p in curve.points
        ],
    )


def simulate_response(
    config: Configuration,
    sim: SimulationResult,
    *,
    kv_capacity_tokens: int,
    seed: int,
    saturation_rps: float,
    arrival_rate_rps_per_replica: float,
    prefix_cache: PrefixCacheSimulated | None = None,
) -> SimulateResponse:
    stable = sim.stable
    return SimulateResponse(
        gpu=config.gpu.slug,
        model=config.model.slug,
        tp=config.tp,
        precision=_precision(config),
        efficiency=efficiency_used(config),
        catalog_version=config.catalog_version,
        engine=config.engine,
        kv_capacity_tokens=kv_capacity_tokens,
        requests=sim.requests,
        measured_requests=sim.measured_requests,
        seed=seed,
        unstable=not stable,
        utilisation=arrival_rate_rps_per_replica / saturation_rps if saturation_rps > 0 else None,
        saturation_rps=saturation_rps,
        ttft_ms=_simulated(sim.ttft_s, MS_PER_S, stable=stable),
        tpot_ms=_simulated(sim.tpot_s, MS_PER_S, stable=stable),
        e2e_s=_simulated(sim.e2e_s, 1.0, stable=stable),
        queue_wait_ms=_simulated(sim.queue_wait_s, MS_PER_S, stable=stable),
        mean_occupancy=sim.mean_occupancy,
        occupancy_fraction=sim.occupancy_fraction,
        busy_fraction=sim.busy_fraction,
        littles_law=LittlesLaw(
            occupancy=sim.mean_in_system,
            arrival_rate_rps=sim.measured_arrival_rate_rps,
            time_in_service_s=sim.mean_time_in_system_s,
        ),
        throughput_rps=sim.throughput_rps,
        output_tokens_per_s=sim.output_tokens_per_s,
        backlog_at_end=sim.backlog_at_end,
        steps=sim.steps,
        simulated_duration_s=sim.simulated_duration_s,
        wall_time_ms=_ms(sim.wall_time_s),
        ci_method=sim.ci_method,
        ci_level=CI_LEVEL,
        prefix_cache=prefix_cache,
    )
