"""The `headroom` command line, called in-process through `api.cli.main` on the test database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Engine, text

from api.cli import main
from catalog import migrate
from catalog.api_keys import ApiKeys
from catalog.db import make_engine, make_session_factory
from tests.api.client import ApiClient
from tests.api.conftest import GPU_RECORD, assert_problem


def run(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--database-url", url, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_db_upgrade_current_downgrade(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    head = migrate.head_revision()
    assert run(capsys, database_url, "db", "current")[1].startswith("base")
    code, out, _ = run(capsys, database_url, "db", "upgrade")
    assert (code, out.strip()) == (0, f"database at {head}")
    assert migrate.is_at_head(database_url)
    assert run(capsys, database_url, "db", "current")[1].strip() == f"{head} (head)"
    code, out, _ = run(capsys, database_url, "db", "downgrade", "base")
    assert (code, out.strip()) == (0, "database at base")
    assert migrate.current_revision(database_url) is None
    assert run(capsys, database_url, "db", "upgrade", "head")[0] == 0
    assert migrate.is_at_head(database_url)


def _export(capsys: pytest.CaptureFixture[str], url: str, path: Path) -> Any:
    code, out, err = run(capsys, url, "catalog", "export", str(path))
    assert code == 0, err
    assert str(path) in out
    text = path.read_text(encoding="utf-8")
    return yaml.safe_load(text) if path.suffix == ".yaml" else json.loads(text)


def test_seed_export_import_round_trip(database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Seed, export as JSON and YAML, import each into a fresh database: the exports are identical."""
    run(capsys, database_url, "db", "upgrade")
    assert run(capsys, database_url, "db", "seed")[1].strip() == "loaded the reference catalog"
    assert run(capsys, database_url, "db", "seed")[1].strip() == "the catalog is not empty: nothing loaded"
    original = _export(capsys, database_url, tmp_path / "catalog.json")
    assert len(original["gpus"]) >= 12
    assert len(original["models"]) >= 12
    assert {"fp16", "bf16", "fp8", "int8", "int4-awq", "nvfp4"} <= {q["slug"] for q in original["quantizations"]}
    assert _export(capsys, database_url, tmp_path / "catalog.yaml") == original

    for source in ("catalog.json", "catalog.yaml"):
        fresh = f"sqlite:///{tmp_path / f'fresh-{source}.db'}"
        run(capsys, fresh, "db", "upgrade")
        code, out, err = run(capsys, fresh, "catalog", "import", str(tmp_path / source))
        assert code == 0, err
        records = sum(
            len(original[key]) for key in ("gpus", "models", "quantizations", "efficiency_profiles", "prices", "instance_types")
        ) + sum(len(original["engine_profiles"][key]) for key in ("profiles", "low_precision"))
        assert out.startswith(f"created {records}, updated 0, unchanged 0")
        assert _export(capsys, fresh, tmp_path / f"again-{source}.json") == original

    # Importing the export again into the same database changes no record.
    code, out, _ = run(capsys, database_url, "catalog", "import", str(tmp_path / "catalog.json"))
    assert code == 0
    assert "created 0, updated 0" in out
    again = _export(capsys, database_url, tmp_path / "again.json")
    assert {key: value for key, value in again.items() if key != "catalog_version"} == {
        key: value for key, value in original.items() if key != "catalog_version"
    }


def test_yaml_import_accepts_unquoted_dates(
    migrated_database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gpu.yml"
    path.write_text(yaml.safe_dump({"gpus": [GPU_RECORD]}).replace("'2026-10-01'", "2026-10-01"), encoding="utf-8")
    assert "as_of: 2026-10-01" in path.read_text()
    assert run(capsys, migrated_database_url, "catalog", "import", str(path))[0] == 0
    exported = _export(capsys, migrated_database_url, tmp_path / "out.json")
    assert exported["gpus"][0]["price_usd_per_hour"]["as_of"] == "2026-10-01"


def test_keys_create_prints_a_working_key_once(
    migrated_database_url: str, capsys: pytest.CaptureFixture[str], make_client: Any
) -> None:
    code, out, err = run(capsys, migrated_database_url, "keys", "create", "--role", "admin")
    assert code == 0
    key = out.strip()
    assert key.startswith("hr_")
    assert "only this once" in err
    client: ApiClient = make_client(admin_key=None)
    assert client.post("/v1/gpus", json=GPU_RECORD, headers={"Authorization": f"Bearer {key}"}).status_code == 201

    code, out, _ = run(capsys, migrated_database_url, "keys", "create", "--role", "reader")
    reader = {"Authorization": f"Bearer {out.strip()}"}
    assert_problem(client.delete("/v1/gpus/h100-sxm", headers=reader), 403)

    engine: Engine = make_engine(migrated_database_url)
    try:
        with make_session_factory(engine)() as session:
            assert ApiKeys(session).role_for_key(key) == "admin"
            stored = session.execute(text("SELECT secret_sha256 FROM api_keys")).scalars().all()
    finally:
        engine.dispose()
    assert len(stored) == 2
    assert all(key.split("_")[-1] not in digest for digest in stored)  # only hashes are stored


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["catalog", "import", "/no/such/file.json"], "cannot read"),
        (["catalog", "import", "{bad}"], "not valid JSON"),
        (["catalog", "import", "{invalid}"], "gpus[0].memory_gb"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    migrated_database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "invalid.json").write_text(json.dumps({"gpus": [GPU_RECORD | {"memory_gb": -1}]}), encoding="utf-8")
    args = [arg.replace("{bad}", str(tmp_path / "bad.json")).replace("{invalid}", str(tmp_path / "invalid.json")) for arg in args]
    code, _, err = run(capsys, migrated_database_url, *args)
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("headroom: error: ")
    assert message in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["keys", "create", "--role", "root"], ["db", "downgrade"], []):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
    capsys.readouterr()


def test_bad_settings_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HEADROOM_REQUIRE_AUTH", "maybe")
    assert main(["db", "current"]) == 2
    assert "HEADROOM_REQUIRE_AUTH" in capsys.readouterr().err


def test_unreachable_database_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, f"sqlite:///{tmp_path / 'missing' / 'x.db'}", "db", "upgrade")
    assert code == 1
    assert err.startswith("headroom: error: OperationalError")
    assert err.count("\n") == 1


def test_openapi_export_writes_the_committed_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nested" / "openapi.json"
    assert main(["openapi", "export", str(path)]) == 0
    capsys.readouterr()
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    document = json.loads(text)
    assert text == json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert document["info"]["title"] == "Headroom"


def test_console_script_points_at_main() -> None:
    import tomllib

    from tests.api.test_openapi import ROOT

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, function = scripts["headroom"].partition(":")
    assert (module, function) == ("api.cli", "main")
