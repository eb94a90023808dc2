"""CSV for spreadsheets: one renderer, one content-negotiation rule and one OpenAPI declaration,
shared by every endpoint that can answer as a table (plans, what-if sweeps, deployment history).

How a route offers CSV (three lines):

    @router.get("/things/{id}", response_model=ThingRead, responses=csv_responses("One row per thing.", COLUMNS))
    def get_thing(id: str, as_csv: CsvDep, ...) -> ThingRead | Response:
        ...
        if as_csv:
            return csv_response(rows_to_csv(rows, COLUMNS), filename=f"thing-{id}.csv")
        return ThingRead(...)

- `rows_to_csv(rows, columns)`: flat dicts → RFC 4180 text (CRLF line ends, a header row, fields
  quoted only when they hold a comma, quote or line break). Numbers are rounded by their column's
  unit (api/rounding.py: cents, 0.1 ms, 6 significant figures) and written round-trip exact
  (`repr` of the rounded float), None is an empty cell, booleans are `true` / `false`. A text cell that a
  spreadsheet would run as a formula (starting with `=`, `+`, `-`, `@`, tab or CR) gets a leading
  `'` (OWASP's CSV-injection advice): names come from callers. A key not among the columns is a
  bug (ValueError); a missing key is an empty cell.
- `CsvDep`: True when the caller asked for CSV — `?format=csv`, or `Accept` preferring `text/csv`
  over JSON (higher q, or equal q and named first; `?format=json|csv` wins over `Accept`).
- `csv_response(text, filename=...)`: `text/csv; charset=utf-8` with
  `Content-Disposition: attachment; filename="..."`.
- `csv_responses(description, columns, status_code=200)`: the `responses=` entry that declares the
  `text/csv` content next to the JSON one in the OpenAPI document (columns listed in its description).
- `CsvResponse` and `csv_only_responses(description, columns)`: a route that answers only CSV
  (`GET /v1/plans/{plan_id}/csv`, operationId `get_plan_csv`). A generated client reads a route's
  first declared content type, JSON where a route offers both, so CSV needs a route of its own to
  come back as text; `?format=csv` keeps working on the JSON routes.
- `plan_csv_rows(request, response)` and `PLAN_CSV_COLUMNS`: one stored plan (its request and
  response JSON, as `catalog.plans.Plans.get` returns them) as rows; deployment history is these rows
  for each plan, newest first.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from typing import Annotated, Any

from fastapi import Depends, Query, Request, Response

from api.rounding import rounded
from planner.units import HOURS_PER_MONTH

CSV_MEDIA_TYPE = "text/csv"
CSV_CONTENT_TYPE = "text/csv; charset=utf-8"
JSON_MEDIA_TYPE = "application/json"
CURRENCY = "USD"
#: Leading characters a spreadsheet reads as the start of a formula (OWASP "CSV Injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class ResponseFormat(str, Enum):
    """How to answer: `json` (default) or `csv` (the same data as flat rows)."""

    json = "json"
    csv = "csv"


# --- rendering ------------------------------------------------------------------------------------


def csv_cell(value: Any) -> str:
    """One value as a CSV cell: exact numbers, empty for None/NaN, true/false, text guarded against formulas."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "" if not math.isfinite(value) else repr(value)
    if isinstance(value, Enum):
        value = value.value
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def rows_to_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """RFC 4180 CSV text: a header of `columns`, then one line per row (values by column name)."""
    known = set(columns)
    if len(known) != len(columns):
        raise ValueError(f"duplicate CSV column names in {list(columns)}")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
    writer.writerow(columns)
    for row in rows:
        extra = row.keys() - known
        if extra:
            raise ValueError(f"CSV row has keys that are not columns: {sorted(extra)}")
        writer.writerow([csv_cell(rounded(row.get(column), column)) for column in columns])
    return out.getvalue()


# --- content negotiation --------------------------------------------------------------------------


def _quality(accept: str, media_type: str) -> tuple[float, int]:
    """The q-value `accept` gives `media_type` by name (0 when not named) and where it is first named."""
    best, first = 0.0, len(accept)
    for position, part in enumerate(accept.split(",")):
        name, *params = (piece.strip() for piece in part.split(";"))
        if name.lower() != media_type:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        best, first = max(best, q if math.isfinite(q) else 0.0), min(first, position)
    return best, first


def prefers_csv(accept: str | None) -> bool:
    """Whether an Accept header asks for CSV ahead of JSON: `text/csv` named with q > 0 and a higher
    q than `application/json`, or the same q and named first. Wildcards never choose CSV: JSON is the default."""
    if not accept:
        return False
    (csv_q, csv_at), (json_q, json_at) = _quality(accept, CSV_MEDIA_TYPE), _quality(accept, JSON_MEDIA_TYPE)
    return csv_q > 0 and (csv_q > json_q or (csv_q == json_q and csv_at < json_at))


def wants_csv(
    request: Request,
    format: Annotated[
        ResponseFormat | None,
        Query(
            description="`csv` answers with flat CSV rows (as `Accept: text/csv` does); `json` forces JSON. Default: by `Accept`."
        ),
    ] = None,
) -> bool:
    """`?format=` when given, else the Accept header."""
    if format is not None:
        return format is ResponseFormat.csv
    return prefers_csv(request.headers.get("accept"))


#: True when the caller asked for CSV (`?format=csv` or `Accept: text/csv`).
CsvDep = Annotated[bool, Depends(wants_csv)]


def _safe_filename(filename: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in filename) or "export.csv"


def csv_response(text: str, *, filename: str, status_code: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """`text` as `text/csv; charset=utf-8`, offered for download as `filename` (ASCII-safe)."""
    return Response(
        content=text.encode("utf-8"),
        status_code=status_code,
        media_type=CSV_CONTENT_TYPE,
        headers={**(headers or {}), "Content-Disposition": f'attachment; filename="{_safe_filename(filename)}"'},
    )


def csv_responses(description: str, columns: Sequence[str], *, status_code: int = 200) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses=` entry declaring `text/csv` beside the route's JSON response model."""
    header = ",".join(columns)
    return {
        status_code: {
            "description": f"{description} As CSV (`?format=csv` or `Accept: text/csv`): columns {', '.join(columns)}.",
            "content": {CSV_MEDIA_TYPE: {"schema": {"type": "string"}, "example": header + "\r\n"}},
        }
    }


class CsvResponse(Response):
    """A response whose only body is CSV: a route with `response_class=CsvResponse` declares just
    `text/csv` for its success, so a generated client returns the text instead of parsing JSON."""

    media_type = CSV_MEDIA_TYPE


def csv_only_responses(description: str, columns: Sequence[str]) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entry of a CSV-only route (`response_class=CsvResponse`): 200 is `text/csv`
    with `columns` in its description and header row as the example, and nothing else."""
    return {
        200: {
            "description": f"{description} Columns: {', '.join(columns)}.",
            "content": {CSV_MEDIA_TYPE: {"schema": {"type": "string"}, "example": ",".join(columns) + "\r\n"}},
        }
    }


# --- plans as rows --------------------------------------------------------------------------------

#: One row per plan (per configuration of a mixed fleet). Stable: workbooks refer to these names.
PLAN_CSV_COLUMNS: tuple[str, ...] = (
    "plan_id",
    "deployment",
    "created_at",
    "catalog_version",
    "model",
    "arrival_rate_rps",
    "slo_percentile",
    "slo_ttft_ms",
    "slo_tpot_ms",
    "slo_e2e_s",
    "fleet_row",
    "fleet_rows",
    "gpu",
    "tp",
    "replicas",
    "gpus_total",
    "weights_precision",
    "kv_cache_precision",
    "batch_limit",
    "chunk_tokens",
    "target_rho",
    "offered_rps",
    "cost_usd_per_hour",
    "cost_usd_per_month",
    "cost_usd_per_million_output_tokens",
    "currency",
    "ttft_p99_ms",
    "tpot_p99_ms",
    "e2e_p99_s",
    "verified",
    "calibration_grade",
    "warning",
    "price_provider",
    "price_usd_per_gpu_hour",
    "price_source",
    "workload_kind",
    "job_requests",
    "job_deadline_h",
    "job_finish_h",
    "job_gpu_hours",
    "job_cost_usd",
    "job_usd_per_million_output_tokens",
    "job_throughput_rps_per_replica",
    "job_verified_throughput_rps",
    "speculative_method",
    "speculative_draft_tokens",
    "speculative_tokens_per_step",
    "prefix_cache_hit_rate",
    "prefix_cache_tokens",
    "prefix_cache_routing",
    "prefix_prefill_tokens_saved_fraction",
    "pool_role",
    "pool_rho",
    "pool_binding",
    "pp",
    "ep",
    "speculative_acceptance_rate",
    "speculative_draft_model",
)

PLAN_CSV_DESCRIPTION = (
    "One row per plan; a mixed fleet has one row per configuration (`fleet_row` 1..`fleet_rows`), each "
    "with that configuration's GPUs, replicas, offered rate and costs, so summing a plan's rows gives its "
    "totals; the plan's columns (id, model, SLOs, predicted p99s of its largest configuration) repeat. "
    "`calibration_grade` is the row's GPU's calibration grade (low, medium, high); `warning` the plan's warning "
    "about that GPU, if any (a low-graded calibration); `price_provider`, `price_usd_per_gpu_hour` and `price_source` the "
    "price the row was costed at. A batch job (`workload_kind` batch) has no arrival rate, SLOs or latencies; its `job_*` columns "
    "give its size, deadline, finish time, GPU-hours, cost per job and per million output tokens, and the throughput per "
    "replica it was sized with (analytic or simulated, the lower) next to the simulated one. `speculative_method`, "
    "`speculative_draft_tokens` and `speculative_tokens_per_step` give the plan's speculative decoding (draft method, k, "
    "E tokens per verify step), `speculative_acceptance_rate` the α it assumed (plan.speculative.acceptance_rate, its source in "
    "the plan's JSON) and `speculative_draft_model` the catalog model drafting (constraints.pin.draft_model) when the "
    "method is draft_model (empty for a draft head); empty without. `prefix_cache_hit_rate`, `prefix_cache_tokens`, `prefix_cache_routing` and "
    "`prefix_prefill_tokens_saved_fraction` give the plan's prefix cache (workload.prefix_reuse): the hit rate assumed, the KV "
    "tokens per replica it holds, the routing it needs and the prompt tokens it saves from prefill; empty without. "
    "A disaggregated plan (plan.topology disaggregated) has one row per pool: `pool_role` prefill or decode, the pool's GPU, "
    "tp, replicas, GPUs, precision, batch limit, chunk tokens and cost (its $/Mtok is the plan's × the pool's share of the "
    "cost, so a plan's rows sum to its totals), `pool_rho` and `target_rho` the pool's utilisation and `pool_binding` what "
    "set its size; the p99 columns are the plan's predicted figures from its disaggregation section. An aggregated plan's "
    "rows have `pool_role` mixed and empty `pool_rho` and `pool_binding`."
)


def plan_csv_rows(request: Mapping[str, Any], response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The CSV rows of one plan from its request and response JSON (`PLAN_CSV_COLUMNS`).

    A configuration's cost per million output tokens is its cost per hour over the output tokens it
    serves per hour: the plan's figure × (its share of cost) / (its share of traffic)."""
    plan, cost, predicted = response["plan"], response["cost"], response["predicted"] or {}
    slo = request.get("slo") or {}
    rate = float(request["workload"].get("arrival_rate_rps") or 0.0)  # a batch job has none
    shared = {
        "plan_id": response["id"],
        "deployment": response.get("name"),
        "created_at": response["provenance"]["created_at"],
        "catalog_version": response["provenance"]["catalog_version"],
        "model": request["model"],
        "arrival_rate_rps": rate,
        "slo_percentile": slo.get("percentile", 99.0),
        "slo_ttft_ms": slo.get("ttft_ms"),
        "slo_tpot_ms": slo.get("tpot_ms"),
        "slo_e2e_s": slo.get("e2e_s"),
        "currency": cost.get("currency", CURRENCY),
        "ttft_p99_ms": predicted.get("ttft_ms", {}).get("p99"),
        "tpot_p99_ms": predicted.get("tpot_ms", {}).get("p99"),
        "e2e_p99_s": predicted.get("e2e_s", {}).get("p99"),
        "verified": response.get("verification") is not None,
        **_batch_job_columns(response),
        **speculative_columns(plan.get("speculative"), _draft_model(request, plan.get("speculative"))),
        **prefix_columns(plan.get("prefix_caching")),
        "pool_role": "mixed",
        "pool_rho": None,
        "pool_binding": None,
    }
    grades = response.get("calibration_grades") or {}
    warnings = {w["gpu"]: w["message"] for w in response.get("warnings") or [] if w.get("code") == "low_confidence_plan"}

    prices = {p["gpu"]: p for p in cost.get("prices") or []}

    def confidence(gpu: str) -> dict[str, Any]:
        """The row's GPU's calibration grade and warning, and the price it was costed at (whose, how much, from where)."""
        price = prices.get(gpu) or {}
        return {
            "calibration_grade": grades.get(gpu),
            "warning": warnings.get(gpu),
            "price_provider": price.get("provider"),
            "price_usd_per_gpu_hour": price.get("price_usd_per_hour"),
            "price_source": price.get("source"),
        }

    if plan.get("topology") == "disaggregated":
        return _pool_rows(shared, plan, cost, response.get("disaggregation") or {}, confidence)
    fleet = plan.get("fleet")
    if response.get("batch_job"):  # no rate: the job's own columns say what it serves
        shared.update(arrival_rate_rps=None, slo_percentile=None, verified=response["batch_job"]["verification"] is not None)
    if not fleet:
        return [{
            **shared,
            "fleet_row": 1, "fleet_rows": 1,
            "gpu": plan["gpu"], "tp": plan["tp"], "replicas": plan["replicas"], "gpus_total": plan["gpus_total"],
            "pp": plan.get("pp", 1), "ep": plan.get("ep", 1),
            "weights_precision": plan["precision"]["weights"], "kv_cache_precision": plan["precision"]["kv_cache"],
            "batch_limit": plan["batch_limit"], "chunk_tokens": plan["chunk_tokens"], "target_rho": plan["target_rho"],
            "offered_rps": shared["arrival_rate_rps"],
            "cost_usd_per_hour": cost["usd_per_hour"],
            "cost_usd_per_month": cost["usd_per_month"],
            "cost_usd_per_million_output_tokens": cost["usd_per_million_output_tokens"],
            **confidence(plan["gpu"]),
        }]  # fmt: skip
    total_usd_per_hour = cost["usd_per_hour"]
    rows = []
    for index, row in enumerate(fleet, start=1):
        cost_share = row["cost_usd_per_hour"] / total_usd_per_hour if total_usd_per_hour > 0 else 0.0
        traffic_share = row["offered_rps"] / rate if rate > 0 else 0.0
        rows.append({
            **shared,
            "fleet_row": index, "fleet_rows": len(fleet),
            "gpu": row["gpu"], "tp": row["tp"], "replicas": row["replicas"], "gpus_total": row["gpus"],
            "pp": row.get("pp", 1), "ep": row.get("ep", 1),
            "weights_precision": row["precision"]["weights"], "kv_cache_precision": row["precision"]["kv_cache"],
            "batch_limit": row["batch_limit"], "chunk_tokens": row["chunk_tokens"], "target_rho": row["target_rho"],
            "offered_rps": row["offered_rps"],
            "cost_usd_per_hour": row["cost_usd_per_hour"],
            # the JSON row's own month figure (computed before rounding); × 730 only for plans stored without one
            "cost_usd_per_month": (row["cost_usd_per_month"] if row.get("cost_usd_per_month") is not None
                                   else row["cost_usd_per_hour"] * HOURS_PER_MONTH),
            "cost_usd_per_million_output_tokens": (
                cost["usd_per_million_output_tokens"] * cost_share / traffic_share if traffic_share > 0 else None
            ),  # plan $/Mtok × (cost share ÷ traffic share)
            **confidence(row["gpu"]),
        })  # fmt: skip
    return rows


def _pool_rows(
    shared: Mapping[str, Any],
    plan: Mapping[str, Any],
    cost: Mapping[str, Any],
    section: Mapping[str, Any],
    confidence: Callable[[str], dict[str, Any]],
) -> list[dict[str, Any]]:
    """One row per pool of a disaggregated plan: the pool's decisions, its cost, ρ and binding constraint
    (from the `disaggregation` section), and the plan's predicted p99s (its `predicted` is null)."""
    justified = {p["role"]: p for p in section.get("pools") or []}
    total_usd_per_hour = cost["usd_per_hour"]
    plan_columns = {
        **shared,
        "ttft_p99_ms": section.get("predicted_ttft_ms"),
        "tpot_p99_ms": section.get("predicted_tpot_ms"),
        "e2e_p99_s": section.get("predicted_e2e_s"),
        "verified": section.get("simulated_ttft_ms") is not None,
    }
    pools = plan.get("pools") or []
    rows = []
    for index, pool in enumerate(pools, start=1):
        why = justified.get(pool["role"]) or {}
        per_hour = why.get("cost_usd_per_hour")
        cost_share = per_hour / total_usd_per_hour if per_hour is not None and total_usd_per_hour > 0 else None
        rows.append({
            **plan_columns,
            "fleet_row": index, "fleet_rows": len(pools),
            "gpu": pool["gpu"], "tp": pool["tp"], "replicas": pool["replicas"], "pp": pool.get("pp", 1),
            "gpus_total": pool["tp"] * pool.get("pp", 1) * pool["replicas"],
            "weights_precision": pool["precision"]["weights"], "kv_cache_precision": pool["precision"]["kv_cache"],
            "batch_limit": pool["batch_limit"], "chunk_tokens": pool["chunk_tokens"], "target_rho": why.get("rho"),
            "offered_rps": shared["arrival_rate_rps"],  # every request passes through both pools
            "cost_usd_per_hour": per_hour,
            "cost_usd_per_month": None if per_hour is None else per_hour * HOURS_PER_MONTH,
            "cost_usd_per_million_output_tokens": (
                None if cost_share is None else cost["usd_per_million_output_tokens"] * cost_share
            ),  # plan $/Mtok × the pool's share of the cost: both pools serve every output token
            "pool_role": pool["role"], "pool_rho": why.get("rho"), "pool_binding": why.get("binding"),
            **confidence(pool["gpu"]),
        })  # fmt: skip
    return rows


def prefix_columns(prefix: Mapping[str, Any] | None) -> dict[str, Any]:
    """The plan's prefix cache (`plan.prefix_caching`); empty cells without (and for plans stored before it)."""
    if not prefix:
        return dict.fromkeys(
            ("prefix_cache_hit_rate", "prefix_cache_tokens", "prefix_cache_routing", "prefix_prefill_tokens_saved_fraction")
        )
    return {
        "prefix_cache_hit_rate": prefix["hit_rate"],
        "prefix_cache_tokens": prefix["cache_tokens"],
        "prefix_cache_routing": prefix["routing"],
        "prefix_prefill_tokens_saved_fraction": prefix["prefill_tokens_saved_fraction"],
    }


#: The speculative decoding's columns, empty for a plan without it.
SPECULATIVE_CSV_COLUMNS = (
    "speculative_method",
    "speculative_draft_tokens",
    "speculative_tokens_per_step",
    "speculative_acceptance_rate",
    "speculative_draft_model",
)


def _draft_model(request: Mapping[str, Any], speculative: Mapping[str, Any] | None) -> str | None:
    """The catalog slug drafting for the plan (its request's constraints.pin.draft_model, as api/deploy.py's
    `draft_model_request` reads it), when the plan drafts with a model rather than a head."""
    if not speculative or speculative.get("method") != "draft_model":
        return None
    slug: str | None = ((request.get("constraints") or {}).get("pin") or {}).get("draft_model")
    return slug


def speculative_columns(speculative: Mapping[str, Any] | None, draft_model: str | None) -> dict[str, Any]:
    """The plan's speculative decoding (`plan.speculative`) and the catalog model drafting, if one does; empty
    cells without (and for plans stored before it)."""
    if not speculative:
        return dict.fromkeys(SPECULATIVE_CSV_COLUMNS)
    return {
        "speculative_method": speculative["method"],
        "speculative_draft_tokens": speculative["draft_tokens"],
        "speculative_tokens_per_step": speculative["tokens_per_step"],
        "speculative_acceptance_rate": speculative.get("acceptance_rate"),  # stored plans before it: empty
        "speculative_draft_model": draft_model,
    }


def _batch_job_columns(response: Mapping[str, Any]) -> dict[str, Any]:
    """The `job_*` columns of a batch job's plan (its `batch_job` section); empty cells for traffic."""
    job = response.get("batch_job")
    if not job:
        return {column: None for column in PLAN_CSV_COLUMNS if column.startswith("job_")} | {"workload_kind": "interactive"}
    return {
        "workload_kind": "batch",
        "job_requests": job["requests"],
        "job_deadline_h": job["deadline_h"],
        "job_finish_h": job["finish_h"],
        "job_gpu_hours": job["gpu_hours"],
        "job_cost_usd": job["cost_usd"],
        "job_usd_per_million_output_tokens": job["usd_per_million_output_tokens"],
        "job_throughput_rps_per_replica": job["throughput_rps_per_replica"],
        "job_verified_throughput_rps": job["verified_throughput_rps"],
    }
