"""Charts of plans, fleet plans, what-if sweeps and capacity answers, drawn server-side with
matplotlib from the same JSON the API answers (docs/design.md, "Charts").

Each `*_chart` function takes plain dicts (a stored plan's request and response, a fleet plan, a
sweep, a capacity answer) and returns a `Chart`: the matplotlib Figure and the data series it
drew, by name, in the units its axes state. `render` writes the figure as SVG or PNG; the SVG
carries the series as JSON in `<metadata id="headroom-chart-data">`, and every drawn artist has a
`gid` (an `id` in the SVG), so a client or a test reads the numbers back without parsing paths.

No pyplot: figures are built with `matplotlib.figure.Figure` and the Agg canvas, so no global
figure registry, GUI backend or display is touched. SVG output is deterministic: ids come from a
fixed `svg.hashsalt`, text stays text (`svg.fonttype: none`) and no date is written. Nothing is
fetched over the network: the fonts are matplotlib's bundled DejaVu Sans.
"""

from __future__ import annotations

import functools
import io
import json
import math
import textwrap
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec
from xml.sax.saxutils import escape

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator, ScalarFormatter

from planner.errors import PlannerInputError
from planner.performance import decode_step
from planner.plan_result import STEP_MODEL_FIELDS
from planner.simulator import CI_LEVEL
from planner.step_model import Speculation, StepModel

Format = Literal["svg", "png"]
P = ParamSpec("P")
FORMATS: tuple[Format, ...] = ("svg", "png")
MEDIA_TYPES: dict[str, str] = {"svg": "image/svg+xml", "png": "image/png"}
#: Charts of a stored plan, by the name in GET /v1/plans/{plan_id}/charts/{name}.{format}.
PLAN_CHARTS: tuple[str, ...] = ("wall", "knee", "cost", "alternatives", "pools")
#: Colours of the pools chart, by pool role.
POOL_COLOURS: dict[str, str] = {"prefill": "tab:orange", "decode": "tab:blue", "mixed": "tab:green"}
#: PNG resolution: 100 dots per inch, so a 10 × 6 in figure is 1000 × 600 pixels.
DPI = 100
#: `svg.hashsalt` seeds the ids matplotlib gives clip paths and glyphs; fixed, the same plan draws the same bytes.
#: `text.parse_math` off: a `$` in a cost or a reason is a dollar, not the start of TeX.
RC: dict[str, Any] = {
    "svg.hashsalt": "headroom-charts",
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "text.parse_math": False,
}
METADATA_ID = "headroom-chart-data"
MS_PER_S = 1e3
#: The metrics of a latency wall, each in the unit its panel draws (TTFT and TPOT in ms, E2E in s).
WALL_METRICS: tuple[tuple[str, str, str], ...] = (
    ("ttft_ms", "Time to first token", "ms"),
    ("tpot_ms", "Time per output token", "ms"),
    ("e2e_s", "End-to-end latency", "s"),
)
#: rcParams are process-wide: figures are built and rendered one at a time, inside `RC`, so a
#: request thread never sees another's settings and no setting outlives its chart.
_RENDER_LOCK = threading.RLock()


class ChartDataMissingError(PlannerInputError):
    """A stored answer lacks the section a chart is drawn from (a batch job has no latency wall): 422."""


@dataclass(frozen=True, slots=True)
class Chart:
    """A figure and the series it drew (JSON-able, in the units of the figure's axes)."""

    figure: Figure
    series: dict[str, Any]


def render(chart: Chart, fmt: Format) -> bytes:
    """The chart as SVG (with its series in a `<metadata>` block) or PNG at `DPI`."""
    buffer = io.BytesIO()
    FigureCanvasAgg(chart.figure)
    with _styled():
        if fmt == "png":
            chart.figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
            return buffer.getvalue()
        chart.figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue().decode("utf-8")
    block = f'<metadata id="{METADATA_ID}">{escape(json.dumps(chart.series, sort_keys=True, allow_nan=False))}</metadata>'
    opening_end = svg.index(">", svg.index("<svg")) + 1  # just inside the root element
    return (svg[:opening_end] + "\n " + block + svg[opening_end:]).encode("utf-8")


@contextmanager
def _styled() -> Iterator[None]:
    """The lock and `RC`, for building a figure (text objects read rcParams when made) and rendering it."""
    with _RENDER_LOCK, matplotlib.rc_context(RC):  # type: ignore[arg-type]  # its stub wants the keys as Literals
        yield


def _with_style(draw: Callable[P, Chart]) -> Callable[P, Chart]:
    @functools.wraps(draw)
    def styled(*args: P.args, **kwargs: P.kwargs) -> Chart:
        with _styled():
            return draw(*args, **kwargs)

    return styled


def _missing(chart: str, section: str, why: str) -> ChartDataMissingError:
    return ChartDataMissingError(f"The {chart} chart needs {section}: {why}.", chart=chart, missing=section)


def _justification(response: dict[str, Any], chart: str) -> dict[str, Any]:
    justification = response.get("justification")
    if justification is None and (response.get("plan") or {}).get("topology") == "disaggregated":
        raise _missing(
            chart,
            "justification",
            "a disaggregated plan's pools have no one queue to draw it from (its `disaggregation` section justifies each "
            "pool; the pools chart draws them)",
        )
    if justification is None:
        kind = "a batch job's plan" if response.get("batch_job") is not None else "this plan"
        raise _missing(chart, "justification", f"{kind} carries none (batch jobs are sized by throughput, not a queue)")
    return dict(justification)


def _finite(values: Sequence[float | None]) -> list[float | None]:
    """JSON-safe series: NaN and infinities become null (an unstable point has no latency)."""
    return [None if v is None or not math.isfinite(v) else float(v) for v in values]


def _scaled(value: float, factor: float) -> float:
    """A stored figure in another unit (s → ms), rounded to 9 decimals: the plan's own digits, without
    the binary residue of the product (0.2151 × 1000 is 215.10000000000002, drawn and recorded as 215.1)."""
    return round(value * factor, 9)


def _nan(values: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


def _legend(ax: Axes, **kwargs: Any) -> None:
    ax.legend(fontsize=8, framealpha=0.9, **kwargs).set_gid("legend")


# --- latency wall ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WallData:
    """Latency against per-replica arrival rate, TTFT/TPOT in ms and E2E in s, and what to mark on it."""

    title: str
    percentile: float
    rate_rps: list[float]
    latency: dict[str, list[float | None]]  # by WALL_METRICS key
    slo: dict[str, float]  # by WALL_METRICS key, the request's targets
    plan_rate_rps: float | None
    max_rate_rps: float | None
    simulated: dict[str, Any] | None  # {"rate_rps", per metric {"value", "ci": [low, high] | None}}


@_with_style
def wall_chart(data: WallData) -> Chart:
    """Three panels sharing the rate axis: each metric's curve, its SLO line, the plan's operating
    point, the largest rate within every SLO (the headroom between them shaded) and the simulator's
    points; one legend, on the top panel, as every panel draws the same kinds of mark."""
    figure = Figure(figsize=(10, 9), layout="constrained")
    axes = figure.subplots(3, 1, sharex=True)
    figure.suptitle(data.title, fontsize=12)
    for ax, metric in zip(axes, WALL_METRICS, strict=True):
        _wall_panel(ax, data, *metric)
    _legend(axes[0], loc="upper left")
    axes[-1].set_xlabel("Arrival rate per replica, requests/s")
    series = {"percentile": data.percentile, "rate_rps": data.rate_rps, **{k: _finite(v) for k, v in data.latency.items()},
              "slo": data.slo, "plan_rate_rps": data.plan_rate_rps, "max_rate_rps": data.max_rate_rps,
              "simulated": data.simulated}  # fmt: skip
    return Chart(figure, series)


def _wall_panel(ax: Axes, data: WallData, key: str, label: str, unit: str) -> None:
    """One metric of the wall; the y range starts at 0 and clears the SLO line by 12 %."""
    values = [v for v in data.latency[key] if v is not None and math.isfinite(v)]
    ax.plot(data.rate_rps, _nan(data.latency[key]), "o-", color="tab:blue", label=f"p{data.percentile:g}, queueing model")[
        0
    ].set_gid(f"curve-{key}")
    if key in data.slo:
        ax.axhline(data.slo[key], color="tab:red", ls="--", label="SLO target").set_gid(f"slo-{key}")
        ax.annotate(f"SLO {data.slo[key]:g} {unit}", xy=(0.5, data.slo[key]), xycoords=("axes fraction", "data"), ha="center",
                    va="bottom", color="tab:red", fontsize=9, bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 1})  # fmt: skip
        values.append(data.slo[key])
    if data.plan_rate_rps is not None:
        ax.axvline(data.plan_rate_rps, color="tab:green", label=f"plan: {data.plan_rate_rps:.3g} req/s per replica").set_gid(
            f"plan-{key}"
        )
    if data.max_rate_rps is not None:
        ax.axvline(
            data.max_rate_rps, color="tab:purple", ls=":", label=f"most within every SLO: {data.max_rate_rps:.3g} req/s"
        ).set_gid(f"max-rate-{key}")
        if data.plan_rate_rps is not None and data.max_rate_rps > data.plan_rate_rps:
            headroom = data.max_rate_rps / data.plan_rate_rps - 1
            ax.axvspan(data.plan_rate_rps, data.max_rate_rps, color="tab:green", alpha=0.12, label=f"headroom: +{headroom:.1%}")
    simulated = (data.simulated or {}).get(key)
    if data.simulated is not None and simulated is not None and simulated["value"] is not None:
        ci = simulated["ci"]
        yerr = None if ci is None else [[simulated["value"] - ci[0]], [ci[1] - simulated["value"]]]
        ax.errorbar([data.simulated["rate_rps"]], [simulated["value"]], yerr=yerr, fmt="s", color="black", capsize=4,
                    label="simulator" + (f", {CI_LEVEL:.0%} CI of the p99" if ci is not None else ""))[0].set_gid(f"simulated-{key}")  # fmt: skip
        values.extend(ci or [simulated["value"]])
    ax.set_ylim(0, 1.12 * max(values, default=1.0))
    ax.set_ylabel(f"{label} (p{data.percentile:g}), {unit}")
    ax.grid(alpha=0.3)


def plan_wall(request: dict[str, Any], response: dict[str, Any]) -> WallData:
    """A plan's ρ–latency curve (justification.queueing, seconds) in the wall's units, with the
    simulator's percentiles and p99 confidence intervals where the plan was verified."""
    queueing = _justification(response, "wall").get("queueing") or {}
    if "rho_curve" not in queueing:
        raise _missing("wall", "justification.queueing", "the queueing model has no steady state at this plan's load")
    curve = queueing["rho_curve"]
    scale = {"ttft_ms": MS_PER_S, "tpot_ms": MS_PER_S, "e2e_s": 1.0}
    source = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "e2e_s": "e2e_s"}
    latency = {k: [None if p[source[k]] is None else _scaled(p[source[k]], scale[k]) for p in curve] for k in scale}
    slo = {
        k: _scaled(queueing["slo_lines_s"][source[k][:-2]], scale[k]) for k in scale if source[k][:-2] in queueing["slo_lines_s"]
    }
    marks = {p["at"]: p["arrival_rate_rps"] for p in curve if p.get("at")}
    plan = response["plan"]
    title = (
        f"Latency wall of {request.get('model', 'the model')} on {plan['gpu']} (tp {plan['tp']}, batch limit "
        f"{plan['batch_limit']}): p{queueing['percentile']:g} latency against load per replica"
    )
    return WallData(title, queueing["percentile"], [p["arrival_rate_rps"] for p in curve], latency, slo,
                    marks.get("plan"), marks.get("max_rps_at_slo"), _simulated(response.get("verification"), scale))  # fmt: skip


def _simulated(verification: dict[str, Any] | None, scale: dict[str, float]) -> dict[str, Any] | None:
    """The simulated replica's percentiles at its rate; the batch-means p99 intervals only when the
    SLO's percentile is the 99th (the intervals are of the p99)."""
    if verification is None:
        return None
    simulated = verification["simulated"]
    points: dict[str, Any] = {"rate_rps": verification["per_replica_rate_rps"]}
    for key, factor in scale.items():
        metric = key.split("_")[0]
        value = simulated[f"{metric}_s"]["at_percentile"]
        low, high = simulated["p99_ci_s"][metric] if simulated["percentile"] == 99 else (None, None)
        ci = None if low is None or high is None else [_scaled(low, factor), _scaled(high, factor)]
        points[key] = {"value": None if value is None else _scaled(value, factor), "ci": ci}
    return points


def capacity_wall(request: dict[str, Any], response: dict[str, Any]) -> WallData:
    """A capacity answer's per-replica curve up to μ (already ms/ms/s), the request's SLOs, and the
    simulator's steps (whole-deployment rates divided by the replicas) where it verified."""
    slo_request = request.get("slo") or {}
    percentile = float(slo_request.get("percentile", 99))
    curve = response["curve"]
    slo = {key: float(slo_request[key]) for key, _, _ in WALL_METRICS if slo_request.get(key) is not None}
    configuration = response["configuration"]
    title = (
        f"Latency wall of {request.get('model', 'the model')} on {configuration['replicas']} × {configuration['gpu']} "
        f"(tp {configuration['tp']}): p{percentile:g} latency against load per replica"
    )
    steps = response.get("verification") or []
    accepted = [s for s in steps if s.get("meets_slo")]
    simulated = None
    if accepted:
        last = accepted[-1]
        simulated = {"rate_rps": last["arrival_rate_rps"] / configuration["replicas"],
                     **{key: {"value": last[key], "ci": None} for key, _, _ in WALL_METRICS}}  # fmt: skip
    latency = {key: [p[key] for p in curve] for key, _, _ in WALL_METRICS}
    return WallData(title, percentile, [p["arrival_rate_rps"] for p in curve], latency, slo, None,
                    response["max_rps_per_replica"], simulated)  # fmt: skip


# --- throughput knee ---------------------------------------------------------------------------------------


def knee_series(response: dict[str, Any]) -> dict[str, Any]:
    """Decode throughput against batch size, recomputed with planner.performance.decode_step from the
    step-model coefficients the plan stores (justification.step_model) at the roofline's mean
    context: the same function that produced justification.roofline.decode, so the curve passes
    through its stored points. Batch sizes: a geometric grid to 1.5 × the larger of the KV limit
    and the batch limit, plus every batch the plan names."""
    justification = _justification(response, "knee")
    coefficients = justification["step_model"]
    draft = coefficients.get("speculation")
    model = StepModel(
        **{name: coefficients[name] for name in STEP_MODEL_FIELDS},
        speculation=None if draft is None else Speculation(**draft),  # a speculating plan's decode step is its verify step
    )
    memory, roofline = justification["memory"], justification["roofline"]
    context = roofline["decode"][0]["context_tokens"]
    top = max(2, math.ceil(1.5 * max(memory["concurrency_limit_by_kv"], memory["batch_limit"])))
    grid = {round(top ** (i / 63)) for i in range(64)} | {d["batch"] for d in roofline["decode"]}
    grid |= {memory["batch_limit"], memory["concurrency_limit_by_kv"]}
    batches = sorted(b for b in grid if 1 <= b <= top)
    steps = [decode_step(model, batch=b, context_tokens=context) for b in batches]
    return {
        "context_tokens": context,
        "batch": batches,
        "output_tokens_per_s": [s.output_tokens_per_s for s in steps],
        "per_user_tokens_per_s": [s.output_tokens_per_s_per_request for s in steps],
        "flops_per_byte": [s.flops_per_byte_with_attention for s in steps],
        "bound": [s.bound for s in steps],
        "break_even_flops_per_byte": roofline["break_even_flops_per_byte"],
        "kv_limit": memory["concurrency_limit_by_kv"],
        "batch_limit": memory["batch_limit"],
        "roofline": [
            {"at": d["at"], "batch": d["batch"], "output_tokens_per_s": d["output_tokens_per_s"]} for d in roofline["decode"]
        ],
    }


@_with_style
def knee_chart(request: dict[str, Any], response: dict[str, Any]) -> Chart:
    """Throughput per replica and per user against batch size (top) and the step's arithmetic
    intensity against the break-even intensity (bottom), memory- and compute-bound ranges shaded."""
    s = knee_series(response)
    plan = response["plan"]
    figure = Figure(figsize=(10, 8), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    figure.suptitle(
        f"Throughput knee of {request.get('model', 'the model')} on {plan['gpu']} (tp {plan['tp']}, "
        f"{plan['precision']['weights']}): decode at {s['context_tokens']} tokens of context",
        fontsize=12,
    )
    for ax in (top, bottom):
        _shade_bounds(ax, s["batch"], s["bound"])
        ax.axvline(s["kv_limit"], color="tab:red", ls="--", label=f"KV-cache limit: {s['kv_limit']} sequences").set_gid(
            "kv-limit"
        )
        ax.axvline(s["batch_limit"], color="tab:green", label=f"planned batch limit: {s['batch_limit']}").set_gid("batch-limit")
        if max(s["batch"]) > s["kv_limit"]:  # batches whose KV cache does not fit: drawn for the shape, never run
            ax.axvspan(s["kv_limit"], max(s["batch"]), facecolor="none", edgecolor="tab:red", hatch="//", alpha=0.35, lw=0,
                       label="beyond the KV cache: does not fit")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ScalarFormatter())  # 1, 4, 16, … rather than 2^n
        ax.grid(alpha=0.3, which="both")
    top.plot(s["batch"], s["output_tokens_per_s"], color="tab:blue", label="per replica (left axis)")[0].set_gid("per-replica")
    roofline = s["roofline"]
    top.plot([p["batch"] for p in roofline], [p["output_tokens_per_s"] for p in roofline], "ko",
             label="the plan's roofline points")[0].set_gid("roofline-points")  # fmt: skip
    top.set_ylabel("Output tokens/s per replica")
    right = top.twinx()
    right.plot(s["batch"], s["per_user_tokens_per_s"], color="tab:orange", label="per user (right axis)")[0].set_gid("per-user")
    right.set_ylabel("Output tokens/s per user")
    lines = top.get_legend_handles_labels(), right.get_legend_handles_labels()
    top.legend(lines[0][0] + lines[1][0], lines[0][1] + lines[1][1], fontsize=8, loc="center left").set_gid("legend")
    bottom.plot(s["batch"], s["flops_per_byte"], color="tab:gray", label="decode step intensity")[0].set_gid("intensity")
    bottom.axhline(s["break_even_flops_per_byte"], color="black", ls=":",
                   label=f"break-even: {s['break_even_flops_per_byte']:.0f} FLOP/byte").set_gid("break-even")  # fmt: skip
    bottom.set_ylabel("Arithmetic intensity, FLOP/byte")
    bottom.set_xlabel("Batch size (sequences decoding together), log scale")
    mine = [h for h in bottom.get_lines() if h.get_gid() in ("intensity", "break-even")]
    bottom.legend(mine, [h.get_label() for h in mine], fontsize=8, loc="center right").set_gid("legend-intensity")
    return Chart(figure, s)


def _shade_bounds(ax: Axes, batches: list[int], bounds: list[str]) -> None:
    """Memory-bound batch ranges blue, compute-bound orange, each range from one batch to the next."""
    colors = {"memory": "tab:blue", "compute": "tab:orange"}
    labelled: set[str] = set()
    for i, bound in enumerate(bounds):
        right = batches[i + 1] if i + 1 < len(batches) else batches[i]
        label = None if bound in labelled else f"{bound}-bound"
        labelled.add(bound)
        ax.axvspan(batches[i], right, color=colors.get(bound, "tab:gray"), alpha=0.08, lw=0, label=label)


# --- cost against demand ---------------------------------------------------------------------------------


def cost_series(request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The plan's configuration grown with demand, replicas = max(1, ⌈λ / μ⌉) at the plan's cost per
    replica (μ: the queueing section's largest per-replica rate within every SLO), and the
    sensitivity section's levels: each re-planned and its `same_configuration`. The staircase is
    drawn for a single configuration priced per GPU only; a mixed fleet or a plan in whole
    instances has no one price per replica, so only its sensitivity points are drawn."""
    justification = _justification(response, "cost")
    sensitivity = justification["sensitivity"]
    plan, cost = response["plan"], response["cost"]
    rate = float(request["workload"]["arrival_rate_rps"])
    levels = [{"traffic_factor": t["traffic_factor"], "arrival_rate_rps": t["arrival_rate_rps"],
               "cost_usd_per_hour": t["cost_usd_per_hour"], "gpu": t["gpu"], "replicas": t["replicas"],
               "same_configuration_usd_per_hour": (t.get("same_configuration") or {}).get("cost_usd_per_hour")}
              for t in sensitivity["traffic"]]  # fmt: skip
    series: dict[str, Any] = {"arrival_rate_rps": rate, "cost_usd_per_hour": cost["usd_per_hour"], "replicas": plan["replicas"],
                              "max_arrival_rate_rps_within_slo": sensitivity["max_arrival_rate_rps_within_slo"],
                              "levels": levels, "staircase": None}  # fmt: skip
    queueing = justification.get("queueing") or {}
    mu = next((p["arrival_rate_rps"] for p in queueing.get("rho_curve", []) if p.get("at") == "max_rps_at_slo"), None)
    if plan.get("fleet") is None and plan.get("instances") is None and mu:
        per_replica = cost["usd_per_hour"] / plan["replicas"]
        top = 1.15 * max([rate * 1.6, *(lv["arrival_rate_rps"] for lv in levels)])
        steps = range(1, max(1, math.ceil(top / mu)) + 1)
        series["staircase"] = {"per_replica_rps": mu, "usd_per_hour_per_replica": per_replica,
                               "demand_rps": [0.0, *(n * mu for n in steps)],
                               "replicas": [1, *steps], "cost_usd_per_hour": [per_replica, *(n * per_replica for n in steps)]}  # fmt: skip
    return series


@_with_style
def cost_chart(request: dict[str, Any], response: dict[str, Any]) -> Chart:
    """Cost per hour against demand: the configuration's staircase (replicas on the right axis),
    the plan, and the re-planned +10/25/50 % levels beside the same configuration grown."""
    s = cost_series(request, response)
    figure = Figure(figsize=(10, 6), layout="constrained")
    ax = figure.subplots()
    plan = response["plan"]
    figure.suptitle(f"Cost against demand: {plan['gpu']} × {plan['replicas']} now, and what more traffic costs", fontsize=12)
    stair = s["staircase"]
    if stair is not None:
        ax.step(stair["demand_rps"], stair["cost_usd_per_hour"], where="pre", color="tab:blue",
                label=f"this configuration: demand / {stair['per_replica_rps']:.3g} req/s per replica, rounded up")[0].set_gid("staircase")  # fmt: skip
        per = stair["usd_per_hour_per_replica"]
        ax.secondary_yaxis("right", functions=(lambda c: c / per, lambda r: r * per)).set_ylabel("Replicas (this configuration)")
    ax.plot([s["arrival_rate_rps"]], [s["cost_usd_per_hour"]], "*", ms=16, color="tab:green",
            label=f"the plan: {s['arrival_rate_rps']:g} req/s, ${s['cost_usd_per_hour']:.2f}/h")[0].set_gid("plan")  # fmt: skip
    ax.axvline(s["max_arrival_rate_rps_within_slo"], color="tab:purple", ls=":",
               label=f"most the plan serves within SLO: {s['max_arrival_rate_rps_within_slo']:.3g} req/s").set_gid("max-rate")  # fmt: skip
    levels = [lv for lv in s["levels"] if lv["cost_usd_per_hour"] is not None]
    ax.plot([lv["arrival_rate_rps"] for lv in levels], [lv["cost_usd_per_hour"] for lv in levels], "^", ms=9,
            color="tab:orange", label="re-planned at +10/25/50 % traffic")[0].set_gid("replanned")  # fmt: skip
    same = [lv for lv in s["levels"] if lv["same_configuration_usd_per_hour"] is not None]
    ax.plot([lv["arrival_rate_rps"] for lv in same], [lv["same_configuration_usd_per_hour"] for lv in same], "o",
            mfc="none", color="tab:blue", ms=9, label="same configuration grown")[0].set_gid("same-configuration")  # fmt: skip
    for i, lv in enumerate(levels):  # below and above in turn: neighbouring levels sit close
        ax.annotate(f"+{lv['traffic_factor'] - 1:.0%}: {lv['gpu']} × {lv['replicas']}", (lv["arrival_rate_rps"], lv["cost_usd_per_hour"]),
                    textcoords="offset points", xytext=(12, -22 if i % 2 == 0 else 22), fontsize=8,
                    arrowprops={"arrowstyle": "-", "color": "tab:orange", "lw": 0.6})  # fmt: skip
    ax.set_xlabel("Demand, requests/s")
    ax.set_ylabel("Cost, USD per hour (on demand)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend(ax, loc="upper left")
    return Chart(figure, s)


# --- alternatives ------------------------------------------------------------------------------------------


@_with_style
def alternatives_chart(request: dict[str, Any], response: dict[str, Any]) -> Chart:
    """Cost per hour of the plan and of the best plan on every other GPU type or precision, with the
    reason each lost: an exact cost as a solid bar, a proven lower bound hatched, none when it cannot serve."""
    alternatives = _justification(response, "alternatives")["alternatives"]
    plan = response["plan"]
    rows = [{"label": f"this plan: {plan['gpu']} × {plan['gpus_total']}, {plan['precision']['weights']}/{plan['precision']['kv_cache']}",
             "kind": "plan", "cost_usd_per_hour": response["cost"]["usd_per_hour"], "exact": True, "reason": "the cheapest"}]  # fmt: skip
    for alt in alternatives:
        cost = alt["cost_usd_per_hour"] if alt["cost_usd_per_hour"] is not None else alt.get("cost_at_least_usd_per_hour")
        rows.append({"label": f"{alt['kind']} {alt['name']}", "kind": alt["kind"], "cost_usd_per_hour": cost,
                     "exact": alt["cost_usd_per_hour"] is not None, "reason": alt["reason"]})  # fmt: skip
    return _alternatives_figure(f"Alternatives to the plan for {request.get('model', 'the model')}: cost and why each lost", rows)


def _alternatives_figure(title: str, rows: list[dict[str, Any]]) -> Chart:
    """Bars of each row's cost (the plan's first, green), with the reason each lost beside it."""
    figure = Figure(figsize=(12, 1.6 + 0.55 * len(rows)), layout="constrained")
    bars, reasons = figure.subplots(1, 2, width_ratios=[3, 2], sharey=True)
    figure.suptitle(title, fontsize=12)
    ys = list(range(len(rows)))[::-1]
    for y, row in zip(ys, rows, strict=True):
        cost = row["cost_usd_per_hour"]
        if cost is None:
            bars.text(0, y, " cannot serve", va="center", fontsize=8, color="tab:red")
            continue
        style = {"color": "tab:green"} if row["kind"] == "plan" else (
            {"color": "tab:gray"} if row["exact"] else {"color": "white", "edgecolor": "tab:gray", "hatch": "//"})  # fmt: skip
        bars.barh(y, cost, **style).patches[0].set_gid(f"bar-{len(rows) - 1 - y}")
        bars.text(cost, y, f" ${cost:.2f}/h" if row["exact"] else f" ≥ ${cost:.2f}/h", va="center", fontsize=8)
    proxies = [Patch(color="tab:green", label="this plan"), Patch(color="tab:gray", label="exact cost"),
               Patch(facecolor="white", edgecolor="tab:gray", hatch="//", label="at least (a proven lower bound)")]  # fmt: skip
    bars.set_yticks(ys, [r["label"] for r in rows], fontsize=8)
    bars.set_xlabel("Cost, USD per hour (on demand)")
    bars.set_xlim(0, 1.3 * max([r["cost_usd_per_hour"] or 0 for r in rows] + [1e-9]))
    bars.grid(alpha=0.3, axis="x")
    bars.legend(handles=proxies, fontsize=8, loc="upper right").set_gid("legend")
    reasons.axis("off")
    reasons.set_title("Why it lost", fontsize=10, loc="left")
    for y, row in zip(ys, rows, strict=True):
        reasons.text(0, y, textwrap.fill(row["reason"], 70), va="center", fontsize=7.5, transform=reasons.get_yaxis_transform())
    series = {"rows": [{k: r[k] for k in ("label", "kind", "cost_usd_per_hour", "exact", "reason")} for r in rows]}
    return Chart(figure, series)


# --- pools ------------------------------------------------------------------------------------------------


def pool_rows(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's pools with their GPUs, cost per hour, ρ and binding constraint: a disaggregated plan's
    prefill and decode pools (ρ, binding and cost from its `disaggregation` section), an aggregated
    plan's mixed pool per configuration (ρ its target ρ, cost its row's; no binding recorded per row)."""
    plan = response["plan"]
    pools = plan.get("pools") or []
    if plan.get("topology") == "disaggregated":
        why = {p["role"]: p for p in (response.get("disaggregation") or {}).get("pools") or []}
        return [
            {**_pool_fields(p), "cost_usd_per_hour": why.get(p["role"], {}).get("cost_usd_per_hour"),
             "rho": why.get(p["role"], {}).get("rho"), "binding": why.get(p["role"], {}).get("binding")}
            for p in pools
        ]  # fmt: skip
    rows = plan.get("fleet") or [{**plan, "cost_usd_per_hour": response["cost"]["usd_per_hour"]}]
    if not pools:  # a plan stored before pools were reported: its configurations are its mixed pools
        pools = [{"role": "mixed", **{k: r[k] for k in ("gpu", "tp", "replicas", "batch_limit", "chunk_tokens", "precision")}}
                 for r in rows]  # fmt: skip
    return [
        {**_pool_fields(p), "cost_usd_per_hour": r["cost_usd_per_hour"], "rho": r["target_rho"], "binding": None}
        for p, r in zip(pools, rows, strict=True)
    ]


def _pool_fields(pool: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": pool["role"], "gpu": pool["gpu"], "tp": pool["tp"], "replicas": pool["replicas"],
        "gpus": pool["tp"] * pool.get("pp", 1) * pool["replicas"], "batch_limit": pool["batch_limit"],
        "chunk_tokens": pool["chunk_tokens"], "precision": f"{pool['precision']['weights']}/{pool['precision']['kv_cache']}",
    }  # fmt: skip


@_with_style
def pools_chart(request: dict[str, Any], response: dict[str, Any]) -> Chart:
    """Each pool of the plan as a bar of its GPUs (left) and of its cost per hour (right), coloured by
    role, labelled with its configuration, ρ and what set its size."""
    rows = pool_rows(response)
    plan = response["plan"]
    figure = Figure(figsize=(12, 1.8 + 0.7 * len(rows)), layout="constrained")
    gpus_ax, cost_ax = figure.subplots(1, 2, sharey=True)
    topology = plan.get("topology", "aggregated")
    figure.suptitle(
        f"Pools of the {topology} plan for {request.get('model', 'the model')}: GPUs and cost per pool "
        f"(${response['cost']['usd_per_hour']:.2f}/h in all)",
        fontsize=12,
    )
    ys = list(range(len(rows)))[::-1]
    labels = []
    for index, (y, row) in enumerate(zip(ys, rows, strict=True)):
        colour = POOL_COLOURS.get(row["role"], "tab:gray")
        gpus_ax.barh(y, row["gpus"], color=colour).patches[0].set_gid(f"gpus-{index}")
        rho = "" if row["rho"] is None else f", ρ {row['rho']:.2f}"
        binding = "" if row["binding"] is None else f" ({row['binding']})"
        gpus_ax.text(row["gpus"], y, f" {row['replicas']} × tp {row['tp']}{rho}{binding}", va="center", fontsize=8)
        if row["cost_usd_per_hour"] is not None:
            cost_ax.barh(y, row["cost_usd_per_hour"], color=colour).patches[0].set_gid(f"cost-{index}")
            cost_ax.text(row["cost_usd_per_hour"], y, f" ${row['cost_usd_per_hour']:.2f}/h", va="center", fontsize=8)
        limit = f"batch {row['batch_limit']}" if row["batch_limit"] is not None else f"{row['chunk_tokens']} tokens/step"
        labels.append(f"{row['role']}: {row['gpu']}, {row['precision']}, {limit}")
    gpus_ax.set_yticks(ys, labels, fontsize=8)
    gpus_ax.set_xlabel("GPUs (replicas × tp)")
    gpus_ax.set_xlim(0, 1.6 * max([r["gpus"] for r in rows] + [1]))
    cost_ax.set_xlabel("Cost, USD per hour (on demand)")
    cost_ax.set_xlim(0, 1.35 * max([r["cost_usd_per_hour"] or 0 for r in rows] + [1e-9]))
    for ax in (gpus_ax, cost_ax):
        ax.grid(alpha=0.3, axis="x")
    roles = list(dict.fromkeys(r["role"] for r in rows))
    gpus_ax.legend(handles=[Patch(color=POOL_COLOURS.get(r, "tab:gray"), label=r) for r in roles], fontsize=8,
                   loc="lower right").set_gid("legend")  # fmt: skip
    return Chart(figure, {"topology": topology, "pools": rows})


# --- class plans -------------------------------------------------------------------------------------------


@_with_style
def class_alternatives_chart(request: dict[str, Any], response: dict[str, Any]) -> Chart:
    """A class plan's arrangements compared: the chosen one's cost (green) and every other's, with the
    reason it lost or could not be priced (not comparable, infeasible)."""
    arrangement = response["arrangement"]
    chosen = next(c for c in arrangement["compared"] if c["name"] == arrangement["chosen"])
    rows = [{"label": f"chosen: {chosen['name']}", "kind": "plan", "cost_usd_per_hour": chosen["cost_usd_per_hour"],
             "exact": True, "reason": chosen["reason"]}]  # fmt: skip
    rows += [{"label": c["name"], "kind": "arrangement", "cost_usd_per_hour": c["cost_usd_per_hour"], "exact": True,
              "reason": c["reason"]} for c in arrangement["compared"] if c["name"] != chosen["name"]]  # fmt: skip
    title = f"Arrangements compared for the classes of {request.get('model', 'the model')}: cost and why each lost"
    return _alternatives_figure(title, rows)


#: Colours of a class plan's classes, in the order the plan lists them (matplotlib's tab10).
CLASS_COLOURS: tuple[str, ...] = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
                                  "tab:pink", "tab:gray")  # fmt: skip


@_with_style
def class_pools_chart(request: dict[str, Any], response: dict[str, Any]) -> Chart:
    """A class plan's pools as bars of their GPUs (left) and cost per hour (right), each labelled with its
    configuration, scheduling, utilisation and the classes it serves."""
    rows = [
        {"pool": p["name"], "classes": list(p["classes"]), "scheduling": p["scheduling"], "gpu": p["gpu"], "tp": p["tp"],
         "replicas": p["replicas"], "gpus": p["replicas"] * p["tp"], "cost_usd_per_hour": p["cost_usd_per_hour"],
         "utilisation": p["utilisation"], "precision": f"{p['precision']['weights']}/{p['precision']['kv_cache']}",
         "batch_limit": p["batch_limit"]}
        for p in response["pools"]
    ]  # fmt: skip
    figure = Figure(figsize=(12, 1.8 + 0.7 * len(rows)), layout="constrained")
    gpus_ax, cost_ax = figure.subplots(1, 2, sharey=True)
    figure.suptitle(
        f"Pools of the {response['arrangement']['chosen']} class plan for {request.get('model', 'the model')}: GPUs and cost "
        f"per pool (${response['cost_usd_per_hour']:.2f}/h in all)",
        fontsize=12,
    )
    ys = list(range(len(rows)))[::-1]
    for index, (y, row) in enumerate(zip(ys, rows, strict=True)):
        colour = "tab:purple" if row["scheduling"] == "priority" else "tab:green"
        gpus_ax.barh(y, row["gpus"], color=colour).patches[0].set_gid(f"gpus-{index}")
        gpus_ax.text(row["gpus"], y, f" {row['replicas']} × tp {row['tp']}, ρ {row['utilisation']:.2f}: "
                     f"{', '.join(row['classes'])}", va="center", fontsize=8)  # fmt: skip
        cost_ax.barh(y, row["cost_usd_per_hour"], color=colour).patches[0].set_gid(f"cost-{index}")
        cost_ax.text(row["cost_usd_per_hour"], y, f" ${row['cost_usd_per_hour']:.2f}/h", va="center", fontsize=8)
    labels = [f"{r['pool']}: {r['gpu']}, {r['precision']}, batch {r['batch_limit']}" for r in rows]
    gpus_ax.set_yticks(ys, labels, fontsize=8)
    gpus_ax.set_xlabel("GPUs (replicas × tp)")
    gpus_ax.set_xlim(0, 2.2 * max([r["gpus"] for r in rows] + [1]))
    cost_ax.set_xlabel("Cost, USD per hour (on demand)")
    cost_ax.set_xlim(0, 1.35 * max([r["cost_usd_per_hour"] for r in rows] + [1e-9]))
    for ax in (gpus_ax, cost_ax):
        ax.grid(alpha=0.3, axis="x")
    kinds = list(dict.fromkeys(r["scheduling"] for r in rows))
    gpus_ax.legend(handles=[Patch(color="tab:purple" if k == "priority" else "tab:green", label=k) for k in kinds],
                   fontsize=8, loc="lower right").set_gid("legend")  # fmt: skip
    return Chart(figure, {"arrangement": response["arrangement"]["chosen"], "pools": rows})


@_with_style
def class_wall_chart(request: dict[str, Any], response: dict[str, Any], wall: dict[str, Any]) -> Chart:
    """A class plan's latency wall: each class's TTFT, TPOT and end-to-end latency at its percentile
    on the plan's pools against the classes' summed arrival rate (every class scaled alike; `wall`
    from api/classes_replan.py `class_wall_series`), each class's targets as dashed lines of its
    colour, the plan's rate marked. A class not modelled (deferred) has no curve."""
    figure = Figure(figsize=(10, 9), layout="constrained")
    axes = figure.subplots(3, 1, sharex=True)
    figure.suptitle(
        f"Latency wall of the {response['arrangement']['chosen']} class plan for {request.get('model', 'the model')}: "
        "each class against the classes' load (all scaled alike)",
        fontsize=12,
    )
    rates = wall["rate_rps"]
    for ax, (key, label, unit) in zip(axes, WALL_METRICS, strict=True):
        values: list[float] = []
        for index, k in enumerate(wall["classes"]):
            colour = CLASS_COLOURS[index % len(CLASS_COLOURS)]
            points = k[key]
            values += [v for v in points if v is not None]
            ax.plot(rates, _nan(points), "o-", ms=3, color=colour, label=f"{k['name']} (p{k['percentile']:g}, {k['pool']})")[
                0
            ].set_gid(f"curve-{key}-{k['name']}")
            target = k["slo"].get(key)
            if target is not None:
                ax.axhline(target, color=colour, ls="--", label=f"{k['name']} target").set_gid(f"slo-{key}-{k['name']}")
                values.append(target)
        ax.axvline(wall["plan_rate_rps"], color="black", ls=":", label=f"plan: {wall['plan_rate_rps']:.3g} req/s").set_gid(
            f"plan-{key}"
        )
        ax.set_ylim(0, 1.12 * max(values, default=1.0))
        ax.set_ylabel(f"{label}, {unit}")
        ax.grid(alpha=0.3)
    _legend(axes[0], loc="upper left")
    axes[-1].set_xlabel("Arrival rate of every class together, requests/s")
    series = {"rate_rps": rates, "load_factor": wall["load_factor"], "plan_rate_rps": wall["plan_rate_rps"],
              "classes": [{**k, **{m: _finite(k[m]) for m, _, _ in WALL_METRICS}} for k in wall["classes"]]}  # fmt: skip
    return Chart(figure, series)


# --- fleet plan: the day ------------------------------------------------------------------------------------


@_with_style
def fleet_day_chart(response: dict[str, Any]) -> Chart:
    """GPUs held in each period, stacked by GPU type and how they are bought (reserved every
    period, on demand, spot), against each workload's demand (right axis). A workload served by
    separate prefill and decode pools is named above each period's bar with its xPyD ratio and
    both pools' GPUs (their GPUs are in the stack, as `gpus_held` counts them)."""
    periods, hours = response["periods"], float(response["period_hours"])
    reserved = response.get("reserved_gpus") or {}
    gpus = sorted({*reserved, *(g for p in periods for g in (*p["on_demand_gpus"], *p["spot_gpus"]))})
    workloads = list(dict.fromkeys(w for p in periods for w in p["demand_rps"]))
    starts = [float(p["start_hour"]) for p in periods]
    stacks: dict[str, list[int]] = {}
    for gpu in gpus:
        stacks[f"{gpu} reserved"] = [int(reserved.get(gpu, 0)) for _ in periods]
        stacks[f"{gpu} on demand"] = [int(p["on_demand_gpus"].get(gpu, 0)) for p in periods]
        stacks[f"{gpu} spot"] = [int(p["spot_gpus"].get(gpu, 0)) for p in periods]
    stacks = {k: v for k, v in stacks.items() if any(v)}
    figure = Figure(figsize=(11, 6), layout="constrained")
    ax = figure.subplots()
    figure.suptitle(
        f"Fleet over the day: GPUs by type, reserved and on demand, against demand (${response['cost']['usd_per_day']:.2f}/day)",
        fontsize=12,
    )
    colors = {gpu: f"C{i}" for i, gpu in enumerate(gpus)}
    hatches = {"reserved": "", "on demand": "//", "spot": ".."}
    base = [0] * len(periods)
    for name, counts in stacks.items():
        gpu, kind = name.split(" ", 1)
        ax.bar(starts, counts, width=hours, bottom=base, align="edge", color=colors[gpu], alpha=0.75, hatch=hatches[kind],
               edgecolor="white", label=f"{gpu}, {kind}", gid=f"gpus-{gpu}-{kind.replace(' ', '-')}")  # fmt: skip
        base = [b + c for b, c in zip(base, counts, strict=True)]
    pools = _fleet_pools(periods)
    arranged = _fleet_class_labels(periods)
    for i, start in enumerate(starts):
        lines = [f"{w} {drawn['ratio'][i]} ({drawn['prefill_gpus'][i]}+{drawn['decode_gpus'][i]} GPUs)"
                 for w, drawn in pools.items() if drawn["ratio"][i] is not None]  # fmt: skip
        lines += arranged[i]
        if lines:
            ax.annotate("\n".join(lines), (start + hours / 2, base[i]), textcoords="offset points", xytext=(0, 3), ha="center",
                        va="bottom", fontsize=7, gid=f"pools-{i}")  # fmt: skip
    ax.set_xlabel("Hour of the day")
    ax.set_ylabel("GPUs held")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(starts[0], starts[-1] + hours)
    if pools or any(arranged):  # room above the tallest bar for its pools' labels
        ax.set_ylim(0, 1.25 * max(base + [1]))
    right = ax.twinx()
    demand = {w: [float(p["demand_rps"].get(w, 0.0)) for p in periods] for w in workloads}
    for i, (w, values) in enumerate(demand.items()):
        right.step([*starts, starts[-1] + hours], [*values, values[-1]], where="post", color="black", lw=1.5,
                   ls=("-", "--", ":", "-.")[i % 4], label=f"demand: {w}")[0].set_gid(f"demand-{w}")  # fmt: skip
    right.set_ylabel("Demand, requests/s")
    right.set_ylim(bottom=0)
    handles = ax.get_legend_handles_labels(), right.get_legend_handles_labels()
    ax.legend(handles[0][0] + handles[1][0], handles[0][1] + handles[1][1], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.08, 1)).set_gid("legend")  # fmt: skip
    ax.grid(alpha=0.3, axis="y")
    series = {"start_hour": starts, "period_hours": hours, "gpus": stacks, "demand_rps": demand, "held": base, "pools": pools,
              "class_pools": arranged}  # fmt: skip
    return Chart(figure, series)


def _fleet_class_labels(periods: list[dict[str, Any]]) -> list[list[str]]:
    """Per period, a label per workload with traffic classes: its arrangement and each pool's classes and GPUs
    ("assist segregated (chat 4, summarise 2 GPUs)")."""
    return [
        [
            f"{a['name']} {a['arrangement']} ("
            + ", ".join(f"{'+'.join(pool['classes']) or pool['name']} {pool['gpus']}" for pool in a["pools"])
            + " GPUs)"
            for a in p.get("class_pools", [])
        ]
        for p in periods
    ]


def _fleet_pools(periods: list[dict[str, Any]]) -> dict[str, dict[str, list[Any]]]:
    """Per workload served by pools in some period: its xPyD ratio and each pool's GPUs per period (None where it
    has no pools)."""
    names = list(dict.fromkeys(pair["name"] for p in periods for pair in p.get("pools", [])))
    out: dict[str, dict[str, list[Any]]] = {}
    for name in names:
        pairs = [next((pair for pair in p.get("pools", []) if pair["name"] == name), None) for p in periods]
        out[name] = {
            "ratio": [None if pair is None else pair["ratio"] for pair in pairs],
            "prefill_gpus": [None if pair is None else pair["prefill"]["gpus"] for pair in pairs],
            "decode_gpus": [None if pair is None else pair["decode"]["gpus"] for pair in pairs],
        }
    return out


# --- what-if sweep ----------------------------------------------------------------------------------------


def sweep_axis(points: list[dict[str, Any]]) -> tuple[str, str, str, Callable[[dict[str, Any]], float | None]]:
    """What the sweep varied fastest and what it costs: (x key, x title, y title, y of a point)."""
    if points and points[0]["arrival_rate_rps"] is None:  # a batch job: its deadline or its size
        x = "job_deadline_h" if len({p["job_deadline_h"] for p in points}) > 1 else "job_requests"
        title = {"job_deadline_h": "Job deadline, hours", "job_requests": "Job size, requests"}[x]
        return x, title, "Cost of the whole job, USD", lambda p: p["job_cost_usd"]
    if len({p["arrival_rate_rps"] for p in points}) > 1:
        return "arrival_rate_rps", "Arrival rate, requests/s", "Cost, USD per hour (on demand)", lambda p: p["cost_usd_per_hour"]
    metric = next((k for k in ("slo_ttft_ms", "slo_tpot_ms", "slo_e2e_s") if len({p[k] for p in points}) > 1), "arrival_rate_rps")
    unit = {"slo_ttft_ms": "TTFT SLO, ms", "slo_tpot_ms": "TPOT SLO, ms", "slo_e2e_s": "E2E SLO, s"}.get(
        metric, "Arrival rate, requests/s"
    )
    return metric, unit, "Cost, USD per hour (on demand)", lambda p: p["cost_usd_per_hour"]


@_with_style
def sweep_chart(response: dict[str, Any]) -> Chart:
    """Cost against the swept variable, one line per value of the other axes (GPU type planned
    alone, SLO values); a point no plan serves is marked on the axis with an ×."""
    points = response["points"]
    x_key, x_title, y_title, y_of = sweep_axis(points)
    others = [k for k in ("gpu_allowed", "slo_ttft_ms", "slo_tpot_ms", "slo_e2e_s", "job_deadline_h", "job_requests")
              if k != x_key and len({p[k] for p in points}) > 1]  # fmt: skip
    groups: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        name = ", ".join(f"{k.removeprefix('slo_').replace('_allowed', '')} {p[k]}" for k in others) or "cheapest plan"
        groups.setdefault(name, []).append(p)
    figure = Figure(figsize=(10, 6), layout="constrained")
    ax = figure.subplots()
    figure.suptitle(f"What-if: cost of {response['model']} against {x_title.split(',')[0].lower()}", fontsize=12)
    series: dict[str, Any] = {"x": x_key, "groups": {}}
    for i, (name, group) in enumerate(groups.items()):
        feasible = [p for p in group if p["feasible"] and y_of(p) is not None]
        xs, ys = [p[x_key] for p in feasible], _nan([y_of(p) for p in feasible])
        ax.plot(xs, ys, "o:", color=f"C{i}", label=name)[0].set_gid(f"sweep-{i}")  # dotted: the sweep has no points between
        previous = None
        for p in feasible:  # the configuration, where it changes along the line
            config = f"{p['gpu']} × {p['replicas']}"
            if config != previous:
                ax.annotate(config, (p[x_key], y_of(p)), textcoords="offset points", xytext=(6, -4), fontsize=7, color=f"C{i}",
                            va="top")  # fmt: skip  # below right: the line arrives from the lower left
            previous = config
        missing = [p[x_key] for p in group if p not in feasible]
        if missing:
            ax.plot(missing, [0] * len(missing), "x", color="tab:red", ms=10, clip_on=False, label=f"{name}: no plan")
        series["groups"][name] = {"x": xs, "y": ys, "no_plan": missing}
    ax.set_xlabel(x_title)
    ax.set_ylabel(y_title)
    ax.set_ylim(0, 1.15 * max([y for g in series["groups"].values() for y in g["y"]] + [1e-9]))
    ax.margins(x=0.1)  # room for the last point's label
    ax.grid(alpha=0.3)
    _legend(ax, loc="upper left")
    return Chart(figure, series)
