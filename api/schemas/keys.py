"""API keys as an administrator sees them (GET /v1/keys): never a secret, only its prefix."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class ApiKeyRead(BaseModel):
    id: str = Field(description="The key's public id: `hr_<id>_...` is the key.", examples=["0f3c9a1b2c4d5e6f"])
    prefix: str = Field(
        description="What the key starts with, to recognise it where it is kept.", examples=["hr_0f3c9a1b2c4d5e6f_"]
    )
    role: str = Field(description="admin, planner or reader.")
    created_at: datetime
    last_used_at: datetime | None = Field(description="The last request it authenticated (to the minute); null if never.")
    revoked_at: datetime | None = Field(description="When it was revoked; null while it is valid.")
    revoked: bool


class ApiKeyList(BaseModel):
    items: list[ApiKeyRead] = Field(description="Every key issued, revoked ones included, oldest first.")
    total: int
