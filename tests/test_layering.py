"""Imports point one way: api → catalog → planner. `planner/` stays pure (no web, database or
migration framework, no api/catalog), and `catalog/` never imports `api`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLANNER_FORBIDDEN = frozenset({"fastapi", "starlette", "sqlalchemy", "alembic", "uvicorn", "psycopg", "api", "catalog"})


def imported_roots(path: Path) -> set[str]:
    """Top-level package names `path` imports (absolute imports; relative ones stay inside the package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "__import__"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            roots.add(node.args[0].value.split(".")[0])
    return roots


def violations(package: str, forbidden: frozenset[str]) -> list[str]:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no Python files under {package}/"
    return [
        f"{path.relative_to(ROOT)} imports {', '.join(sorted(imported_roots(path) & forbidden))}"
        for path in files
        if imported_roots(path) & forbidden
    ]


def test_planner_is_pure() -> None:
    assert violations("planner", PLANNER_FORBIDDEN) == []


def test_catalog_does_not_import_api() -> None:
    assert violations("catalog", frozenset({"api"})) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import sqlalchemy.orm", {"sqlalchemy"}),
        ("from fastapi import FastAPI", {"fastapi"}),
        ("from catalog.repository import Catalog", {"catalog"}),
        ("from . import specs", set()),
        ("x = __import__('api.app')", {"api"}),
    ],
)
def test_the_scanner_sees_each_import_form(tmp_path: Path, source: str, found: set[str]) -> None:
    path = tmp_path / "module.py"
    path.write_text(source + "\n", encoding="utf-8")
    assert imported_roots(path) & PLANNER_FORBIDDEN == found
