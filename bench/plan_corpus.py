"""Where plans operate: the analytic queueing model against the simulator on the plans the planner makes (issue 14 §4).

`CORPUS` is a documented, varied set of plan questions (POST /v1/plans bodies): models from 7–8 B to
70–72 B dense and two MoE (Mixtral-8x7B, Qwen3-30B-A3B), GPUs from L4 to H200/B200, chunked prefill
searched or pinned off, chat / RAG / summarisation / short-prompt mixes and prompt-length
histograms, TTFT+TPOT-, TPOT-only and E2E-only SLOs, rates from 2 to 300 rps. Each is planned with
`verify` false and speculation off (the plan the analytic model alone chooses: what the simulator
is then asked to confirm), and the plan's largest row is compared on the same deployment: one
replica at its share of the traffic, `planner.queueing.predict` against `planner.simulator.simulate`
on the same step model, KV capacity, batch limit and chunk budget. Error = analytic / simulated − 1
on each p99; a plan is *within 10 %* when every p99 it has (TTFT, TPOT of decoding requests, E2E) is.

    .venv/bin/python -m bench.plan_corpus                  # the corpus table (prints; --out writes markdown)
    .venv/bin/python -m bench.plan_corpus --quick          # every 4th question
    .venv/bin/python -m bench.plan_corpus --save pts.pkl   # keep the points (re-render with --render)

`bench/queueing_fidelity.py --corpus points.pkl` puts this table (saved by `--save points.pkl`) into
docs/queueing-fidelity.md.
"""

from __future__ import annotations

import argparse
import logging
import math
import pickle
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

METRICS = ("ttft", "tpot", "e2e")
TARGET_ERROR = 0.10
#: Simulated requests per plan (the verification default is 4,000; more here so the simulator's own
#: p99 CI stays a few percent: a 10 % comparison needs the reference tighter than 10 %).
REQUESTS = 20_000


def _q(model: str, rate: float, prompt: Any, output: Any, slo: dict[str, float], **constraints: Any) -> dict[str, Any]:
    return {
        "model": model,
        "workload": {"arrival_rate_rps": rate, "prompt_tokens": prompt, "output_tokens": output},
        "slo": slo,
        "constraints": {"speculative": "off", **constraints},
    }


CHAT = ({"mean": 1000, "p99": 4000}, {"mean": 250, "p99": 1000})
RAG = ({"mean": 6000, "p99": 16000}, {"mean": 300, "p99": 800})
SUMM = ({"mean": 3000, "p99": 8000}, {"mean": 400, "p99": 1000})
SHORT = (256, 64)
AGENT = ({"tokens": [128, 512, 2048, 8192], "weights": [0.4, 0.3, 0.2, 0.1]}, {"mean": 150, "p99": 600})
HIST = ({"tokens": [128, 512, 2048], "weights": [0.5, 0.3, 0.2]}, 200)
FIXED = (1500, 300)
NO_CHUNK = {"pin": {"chunk_tokens": None}}
TT = {"ttft_ms": 500, "tpot_ms": 50}

#: ≥ 50 questions. Each line varies model, rate, lengths, SLO kind and the allowed GPUs; about a
#: third pin chunked prefill off (the rest let the search choose a budget, or none).
CORPUS: tuple[dict[str, Any], ...] = (
    # Llama-3.1-8B: chat, RAG, summarisation, short prompts, histograms; TTFT+TPOT, TPOT-only, E2E
    _q("llama-3.1-8b", 20, *CHAT, TT),
    _q("llama-3.1-8b", 200, *CHAT, TT),
    _q("llama-3.1-8b", 50, *CHAT, {"ttft_ms": 800, "tpot_ms": 40}, gpus=["h200"]),
    _q("llama-3.1-8b", 50, *CHAT, {"ttft_ms": 800, "tpot_ms": 40}, gpus=["h200"], **NO_CHUNK),
    _q("llama-3.1-8b", 5, *SHORT, {"tpot_ms": 20}),
    _q("llama-3.1-8b", 30, *SUMM, {"e2e_s": 60}),
    _q("llama-3.1-8b", 10, *RAG, {"ttft_ms": 2000, "tpot_ms": 60}),
    _q("llama-3.1-8b", 10, *RAG, {"ttft_ms": 2000, "tpot_ms": 60}, **NO_CHUNK),
    _q("llama-3.1-8b", 40, *AGENT, {"ttft_ms": 1000, "tpot_ms": 40}, gpus=["a100-80gb-sxm"]),
    _q("llama-3.1-8b", 40, *AGENT, {"ttft_ms": 1000, "tpot_ms": 40}, gpus=["a100-80gb-sxm"], **NO_CHUNK),
    _q("llama-3.1-8b", 15, *HIST, {"ttft_ms": 400, "tpot_ms": 40}, gpus=["l40s"]),
    _q("llama-3.1-8b", 15, *HIST, {"ttft_ms": 400, "tpot_ms": 40}, gpus=["l40s"], **NO_CHUNK),
    _q("llama-3.1-8b", 300, *SHORT, {"ttft_ms": 200, "tpot_ms": 30}, gpus=["h100-sxm"]),
    _q("llama-3.1-8b", 8, *FIXED, {"ttft_ms": 600, "tpot_ms": 30}, gpus=["l4"]),
    _q("llama-3.1-8b", 60, *CHAT, {"tpot_ms": 25}, gpus=["h100-sxm", "h200"]),
    _q("llama-3.1-8b", 25, *CHAT, {"ttft_ms": 300, "tpot_ms": 60, "percentile": 95}),
    # small dense models: Qwen2.5-7B, Mistral-7B, Llama-2-7B/13B
    _q("qwen2.5-7b", 30, *SUMM, {"e2e_s": 120}),
    _q("qwen2.5-7b", 100, *SHORT, {"ttft_ms": 200, "tpot_ms": 30}),
    _q("qwen2.5-7b", 100, *SHORT, {"ttft_ms": 200, "tpot_ms": 30}, **NO_CHUNK),
    _q("qwen2.5-7b", 20, *RAG, {"ttft_ms": 3000, "tpot_ms": 50}, gpus=["a100-80gb-sxm", "l40s"]),
    _q("mistral-7b-v0.3", 15, *HIST, {"ttft_ms": 400, "tpot_ms": 40}),
    _q("mistral-7b-v0.3", 60, *CHAT, {"ttft_ms": 700, "tpot_ms": 45}),
    _q("mistral-7b-v0.3", 60, *CHAT, {"ttft_ms": 700, "tpot_ms": 45}, **NO_CHUNK),
    _q("mistral-7b-v0.3", 12, *AGENT, {"e2e_s": 20}, gpus=["l40s", "a10g"]),
    _q("llama-2-7b", 25, *FIXED, {"ttft_ms": 500, "tpot_ms": 40}),
    _q("llama-2-13b", 8, *FIXED, {"ttft_ms": 800, "tpot_ms": 50}),
    _q("llama-2-13b", 8, *FIXED, {"ttft_ms": 800, "tpot_ms": 50}, **NO_CHUNK),
    _q("llama-2-13b", 20, *CHAT, {"tpot_ms": 35}, gpus=["a100-80gb-sxm"]),
    # 70 B class: Llama-3.1-70B, Llama-2-70B, Qwen2.5-72B
    _q("llama-3.1-70b", 4, *RAG, {"ttft_ms": 3000, "tpot_ms": 80}),
    _q("llama-3.1-70b", 4, *RAG, {"ttft_ms": 3000, "tpot_ms": 80}, **NO_CHUNK),
    _q("llama-3.1-70b", 10, *CHAT, {"ttft_ms": 1000, "tpot_ms": 50}),
    _q("llama-3.1-70b", 10, *CHAT, {"ttft_ms": 1000, "tpot_ms": 50}, **NO_CHUNK),
    _q("llama-3.1-70b", 2, *CHAT, {"ttft_ms": 2000, "tpot_ms": 20}, gpus=["h100-sxm", "h200", "a100-80gb-sxm"]),
    _q("llama-3.1-70b", 20, *SUMM, {"e2e_s": 120}),
    _q("llama-3.1-70b", 30, *HIST, {"ttft_ms": 800, "tpot_ms": 60}, gpus=["h200"]),
    _q("llama-3.1-70b", 15, *AGENT, {"ttft_ms": 1500, "tpot_ms": 60}, gpus=["b200"]),
    _q("llama-2-70b", 3, 2000, 500, {"ttft_ms": 2000, "tpot_ms": 70}),
    _q("llama-2-70b", 3, 2000, 500, {"ttft_ms": 2000, "tpot_ms": 70}, **NO_CHUNK),
    _q("llama-2-70b", 12, *CHAT, {"tpot_ms": 60}, gpus=["a100-80gb-sxm"]),
    _q("qwen2.5-72b", 5, *CHAT, {"ttft_ms": 1500, "tpot_ms": 60}),
    _q("qwen2.5-72b", 5, *CHAT, {"ttft_ms": 1500, "tpot_ms": 60}, **NO_CHUNK),
    _q("qwen2.5-72b", 8, *SUMM, {"ttft_ms": 2500, "tpot_ms": 70}, gpus=["h100-sxm"]),
    # MoE: Mixtral-8x7B, Qwen3-30B-A3B
    _q("mixtral-8x7b", 10, *CHAT, {"ttft_ms": 1000, "tpot_ms": 60}),
    _q("mixtral-8x7b", 10, *CHAT, {"ttft_ms": 1000, "tpot_ms": 60}, **NO_CHUNK),
    _q("mixtral-8x7b", 40, *CHAT, {"ttft_ms": 1000, "tpot_ms": 60}, gpus=["h100-sxm"]),
    _q("mixtral-8x7b", 6, *RAG, {"ttft_ms": 2500, "tpot_ms": 70}),
    _q("mixtral-8x7b", 20, *HIST, {"e2e_s": 15}, gpus=["a100-80gb-sxm"]),
    _q("qwen3-30b-a3b", 25, *CHAT, {"ttft_ms": 600, "tpot_ms": 40}),
    _q("qwen3-30b-a3b", 25, *CHAT, {"ttft_ms": 600, "tpot_ms": 40}, **NO_CHUNK),
    _q("qwen3-30b-a3b", 25, *CHAT, {"tpot_ms": 30}, gpus=["l40s", "l4", "a10g"]),
    _q("qwen3-30b-a3b", 60, *SHORT, {"ttft_ms": 300, "tpot_ms": 25}, gpus=["h200"]),
    _q("qwen3-30b-a3b", 15, *SUMM, {"e2e_s": 40}),
    _q("qwen3-30b-a3b", 10, *AGENT, {"ttft_ms": 1200, "tpot_ms": 35}, gpus=["h100-sxm"], **NO_CHUNK),
    _q("mixtral-8x7b", 15, *FIXED, {"ttft_ms": 700, "tpot_ms": 50}, gpus=["h200"], **NO_CHUNK),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CorpusPoint:
    index: int
    label: str  # model, rate, deployment
    rho: float
    rate_rps: float  # per replica
    analytic: dict[str, float | None]
    simulated: dict[str, tuple[float, float | None, float | None]]
    reliable: bool
    fidelity_note: str | None
    dispersion: float
    wait_probability: float
    chunk_tokens: int | None

    def error(self, metric: str) -> float | None:
        a, sim = self.analytic[metric], self.simulated[metric][0]
        if a is None or not math.isfinite(sim) or sim <= 0:
            return None
        return a / sim - 1.0

    @property
    def worst(self) -> float:
        return max((abs(e) for e in (self.error(m) for m in METRICS) if e is not None), default=0.0)

    @property
    def within(self) -> bool:
        return self.worst <= TARGET_ERROR


def _deployments(questions: tuple[dict[str, Any], ...]) -> list[tuple[int, str, Any, Any, Any, int, int]]:
    """Each question's plan (verify false), as (index, label, step model, per-replica workload, serving, kv, replicas)."""
    from api.inputs import planning_inputs
    from api.schemas.plans import PlanRequest
    from api.settings import Settings
    from catalog.db import make_engine, make_session_factory
    from catalog.migrate import upgrade
    from catalog.repository import Catalog
    from planner import planning
    from planner.errors import HeadroomError
    from planner.pins import apply_pins
    from planner.plan_predict import option_serving, per_replica_arrival_cv
    from planner.plan_rows import candidate_id_of
    from planner.workload import Workload

    logging.disable(logging.CRITICAL)
    out = []
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'headroom.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            catalog.load_reference_catalog()
            session.commit()
            for index, body in enumerate(questions):
                request = PlanRequest.model_validate({**body, "verify": False})
                inputs, _ = planning_inputs(request, catalog, default_provider=Settings().default_price_provider)
                planning_request = planning.PlanningRequest(
                    workload=request.traffic(),
                    slo=request.targets(),
                    constraints=request.constraints.to_constraints(),
                    verify=False,
                )
                try:
                    result = planning.plan_capacity(planning_request, inputs)
                except HeadroomError as error:
                    print(f"#{index} {body['model']}: no plan ({error})", flush=True)
                    continue
                pinned, pinned_inputs = apply_pins(planning_request, inputs)
                space = planning._search_space(pinned, pinned_inputs)
                row = result.row
                option = space.by_id[candidate_id_of(row)]
                workload = planning_request.workload
                per_replica = Workload(
                    arrival_rate_rps=row.offered_rps / row.replicas,
                    prompt_tokens=workload.prompt_tokens,
                    output_tokens=workload.output_tokens,
                    arrival_cv=per_replica_arrival_cv(workload.arrival_cv, row.replicas),
                )
                chunk = f"chunk {row.chunk_tokens}" if row.chunk_tokens else "no chunk"
                label = (
                    f"#{index} {body['model']} {body['workload']['arrival_rate_rps']} rps → {row.replicas} × {row.gpu} "
                    f"tp{row.tp} {row.weights_precision} b{row.batch_limit} {chunk}"
                )
                out.append(
                    (
                        index,
                        label,
                        option.group.step_model,
                        per_replica,
                        option_serving(option),
                        option.group.kv_capacity_tokens,
                        row.replicas,
                    )
                )
        engine.dispose()
    return out


def run(questions: tuple[dict[str, Any], ...] = CORPUS, *, requests: int = REQUESTS, seed: int = 0) -> list[CorpusPoint]:
    from planner.queueing import predict
    from planner.simulator import simulate

    points = []
    for index, label, sm, workload, serving, kv, _ in _deployments(questions):
        p = predict(sm, workload, serving, kv_capacity_tokens=kv)
        sim = simulate(sm, workload, serving, kv_capacity_tokens=kv, requests=requests, seed=seed)
        point = CorpusPoint(
            index=index,
            label=label,
            rho=p.utilisation,
            rate_rps=workload.arrival_rate_rps,
            analytic={m: (getattr(p, m).p99_s if getattr(p, m) is not None else None) for m in METRICS},
            simulated={
                m: (getattr(sim, f"{m}_s").p99, getattr(sim, f"{m}_s").p99_ci_low, getattr(sim, f"{m}_s").p99_ci_high)
                for m in METRICS
            },
            reliable=p.reliable,
            fidelity_note=p.fidelity_note,
            dispersion=p.queueing.occupancy_dispersion if p.queueing else math.nan,
            wait_probability=p.queueing.wait_probability if p.queueing else math.nan,
            chunk_tokens=serving.chunk_tokens,
        )
        points.append(point)
        errs = " ".join(f"{m}={_fmt_err(point.error(m))}" for m in METRICS)
        print(
            f"{label:75s} ρ={point.rho:.2f} {errs} D {point.dispersion:.2f} Pw {point.wait_probability:.4f} "
            f"{'RELIABLE' if point.reliable else 'unrel'}",
            flush=True,
        )
    return points


def _fmt_err(e: float | None) -> str:
    return "—" if e is None else f"{e * 100:+.1f} %"


def _fmt_ms(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x * 1e3:,.1f}"


def report(points: list[CorpusPoint], command: str) -> list[str]:
    """The corpus section of docs/queueing-fidelity.md."""
    n = len(points)
    within = sum(p.within for p in points)
    flagged = [p for p in points if p.reliable]
    both = sum(p.within and p.reliable for p in points)
    dishonest = [p for p in flagged if not p.within]
    lines = [
        "## The plans the planner makes (corpus, issue 14 §4)",
        "",
        (
            f"`{command}`: {n} plan questions of `bench/plan_corpus.py` (`CORPUS`), each planned with verify false and "
            "speculation off; the plan's largest row is simulated as one replica at its share of the traffic "
            f"({REQUESTS:,} requests) and compared with `predict` on the same deployment."
        ),
        "",
        "| plans | within 10 % (every p99) | flagged reliable | within 10 % and reliable | reliable but outside 10 % |",
        "|---|---|---|---|---|",
        f"| {n} | {within} ({within / n:.0%}) | {len(flagged)} ({len(flagged) / n:.0%}) | {both} ({both / n:.0%}) | {len(dishonest)} |",
        "",
        "The reliable region was set looking at the even-numbered questions; the odd-numbered ones are the held-out half:",
        "",
        "| half | plans | within 10 % (every p99) | flagged reliable | within 10 % and reliable | reliable but outside 10 % |",
        "|---|---|---|---|---|---|",
        *(
            f"| {name} | {len(half)} | {sum(p.within for p in half)} | {sum(p.reliable for p in half)} | "
            f"{sum(p.within and p.reliable for p in half)} | {sum(p.reliable and not p.within for p in half)} |"
            for name, half in (
                ("even (looked at)", [p for p in points if p.index % 2 == 0]),
                ("odd (held out)", [p for p in points if p.index % 2 == 1]),
            )
        ),
        "",
        "| question → plan | ρ | TTFT p99 analytic / sim (ms) | err | TPOT p99 | err | E2E p99 (ms) | err | D | reliable |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        cells = []
        for m in METRICS:
            cells += [f"{_fmt_ms(p.analytic[m])} / {_fmt_ms(p.simulated[m][0])}", _fmt_err(p.error(m))]
        lines.append(
            f"| {p.label} | {p.rho:.2f} | " + " | ".join(cells) + f" | {p.dispersion:.2f} | {'yes' if p.reliable else 'no'} |"
        )
    lines.append("")
    return lines


def plan_cpu() -> dict[str, Any]:
    """CPU ms of cold in-process plans (verify false) of bench/plan_latency.py's 24 requests, the
    smaller of two per request, and their p50 and mean: what the queueing model costs the search.
    Run it from two checkouts alternately to compare models on one machine load."""
    import statistics

    from api.inputs import planning_inputs
    from api.schemas.plans import PlanRequest
    from api.settings import Settings
    from bench.plan_latency import REQUESTS, _clear_caches
    from catalog.db import make_engine, make_session_factory
    from catalog.migrate import upgrade
    from catalog.repository import Catalog
    from planner import planning
    from planner.errors import HeadroomError

    logging.disable(logging.CRITICAL)
    times = []
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'headroom.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            catalog.load_reference_catalog()
            session.commit()
            for body in REQUESTS:
                request = PlanRequest.model_validate({**body, "verify": False})
                inputs, _ = planning_inputs(request, catalog, default_provider=Settings().default_price_provider)
                planning_request = planning.PlanningRequest(
                    workload=request.traffic(),
                    slo=request.targets(),
                    constraints=request.constraints.to_constraints(),
                    verify=False,
                )
                best = math.inf
                for _ in range(2):
                    _clear_caches()
                    started = time.process_time()
                    try:
                        planning.plan_capacity(planning_request, inputs)
                    except HeadroomError:
                        pass  # an impossible request is timed like any other
                    best = min(best, (time.process_time() - started) * 1e3)
                times.append(best)
        engine.dispose()
    return {"p50_ms": statistics.median(times), "mean_ms": statistics.fmean(times)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every 4th question")
    parser.add_argument("--requests", type=int, default=REQUESTS)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--render", type=Path, help="print the table from points saved by --save")
    parser.add_argument("--plan-cpu", action="store_true", help="only time cold plans of bench/plan_latency.py's requests")
    args = parser.parse_args(argv)
    if args.plan_cpu:
        print(plan_cpu())
        return
    if args.render is not None:
        points, command = pickle.loads(args.render.read_bytes())
    else:
        started = time.perf_counter()
        questions = CORPUS[::4] if args.quick else CORPUS
        points = run(questions, requests=args.requests)
        command = ".venv/bin/python -m bench.plan_corpus" + (" --quick" if args.quick else "")
        print(f"{len(points)} plans in {time.perf_counter() - started:.0f} s")
        if args.save is not None:
            args.save.write_bytes(pickle.dumps((points, command)))
    print("\n".join(report(points, command)))


if __name__ == "__main__":
    # run as bench.plan_corpus, so --save pickles bench.plan_corpus.CorpusPoint (not __main__'s), which
    # bench/queueing_fidelity.py --corpus can load
    from bench.plan_corpus import main as _main

    _main()
