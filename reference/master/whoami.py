"""`GET /v1/whoami`: the user the request's token names, so that a client can default to that user's jobs (`minborg job show hello_world`)."""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from reference.master import contract
from reference.master.guard import identity_of
from reference.master.querycheck import freshness_query


def register(app: FastAPI) -> None:
    """Add /v1/whoami to a master's app: any valid token may ask who it names."""

    @app.get("/v1/whoami", dependencies=[Depends(freshness_query)], responses=contract.answers(503))
    async def whoami(request: Request) -> JSONResponse:
        """The token's user and whether it is the admin; `user` is null where the masters check no tokens."""
        who = identity_of(request.scope)
        if who is None:
            return JSONResponse({"user": None, "admin": None})
        return JSONResponse({"user": who.name, "admin": who.admin})
