"""The cell's users in etcd: the admin's token hash stored at start, and `/v1/users` to add, list and revoke users (admin only).

A user is not cell state the scheduler reads, so any replica writes its record straight to
etcd (a create guarded on the key being absent, or a delete) instead of through the leader's
writer; every replica's watch cache sees the change within a watch round trip, which is how
a revocation reaches every replica. Only a token's SHA-256 is stored; the token itself is
answered once, to the admin who added the user.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from fastapi import Body, Depends, FastAPI
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from reference.master import codec, contract
from reference.master.access import (
    ADMIN,
    USER_NAME,
    USER_NAME_RULE,
    UserRecord,
    hash_token,
    new_token,
)
from reference.master.querycheck import freshness_query
from reference.store import ops
from reference.store.client import StoreClient, StoreError

log = logging.getLogger(__name__)

CATCH_UP_S = 2.0  # the longest an added user's answer waits for this replica's cache


def read_token_file(path: str | Path) -> str:
    """The token a file holds (surrounding whitespace dropped); ValueError naming the file if none."""
    text = Path(path).read_text().strip()
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"{path} must hold one token on one line")
    return text


def store_admin(client: StoreClient, keys: codec.Keys, admin_hash: str, clock: Any = time.time) -> bool:
    """Record the admin's token hash under users/admin; returns whether it was written.

    The first replica to start writes it; a later start with another admin token file
    replaces it (whoever starts the cell's masters holds its admin credential)."""
    key = keys.user(ADMIN)
    kv = client.get_kv(key)
    if kv is not None:
        try:
            if codec.decode_user(kv.value).token_sha256 == admin_hash:
                return False
        except (codec.SchemaError, KeyError, ValueError):
            pass
        log.warning("the admin token file differs from the admin recorded in etcd: recording the new one")
    record = UserRecord(ADMIN, admin_hash, admin=True, created_at=clock())
    client.put(key, codec.encode_user(record))
    return True


def user_view(u: UserRecord) -> dict[str, Any]:
    return {"name": u.name, "admin": u.admin, "created_at": u.created_at}


def _refusal(status: int, field: str, error: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": [{"field": field, "error": error}]})


def install(app: FastAPI, replica: Any) -> None:
    """Add /v1/users to a master's app (the guard in front lets only the admin through)."""
    client: StoreClient = replica.client
    keys: codec.Keys = replica.keys

    # A read of the watch cache like any other: it takes ReadGate's freshness controls.
    @app.get("/v1/users", dependencies=[Depends(freshness_query)], responses=contract.answers(503))
    async def list_users() -> JSONResponse:
        return JSONResponse({"users": [user_view(u) for u in replica.cache.users()]})

    @app.post("/v1/users", status_code=201, responses=contract.answers(409, 503))
    async def add_user(payload: Any = Body(None)) -> JSONResponse:
        """Add a user; the answer holds its token, which is stored nowhere (only its hash is)."""
        if not isinstance(payload, dict):
            return _refusal(422, "", 'the body must be a JSON object: {"name": "alice"}')
        if set(payload) - {"name"}:
            extra = sorted(set(payload) - {"name"})[0]
            return _refusal(422, str(extra), "unknown field; a user has only a name")
        name = payload.get("name")
        if not isinstance(name, str) or not USER_NAME.fullmatch(name):
            return _refusal(422, "name", f"a user name {USER_NAME_RULE}")
        token = new_token()
        record = UserRecord(name, hash_token(token), admin=False, created_at=time.time())
        key = keys.user(name)

        def create() -> bool:
            done, revision = client.txn([ops.create_revision(key, "==", 0)], [ops.put(key, codec.encode_user(record))])
            if done:
                # The token works on this replica as soon as its answer is read.
                replica.cache.wait_revision(revision, CATCH_UP_S)
            return done

        try:
            created = await run_in_threadpool(create)
        except StoreError as err:
            return JSONResponse(
                status_code=503,
                content={"detail": [{"field": "", "error": f"the store did not confirm the write: {err}"}]},
                headers={"Retry-After": "1"},
            )
        if not created:
            return _refusal(409, "name", f"user {name} exists; revoke it first to issue a new token")
        return JSONResponse(status_code=201, content={"user": user_view(record), "token": token})

    @app.delete("/v1/users/{name}", responses=contract.answers(404, 409, 503))
    async def revoke_user(name: str) -> JSONResponse:
        """Revoke a user's token: every replica refuses it once its watch cache sees the delete."""
        if name == ADMIN:
            return _refusal(409, "name", "the admin is not revoked: give the masters a new --admin-token-file")
        try:
            existed = await run_in_threadpool(client.delete, keys.user(name))
        except StoreError as err:
            return JSONResponse(
                status_code=503,
                content={"detail": [{"field": "", "error": f"the store did not confirm the delete: {err}"}]},
                headers={"Retry-After": "1"},
            )
        if not existed:
            return _refusal(404, "name", f"no user {name}")
        return JSONResponse({"revoked": name})
