"""Candidate tables computed for a fleet plan in worker processes are the very tables one process
computes, in the order asked, and a repeated request reads them from the per-process cache."""

from __future__ import annotations

import dataclasses
import pickle
import time

import pytest

from api import fleet_tables
from planner.fleet_candidates import CandidateGrid, candidate_table
from planner.workload import FixedLength, LognormalLength, Slo, Workload
from tests.planner.performance_specs import (
    A100_SXM,
    FP8_PRECISION,
    FP16_PRECISION,
    H100_SXM,
    LLAMA_2_70B,
)

H100 = dataclasses.replace(H100_SXM, price_usd_per_hour_on_demand=6.155, price_usd_per_hour_reserved_1y=3.8777)
A100 = dataclasses.replace(A100_SXM, price_usd_per_hour_on_demand=2.7, price_usd_per_hour_reserved_1y=1.701)
GRID = CandidateGrid(tp_degrees=(1, 2, 4), batch_limits=(16, 64), chunk_budgets=(None,))
CHAT = Workload(
    arrival_rate_rps=1.0, prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=3000), output_tokens=FixedLength(tokens=200)
)
LONG = Workload(
    arrival_rate_rps=3.0, prompt_tokens=LognormalLength(mean_tokens=3000, p99_tokens=6000), output_tokens=FixedLength(tokens=300)
)
SLO = Slo(ttft_s=2.0, tpot_s=0.08, percentile=99)


def test_parallel_tables_equal_serial_ones_and_are_cached() -> None:
    fleet_tables.clear_table_cache()
    gpus, precisions = (H100, A100), (FP16_PRECISION, FP8_PRECISION)
    jobs = [
        (LLAMA_2_70B, gpus, precisions, workload, SLO, GRID, ("off", None, None)) for workload in (CHAT, LONG, CHAT.at_rate(5.0))
    ]
    parallel = fleet_tables.candidate_tables(jobs)
    serial = [
        candidate_table(model=LLAMA_2_70B, gpus=gpus, precisions=precisions, workload=w, slo=SLO, grid=GRID)
        for w in (CHAT, LONG, CHAT)
    ]
    assert parallel == serial
    assert parallel[0].candidates  # something to compare
    assert parallel[0] is parallel[2]  # one shape, one table, whatever the demand
    assert fleet_tables.candidate_tables(jobs[:1])[0] is parallel[0]  # from the cache
    fleet_tables.clear_table_cache()


def test_the_table_workers_are_kept_between_plans_and_stop_on_request() -> None:
    """One pool of workers serves every fleet plan (a worker's start costs ~1.4 s); stopping them
    (the app's shutdown) lets them go, and the next tables start new ones with the same answers."""
    gpus, precisions = (H100, A100), (FP16_PRECISION,)
    jobs = [(LLAMA_2_70B, gpus, precisions, workload, SLO, GRID, ("off", None, None)) for workload in (CHAT, LONG)]
    fleet_tables.clear_table_cache()
    first = fleet_tables.candidate_tables(jobs)
    pool = fleet_tables._WORKERS._pool
    assert pool is not None
    fleet_tables.clear_table_cache()
    assert fleet_tables.candidate_tables(jobs) == first and fleet_tables._WORKERS._pool is pool
    fleet_tables.stop_table_workers()
    assert fleet_tables._WORKERS._pool is None
    fleet_tables.clear_table_cache()
    assert fleet_tables.candidate_tables(jobs) == first and fleet_tables._WORKERS._pool is not pool
    fleet_tables.clear_table_cache()


def test_a_table_job_past_its_deadline_stops_at_its_first_checkpoint() -> None:
    """A job carries its request's deadline into the worker (as wall-clock time): past it, the
    table stops before its first (GPU, tp) search with a picklable TableDeadlinePassed."""
    job = (LLAMA_2_70B, (H100, A100), (FP16_PRECISION,), CHAT, SLO, GRID, ("off", None, None))
    with pytest.raises(fleet_tables.TableDeadlinePassed) as stopped:
        fleet_tables._compute_table(job, time.time() - 1.0)
    assert isinstance(pickle.loads(pickle.dumps(stopped.value)), fleet_tables.TableDeadlinePassed)
    assert fleet_tables._compute_table(job, time.time() + 600.0) == fleet_tables._compute_table(job)
