"""Both levers (prefix caching and speculative decoding, issue 18) on every surface a plan leaves the service
by, through the real app: POST /v1/plans and its stored copy, the plan CSV, each engine's deploy rendering,
POST /v1/what-if and its CSV, the `headroom plan` CLI, and a fleet plan's rows and CSV — each asserting the
levers appear with the plan's own values. Capacity with both levers: tests/api/test_prefix_caching.py
`test_capacity_with_shared_prefixes_and_a_draft_head_runs_and_verifies_both`."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.cli import main
from api.deploy import DeployInputs, engine_cli
from api.deploy_render import render
from tests.api.client import ApiClient
from tests.api.test_cli_plan import local_url, write  # noqa: F401  (local_url is a fixture)
from tests.api.test_deploy import commands, flags, inputs
from tests.api.test_deploy import row as deploy_row
from tests.api.test_fleet_levers import fleet, fleet_workload, planned
from tests.api.test_fleet_plans import api, seeded_sqlite_template  # noqa: F401  (fixtures)
from tests.api.test_prefix_caching import REUSE, _body
from tests.api.test_speculative_draft_model import BODY as DRAFT_MODEL_BODY

#: tests/api/test_plans.py's CHAT (Llama 3.1 8B, 15 requests/s, H100 or A100) with test_prefix_caching's REUSE
#: and constraints.speculative auto: one A100 that caches 83 % of the prompt tokens and runs an EAGLE head at the
#: same cost (a lower TPOT), verified by the prefix simulator's speculating replica.
BOTH: dict[str, Any] = {**_body(REUSE, verify=True)}
BOTH["constraints"] = {**BOTH["constraints"], "speculative": "auto"}

SPECULATIVE_COLUMNS = {
    "speculative_method": "method",
    "speculative_draft_tokens": "draft_tokens",
    "speculative_tokens_per_step": "tokens_per_step",
    "speculative_acceptance_rate": "acceptance_rate",
}
PREFIX_COLUMNS = {
    "prefix_cache_hit_rate": "hit_rate",
    "prefix_cache_tokens": "cache_tokens",
    "prefix_cache_routing": "routing",
    "prefix_prefill_tokens_saved_fraction": "prefill_tokens_saved_fraction",
}


def _cell(value: str) -> Any:
    """A CSV cell as the JSON would hold it: a number where it parses as one."""
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


def _assert_levers(row: dict[str, Any], plan: dict[str, Any], *, as_text: bool, skip: tuple[str, ...] = ()) -> None:
    """Each lever column of `row` (a CSV row when `as_text`, else a JSON point) is the plan's own value."""
    for columns, lever in ((SPECULATIVE_COLUMNS, plan["speculative"]), (PREFIX_COLUMNS, plan["prefix_caching"])):
        for column, member in columns.items():
            if column in skip:
                continue
            got = _cell(row[column]) if as_text else row[column]
            assert got == pytest.approx(lever[member]) if isinstance(lever[member], float) else got == lever[member], column


@pytest.fixture
def both(seeded: ApiClient, admin: dict[str, str]) -> dict[str, Any]:
    response = seeded.post("/v1/plans", json=BOTH, headers=admin)
    assert response.status_code == 201, response.text
    return response.json()


def test_the_plan_deploys_both_levers_verified_by_the_simulator(seeded: ApiClient, both: dict[str, Any]) -> None:
    plan = both["plan"]
    chosen, cache = plan["speculative"], plan["prefix_caching"]
    assert chosen is not None and cache is not None, "this request runs both levers (BOTH's comment)"
    k, alpha = chosen["draft_tokens"], chosen["acceptance_rate"]
    assert chosen["tokens_per_step"] == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha), rel=1e-5)
    assert cache["cache_tokens"] > 0 and cache["cache_tokens"] % 16 == 0
    assert both["verification"]["meets_slo"] is True
    section = both["justification"]["prefix_caching"]
    assert section["simulated_hit_rate"] == pytest.approx(cache["hit_rate"], abs=0.05)
    stored = seeded.get(f"/v1/plans/{both['id']}").json()["plan"]
    assert (stored["speculative"], stored["prefix_caching"]) == (chosen, cache)


def test_the_plan_csv_carries_both_levers_with_the_plans_values(seeded: ApiClient, both: dict[str, Any]) -> None:
    response = seeded.get(f"/v1/plans/{both['id']}/csv")
    assert response.status_code == 200, response.text
    [row] = list(csv.DictReader(io.StringIO(response.text)))
    _assert_levers(row, both["plan"], as_text=True)
    assert row["speculative_draft_model"] == ""  # a head drafts, not a catalog model


def test_each_engine_rendering_carries_both_levers(seeded: ApiClient, both: dict[str, Any]) -> None:
    """vLLM: --enable-prefix-caching and --speculative-config at the plan's k; SGLang: the EAGLE chain of k
    (its radix cache is on by default, so no flag turns it off); TensorRT-LLM: speculative_config at k. Each
    script states the cache the plan assumed."""
    chosen, cache = both["plan"]["speculative"], both["plan"]["prefix_caching"]
    k = chosen["draft_tokens"]
    head = engine_cli()["draft_heads"]["llama-3.1-8b"]["eagle"]["checkpoint"]
    scripts = {}
    for target in ("vllm", "sglang", "trt-llm", "k8s"):
        response = seeded.get(f"/v1/plans/{both['id']}/deploy", params={"target": target})
        assert response.status_code == 200, response.text
        scripts[target] = response.text
    [vllm] = commands(scripts["vllm"])
    got = flags(vllm)
    assert "--enable-prefix-caching" in got and "--no-enable-prefix-caching" not in got
    assert json.loads(got["--speculative-config"] or "") == {"method": "eagle", "model": head, "num_speculative_tokens": k}
    [sglang] = commands(scripts["sglang"])
    got = flags(sglang)
    assert "--disable-radix-cache" not in got
    assert (got["--speculative-algorithm"], got["--speculative-num-steps"], got["--speculative-num-draft-tokens"]) == (
        "EAGLE",
        str(k),
        str(k + 1),
    )
    options = yaml.safe_load(scripts["trt-llm"].split("<<'EOF'\n")[1].split("\nEOF")[0])
    assert options["speculative_config"] == {"decoding_type": "Eagle", "max_draft_len": k, "speculative_model_dir": head}
    assert (options.get("kv_cache_config") or {}).get("enable_block_reuse", True) is True
    for engine in ("vllm", "sglang", "trt-llm"):
        assert f"hit rate {cache['hit_rate']} with {cache['cache_tokens']} KV tokens" in scripts[engine]
    [deployment, *_] = yaml.safe_load_all(scripts["k8s"])
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--enable-prefix-caching" in args and "--speculative-config" in args


def test_what_if_points_and_their_csv_carry_both_levers(seeded: ApiClient, admin: dict[str, str]) -> None:
    """A one-point sweep at BOTH's rate is the plan POST /v1/plans makes (verify off in both): its lever columns
    are that plan's, in the JSON point and the CSV row."""
    quick = {**BOTH, "verify": False}
    plan = seeded.post("/v1/plans", json=quick, headers=admin)
    assert plan.status_code == 201, plan.text
    planned = plan.json()["plan"]
    assert planned["speculative"] is not None and planned["prefix_caching"] is not None
    shape = {key: value for key, value in quick["workload"].items() if key != "arrival_rate_rps"}
    sweep = {
        "model": quick["model"],
        "workload": shape,
        "slo": quick["slo"],
        "constraints": quick["constraints"],
        "sweep": {"arrival_rates_rps": [quick["workload"]["arrival_rate_rps"]]},
    }
    answer = seeded.post("/v1/what-if", json=sweep, headers=admin)
    assert answer.status_code == 200, answer.text
    [point] = answer.json()["points"]
    _assert_levers(point, planned, as_text=False)
    assert point["speculative_draft_model"] is None
    table = seeded.post("/v1/what-if", json=sweep, params={"format": "csv"}, headers=admin)
    assert table.status_code == 200, table.text
    [row] = list(csv.DictReader(io.StringIO(table.text)))
    _assert_levers(row, planned, as_text=True)


def test_a_plan_without_the_levers_leaves_their_columns_empty(seeded: ApiClient, admin: dict[str, str]) -> None:
    plain = {**BOTH, "verify": False, "workload": {k: v for k, v in BOTH["workload"].items() if k != "prefix_reuse"}}
    plain["constraints"] = {**BOTH["constraints"], "speculative": "off"}
    plan = seeded.post("/v1/plans", json=plain, headers=admin)
    assert plan.status_code == 201, plan.text
    assert plan.json()["plan"]["speculative"] is None and plan.json()["plan"]["prefix_caching"] is None
    [row] = list(csv.DictReader(io.StringIO(seeded.get(f"/v1/plans/{plan.json()['id']}/csv").text)))
    assert all(row[column] == "" for column in (*SPECULATIVE_COLUMNS, *PREFIX_COLUMNS, "speculative_draft_model"))


def test_a_draft_model_plan_names_its_draft_in_the_csv_and_the_what_if_point(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Llama 3.1 70B drafted by Llama 3.1 8B at a measured α 0.7 (tests/api/test_speculative_draft_model.py): the
    plan's `speculative` says draft_model; the CSV and the sweep's point name the catalog model drafting."""
    response = seeded.post("/v1/plans", json=DRAFT_MODEL_BODY, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["plan"]["speculative"]["method"] == "draft_model"
    [row] = list(csv.DictReader(io.StringIO(seeded.get(f"/v1/plans/{plan['id']}/csv").text)))
    assert (row["speculative_method"], row["speculative_draft_model"]) == ("draft_model", "llama-3.1-8b")
    assert float(row["speculative_acceptance_rate"]) == pytest.approx(0.7)
    shape = {key: value for key, value in DRAFT_MODEL_BODY["workload"].items() if key != "arrival_rate_rps"}
    sweep = {
        "model": DRAFT_MODEL_BODY["model"],
        "workload": shape,
        "slo": DRAFT_MODEL_BODY["slo"],
        "constraints": DRAFT_MODEL_BODY["constraints"],
        "sweep": {"arrival_rates_rps": [DRAFT_MODEL_BODY["workload"]["arrival_rate_rps"]]},
    }
    answer = seeded.post("/v1/what-if", json=sweep, headers=admin)
    assert answer.status_code == 200, answer.text
    [point] = answer.json()["points"]
    assert (point["speculative_method"], point["speculative_draft_model"]) == ("draft_model", "llama-3.1-8b")
    assert point["speculative_draft_tokens"] == plan["plan"]["speculative"]["draft_tokens"]


def test_the_cli_shows_both_levers_and_counts_a_lever_change_as_a_change(
    local_url: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`headroom plan --format table` lists the draft and the cache; with --detailed-exitcode a plan whose GPUs
    stay but whose levers change (speculative off, then auto) exits 5: the engine's flags change."""
    off = {**BOTH, "verify": False, "constraints": {**BOTH["constraints"], "speculative": "off"}}
    code = main(["--database-url", local_url, "plan", write(tmp_path / "off.json", off), "--deployment", "chat"])
    before = json.loads(capsys.readouterr().out)
    assert code == 0 and before["plan"]["speculative"] is None
    auto = {**off, "constraints": BOTH["constraints"]}
    request = write(tmp_path / "auto.json", auto)
    argv = ["--database-url", local_url, "plan", request, "--deployment", "chat", "--detailed-exitcode"]
    code = main(argv)
    after = json.loads(capsys.readouterr().out)
    assert after["plan"]["speculative"] is not None
    same_gpus = [after["plan"][f] for f in ("gpu", "tp", "replicas")] == [before["plan"][f] for f in ("gpu", "tp", "replicas")]
    assert same_gpus, "the draft head comes at the same cost here, so only the levers change"
    assert code == 5
    code = main([*argv[:6], "--format", "table"])
    table = capsys.readouterr().out
    chosen, cache = after["plan"]["speculative"], after["plan"]["prefix_caching"]
    assert code == 0
    assert f"eagle, k {chosen['draft_tokens']}" in table
    assert f"{cache['cache_tokens']} tokens" in table and cache["routing"] in table


def test_a_fleet_row_and_its_csv_row_carry_both_levers(api: ApiClient) -> None:  # noqa: F811
    """A fleet workload with REUSE and speculative auto (tests/api/test_fleet_levers.py's H100 search): each
    schedule row's levers are in its CSV row with the same values."""
    plan = planned(api, fleet(fleet_workload("chat", [15.0, 15.0], prefix_reuse=REUSE), speculative="auto"))
    rows = [row for period in plan["periods"] for row in period["workloads"]]
    assert all(row["speculative"] is not None and row["prefix_caching"] is not None for row in rows), rows
    response = api.get(f"/v1/fleet-plans/{plan['id']}/csv")
    assert response.status_code == 200, response.text
    table = [row for row in csv.DictReader(io.StringIO(response.text)) if row["pool_role"] == "mixed"]
    assert len(table) == len(rows)
    for json_row, csv_row in zip(rows, table, strict=True):
        levers = {"speculative": json_row["speculative"], "prefix_caching": json_row["prefix_caching"]}
        _assert_levers(csv_row, levers, as_text=True, skip=("prefix_prefill_tokens_saved_fraction",))


def _cached(routing: str) -> DeployInputs:
    """A two-replica plan whose `plan.prefix_caching` holds 8,192 KV tokens per replica at hit rate 0.6."""
    plan = inputs([deploy_row("g1", 1, 2, "bf16", "bf16", 64, 2048)])
    response = json.loads(json.dumps(plan.response))
    response["plan"]["prefix_caching"] = {
        "hit_rate": 0.6,
        "cache_tokens": 8192,
        "routing": routing,
        "prefill_tokens_saved_fraction": 0.5,
    }
    return DeployInputs(
        plan_id=plan.plan_id, response=response, model=plan.model, quantizations=plan.quantizations, gpus=plan.gpus
    )


@pytest.mark.parametrize("routing", ["prefix_aware", "random"])
def test_a_cached_plans_scripts_state_the_cache_and_the_router_prefix_aware_routing_needs(routing: str) -> None:
    """No engine flag sets the routing or the cache's size: each script says what the plan assumed, and under
    prefix-aware routing that a router must pin each prefix to one replica (a random balancer lowers the hit rate)."""
    plan = _cached(routing)
    for engine in ("vllm", "sglang", "trt-llm"):
        script = render(plan, engine)[0]
        assert f"hit rate 0.6 with 8192 KV tokens per replica under {routing} routing" in script
        assert ("cache_aware" in script) is (routing == "prefix_aware")
        for argv in commands(script):
            assert set(flags(argv)) <= set(engine_cli()[engine]["flags"])
    [vllm] = commands(render(plan, "vllm")[0])
    assert "--enable-prefix-caching" in vllm
