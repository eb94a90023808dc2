"""The shared CSV renderer and content negotiation (api/csv_export.py), without an app."""

from __future__ import annotations

import csv
import io

import pytest

from api.csv_export import (
    CSV_CONTENT_TYPE,
    PLAN_CSV_COLUMNS,
    csv_cell,
    csv_response,
    csv_responses,
    plan_csv_rows,
    prefers_csv,
    rows_to_csv,
)


def test_rows_are_rfc_4180_with_crlf_and_minimal_quoting() -> None:
    text = rows_to_csv(
        [{"name": "a,b", "note": 'he said "hi"', "lines": "one\ntwo", "n": 3}, {"name": "plain", "n": 4}],
        ["name", "note", "lines", "n"],
    )
    assert text == 'name,note,lines,n\r\n"a,b","he said ""hi""","one\ntwo",3\r\nplain,,,4\r\n'
    parsed = list(csv.DictReader(io.StringIO(text, newline="")))
    assert parsed[0] == {"name": "a,b", "note": 'he said "hi"', "lines": "one\ntwo", "n": "3"}
    assert parsed[1]["note"] == ""


def test_floats_round_trip_exactly_and_none_nan_bool_are_spelled_out() -> None:
    value = 0.1 + 0.2
    assert float(csv_cell(value)) == value
    assert csv_cell(1e-9) == "1e-09"
    assert (csv_cell(None), csv_cell(float("nan")), csv_cell(float("inf"))) == ("", "", "")
    assert (csv_cell(True), csv_cell(False), csv_cell(0)) == ("true", "false", "0")
    assert csv_cell(-2.5) == "-2.5"  # numbers are never guarded as formulas


@pytest.mark.parametrize("text", ['=HYPERLINK("x")', "+1", "-1+2", "@SUM(A1)", "\tx"])
def test_text_a_spreadsheet_would_run_as_a_formula_is_prefixed(text: str) -> None:
    assert csv_cell(text) == "'" + text


def test_a_key_outside_the_columns_is_refused_and_columns_must_be_unique() -> None:
    with pytest.raises(ValueError, match="not columns: \\['surprise'\\]"):
        rows_to_csv([{"a": 1, "surprise": 2}], ["a"])
    with pytest.raises(ValueError, match="duplicate"):
        rows_to_csv([], ["a", "a"])
    assert rows_to_csv([], ["a", "b"]) == "a,b\r\n"


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, False),
        ("", False),
        ("text/csv", True),
        ("TEXT/CSV; charset=utf-8", True),
        ("*/*", False),
        ("text/*", False),
        ("text/csv, application/json", True),
        ("application/json, text/csv", False),
        ("text/csv;q=0.5, application/json", False),
        ("application/json;q=0.5, text/csv;q=0.9", True),
        ("text/csv;q=0", False),
        ("text/csv;q=oops", False),
        ("text/csv, */*;q=0.1", True),
    ],
)
def test_accept_chooses_csv_only_when_it_ranks_above_json(accept: str | None, expected: bool) -> None:
    assert prefers_csv(accept) is expected


def test_csv_response_is_utf8_text_csv_offered_as_a_download_with_a_safe_name() -> None:
    response = csv_response("a\r\nü\r\n", filename='plan "1"/../x.csv')
    assert response.headers["content-type"] == CSV_CONTENT_TYPE == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == 'attachment; filename="plan__1__.._x.csv"'
    assert response.body == "a\r\nü\r\n".encode()


def test_openapi_entry_declares_text_csv_with_the_header_as_example() -> None:
    entry = csv_responses("One row.", ["a", "b"], status_code=201)[201]
    assert entry["content"]["text/csv"] == {"schema": {"type": "string"}, "example": "a,b\r\n"}
    assert "columns a, b" in entry["description"]


PLAN_REQUEST = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 10.0, "prompt_tokens": 1000, "output_tokens": 200},
    "slo": {"tpot_ms": 50.0},
}


def _response(plan: dict, cost: dict) -> dict:
    return {
        "id": "p1", "name": "chat", "plan": plan, "cost": cost, "verification": None,
        "predicted": {"ttft_ms": {"p99": 300.0}, "tpot_ms": {"p99": 40.0}, "e2e_s": {"p99": 8.0}},
        "provenance": {"created_at": "2026-11-29T00:00:00+00:00", "catalog_version": 7},
    }  # fmt: skip


def _fleet_row(gpu: str, replicas: int, offered: float, usd: float) -> dict:
    return {
        "gpu": gpu,
        "tp": 1,
        "replicas": replicas,
        "gpus": replicas,
        "precision": {"weights": "bf16", "kv_cache": "bf16"},
        "batch_limit": 64,
        "chunk_tokens": None,
        "target_rho": 0.5,
        "max_rps_at_slo": 2.0,
        "saturation_rps": 4.0,
        "offered_rps": offered,
        "cost_usd_per_hour": usd,
    }


def test_a_single_configuration_plan_is_one_row_with_the_plan_costs() -> None:
    plan = {
        "gpu": "h100-sxm",
        "tp": 1,
        "replicas": 3,
        "gpus_total": 3,
        "precision": {"weights": "fp8", "kv_cache": "fp8"},
        "batch_limit": 128,
        "chunk_tokens": 2048,
        "target_rho": 0.6,
        "fleet": None,
    }
    cost = {"usd_per_hour": 9.0, "usd_per_month": 6570.0, "usd_per_million_output_tokens": 1.25}
    [row] = plan_csv_rows(PLAN_REQUEST, _response(plan, cost))
    assert set(row) == set(PLAN_CSV_COLUMNS)
    assert (row["gpu"], row["replicas"], row["gpus_total"], row["weights_precision"]) == ("h100-sxm", 3, 3, "fp8")
    assert (row["cost_usd_per_hour"], row["cost_usd_per_month"], row["currency"]) == (9.0, 6570.0, "USD")
    assert (row["fleet_row"], row["fleet_rows"], row["offered_rps"], row["slo_tpot_ms"], row["slo_ttft_ms"]) == (
        1,
        1,
        10.0,
        50.0,
        None,
    )
    assert row["verified"] is False


def test_a_mixed_fleet_is_one_row_per_configuration_summing_to_the_plan() -> None:
    """Rows: H100 serving 6 of 10 req/s for $6/h, A100 serving 4 for $2/h; the plan is $8/h at
    $1/Mtok, so the H100 row is $1 × (6/8)/(6/10) = $1.25/Mtok and the A100 row $1 × (2/8)/(4/10) = $0.625/Mtok."""
    plan = {
        "gpu": "h100-sxm",
        "tp": 1,
        "replicas": 5,
        "gpus_total": 5,
        "precision": {"weights": "bf16", "kv_cache": "bf16"},
        "batch_limit": 64,
        "chunk_tokens": None,
        "target_rho": 0.5,
        "fleet": [_fleet_row("h100-sxm", 3, 6.0, 6.0), _fleet_row("a100-80gb-sxm", 2, 4.0, 2.0)],
    }
    cost = {"usd_per_hour": 8.0, "usd_per_month": 5840.0, "usd_per_million_output_tokens": 1.0}
    rows = plan_csv_rows(PLAN_REQUEST, _response(plan, cost))
    assert [(r["fleet_row"], r["fleet_rows"], r["gpu"]) for r in rows] == [(1, 2, "h100-sxm"), (2, 2, "a100-80gb-sxm")]
    assert sum(r["cost_usd_per_hour"] for r in rows) == pytest.approx(8.0)
    assert sum(r["cost_usd_per_month"] for r in rows) == pytest.approx(5840.0)
    assert sum(r["gpus_total"] for r in rows) == 5
    assert [r["cost_usd_per_million_output_tokens"] for r in rows] == pytest.approx([1.25, 0.625])
    assert {r["plan_id"] for r in rows} == {"p1"}
