"""API keys: shown once, stored as a hash, checked in constant time."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from catalog.api_keys import ApiKeys
from catalog.errors import InvalidRecordError
from catalog.models import ApiKeyRow
from catalog.repository import Catalog


@pytest.mark.parametrize("role", ["admin", "planner", "reader"])
def test_a_new_key_has_its_role(catalog: Catalog, role: str) -> None:
    key = ApiKeys(catalog.session).create(role)
    assert key.startswith("hr_")
    assert ApiKeys(catalog.session).role_for_key(key) == role


def test_only_the_hash_of_the_secret_is_stored(catalog: Catalog, session: Session) -> None:
    key = ApiKeys(catalog.session).create("admin")
    _, key_id, secret = key.split("_", 2)
    row = session.scalars(select(ApiKeyRow)).one()
    assert row.id == key_id
    assert row.secret_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    stored = " ".join(str(value) for value in (row.id, row.secret_sha256, row.role))
    assert secret not in stored
    assert key not in stored


def test_wrong_unknown_or_malformed_keys_have_no_role(catalog: Catalog) -> None:
    key = ApiKeys(catalog.session).create("admin")
    other = ApiKeys(catalog.session).create("reader")
    _, key_id, secret = key.split("_", 2)
    _, _other_id, other_secret = other.split("_", 2)
    tampered = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    assert ApiKeys(catalog.session).role_for_key(f"hr_{key_id}_{tampered}") is None
    assert ApiKeys(catalog.session).role_for_key(f"hr_{key_id}_{other_secret}") is None  # another key's secret
    assert ApiKeys(catalog.session).role_for_key(f"hr_{'0' * 16}_{secret}") is None
    for malformed in ("", "hr_", key_id, secret, f"xx_{key_id}_{secret}", f"Bearer {key}", key + " "):
        assert ApiKeys(catalog.session).role_for_key(malformed) is None
    assert ApiKeys(catalog.session).role_for_key(other) == "reader"


def test_keys_are_unique_and_revocable(catalog: Catalog) -> None:
    keys = {ApiKeys(catalog.session).create("planner") for _ in range(5)}
    assert len(keys) == 5
    key = keys.pop()
    revoked = ApiKeys(catalog.session).revoke(key.split("_", 2)[1])
    assert revoked is not None and revoked.revoked_at is not None
    assert ApiKeys(catalog.session).role_for_key(key) is None
    assert ApiKeys(catalog.session).revoke(key.split("_", 2)[1]) == revoked  # revoked once: the first time stands


def test_unknown_role_is_invalid(catalog: Catalog) -> None:
    with pytest.raises(InvalidRecordError) as error:
        ApiKeys(catalog.session).create("root")
    assert error.value.errors[0]["field"] == "role"


def test_listing_shows_role_created_last_use_and_revocation_never_a_secret(catalog: Catalog) -> None:
    keys = ApiKeys(catalog.session)
    key = keys.create("reader")
    key_id = key.split("_", 2)[1]
    [listed] = keys.list()
    assert (listed.id, listed.prefix, listed.role, listed.revoked_at) == (key_id, f"hr_{key_id}_", "reader", None)
    assert key.startswith(listed.prefix) and key.split("_", 2)[2] not in repr(listed)
    revoked = keys.revoke(key_id)
    assert revoked is not None and revoked.revoked_at is not None
    assert keys.role_for_key(key) is None
    assert keys.revoke(key_id) == revoked  # the first revocation stands
    assert keys.revoke("0" * 16) is None
    assert [k.revoked_at for k in keys.list()] == [revoked.revoked_at]
