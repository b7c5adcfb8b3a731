"""The HTTP server of many hollow machines in one process, for scale tests only: each machine under its own URL prefix.

Machine M answers at `/m/M/v1/sync`, `/m/M/v1/state` and `/m/M/healthz`, so the address it is
registered with, `http://HOST:PORT/m/M`, is used by the master's poller unchanged. The server
as a whole answers `/healthz` and `/v1/hollow` (what runs on every machine, for tests).

With the cell's channel key, a machine obeys only requests signed for it, as a borglet does
(`channel.check_request`, the check of the borglet's `Verifier`): anything under `/m/M/` but
its `/healthz` is answered 401 unless signed with the key for machine M. The server's own
`/healthz` and `/v1/hollow` stay open, as a borglet's `/healthz` and `/metrics` do: they only
read. Without a key (`--insecure-channel`) every request is obeyed.

A bare ASGI app rather than FastAPI: ten thousand machines polled every few seconds on two
cores shared with the masters and etcd leave little time per request, and routing and
encoding through FastAPI cost several times what the simulated machine itself does. Every
request is handled on the event loop's one thread, which is what `HollowMachine` expects.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from reference import channel, wirelimits
from reference.borglet.core import SyncRefused
from reference.borglet.hollow import HollowMachine
from reference.borglet.protocol import SyncRequest

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

MAX_BODY_BYTES = 64 << 20  # a sync of many thousand tasks is a few MiB
# The wire refuses a larger body before the app reads it (reference/wirelimits.py).
WIRE_LIMITS = replace(wirelimits.BORGLET, max_signed_body_bytes=MAX_BODY_BYTES)


class HollowApp:
    """The ASGI app of a set of hollow machines, by name; with `channel_key`, each obeys only
    requests signed with it for that machine."""

    def __init__(
        self, machines: Mapping[str, HollowMachine], channel_key: bytes | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        self.machines = dict(machines)
        self.channel_key, self.clock = channel_key, clock
        self.requests = 0
        self.refused = 0  # requests answered 401

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        self.requests += 1
        method, path = scope["method"], scope["path"]
        body = b""
        signer = self.signed_for(path)
        if signer is not None and self.channel_key is not None:
            problem, body = await channel.check_request(
                self.channel_key, signer, scope, receive, self.clock(), max_body=MAX_BODY_BYTES
            )
            if problem is not None:
                self.refused += 1
                await channel.refuse(send, *problem)
                return
        elif method == "POST":
            body = await _body(receive)
            if body is None:
                await _reply(
                    send,
                    413,
                    {"detail": [{"field": "body", "error": f"larger than {MAX_BODY_BYTES} bytes"}]},
                )
                return
        status, answer = self.handle(method, path, body)
        await _reply(send, status, answer)

    def signed_for(self, path: str) -> str | None:
        """The machine a request to `path` must be signed for when the cell has a key: the
        one it is addressed to, but not for its /healthz; None for the server's own paths."""
        name, endpoint = _split(path)
        return name if name in self.machines and endpoint != "healthz" else None

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """(HTTP status, JSON body) for one request."""
        if path == "/healthz" and method == "GET":
            return 200, {"ok": True, "machines": len(self.machines), "requests": self.requests}
        if path == "/v1/hollow" and method == "GET":
            return 200, self.summary()
        if path == "/v1/hollow/jobs" and method == "GET":
            return 200, self.jobs()
        name, endpoint = _split(path)
        machine = self.machines.get(name)
        if machine is None:
            return 404, {"detail": [{"field": "path", "error": f"no hollow machine serves {path}"}]}
        if endpoint == "v1/sync" and method == "POST":
            return self._sync(machine, body)
        if endpoint == "v1/state" and method == "GET":
            return 200, machine.report()
        if endpoint == "healthz" and method == "GET":
            return 200, {"ok": True, "machine": name}
        return 404, {
            "detail": [
                {"field": "path", "error": f"no {method} /{endpoint} on hollow machine {name}"}
            ]
        }

    def _sync(self, machine: HollowMachine, body: bytes) -> tuple[int, Any]:
        try:
            request = SyncRequest.model_validate_json(body)
        except ValidationError as err:
            return 422, {"detail": [_problem(e) for e in err.errors(include_url=False)]}
        try:
            return 200, machine.sync(request)
        except SyncRefused as refused:
            return 409, {
                "error": str(refused),
                "reason": refused.reason,
                "epoch": refused.fence.epoch,
                "seq": refused.fence.seq,
                "revision": refused.fence.revision,
                "machine": machine.config.name,
            }

    def summary(self) -> dict[str, Any]:
        """Every machine's running task ids and any task id started more than once."""
        running: dict[str, list[str]] = {}
        twice: list[str] = []
        for name, machine in self.machines.items():
            report = machine.report()
            ids = [t["task_id"] for t in report["tasks"] if t["state"] == "RUNNING"]
            if ids:
                running[name] = ids
            twice.extend(tid for tid, n in machine.starts.items() if n > 1)
        return {"machines": len(self.machines), "running": running, "started_twice": sorted(twice)}


    def jobs(self) -> dict[str, Any]:
        """Per job: its task indices RUNNING on any hollow machine (an index counted once, however
        many processes it has) and when the first and the last of them started (wall clock); how many task
        ids were started more than once, and how many indices run more than one process (on two
        machines, or two incarnations): what a scale campaign reads instead of every task id."""
        out: dict[str, dict[str, Any]] = {}
        twice = 0
        processes: dict[tuple[str, int], int] = {}
        for machine in self.machines.values():
            machine.advance(machine.clock())
            for task in machine.tasks.values():
                if task.phase != "RUNNING":
                    continue
                j = out.setdefault(task.spec.job, {"running": 0, "first_started_at": None, "last_started_at": 0.0})
                index = (task.spec.job, task.spec.index) if task.spec.job else (task.spec.task_id, -1)
                processes[index] = processes.get(index, 0) + 1
                j["running"] += processes[index] == 1
                started = float(task.started_at or 0.0)
                j["last_started_at"] = max(j["last_started_at"], started)
                if j["first_started_at"] is None or started < j["first_started_at"]:
                    j["first_started_at"] = started
            twice += sum(1 for n in machine.starts.values() if n > 1)
        index_twice = sum(1 for n in processes.values() if n > 1)
        return {"jobs": out, "started_twice": twice, "index_twice": index_twice}


def _split(path: str) -> tuple[str, str]:
    """(machine, endpoint) of `/m/<machine>/<endpoint>`; ("", "") for any other path."""
    prefix, _, rest = path.partition("/m/")
    name, slash, endpoint = rest.partition("/")
    return (name, endpoint) if not prefix and slash else ("", "")


def _problem(error: Mapping[str, Any]) -> dict[str, str]:
    field = ".".join(str(part) for part in error.get("loc", ())) or "body"
    return {"field": field, "error": str(error.get("msg", "invalid"))}


async def _body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _reply(send: Send, status: int, answer: Any) -> None:
    body = json.dumps(answer, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
