"""Dependencies routes declare with `Annotated` aliases: the settings, one database session per
request, the catalog and the stores on that session (plans, fleet plans, deployments, prices,
instance types, API keys, operations), the operations' task engine, the caller's API key role,
and the If-Match version.

The session commits when the route returns and rolls back when it raises, before the response
is sent (dependency scope "function"), so a 2xx means the write is durable and a problem
response means nothing was written. Routes never touch the session or status codes themselves:
they get the catalog or a store (FastAPI resolves `_session` once per request, so every store a
route declares shares the one transaction) and hand it to a service.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.errors import AuthenticationError, MalformedHeaderError, PermissionDeniedError
from api.operations import OperationQueue
from api.settings import Settings
from catalog.api_keys import ApiKeys
from catalog.deployments import Deployments
from catalog.fleet_plans import FleetPlans
from catalog.instances import InstanceTypes
from catalog.operations import Operations
from catalog.plans import Plans
from catalog.prices import Prices
from catalog.repository import Catalog

#: Roles in increasing power; a role may do what every role before it may.
ROLES: tuple[str, ...] = ("reader", "planner", "admin")


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(_settings)]


def _session(request: Request) -> Iterator[Session]:
    with request.app.state.session_factory() as session:
        try:
            yield session
        except BaseException:
            session.rollback()
            raise
        session.commit()


SessionDep = Annotated[Session, Depends(_session, scope="function")]


def _catalog(session: SessionDep) -> Catalog:
    return Catalog(session)


CatalogDep = Annotated[Catalog, Depends(_catalog)]


def _plans(session: SessionDep) -> Plans:
    return Plans(session)


def _fleet_plans(session: SessionDep) -> FleetPlans:
    return FleetPlans(session)


def _deployments(session: SessionDep) -> Deployments:
    return Deployments(session)


def _prices(session: SessionDep) -> Prices:
    return Prices(session)


def _instance_types(session: SessionDep) -> InstanceTypes:
    return InstanceTypes(session)


def _keys(session: SessionDep) -> ApiKeys:
    return ApiKeys(session)


def _operations(session: SessionDep) -> Operations:
    return Operations(session)


def _tasks(request: Request) -> OperationQueue:
    tasks: OperationQueue = request.app.state.tasks
    return tasks


#: The stores on the request's session (catalog/plans.py, fleet_plans.py, deployments.py, prices.py,
#: instances.py, api_keys.py, operations.py).
PlansDep = Annotated[Plans, Depends(_plans)]
FleetPlansDep = Annotated[FleetPlans, Depends(_fleet_plans)]
DeploymentsDep = Annotated[Deployments, Depends(_deployments)]
PricesDep = Annotated[Prices, Depends(_prices)]
InstanceTypesDep = Annotated[InstanceTypes, Depends(_instance_types)]
KeysDep = Annotated[ApiKeys, Depends(_keys)]
OperationsDep = Annotated[Operations, Depends(_operations)]
#: The app's task engine (api/tasks.py): submits operations with their own transaction, committed
#: before their first message is sent.
TasksDep = Annotated[OperationQueue, Depends(_tasks)]

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description=(
        "An API key as `Authorization: Bearer <key>` (`headroom keys create --role ...`). "
        "Writes to the catalog need role admin; reads need any valid key only when the service runs "
        "with HEADROOM_REQUIRE_AUTH=1."
    ),
)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _caller_role(
    settings: SettingsDep,
    keys: KeysDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str | None:
    """The role of the presented key; None without a key; 401 for a key nobody issued or a revoked one."""
    if credentials is None:
        return None
    key = credentials.credentials
    if settings.admin_key is not None and hmac.compare_digest(_digest(key), _digest(settings.admin_key)):
        return "admin"
    role = keys.role_for_key(key, record_use=True)  # a revoked key fails here, from its next request
    if role is None:
        raise AuthenticationError("The API key is not valid.")
    return role


CallerRoleDep = Annotated[str | None, Depends(_caller_role)]


def require_role(minimum: str) -> Callable[..., str]:
    """A dependency that answers 401 without a valid key and 403 when its role is below `minimum`."""
    if minimum not in ROLES:
        raise ValueError(f"unknown role {minimum!r}")

    def dependency(role: CallerRoleDep) -> str:
        if role is None:
            raise AuthenticationError(f"This operation needs an API key with role {minimum}: send Authorization: Bearer <key>.")
        if ROLES.index(role) < ROLES.index(minimum):
            raise PermissionDeniedError(f"This operation needs role {minimum}; the key has role {role}.", role=role)
        return role

    return dependency


def _reader(settings: SettingsDep, role: CallerRoleDep) -> str | None:
    if settings.require_auth and role is None:
        raise AuthenticationError("This service requires an API key for every request: send Authorization: Bearer <key>.")
    return role


def authorize_plan(settings: Settings, role: str | None, *, store: bool) -> None:
    """POST /v1/plans: storing a plan needs role planner; a dry run (`store: false`) writes nothing
    and is authorised as a read."""
    if store:
        require_role("planner")(role)
    else:
        _reader(settings, role)


#: Writes to the catalog.
AdminKeyDep = Annotated[str, Depends(require_role("admin"))]
#: Planning operations (plans, calibrations) that write results but not the catalog.
PlannerKeyDep = Annotated[str, Depends(require_role("planner"))]
#: Reads: no key needed unless HEADROOM_REQUIRE_AUTH=1, then any valid key.
ReaderDep = Annotated[str | None, Depends(_reader)]

_ETAG = re.compile(r'^\s*"(\d{1,18})"\s*$')


def etag(version: int) -> str:
    """The strong entity tag of a record at `version`."""
    return f'"{version}"'


def _if_match(
    if_match: Annotated[
        str | None,
        Header(
            alias="If-Match",
            description=(
                'Update only if the stored record still has this ETag (e.g. `"3"`, from a GET); '
                "otherwise 412. Omit it to write unconditionally."
            ),
        ),
    ] = None,
) -> int | None:
    if if_match is None or if_match.strip() == "*":
        return None
    match = _ETAG.match(if_match)
    if match is None:
        raise MalformedHeaderError(
            f'If-Match must be one strong entity tag such as "3" (from the ETag header), got {if_match!r}.'
        )
    return int(match.group(1))


#: The record version named by If-Match; None when absent or `*`.
IfMatchDep = Annotated[int | None, Depends(_if_match)]
