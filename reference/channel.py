"""The authenticated master-borglet channel: a per-cell secret key, requests signed with it (HMAC-SHA256) by the master and checked by the borglet.

Every request a master sends to a borglet carries three headers:

- `X-Minborg-Channel-Time`: when it was signed, in seconds since the epoch;
- `X-Minborg-Channel-Machine`: the machine it is meant for (the caller sets it, `to_machine`);
- `X-Minborg-Channel-Signature`: `v1=` and the hex HMAC-SHA256, under the cell's key, of the
  method, the path with its query as sent, the time, the machine and the SHA-256 of the body.

The borglet (`Verifier`, an ASGI middleware) answers 401, before any handler runs, to a request
that lacks them, is signed with another key, was altered, is meant for another machine, or was
signed more than `WINDOW_S` seconds from its own clock. Naming the machine keeps a sync signed
for one borglet from being replayed to another inside the window; a replay to the same borglet
is refused by the sync protocol's (epoch, seq) fence. The signature authenticates the master;
in a cell run with TLS (`cell up --tls`) the channel is HTTPS besides: each borglet serves
with its own certificate from the cell's CA, which the masters verify (`trust_ca`, `peer_verify`),
so the borglet is authenticated to the master and nothing crosses the link in clear.
docs/decisions.md says why the signature stays on top of TLS rather than client certificates.

Use: `key = load_key(path)`; a client passes `auth=ClientAuth(key)` to its `httpx.Client` or
`httpx.AsyncClient` and `headers=to_machine(name)` to each request; a server wraps its ASGI app
in `Verifier(app, key, machine)`, or, serving many machines, calls `check_request` for the one
a request is addressed to.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import math
import os
import secrets
import ssl
import stat
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

KEY_FILE = "channel.key"  # its name in a local cell's state dir
KEY_BYTES = 32
WINDOW_S = 30.0  # how far a request's signing time may be from the borglet's clock
MAX_BODY_BYTES = 256 * 1024 * 1024  # a signed body is read whole before it is checked
TIME_HEADER = "X-Minborg-Channel-Time"
MACHINE_HEADER = "X-Minborg-Channel-Machine"
SIGNATURE_HEADER = "X-Minborg-Channel-Signature"
# On a borglet's answer: how many seconds its clock is off the request's signing time, when
# more than the window (it obeyed by `skew_floor`). The master shows it on the machine.
SKEW_HEADER = "X-Minborg-Channel-Skew"
SCHEME = "v1="
# On a request the borglet refuses: the cell asks it to stop its tasks (`StandDown`). Not
# signed (the borglet cannot check anything of a master whose signature it refuses): it counts
# only while no request it accepts comes between.
STAND_DOWN_HEADER = "X-Minborg-Stand-Down"
# How long a borglet must have refused every request, while asked to stand down, before it
# stops its tasks. The leader waits twice this before it declares the machine down and starts
# them elsewhere (shardreports.STAND_DOWN_WAIT_S).
STAND_DOWN_S = 10.0


class ChannelKeyError(ValueError):
    """A key file that is missing, malformed or readable by others."""


# --- the key ---------------------------------------------------------------------------------


def create_key_file(path: str | os.PathLike[str]) -> Path:
    """Write a new random key to `path` (mode 0600, created exclusively); a key already there
    is kept, so a cell restarted on its state dir keeps its key. Returns the path."""
    target = Path(path)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        load_key(target)  # refuse a bad one now rather than at the first start
        return target
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(KEY_BYTES) + "\n")
    return target


def load_key(path: str | os.PathLike[str]) -> bytes:
    """The key in `path`; ChannelKeyError saying what to fix if it is missing, open to other
    users (like ssh, a secret anyone can read is no secret) or not 64 hex digits."""
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text().strip()
    except OSError as err:
        raise ChannelKeyError(f"cannot read the channel key {path}: {err.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ChannelKeyError(
            f"the channel key {path} is open to other users (mode {stat.S_IMODE(mode):04o}): chmod 600 it"
        )
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise ChannelKeyError(f"the channel key {path} must hold {2 * KEY_BYTES} hex digits")
    return key


# --- signing and checking (pure) ---------------------------------------------------------------


def signed_text(method: str, target: bytes, timestamp: str, machine: str, body: bytes) -> bytes:
    """What the signature covers: method, path and query as sent, time, machine, body digest."""
    digest = hashlib.sha256(body).hexdigest()
    return b"\n".join(
        (method.upper().encode(), target, timestamp.encode(), machine.encode(), digest.encode())
    )


def signature(key: bytes, text: bytes) -> str:
    return SCHEME + hmac.new(key, text, hashlib.sha256).hexdigest()


def sign(
    key: bytes, method: str, target: bytes, body: bytes, machine: str, now: float
) -> dict[str, str]:
    """The headers that authenticate one request to `machine`, signed at `now`."""
    timestamp = f"{now:.3f}"
    return {
        TIME_HEADER: timestamp,
        MACHINE_HEADER: machine,
        SIGNATURE_HEADER: signature(key, signed_text(method, target, timestamp, machine, body)),
    }


def check_headers(
    headers: Mapping[str, str], machine: str, now: float, window_s: float = WINDOW_S,
    newer_than: float | None = None,
) -> tuple[str, str] | None:  # fmt: skip
    """(header, what is wrong) when the headers alone refuse the request, else None: checked
    before its body is read, so an unsigned request costs the borglet nothing. With
    `newer_than`, a signing time after it passes however far from `now` (`Verifier`)."""
    if not headers.get(SIGNATURE_HEADER):
        return (
            SIGNATURE_HEADER,
            "the request is not signed: the borglet obeys only its cell's masters",
        )
    raw = headers.get(TIME_HEADER, "")
    try:
        signed_at = float(raw)
    except ValueError:
        signed_at = math.nan
    if not math.isfinite(signed_at):
        return TIME_HEADER, f"must be the signing time in seconds since the epoch, not {raw[:40]!r}"
    if abs(now - signed_at) > window_s and not (newer_than is not None and signed_at > newer_than):
        return TIME_HEADER, skew_error(signed_at, now, window_s)
    if headers.get(MACHINE_HEADER, "") != machine:
        return (
            MACHINE_HEADER,
            f"the request is for machine {headers.get(MACHINE_HEADER, '')[:80]!r}, this is {machine!r}",
        )
    return None


def skew_error(signed_at: float, now: float, window_s: float = WINDOW_S) -> str:
    """Why a request signed at `signed_at` is refused by a borglet whose clock reads `now`:
    both times, so whoever reads it (the master's log, the machine's reason in the API) sees
    which clock is off and by how much."""
    ahead = now - signed_at
    side = "ahead of" if ahead > 0 else "behind"
    return (
        f"clock skew: request signed at {signed_at:.3f}, borglet clock {now:.3f} "
        f"({abs(ahead):.0f} s {side} the master's), more than the {window_s:.0f} s allowed: "
        "synchronize the clocks (NTP)"
    )


def verify(
    key: bytes, method: str, target: bytes, headers: Mapping[str, str], body: bytes, machine: str,
    now: float, window_s: float = WINDOW_S, newer_than: float | None = None,
) -> tuple[str, str] | None:  # fmt: skip
    """(header, what is wrong) for a request that is not from a holder of `key`, meant for
    `machine`, signed within `window_s` of `now` (or after `newer_than`) and unaltered; None
    for one that is."""
    problem = check_headers(headers, machine, now, window_s, newer_than)
    if problem is not None:
        return problem
    expected = signature(key, signed_text(method, target, headers[TIME_HEADER], machine, body))
    if not hmac.compare_digest(expected.encode(), headers[SIGNATURE_HEADER].encode()):
        return (
            SIGNATURE_HEADER,
            "the signature does not match: another cell's key, or an altered request",
        )
    return None


# --- TLS: whom a master trusts ------------------------------------------------------------------

_trusted: ssl.SSLContext | None = None


def ca_context(ca_file: str | os.PathLike[str]) -> ssl.SSLContext:
    """A client's TLS context that trusts the CA in `ca_file` alone and checks each server's
    name (its certificate's subjectAltNames) against the address it was reached at."""
    return ssl.create_default_context(cafile=os.fspath(ca_file))


def trust_ca(ca_file: str | os.PathLike[str] | None) -> None:
    """Verify every https server this process calls (borglets, other replicas, the leader)
    with the cell's CA in `ca_file`, from now on; None: the system's CAs again."""
    global _trusted
    _trusted = None if ca_file is None else ca_context(ca_file)


def peer_verify() -> ssl.SSLContext | bool:
    """httpx's `verify` for a request to a peer of the cell: the cell's CA when `trust_ca`
    named one, else True (the system's CAs). An http URL ignores it."""
    return _trusted if _trusted is not None else True


@dataclass(frozen=True)
class ServerTLS:
    """The certificate (PEM, its chain to the cell's CA) and private key a server answers with."""

    cert_file: str
    key_file: str

    def args(self) -> list[str]:
        return ["--tls-cert-file", self.cert_file, "--tls-key-file", self.key_file]

    def options(self) -> dict[str, Any]:
        """uvicorn.Config's options: TLS 1.2 at least (Python's floor since 3.10), no client certificate."""
        return {"ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file, "ssl_version": ssl.PROTOCOL_TLS_SERVER}


def add_tls_arguments(parser: argparse.ArgumentParser, *, serves: bool = True, calls: bool = True) -> None:
    """A process's TLS flags, named as the Kubernetes API server names them: the certificate
    it serves with (`serves`), the CA that verifies the https servers it calls (`calls`)."""
    if calls:
        parser.add_argument(
            "--tls-ca-file", default=None,
            help="the cell's CA (PEM): the https borglets and replicas this process calls must show a "
            "certificate it signed, for the address they are called at",
        )
    if not serves:
        return
    parser.add_argument(
        "--tls-cert-file", default=None,
        help="serve HTTPS only, with this certificate (PEM; `cell up --tls` issues one from the cell's CA)",
    )
    parser.add_argument("--tls-key-file", default=None, help="the private key of --tls-cert-file")


def tls_from_arguments(args: argparse.Namespace) -> ServerTLS | None:
    """The server's flags of `add_tls_arguments`: both or neither (plain HTTP); a ValueError saying
    what to fix for one alone, a file that cannot be read, or a key that is not the
    certificate's. A readable --tls-ca-file is made the process's trust (`trust_ca`)."""
    ca = getattr(args, "tls_ca_file", None)
    if ca:
        try:
            trust_ca(ca)
        except (ssl.SSLError, OSError) as err:
            raise ValueError(f"--tls-ca-file {ca}: {err}") from None
    cert, key = getattr(args, "tls_cert_file", None), getattr(args, "tls_key_file", None)
    if not cert and not key:
        return None
    if not (cert and key):
        raise ValueError("--tls-cert-file and --tls-key-file go together: give both or neither")
    unreadable = [p for p in (cert, key) if not os.access(p, os.R_OK)]
    if unreadable:
        raise ValueError(f"cannot read the server's TLS files: {', '.join(unreadable)}")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as err:
        raise ValueError(f"--tls-cert-file {cert} with --tls-key-file {key}: {err}") from None
    return ServerTLS(cert, key)


# --- the client side -----------------------------------------------------------------------------


def to_machine(name: str) -> dict[str, str]:
    """The header naming the machine a request is for; `ClientAuth` signs it."""
    return {MACHINE_HEADER: name}


def replica_peer(name: str) -> str:
    """The name a request between replicas (or from the scheduler process) is signed for: the
    channel's machine header, so a request signed for one replica is refused by another."""
    return f"replica:{name}"


class ClientAuth(httpx.Auth):
    """Signs every request of an `httpx.Client` or `httpx.AsyncClient` with the cell's key,
    for the machine each request names (`to_machine`), or for `machine` when given."""

    requires_request_body = True

    def __init__(
        self, key: bytes, clock: Callable[[], float] = time.time, machine: str | None = None
    ) -> None:
        self.key, self.clock, self.machine = key, clock, machine

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        machine = (
            self.machine if self.machine is not None else request.headers.get(MACHINE_HEADER, "")
        )
        request.headers.update(
            sign(
                self.key,
                request.method,
                request.url.raw_path,
                request.content,
                machine,
                self.clock(),
            )
        )
        yield request


def client_auth(key: bytes | None) -> ClientAuth | None:
    """`ClientAuth(key)`, or None (unsigned requests) for a master run without a key."""
    return None if key is None else ClientAuth(key)


# --- the server side -----------------------------------------------------------------------------

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def skew_floor(latest: float | None, window_s: float = WINDOW_S) -> float | None:
    """The signing time after which a request passes whatever the borglet's clock says, given
    the latest signing time `latest` it accepted (None: none yet, so any time passes once).

    A borglet with a wrong clock (60 s ahead, say) would otherwise refuse its masters forever:
    its tasks then run on unmanaged while the cell, hearing nothing, starts them elsewhere. So
    the window is also measured on the masters' own clock, as the signing times the borglet has
    accepted: a request signed less than `window_s` before the newest one accepted passes. A
    request replayed later than that is refused as before; a sync replayed at all is refused by
    its (epoch, seq) fence, which the borglet keeps on disk."""
    if latest is None:
        return -math.inf
    return latest - window_s


class StandDown:
    """When a borglet that refuses the cell stops its tasks.

    A borglet whose channel key is not the cell's (a stale copy of the cell bundle, a key
    replaced by hand) refuses every request of every master, so no master can tell it to stop
    the tasks that the cell, which cannot manage them, starts elsewhere. The leader asks it to
    stand down (the `X-Minborg-Stand-Down` header on the requests the borglet refuses) only when
    every replica that polls the machine is refused while most of the cell's machines answer:
    the fault is the borglet's, not a master's (shardreports.py). The borglet stops its tasks
    once it has been asked for `after_s` with no request it accepted in between; an accepted
    request, or `after_s` with no asking, starts the count again. The header carries no
    signature: a process that reaches the borglet's port can ask too, but any request a master
    gets through undoes it; docs/security.md says what that leaves open."""

    def __init__(self, after_s: float = STAND_DOWN_S) -> None:
        self.after_s = after_s
        self.since: float | None = None  # the first asking refusal since the last accepted request
        self.last: float | None = None  # the latest asking refusal
        self.reason = ""  # why the borglet refused the latest asking request
        self.stood_down = 0  # how many times it stopped its tasks

    def accepted(self) -> None:
        self.since = self.last = None

    def refused(self, now: float, asked: bool, reason: str) -> bool:
        """Take a refused request (`asked`: it carried the header); whether the borglet must
        stand down now. It says so once per `after_s` of asking."""
        if not asked:
            return False
        if self.since is None or self.last is None or now - self.last > self.after_s:
            self.since = now
        self.last, self.reason = now, reason
        if now - self.since < self.after_s:
            return False
        self.since = now  # asked on: again only after another `after_s`
        self.stood_down += 1
        return True


class Verifier:
    """ASGI middleware: every HTTP request but those to `open_paths` must be signed for
    `machine` with `key`, or it is answered 401 before the app sees it. The signing time must
    be within the window of the borglet's clock, or of the newest signing time it accepted
    (`skew_floor`): a borglet whose clock is off keeps obeying its masters, and shows the skew
    it measured (`skew_s`, and the `X-Minborg-Channel-Skew` header of its answers)."""

    def __init__(
        self, app: Callable[[Scope, Receive, Send], Awaitable[None]], key: bytes, machine: str, *,
        open_paths: Iterable[str] = ("/healthz", "/metrics"), clock: Callable[[], float] = time.time,
        window_s: float = WINDOW_S, on_stand_down: Callable[[str], None] | None = None,
        stand_down_s: float = STAND_DOWN_S, monotonic: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.app, self.key, self.machine, self.clock, self.window_s = (
            app,
            key,
            machine,
            clock,
            window_s,
        )
        self.open_paths = frozenset(open_paths)
        self.refused = 0  # requests answered 401
        self.latest: float | None = None  # the newest signing time accepted (the masters' clock)
        self.skew_s = 0.0  # this clock minus the last accepted signing time, when past the window
        # Told once the cell has asked it to stand down for long enough (StandDown): it is
        # called, in a worker thread, with why the borglet refuses.
        self.on_stand_down, self.monotonic = on_stand_down, monotonic
        self.stand_down = StandDown(stand_down_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        now = self.clock()
        problem, body = await check_request(
            self.key, self.machine, scope, receive, now, self.window_s, newer_than=skew_floor(self.latest, self.window_s)
        )
        if problem is not None:
            self.refused += 1
            asked = _header(scope, STAND_DOWN_HEADER) is not None
            if self.stand_down.refused(self.monotonic(), asked, ": ".join(problem)) and self.on_stand_down is not None:
                await asyncio.to_thread(self.on_stand_down, self.stand_down.reason)
            await refuse(send, *problem)
            return
        self.stand_down.accepted()
        signed_at = _signed_at(scope)
        self.latest = signed_at if self.latest is None else max(self.latest, signed_at)
        self.skew_s = now - signed_at if abs(now - signed_at) > self.window_s else 0.0
        if not self.skew_s:
            await self.app(scope, _replay(body, receive), send)
            return
        skew = f"{self.skew_s:.0f}".encode()

        async def send_with_skew(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (SKEW_HEADER.lower().encode(), skew)]}
            await send(message)

        await self.app(scope, _replay(body, receive), send_with_skew)


def _signed_at(scope: Scope) -> float:
    value = _header(scope, TIME_HEADER)
    return math.nan if value is None else float(value)


def _header(scope: Scope, name: str) -> str | None:
    wanted = name.lower().encode()
    for k, v in scope["headers"]:
        if k.lower() == wanted:
            return v.decode("latin-1")
    return None


async def check_request(
    key: bytes, machine: str, scope: Scope, receive: Receive, now: float, window_s: float = WINDOW_S,
    max_body: int = MAX_BODY_BYTES, newer_than: float | None = None,
) -> tuple[tuple[str, str] | None, bytes]:  # fmt: skip
    """(what is wrong or None, the body) for the ASGI HTTP request `scope`, as `verify` judges
    it for `machine`: the check every server of the channel makes (`Verifier`, the hollow
    borglets). The body is read only once the headers pass, and at most `max_body` bytes."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    lowered = {name: headers.get(name.lower(), "") for name in (TIME_HEADER, MACHINE_HEADER, SIGNATURE_HEADER)}
    problem = check_headers(lowered, machine, now, window_s, newer_than)
    if problem is not None:
        return problem, b""
    body, more = await _read_body(receive, max_body)
    if more:
        return ("content-length", f"the body is larger than {max_body} bytes"), b""
    target = scope.get("raw_path") or scope["path"].encode()
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    return verify(key, scope["method"], target, lowered, body, machine, now, window_s, newer_than), body


async def _read_body(receive: Receive, max_body: int) -> tuple[bytes, bool]:
    """The request's body, and whether it went past `max_body` bytes (then not all of it)."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(parts), False
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body:
            return b"", True
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts), False


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # the disconnect, when it comes

    return replayed


async def refuse(send: Send, header: str, error: str) -> None:
    """Answer 401, the body naming the header at fault and what is wrong with it."""
    content = json.dumps({"detail": [{"field": header, "error": error}]}).encode()
    await send({
        "type": "http.response.start", "status": 401,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()),
                    (b"www-authenticate", b"MinborgChannel")],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": content})
