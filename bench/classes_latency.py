"""Plan latency of a two-class request against a one-class one, in the planner, caches cleared before each plan.

The one-class request: chat alone (60 req/s, p99 TTFT 500 ms) through `plan_capacity`. The
two-class request: the same chat plus a 20 req/s summarisation stream due within 6 h through
`plan_classes` (three arrangements: four single-class plans, the priority pool's search and its
step-level class simulation). Both on the test catalog of tests/planner/test_planning.py, without and with
the simulator's verification (`verify`: the single-class planner's simulator for each pool, and
the step-level class simulator for a priority pool, the day run for a deferred one). Prints the p50 of `--runs` cold plans of each and their
ratio (target: within 3×), in wall-clock time and in the process's CPU time (on a shared machine
the CPU time is the steadier figure: other processes' load stretches the wall clock alone). The
one-class and two-class plans alternate, so both see the same load.

    PYTHONPATH=. .venv/bin/python -m bench.classes_latency [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace

from bench.plan_latency import _clear_caches
from planner.plan_classes import plan_classes
from planner.planning import plan_capacity
from tests.planner.test_plan_classes import BASE, CHAT_CLASS, SUMMARISE
from tests.planner.test_planning import INPUTS


def _clear_all_caches() -> None:
    """bench/plan_latency.py's caches and every other functools cache of the planner's modules."""
    _clear_caches()
    for name, module in list(sys.modules.items()):
        if name.startswith("planner.") and module is not None:
            for value in vars(module).values():
                if not isinstance(value, type) and callable(getattr(value, "cache_clear", None)):
                    value.cache_clear()


def _timed(fn: object) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one cold call."""
    _clear_all_caches()
    start, cpu = time.perf_counter(), time.process_time()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for verify in (False, True):
        base = replace(BASE, verify=verify)
        one_class = replace(base, workload=CHAT_CLASS.workload)
        plan_capacity(one_class, INPUTS)  # warm the process (imports, compiled kernels)
        one: list[tuple[float, float]] = []
        two: list[tuple[float, float]] = []
        for _ in range(args.runs):
            one.append(_timed(lambda b=one_class: plan_capacity(b, INPUTS)))  # type: ignore[misc]
            two.append(_timed(lambda b=base: plan_classes([CHAT_CLASS, SUMMARISE], INPUTS, b)))  # type: ignore[misc]
        for label, index in (("wall", 0), ("cpu", 1)):
            p50_one = statistics.median(t[index] for t in one)
            p50_two = statistics.median(t[index] for t in two)
            print(
                f"verify={verify} {label}: one class p50 {p50_one * 1e3:.0f} ms, two classes p50 {p50_two * 1e3:.0f} ms, "
                f"ratio {p50_two / p50_one:.2f}"
            )


if __name__ == "__main__":
    main()
