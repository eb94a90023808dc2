"""The `headroom` command line: serve the API, migrate and seed the database, move the catalog
in and out as JSON/YAML, issue, list and revoke API keys, export the OpenAPI document, run a task
worker and follow an operation (api/operations_cli.py).

Exit codes: 0 success, 2 bad input (arguments, settings, files, records), 1 anything else;
errors are one line on stderr. `plan` and `replan` (api/client_cli.py, for scheduled jobs) add
3 infeasible and 4 service unreachable.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from api import client_cli, operations_cli
from api.settings import Settings, SettingsError
from catalog import migrate
from catalog.api_keys import ApiKeys, key_id_of
from catalog.db import make_engine, make_session_factory
from catalog.errors import InvalidRecordError
from catalog.records import API_KEY_ROLES
from catalog.repository import Catalog
from planner.errors import HeadroomError

if TYPE_CHECKING:
    from fastapi import FastAPI

DEFAULT_OPENAPI_PATH = Path("openapi/openapi.json")


class InputError(Exception):
    """A file or argument the command cannot use (exit code 2)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `headroom` command; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        if args.database_url:
            settings = dataclasses.replace(settings, database_url=args.database_url)
        code: int = args.run(args, settings)  # each subcommand's `run` (build_parser) returns its exit code
        return code
    except InvalidRecordError as exc:
        fields = "; ".join(f"{e['field']}: {e['message']}" for e in exc.errors)
        return _fail(2, f"{exc.detail} ({fields})")
    except (InputError, SettingsError, HeadroomError) as exc:
        return _fail(2, str(exc))
    except KeyboardInterrupt:
        return _fail(1, "interrupted")
    except Exception as exc:  # noqa: BLE001  the one-line message is the CLI's contract; the type says where to look
        return _fail(1, f"{type(exc).__name__}: {' '.join(str(exc).split())}")


def _fail(code: int, message: str) -> int:
    print(f"headroom: error: {message}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headroom",
        description="Capacity-planning optimizer for LLM inference.",
        epilog="The database is HEADROOM_DATABASE_URL (default: sqlite:///./headroom.db).",
    )
    parser.add_argument("--database-url", help="SQLAlchemy database URL (overrides HEADROOM_DATABASE_URL)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="migrate, seed an empty catalog, and serve the API")
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    serve.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        help="server processes (uvicorn's workers, default 1): each serves the whole API with its own caches",
    )
    serve.set_defaults(run=_serve)

    db = commands.add_parser("db", help="database schema and reference data").add_subparsers(
        dest="db_command", required=True, metavar="ACTION"
    )
    upgrade = db.add_parser("upgrade", help="migrate up to REV (default head)")
    upgrade.add_argument("revision", nargs="?", default="head", metavar="REV")
    upgrade.set_defaults(run=_db_upgrade)
    downgrade = db.add_parser("downgrade", help="migrate down to REV (base drops every table)")
    downgrade.add_argument("revision", metavar="REV")
    downgrade.set_defaults(run=_db_downgrade)
    current = db.add_parser("current", help="print the revision the database is at")
    current.set_defaults(run=_db_current)
    seed = db.add_parser(
        "seed", help="load the reference catalog into an empty catalog (else only engine profiles into empty engine tables)"
    )
    seed.set_defaults(run=_db_seed)

    catalog = commands.add_parser("catalog", help="the whole catalog as JSON or YAML").add_subparsers(
        dest="catalog_command", required=True, metavar="ACTION"
    )
    export = catalog.add_parser("export", help="write the catalog to FILE (.json, .yaml/.yml; - for JSON on stdout)")
    export.add_argument("file", metavar="FILE")
    export.set_defaults(run=_catalog_export)
    import_ = catalog.add_parser("import", help="upsert every record of FILE (.json, .yaml/.yml) into the catalog")
    import_.add_argument("file", metavar="FILE")
    import_.set_defaults(run=_catalog_import)

    keys = commands.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = keys.add_parser("create", help="issue a key and print it once (only its hash is stored)")
    create.add_argument("--role", required=True, choices=API_KEY_ROLES)
    create.set_defaults(run=_keys_create)
    list_ = keys.add_parser("list", help="every key: id, prefix, role, created, last used, revoked (never a secret)")
    list_.add_argument("--format", choices=("table", "json"), default="table", help="output format (default table)")
    list_.set_defaults(run=_keys_list)
    revoke = keys.add_parser("revoke", help="revoke key ID (its id, prefix hr_<id> or the whole key): 401 from its next request")
    revoke.add_argument("key", metavar="ID")
    revoke.set_defaults(run=_keys_revoke)

    client_cli.add_commands(commands)  # plan, replan, deploy: the scheduled-job commands (exit codes 0/2/3/4)
    operations_cli.add_commands(commands)  # worker, operations wait: operations' tasks and their progress

    openapi = commands.add_parser("openapi", help="the OpenAPI document").add_subparsers(
        dest="openapi_command", required=True, metavar="ACTION"
    )
    openapi_export = openapi.add_parser("export", help=f"write the OpenAPI document (default {DEFAULT_OPENAPI_PATH})")
    openapi_export.add_argument("file", nargs="?", default=str(DEFAULT_OPENAPI_PATH), metavar="FILE")
    openapi_export.set_defaults(run=_openapi_export)
    return parser


def _in_transaction(settings: Settings, work: Callable[[Catalog], Any]) -> Any:
    """Run `work` on a catalog in one transaction: committed if it returns, rolled back if it raises."""
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine)() as session, session.begin():
            return work(Catalog(session))
    finally:
        engine.dispose()


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from api.app import create_app

    migrate.upgrade(settings.database_url)
    if _in_transaction(settings, lambda catalog: catalog.load_reference_catalog()):
        print("headroom: loaded the reference catalog into the empty database", file=sys.stderr)
    if settings.admin_key is not None:
        print("headroom: HEADROOM_ADMIN_KEY is accepted as an admin API key", file=sys.stderr)
    from api.fleet_tables import start_table_workers, stop_table_workers
    from api.observability import UVICORN_LOG_CONFIG
    from planner.queueing import warm_up

    # uvicorn's own lines as JSON too; its access log is replaced by the app's headroom.access line
    options: dict[str, Any] = {
        "host": args.host, "port": args.port, "log_level": settings.log_level,
        "log_config": UVICORN_LOG_CONFIG, "access_log": False,
    }  # fmt: skip
    if args.workers > 1:
        # uvicorn starts each worker process from an import string: the worker builds its app from
        # the environment, so the database this command was given travels there.
        os.environ["HEADROOM_DATABASE_URL"] = settings.database_url
        uvicorn.run("api.cli:worker_app", factory=True, workers=args.workers, **options)
        return 0

    warm_up()  # the compiled queueing kernels, before the first plan request rather than during it
    start_table_workers()

    # SIGTERM: uvicorn shuts the app down (its lifespan stops the table workers) and re-raises the
    # signal; `finally` stops them where uvicorn returns or raises instead (a port already in use).
    # SIGKILL runs nothing here: the workers watch the service and exit (api/table_worker.py).
    try:
        uvicorn.run(create_app(settings), **options)
    finally:
        stop_table_workers()
    return 0


def worker_app() -> FastAPI:
    """The app of one `headroom serve --workers N` process, configured from the environment; its
    queueing kernels are loaded before it serves, its table workers on its first fleet plan."""
    from api.app import create_app
    from planner.queueing import warm_up

    warm_up()
    return create_app()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    migrate.upgrade(settings.database_url, args.revision)
    print(f"database at {migrate.current_revision(settings.database_url) or 'base'}")
    return 0


def _db_downgrade(args: argparse.Namespace, settings: Settings) -> int:
    migrate.downgrade(settings.database_url, args.revision)
    print(f"database at {migrate.current_revision(settings.database_url) or 'base'}")
    return 0


def _db_current(_args: argparse.Namespace, settings: Settings) -> int:
    revision = migrate.current_revision(settings.database_url)
    head = migrate.head_revision()
    print(f"{revision or 'base'}{' (head)' if revision == head else f' (head is {head})'}")
    return 0


def _db_seed(_args: argparse.Namespace, settings: Settings) -> int:
    loaded = _in_transaction(settings, lambda catalog: catalog.load_reference_catalog())
    if loaded:
        print("loaded the reference catalog")
        return 0
    # a catalog from before migration 0014 gets the reference engine profiles (docs/engines.md) and nothing else
    engines = _in_transaction(settings, lambda catalog: catalog.load_reference_engine_profiles())
    print("the catalog is not empty: " + ("loaded the reference engine profiles only" if engines else "nothing loaded"))
    return 0


def _catalog_export(args: argparse.Namespace, settings: Settings) -> int:
    data = _in_transaction(settings, lambda catalog: catalog.export_catalog())
    if args.file == "-":
        sys.stdout.write(_dump(data, "-"))
        return 0
    path = Path(args.file)
    try:
        path.write_text(_dump(data, args.file), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from exc
    counts = ", ".join(f"{len(data.get(key, []))} {key}" for key in ("gpus", "models", "quantizations", "efficiency_profiles"))
    print(f"wrote {counts} (catalog version {data.get('catalog_version')}) to {path}")
    return 0


def _catalog_import(args: argparse.Namespace, settings: Settings) -> int:
    data = _load(Path(args.file))
    counts = _in_transaction(settings, lambda catalog: catalog.import_catalog(data))
    print(", ".join(f"{key} {value}" for key, value in counts.items()))
    return 0


def _keys_create(args: argparse.Namespace, settings: Settings) -> int:
    key = _in_transaction(settings, lambda catalog: ApiKeys(catalog.session).create(args.role))
    print(key)
    print(f"headroom: created a {args.role} key; it is shown only this once", file=sys.stderr)
    return 0


def _keys_list(args: argparse.Namespace, settings: Settings) -> int:
    keys = _in_transaction(settings, lambda catalog: ApiKeys(catalog.session).list())
    rows = [
        {
            "id": key.id,
            "prefix": key.prefix,
            "role": key.role,
            "created_at": key.created_at.isoformat(),
            "last_used_at": key.last_used_at.isoformat() if key.last_used_at else None,
            "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
        }
        for key in keys
    ]
    if args.format == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    columns = ("id", "role", "created_at", "last_used_at", "revoked_at")
    table = [columns, *[tuple(row[column] or "-" for column in columns) for row in rows]]
    widths = [max(len(str(line[i])) for line in table) for i in range(len(columns))]
    for line in table:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    return 0


def _keys_revoke(args: argparse.Namespace, settings: Settings) -> int:
    key_id = key_id_of(args.key)
    revoked = _in_transaction(settings, lambda catalog: ApiKeys(catalog.session).revoke(key_id))
    if revoked is None:
        raise InputError(f"no API key with id {key_id!r} (headroom keys list shows them)")
    print(f"revoked {revoked.prefix} ({revoked.role}) at {revoked.revoked_at.isoformat() if revoked.revoked_at else '-'}")
    return 0


def _openapi_export(args: argparse.Namespace, _settings: Settings) -> int:
    path = Path(args.file)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(openapi_document(), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from exc
    print(f"wrote {path}")
    return 0


def openapi_document() -> str:
    """The app's OpenAPI document as committed in openapi/openapi.json: sorted keys, indent 2."""
    from api.app import create_app

    schema = create_app(Settings(database_url="sqlite://")).openapi()  # the schema never depends on settings
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _is_yaml(name: str) -> bool:
    return name.lower().endswith((".yaml", ".yml"))


def _dump(data: Any, name: str) -> str:
    if _is_yaml(name):
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _load(path: Path) -> Any:
    try:
        content = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return _plain(yaml.safe_load(content)) if _is_yaml(path.name) else json.loads(content)
    except (ValueError, yaml.YAMLError) as exc:
        raise InputError(
            f"{path} is not valid {'YAML' if _is_yaml(path.name) else 'JSON'}: {' '.join(str(exc).split())}"
        ) from exc


def _plain(value: Any) -> Any:
    """YAML's dates (an unquoted `as_of: 2026-10-01`) as the ISO strings JSON records carry."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, date):
        return value.isoformat()
    return value


if __name__ == "__main__":
    sys.exit(main())
