"""The catalog's exceptions, each an expected outcome the API maps to a problem document.

HeadroomError                       (planner/errors.py)
└── CatalogError
    ├── NotFoundError               no row with that slug (or profile name)           → 404
    ├── AlreadyExistsError          a row with that slug exists already                → 409
    ├── VersionConflictError        If-Match version differs from the stored one       → 412/409
    └── InvalidRecordError          a record breaks a type or a physical invariant     → 422
                                    extensions: errors=[{"field": ..., "message": ...}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from planner.errors import HeadroomError


class CatalogError(HeadroomError):
    title = "Catalog error"


class NotFoundError(CatalogError):
    title = "Not found"


class AlreadyExistsError(CatalogError):
    title = "Already exists"


class VersionConflictError(CatalogError):
    title = "Version conflict"


class InvalidRecordError(CatalogError, ValueError):
    """Every bad field of a record at once, as `errors=[{"field": "moe.experts", "message": ...}]`."""

    title = "Invalid record"

    def __init__(self, detail: str, *, errors: Sequence[Mapping[str, str]], **extensions: Any) -> None:
        super().__init__(detail, errors=[dict(error) for error in errors], **extensions)

    @property
    def errors(self) -> list[dict[str, str]]:
        errors: list[dict[str, str]] = self.extensions["errors"]  # set in __init__ as exactly this shape
        return errors
