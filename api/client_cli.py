"""`headroom plan` and `headroom replan`: the commands a scheduled job runs; and `headroom deploy`,
a stored plan as an engine launch command or Kubernetes manifests (GET /v1/plans/{id}/deploy).

Both talk to a running service with `--url` (API key from HEADROOM_API_KEY) or, without it, plan
in-process against the local database (HEADROOM_DATABASE_URL or --database-url), and print the
answer as JSON (default) or a table. The exit code is the contract a CronJob alerts on:

    0  planned (re-plan: whether or not the deployment changed; see `changed` in the output)
    5  planned, and the plan changed (only with --detailed-exitcode; without it a change exits 0)
    2  bad input: unreadable file, invalid request, unknown model/GPU/deployment, rejected key
    3  infeasible: no plan meets the SLOs and constraints (the problem names the relaxation)
    4  service unreachable: connection refused or timed out, 502/503/504, or a local database
       that cannot be opened or is not migrated
    1  anything else (a bug: the message says where to look)

With --detailed-exitcode (as `terraform plan -detailed-exitcode`, whose 2 this CLI already uses for
bad input) "changed" means: for `replan`, the re-plan's `changed`; for `plan --deployment NAME`, a
plan decision (GPU, tp, replicas, precision, batch limit, chunk budget, fleet) other than the one
in force before, or no plan in force; for `plan` without a deployment there is nothing in force, so
every plan is a change. stdout carries only the answer: the solver's banner and any other output
of the planning go to stderr, so `headroom plan f.json | jq` always reads JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from planner.units import HOURS_PER_MONTH

if TYPE_CHECKING:  # the in-process path imports the database layer only when it runs
    from sqlalchemy.orm import Session

    from catalog.repository import Catalog

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_UNREACHABLE = 4
EXIT_CHANGED = 5

API_KEY_ENV = "HEADROOM_API_KEY"
#: Problem types that mean "no plan exists for this request" (exit 3) rather than "bad request" (exit 2).
INFEASIBLE_PROBLEMS = ("urn:headroom:problem:infeasible-plan", "urn:headroom:problem:model-does-not-fit")
#: Seconds to wait for the service: connecting, and the whole plan (a verified plan can take tens of seconds).
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 300.0

EXIT_CODES_HELP = """\
exit codes: 0 planned; 5 planned and the plan changed (only with --detailed-exitcode);
2 bad input (file, request, unknown model/GPU/deployment, API key); 3 infeasible (no plan meets
the SLOs and constraints); 4 service unreachable (connection, 502/503/504, or the local database
cannot be opened or is not migrated); 1 anything else. Only the answer goes to stdout.
With --url the API key is read from HEADROOM_API_KEY; without it the command plans in-process
against HEADROOM_DATABASE_URL (or --database-url)."""


class CommandError(Exception):
    """A failure with its exit code and a one-line message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def add_commands(commands: Any) -> None:
    """Add `plan` and `replan` to the `headroom` argument parser's sub-commands."""
    plan = commands.add_parser(
        "plan",
        help="plan the request in FILE (JSON, as POST /v1/plans takes it: a workload, or traffic classes)",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plan.add_argument("file", metavar="FILE", help="plan request JSON (- for stdin): `workload` and `slo`, or `classes`")
    plan.add_argument("--deployment", metavar="NAME", help="record the plan as deployment NAME's current plan")
    _common(plan)
    plan.set_defaults(run=run_plan)

    replan = commands.add_parser(
        "replan",
        help="re-plan deployment NAME for a new rate or demand, with its diff and hysteresis",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replan.add_argument("name", metavar="NAME", help="the deployment")
    traffic = replan.add_mutually_exclusive_group(required=True)
    traffic.add_argument("--rate", type=float, metavar="R", help="new arrival rate, requests per second")
    traffic.add_argument(
        "--demand",
        metavar="FILE",
        help="JSON: a workload ({arrival_rate_rps, prompt_tokens, output_tokens, ...}) or a re-plan body "
        "({workload | arrival_rate_rps, slo, constraints, verify})",
    )
    _common(replan)
    replan.set_defaults(run=run_replan)

    deploy = commands.add_parser(
        "deploy",
        help="stored plan PLAN_ID as an engine launch command (vllm, sglang, trt-llm) or Kubernetes manifests (k8s)",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    deploy.add_argument("plan_id", metavar="PLAN_ID", help="the plan's id (as POST /v1/plans answered it)")
    deploy.add_argument("--target", required=True, choices=("vllm", "sglang", "trt-llm", "k8s"), help="what to render")
    deploy.add_argument("--url", help="a running Headroom service (e.g. http://headroom:8000); default: the local database")
    deploy.set_defaults(run=run_deploy, idempotency_key=None)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="a running Headroom service (e.g. http://headroom:8000); default: plan in-process")
    parser.add_argument("--format", choices=("json", "table"), default="json", help="output format (default json)")
    parser.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="exit 5 (not 0) when the plan changed: the deployment's plan in force differs afterwards",
    )
    parser.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="sent as Idempotency-Key with --url, so a retried job creates nothing twice (default: a fresh UUID)",
    )


# --- the commands -----------------------------------------------------------------------------------


#: The members of a plan's `plan` block that make it a different deployment (not `target_rho`,
#: which moves with the traffic while the GPUs stay the same).
DECISION_FIELDS = ("gpu", "tp", "replicas", "gpus_total", "precision", "batch_limit", "chunk_tokens", "fleet")

#: The replica's layout beside tp: pipeline stages and the expert-parallel degree (ep 8 on the same 8 GPUs is another
#: engine command); 1 where a plan stored before they were reported lacks them.
LAYOUT_FIELDS = ("pp", "ep")


#: The members of a plan's levers that change what is deployed (the engine's flags, the router): the draft and its
#: length, the cache's size and routing — not α, E or the hit rate, which are the traffic's.
LEVER_FIELDS = {"speculative": ("method", "draft_tokens"), "prefix_caching": ("cache_tokens", "routing")}


def _decision(plan: dict[str, Any] | None) -> dict[str, Any] | None:
    if plan is not None and "arrangement" in plan:  # a class plan in force: its arrangement and pools
        return {"arrangement": plan["arrangement"]["chosen"], "pools": plan["pools"]}
    if plan is None:
        return None
    levers = {
        name: None if not plan["plan"].get(name) else {member: plan["plan"][name].get(member) for member in members}
        for name, members in LEVER_FIELDS.items()
    }
    layout = {field: plan["plan"].get(field, 1) for field in LAYOUT_FIELDS}
    return {**{field: plan["plan"].get(field) for field in DECISION_FIELDS}, **layout, **levers}


def run_plan(args: argparse.Namespace, settings: Any) -> int:
    def work() -> tuple[dict[str, Any], bool]:
        body = _read_json(args.file)
        if not isinstance(body, dict):
            raise CommandError(EXIT_BAD_INPUT, f"{args.file} must hold a JSON object (a plan request)")
        if args.deployment is not None:
            body["name"] = args.deployment
        if args.url:
            before = None
            if args.deployment is not None and args.detailed_exitcode:
                deployment = _remote(args, "GET", f"/v1/deployments/{_quote(args.deployment)}", None, missing_ok=True)
                before = _decision((deployment or {}).get("current_plan"))
            result = _remote(args, "POST", "/v1/plans", body)
        else:
            before, result = _in_process(
                settings, lambda catalog, session: _plan_locally(body, catalog, session, settings.default_price_provider)
            )
        return result, before is None or before != _decision(result)

    return _run(args, work, _plan_table)


def run_replan(args: argparse.Namespace, settings: Any) -> int:
    def work() -> tuple[dict[str, Any], bool]:
        body = _replan_body(args)
        if args.url:
            result = _remote(args, "POST", f"/v1/deployments/{_quote(args.name)}/replan", body)
        else:
            result = _in_process(
                settings,
                lambda catalog, session: _replan_locally(args.name, body, catalog, session, settings.default_price_provider),
            )
        return result, bool(result["changed"])

    return _run(args, work, _replan_table)


def run_deploy(args: argparse.Namespace, settings: Any) -> int:
    """GET /v1/plans/{id}/deploy's text on stdout, and nothing else there: pipe it to a file or kubectl."""
    try:
        with _stdout_to_stderr():
            if args.url:
                path = f"/v1/plans/{_quote(args.plan_id)}/deploy?target={_quote(args.target)}"
                text = _remote(args, "GET", path, None, as_text=True)
            else:
                text = _in_process(
                    settings, lambda catalog, session: _deploy_locally(args.plan_id, args.target, catalog, session)
                )
    except CommandError as exc:
        print(f"headroom: error: {exc}", file=sys.stderr)
        return exc.code
    sys.stdout.write(text)
    return EXIT_OK


def _deploy_locally(plan_id: str, target: str, catalog: Catalog, session: Session) -> str:
    from api.deploy_render import render
    from api.routers.deploy import deploy_inputs
    from catalog.plans import Plans

    return render(deploy_inputs(plan_id, Plans(session), catalog), target)[0]


def _replan_body(args: argparse.Namespace) -> dict[str, Any]:
    if args.rate is not None:
        if not args.rate > 0:
            raise CommandError(EXIT_BAD_INPUT, f"--rate must be > 0 requests per second, got {args.rate:g}")
        return {"arrival_rate_rps": args.rate}
    demand = _read_json(args.demand)
    if not isinstance(demand, dict):
        raise CommandError(EXIT_BAD_INPUT, f"{args.demand} must hold a JSON object (a workload or a re-plan body)")
    return {"workload": demand} if "prompt_tokens" in demand else demand


def _run(
    args: argparse.Namespace, work: Callable[[], tuple[dict[str, Any], bool]], table: Callable[[dict[str, Any]], str]
) -> int:
    """`work()` (the answer and whether it changed the plan in force) with stdout kept for the answer."""
    try:
        with _stdout_to_stderr():
            result, changed = work()
    except CommandError as exc:
        print(f"headroom: error: {exc}", file=sys.stderr)
        return exc.code
    sys.stdout.write(json.dumps(result, indent=2, ensure_ascii=False) + "\n" if args.format == "json" else table(result))
    return EXIT_CHANGED if changed and args.detailed_exitcode else EXIT_OK


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at stderr for the duration: nothing but the answer may reach a pipe
    into `jq`, whatever a solver library writes from C (planner/milp.py keeps HiGHS's banner off)."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _read_json(name: str) -> Any:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(EXIT_BAD_INPUT, f"cannot read {name}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CommandError(EXIT_BAD_INPUT, f"{name} is not valid JSON: {exc}") from exc


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


# --- in-process --------------------------------------------------------------------------------------


def _in_process(settings: Any, work: Callable[[Any, Any], Any]) -> Any:
    """`work(catalog, session)` in one transaction on the local database, errors as exit codes."""
    from sqlalchemy.exc import SQLAlchemyError

    from catalog import migrate
    from catalog.db import make_engine, make_session_factory
    from catalog.errors import CatalogError
    from catalog.repository import Catalog
    from planner.errors import HeadroomError, InfeasiblePlanError, ModelDoesNotFitError, SolverError

    try:
        at_head = migrate.is_at_head(settings.database_url)
    except Exception as exc:  # a driver, a path or a server that is not there
        raise CommandError(
            EXIT_UNREACHABLE, f"cannot open the database {settings.database_url}: {type(exc).__name__}: {exc}"
        ) from exc
    if not at_head:
        raise CommandError(
            EXIT_UNREACHABLE, f"the database {settings.database_url} is not migrated to head: run `headroom db upgrade`"
        )
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session, session.begin():
            return work(Catalog(session), session)
    except ValidationError as exc:
        raise CommandError(EXIT_BAD_INPUT, "invalid request: " + _validation_summary(exc)) from exc
    except (InfeasiblePlanError, ModelDoesNotFitError) as exc:
        raise CommandError(EXIT_INFEASIBLE, f"infeasible: {exc.detail}") from exc
    except SolverError as exc:
        raise CommandError(EXIT_ERROR, f"the solver gave no answer: {exc.detail}") from exc
    except HeadroomError as exc:  # unknown model, GPU or deployment; invalid planner input
        raise CommandError(EXIT_UNREACHABLE if type(exc) is CatalogError else EXIT_BAD_INPUT, exc.detail) from exc
    except SQLAlchemyError as exc:
        raise CommandError(EXIT_UNREACHABLE, f"database error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from exc
    finally:
        engine.dispose()


def _validation_summary(exc: ValidationError) -> str:
    from api.problems import field_errors

    return "; ".join(f"{e['field']}: {e['message']}" for e in field_errors(exc.errors(), strip_body=False))


def _plan_locally(
    body: dict[str, Any], catalog: Any, session: Any, default_provider: str
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the deployment's decision in force before, or None; the new plan). A body with `classes`
    is a class request (as POST /v1/plans takes it) and is planned by api/classes_plans.py."""
    from api.classes_plans import create_classes_plan
    from api.plan_service import DEFAULT_SOLVER_TIME_LIMIT_S, create_named_plan, run_directly
    from api.schemas.classes import ClassesPlanRequest
    from api.schemas.plans import PlanRequest
    from catalog.deployments import Deployments
    from catalog.plans import Plans

    request: PlanRequest | ClassesPlanRequest = (
        ClassesPlanRequest.model_validate(body) if "classes" in body else PlanRequest.model_validate(body)
    )
    deployment = Deployments(session).find(request.name) if request.name is not None else None
    current_id = deployment.current_plan_id if deployment is not None else None
    before = _decision(Plans(session).get(current_id).response) if current_id else None
    if isinstance(request, ClassesPlanRequest):  # stored, and a named one adopted, as the route does
        content = create_classes_plan(
            request,
            catalog,
            run=run_directly,
            solver_time_limit_s=DEFAULT_SOLVER_TIME_LIMIT_S,
            default_provider=default_provider,
        )
    else:
        content = create_named_plan(request, catalog, default_provider=default_provider)
    return before, content


def _replan_locally(name: str, body: dict[str, Any], catalog: Any, session: Any, default_provider: str) -> dict[str, Any]:
    from fastapi.encoders import jsonable_encoder

    from api.deployment_service import replan
    from api.schemas.classes import is_classes_plan
    from api.schemas.deployments import ClassesReplanResponse, ReplanRequest, ReplanResponse

    content = replan(name, ReplanRequest.model_validate(body), catalog, default_provider=default_provider)
    read = ClassesReplanResponse if is_classes_plan(content["plan"]) else ReplanResponse  # a class deployment's answer
    encoded: dict[str, Any] = jsonable_encoder(read.model_validate(content))  # a model encodes to a JSON object
    return encoded


# --- against a service ----------------------------------------------------------------------------------


def _remote(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    *,
    missing_ok: bool = False,
    as_text: bool = False,
) -> Any:
    """The JSON answer (its text with `as_text`); None for a 404 when `missing_ok`; problems as exit codes."""
    try:
        import httpx
    except ImportError as exc:  # pragma: no cover - httpx is a dependency; this guards a broken install
        raise CommandError(EXIT_ERROR, "--url needs the httpx package") from exc
    headers = {"Idempotency-Key": args.idempotency_key or str(uuid.uuid4()), "Accept": "*/*" if as_text else "application/json"}
    key = os.environ.get(API_KEY_ENV)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    try:
        with httpx.Client(base_url=args.url.rstrip("/"), timeout=timeout) as client:
            response = client.request(method, path, json=body, headers=headers)
    except httpx.InvalidURL as exc:
        raise CommandError(EXIT_BAD_INPUT, f"--url {args.url!r} is not a URL: {exc}") from exc
    except httpx.TransportError as exc:
        raise CommandError(EXIT_UNREACHABLE, f"cannot reach {args.url}: {type(exc).__name__}: {exc}") from exc
    if response.is_success:
        return response.text if as_text else response.json()
    if missing_ok and response.status_code == 404:
        return None
    problem = _problem(response)
    detail = problem.get("detail") or response.text[:300]
    if response.status_code in (502, 503, 504):
        raise CommandError(EXIT_UNREACHABLE, f"{args.url} answered {response.status_code}: {detail}")
    if problem.get("type") in INFEASIBLE_PROBLEMS:
        raise CommandError(EXIT_INFEASIBLE, f"infeasible: {detail}")
    if 400 <= response.status_code < 500:
        errors = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in problem.get("errors") or [])
        raise CommandError(
            EXIT_BAD_INPUT, f"{response.status_code} {detail}" + (f" ({errors})" if errors and errors not in detail else "")
        )
    raise CommandError(EXIT_ERROR, f"{args.url} answered {response.status_code}: {detail}")


def _problem(response: Any) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


# --- tables ------------------------------------------------------------------------------------------------


def _table(rows: list[tuple[str, Any]]) -> str:
    width = max(len(label) for label, _ in rows)
    return "".join(f"{label.ljust(width)}  {value}\n" for label, value in rows)


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"


def _classes_table(plan: dict[str, Any]) -> str:
    """A class plan: its arrangement and cost, a line per pool and a line per class at its percentile."""
    rows: list[tuple[str, Any]] = [
        ("plan", plan["id"]),
        ("deployment", plan.get("name") or "-"),
        ("arrangement", plan["arrangement"]["chosen"]),
        ("cost", f"{_money(plan['cost_usd_per_hour'])}/h, {_money(plan['cost_usd_per_hour'] * HOURS_PER_MONTH)}/month (730 h)"),
    ]
    for pool in plan["pools"]:
        gpus = pool["replicas"] * pool["tp"]
        shape = f"tp {pool['tp']}, {pool['replicas']} replicas, {pool['scheduling']}"
        rows.append((f"pool {pool['name']}", f"{pool['gpu']} × {gpus} ({shape}): {', '.join(pool['classes'])}"))
    for k in plan["classes"]:
        meets = "meets its target" if k["meets_target"] else "MISSES its target"
        rows.append((
            f"class {k['name']}",
            f"p{k['percentile']:g} TTFT {k['ttft_ms']:.4g} ms, TPOT {k['tpot_ms']:.4g} ms, E2E {k['e2e_s']:.4g} s; {meets}",
        ))  # fmt: skip
    rows.append(("catalog version", plan["provenance"]["catalog_version"]))
    return _table(rows)


def _plan_table(plan: dict[str, Any]) -> str:
    if "arrangement" in plan:  # a class plan (POST /v1/plans with `classes`)
        return _classes_table(plan)
    decision, cost, predicted = plan["plan"], plan["cost"], plan["predicted"]
    percentile = f"p{predicted['percentile']:g}"
    return _table(
        [
            ("plan", plan["id"]),
            ("deployment", plan.get("name") or "-"),
            ("gpu", f"{decision['gpu']} × {decision['gpus_total']} (tp {decision['tp']}, {decision['replicas']} replicas)"),
            ("precision", f"{decision['precision']['weights']}/{decision['precision']['kv_cache']}"),
            ("batch limit", decision["batch_limit"]),
            ("chunk tokens", decision["chunk_tokens"] if decision["chunk_tokens"] is not None else "-"),
            ("speculative", _speculative_cell(decision.get("speculative"))),
            ("prefix cache", _prefix_cell(decision.get("prefix_caching"))),
            ("cost", f"{_money(cost['usd_per_hour'])}/h, {_money(cost['usd_per_month'])}/month (730 h)"),
            (f"{percentile} TTFT", f"{predicted['ttft_ms']['at_percentile']:.4g} ms"),
            (f"{percentile} TPOT", f"{predicted['tpot_ms']['at_percentile']:.4g} ms"),
            ("catalog version", plan["provenance"]["catalog_version"]),
        ]
    )


def _speculative_cell(chosen: dict[str, Any] | None) -> str:
    if not chosen:
        return "-"
    return (
        f"{chosen['method']}, k {chosen['draft_tokens']}, α {chosen['acceptance_rate']:.3g}, "
        f"E {chosen['tokens_per_step']:.3g} tokens/step"
    )


def _prefix_cell(chosen: dict[str, Any] | None) -> str:
    if not chosen:
        return "-"
    return f"{chosen['cache_tokens']} tokens, hit rate {chosen['hit_rate']:.3g}, routing {chosen['routing']}"


def _replan_table(result: dict[str, Any]) -> str:
    diff = result["diff"]
    rows: list[tuple[str, Any]] = [
        ("deployment", result["deployment"]),
        ("changed", "yes" if result["changed"] else "no"),
        ("reason", result["reason"]),
        ("plan in force", result["adopted"]),
        ("new plan", result["plan"]["id"]),
    ]
    classes = "arrangement" in diff  # a class deployment's diff: its arrangement and pools, not one configuration
    shown = (
        ("arrangement", "replicas", "gpus_total")
        if classes
        else ("gpu", "tp", "replicas", "gpus_total", "batch_limit", "precision")
    )
    for field in shown:
        change = diff[field]
        rows.append(
            (field.replace("_", " "), f"{change['before']} → {change['after']}" if change["changed"] else f"{change['before']}")
        )
    if classes:
        rows.append(("pools", diff["summary"]))
    hourly, monthly = diff["cost_usd_per_hour"], diff["cost_usd_per_month"]
    rows.append(("cost per hour", f"{_money(hourly['before_now'])} → {_money(hourly['after'])}"))
    rows.append(("cost per month", f"{_money(monthly['before_now'])} → {_money(monthly['after'])}"))
    added = ", ".join(f"+{n} {gpu}" for gpu, n in diff["gpus_added"].items())
    removed = ", ".join(f"-{n} {gpu}" for gpu, n in diff["gpus_removed"].items())
    rows.append(("gpus", ", ".join(x for x in (added, removed) if x) or "no change"))
    rows.append(("why", "; ".join(f"{r['kind']}: {r['detail']}" for r in diff["why"]) or "nothing changed"))
    return _table(rows)
