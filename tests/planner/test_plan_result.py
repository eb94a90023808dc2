"""The plan result's records (planner/plan_result.py): JSON names, the step model's coefficients in
full, frozen records, and the one invariant a verification carries. The `sample_*` builders are the
hand-built plan the API schema tests round-trip too."""

from __future__ import annotations

import dataclasses
import json

import pytest

from planner.errors import PlannerInputError
from planner.plan_result import (
    STEP_MODEL_FIELDS,
    AddReplica,
    Alternative,
    CandidatesSection,
    CapacityBinding,
    Configuration,
    ConstraintBinding,
    DecodeRoofline,
    FigureOfRecord,
    FiguresOfRecord,
    Justification,
    LittlesLaw,
    MemorySection,
    NextCandidate,
    P99Intervals,
    Percentiles,
    Predicted,
    PrefillRoofline,
    Provenance,
    QueueingSection,
    Relaxation,
    RhoPoint,
    RooflineSection,
    SameConfiguration,
    Sensitivity,
    SensitivityEntry,
    SimulatedFigures,
    SloBinding,
    StepModelSection,
    Verification,
    VerificationRow,
    as_dict,
)
from planner.specs import Efficiency
from planner.step_model import OPERATION_TERMS, StepModel


def _plan_fields(configuration: Configuration) -> dict[str, object]:
    """A configuration's fields a sensitivity entry repeats (it has no pipeline layout of its own)."""
    return {k: v for k, v in dataclasses.asdict(configuration).items() if k not in ("pp", "ep")}


H100_FP8 = Configuration(gpu="h100-sxm", tp=1, weights_precision="fp8", kv_precision="fp8", batch_limit=128, chunk_tokens=2048)
A100_BF16 = Configuration(
    gpu="a100-80gb-sxm", tp=2, weights_precision="bf16", kv_precision="bf16", batch_limit=64, chunk_tokens=None
)


def sample_step_model() -> StepModel:
    """Llama-3.1-8B-like at fp8 on one H100: 8 GB of weights, 64 KiB of KV per token, 3.35 TB/s."""
    return StepModel(
        dense_weight_bytes=8.0e9,
        kv_bytes_per_token=65_536.0,
        flops_per_token=1.6e10,
        attention_flops_per_context_token=262_144.0,
        memory_bandwidth_bytes_per_s=3.35e12,
        compute_flops_per_s=1.979e15,
        step_overhead_s=0.002,
        memory_compute_overlap=0.9,
    )


def sample_justification() -> Justification:
    """Every section with every optional member exercised: SLO, capacity and MILP bindings, an exact,
    a bounded and an impossible alternative, single-configuration and mixed-fleet traffic levels."""
    sm = sample_step_model()
    return Justification(
        step_model=StepModelSection.of(sm, formula="t_step = max(t_mem, t_compute) + t_comm + step_overhead_s"),
        memory=MemorySection(
            usable_bytes=72e9,
            weights_bytes=8e9,
            kv_bytes_per_token=65_536.0,
            kv_bytes_per_request=8.2e7,
            mean_request_tokens=1250.0,
            kv_capacity_tokens=976_562,
            concurrency_limit_by_kv=781,
            batch_limit=128,
            concurrency_limit=128,
            batch_limited_by="batch_limit",
        ),
        roofline=RooflineSection(
            decode=(
                DecodeRoofline(
                    at="batch_1",
                    batch=1,
                    context_tokens=1125,
                    step_s=0.0045,
                    memory_s=0.0024,
                    compute_s=1e-5,
                    comm_s=0.0,
                    flops_per_byte=2.0,
                    bound="memory",
                    output_tokens_per_s=222.0,
                ),
                DecodeRoofline(
                    at="at_concurrency_limit",
                    batch=128,
                    context_tokens=1125,
                    step_s=0.014,
                    memory_s=0.0052,
                    compute_s=0.0011,
                    comm_s=0.0,
                    flops_per_byte=250.0,
                    bound="memory",
                    output_tokens_per_s=9100.0,
                ),
            ),
            prefill=PrefillRoofline(
                prompt_tokens=1000,
                time_s=0.011,
                linear_time_s=0.008,
                attention_time_s=0.0001,
                weight_read_s=0.0024,
                bound="compute",
            ),
            break_even_flops_per_byte=590.7,
        ),
        queueing=QueueingSection(
            arrival_rate_rps=10.0,
            arrival_cv=1.0,
            service_s=3.1,
            steps_per_request=251.0,
            mean_step_s=0.0124,
            utilisation=0.62,
            saturation_rps=16.1,
            slots=128,
            slots_limited_by="batch_limit",
            littles_law=LittlesLaw(occupancy=31.0, arrival_rate_rps=10.0, time_in_service_s=3.1, check="L = λ·W: 31 = 10 × 3.1"),
            wait_probability=0.0,
            mean_wait_s=0.0,
            wait_at_percentile_s=0.0,
            formula="M/G/c with c = slots",
            rho_curve=(
                RhoPoint(utilisation=0.5, arrival_rate_rps=8.05, ttft_s=0.2, tpot_s=0.02, e2e_s=5.0, meets_slo=True),
                RhoPoint(utilisation=0.62, arrival_rate_rps=10.0, ttft_s=0.3, tpot_s=0.03, e2e_s=7.0, meets_slo=True, at="plan"),
                RhoPoint(utilisation=0.99, arrival_rate_rps=15.9, ttft_s=None, tpot_s=None, e2e_s=None, meets_slo=False),
            ),
            slo_lines_s={"ttft": 0.5, "tpot": 0.05},
            percentile=99.0,
        ),
        binding=(
            SloBinding(
                constraint="slo_ttft",
                binding=True,
                target_s=0.5,
                predicted_at_plan_s=0.3,
                slack_s=0.2,
                predicted_at_max_rps_s=0.5,
                relax_by=0.1,
                relaxed_cost_usd_per_hour=4.0,
                relaxed_saving_usd_per_hour=2.0,
            ),
            SloBinding(
                constraint="slo_tpot",
                binding=False,
                target_s=0.05,
                predicted_at_plan_s=0.03,
                slack_s=0.02,
                predicted_at_max_rps_s=0.04,
                relax_by=0.1,
                relaxed_saving_usd_per_hour=None,
                note="mixed fleet: relaxation not re-solved",
            ),
            CapacityBinding(
                constraint="concurrency",
                binding=False,
                limited_by="batch_limit",
                concurrency_limit=128,
                detail="concurrency is capped by batch_limit at 128 sequences",
            ),
            ConstraintBinding(
                kind="meet_demand", constraint="meet_demand", binding=True, value=20.4, limit=20.0, slack=0.4, unit="rps"
            ),
            ConstraintBinding(
                kind="gpu_inventory", constraint="gpu_inventory__h100_sxm", binding=False, value=2, limit=4, slack=2, unit="gpus"
            ),
        ),
        alternatives=(
            Alternative(
                kind="gpu",
                name="a100-80gb-sxm",
                gpu="a100-80gb-sxm",
                tp=2,
                weights_precision="bf16",
                kv_precision="bf16",
                batch_limit=64,
                chunk_tokens=None,
                replicas=3,
                gpus=6,
                cost_usd_per_hour=9.0,
                exact=True,
                verified=True,
                reason="needs $9.00/h, $3.00/h more than this plan",
                confidence="B",
            ),
            Alternative(
                kind="gpu",
                name="h200",
                cost_usd_per_hour=None,
                cost_at_least_usd_per_hour=7.5,
                exact=False,
                reason="even with every replica at its saturation rate it needs at least $7.50/h",
            ),
            Alternative(
                kind="precision", name="bf16/bf16", cost_usd_per_hour=None, exact=True, reason="ttft 0.6 s > 0.5 s unloaded"
            ),
        ),
        sensitivity=Sensitivity(
            traffic=(
                SensitivityEntry(
                    traffic_factor=1.1,
                    arrival_rate_rps=22.0,
                    **_plan_fields(H100_FP8),
                    replicas=2,
                    gpus=2,
                    cost_usd_per_hour=6.0,
                    cost_increase_usd_per_hour=0.0,
                    within_limits=True,
                    breaks=None,
                    same_configuration=SameConfiguration(replicas=2, gpus=2, cost_usd_per_hour=6.0),
                ),
                SensitivityEntry(
                    traffic_factor=1.5,
                    arrival_rate_rps=30.0,
                    **_plan_fields(A100_BF16),
                    replicas=5,
                    gpus=10,
                    cost_usd_per_hour=15.0,
                    cost_increase_usd_per_hour=9.0,
                    within_limits=False,
                    breaks="max_gpus",
                    note="the plan for 1.5× traffic",
                ),
                SensitivityEntry(
                    traffic_factor=1.25,
                    arrival_rate_rps=25.0,
                    replicas=3,
                    gpus=3,
                    cost_usd_per_hour=9.0,
                    cost_increase_usd_per_hour=3.0,
                    note="mixed fleet: every row scaled by the traffic factor",
                ),
            ),
            max_arrival_rate_rps_within_slo=32.2,
            fails_by_arrival_rate_rps=32.5,
            headroom_fraction=0.61,
            method="re-planned by the queueing model at each level",
        ),
        candidates=CandidatesSection(
            enumerated=2400,
            groups=80,
            dropped_before_queueing=30,
            queueing_predictions=412,
            queueing_root_finds=3,
            in_milp=12,
            search_exhaustive=True,
            simulations=2,
        ),
    )


def sample_percentiles(scale: float = 1.0) -> Percentiles:
    return Percentiles(p50=0.1 * scale, p99=0.3 * scale, at_percentile=0.3 * scale)


def sample_verification() -> Verification:
    return Verification(
        simulated=SimulatedFigures(
            percentile=99.0,
            ttft_s=sample_percentiles(),
            tpot_s=sample_percentiles(0.1),
            e2e_s=sample_percentiles(20.0),
            p99_ci_s=P99Intervals(ttft=(0.28, 0.33), tpot=(0.029, 0.031), e2e=(None, None)),
            mean_occupancy=30.5,
            stable=True,
        ),
        misses=(),
        meets_slo=True,
        requests_simulated=4000,
        replicas_simulated=1,
        per_replica_rate_rps=10.0,
        wall_time_s=0.21,
        rows=(VerificationRow(gpu="h100-sxm", replicas=2, meets_slo=True),),
        adjustments=(
            AddReplica(configuration=H100_FP8, from_replicas=1, to_replicas=2, because="simulated p99 missed: ttft"),
            NextCandidate(from_=A100_BF16, to=H100_FP8, because="simulated p99 missed and one more replica breaks budget"),
            NextCandidate(from_=H100_FP8, to=None, because="simulated p99 missed"),
        ),
        seed=0,
    )


def sample_predicted() -> Predicted:
    return Predicted(
        percentile=99.0,
        per_replica_rate_rps=10.0,
        ttft_s=sample_percentiles(),
        tpot_s=sample_percentiles(0.1),
        e2e_s=sample_percentiles(20.0),
        output_tokens_per_s=5000.0,
        reliable=False,
        fidelity_note="the figures of record are the simulator's",
        of_record=FiguresOfRecord(
            ttft_s=FigureOfRecord(value=0.31, method="simulated", ci_low=0.28, ci_high=0.33),
            tpot_s=FigureOfRecord(value=0.03, method="simulated", ci_low=0.029, ci_high=0.031),
            e2e_s=FigureOfRecord(value=6.0, method="analytic"),
        ),
    )


def sample_provenance() -> Provenance:
    return Provenance(
        catalog_version=3,
        solver="highs",
        status="optimal",
        mip_gap=0.0,
        solve_ms=4.2,
        plan_ms=61.0,
        efficiency_profile="calibrated",
        efficiencies={
            "h100-sxm": Efficiency(
                name="calibrated",
                memory=0.8,
                compute=0.6,
                step_overhead_s=0.002,
                memory_reserve_fraction=0.1,
                include_comm=True,
                source="vLLM 0.6 runs",
            )
        },
        created_at="2026-12-02T00:00:00+00:00",
    )


def sample_relaxations() -> tuple[Relaxation, ...]:
    return (
        Relaxation(constraint="slo.ttft_ms", current=1.0, value=10.43, unit="ms", cost_usd_per_hour=137.6),
        Relaxation(constraint="constraints.max_gpus", current=4, value=8, unit="GPUs"),
        Relaxation(constraint="constraints.n_plus_one", current=True, value=False, unit=None),
        Relaxation(constraint="constraints.gpus", current=None, value="h200", unit=None, note="not in the request's list"),
    )


def test_as_dict_names_keys_as_the_json_does_and_lists_tuples() -> None:
    verification = as_dict(sample_verification())
    assert verification["adjustments"][1] == {
        "action": "next_candidate",
        "from": dataclasses.asdict(A100_BF16),
        "to": dataclasses.asdict(H100_FP8),
        "because": sample_verification().adjustments[1].because,
    }
    assert verification["simulated"]["p99_ci_s"]["ttft"] == [0.28, 0.33]
    assert verification["misses"] == [] and verification["seed"] == 0
    assert json.loads(json.dumps(verification)) == verification


def test_without_renamed_keys_as_dict_is_dataclasses_asdict() -> None:
    """Only `from` is renamed, so every other record's JSON is dataclasses.asdict's (tuples as lists)."""
    for record in (sample_justification(), sample_predicted(), sample_provenance(), *sample_relaxations()):
        assert as_dict(record) == json.loads(json.dumps(dataclasses.asdict(record)))


def test_the_step_model_section_repeats_every_coefficient_of_the_step_model() -> None:
    """A coefficient added to StepModel must reach the justification: the section's fields are the
    step model's, then weight_bytes (8 GB dense, no experts), the break-even intensity, the formula
    and last the step model's `speculation` (the draft the configuration verifies; None here)."""
    sm = sample_step_model()
    section = StepModelSection.of(sm, formula="f")
    names = [f.name for f in dataclasses.fields(StepModelSection)]
    assert names == [*STEP_MODEL_FIELDS, "weight_bytes", "break_even_flops_per_byte", "formula", "speculation"]
    assert as_dict(section) == {
        # the operation-level terms (M½, c_seq) are 0 in every plan and not in the section until the kernels carry them
        **{
            name: value for name, value in dataclasses.asdict(sm).items() if name != "speculation" and name not in OPERATION_TERMS
        },
        "weight_bytes": pytest.approx(8.0e9),
        "break_even_flops_per_byte": pytest.approx(sm.break_even_flops_per_byte),
        "formula": "f",
        "speculation": None,
    }


def test_records_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample_justification().candidates.in_milp = 0  # type: ignore[misc]


def test_a_verification_that_meets_the_slos_has_no_misses() -> None:
    good = sample_verification()
    with pytest.raises(PlannerInputError):
        dataclasses.replace(good, misses=("ttft",))
    missed = dataclasses.replace(good, misses=("ttft", "stability"), meets_slo=False)
    assert not missed.meets_slo
