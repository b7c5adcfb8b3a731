"""Read, write, lease and watch etcd keys, failing over across endpoints: every request through
etcd's JSON gateway (etcd3gw), the watch over gRPC.

The wrapper adds to etcd3gw what a cell needs: a list of endpoints tried in turn, a timeout on
every request, typed results with revisions, readable transactions (see `ops`), and a watch
that survives member failures (see `watch`). etcd3gw supplies the HTTP session, URLs, error
mapping and the delete, transaction and lease keepalive/revoke calls. Where its helpers drop
what we need, the request goes to the same JSON gateway through etcd3gw's own `post`:

- reads (`get`, `get_kv`, `get_prefix`, `revision`) post to `/v3/kv/range`: etcd3gw's range
  helpers drop the response header, so the revision a read reflects would be lost;
- `put` and `delete_prefix`: etcd3gw returns True, not the revision or the count;
- `lease` and `time_to_live`: to return the TTL etcd granted, and -1 for an expired lease;
- `watch_prefix`: `watch.PrefixWatch` opens etcd's gRPC `Watch` stream itself (etcd3gw's
  watcher ignores compaction and cancellation, has no read timeout and cannot resume, and a
  watch through the gateway costs each member a JSON rendering of every event per watcher).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import etcd3gw
import requests
import urllib3
from etcd3gw import exceptions as gw_exceptions
from etcd3gw.lease import Lease as GwLease

from reference import fastjson
from reference.endpoints import Endpoints
from reference.store import ops
from reference.store.tls import StoreTLS
from reference.store.watch import PrefixWatch, WatchCallback

T = TypeVar("T")

# Requests take milliseconds; the timeout bounds the stalls. Right after the etcd leader dies,
# a write sent to a follower that has not noticed yet is forwarded to the dead leader and hangs
# until etcd's own request timeout (5 s + 2 election timeouts = 7 s); ours ends it sooner and
# a repeatable request moves on to the next member.
DEFAULT_TIMEOUT_S = 5.0
# A refused or unanswered connect on loopback is immediate; a long connect timeout would
# only delay the failover to the next member.
DEFAULT_CONNECT_TIMEOUT_S = 1.0


class StoreError(Exception):
    """etcd refused a request (bad request, too many ops, ...); retrying will not help."""


class StoreUnavailable(StoreError):
    """No endpoint answered; the request was not applied (or, for a write, may be retried)."""


class StoreOutcomeUnknown(StoreError):
    """A transaction reached etcd but no answer came back: it may or may not have committed.

    The caller must read the state again before deciding to retry.
    """


@dataclass(frozen=True)
class Lease:
    """An etcd lease: keys attached to it are deleted when it expires or is revoked."""

    id: int
    ttl: int


def normalize_endpoint(endpoint: str) -> tuple[str, int]:
    """'http://127.0.0.1:2379', 'https://127.0.0.1:2379', '127.0.0.1:2379' -> ('127.0.0.1', 2379)."""
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or parts.hostname is None or parts.port is None:
        raise ValueError(f"etcd endpoint must look like https://HOST:PORT, got {endpoint!r}")
    return parts.hostname, parts.port


def endpoint_scheme(endpoints: Sequence[str], tls: StoreTLS | None) -> str:
    """"https" with TLS files, else "http"; a ValueError for URLs that say otherwise (an
    https endpoint without the files to reach it, or an http one beside them)."""
    schemes = {e.split("://", 1)[0] for e in endpoints if "://" in e}
    if tls is not None:
        if "http" in schemes:
            raise ValueError(f"TLS files were given but the etcd endpoints are plain http: {list(endpoints)}")
        return "https"
    if "https" in schemes:
        raise ValueError(
            "etcd endpoints are https: the store takes only clients with the cell's certificate "
            "(give the TLS files: --etcd-cafile, --etcd-certfile, --etcd-keyfile; a local cell's "
            "are in its cell file)"
        )
    return "http"


def never_reached_server(exc: BaseException) -> bool:
    """Whether a failed request provably never reached etcd (so a write may be retried).

    True only for a connection that could not be opened (refused, connect timeout). A reset
    or a read timeout after the request was sent leaves the outcome unknown.
    """
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, requests.exceptions.ConnectTimeout):
        return True
    if isinstance(cause, requests.exceptions.ConnectionError) and cause.args:
        reason = getattr(cause.args[0], "reason", None)
        return isinstance(reason, urllib3.exceptions.NewConnectionError)
    return False


def gateway_post(gw: etcd3gw.Etcd3Client, path: str, payload: dict[str, Any]) -> Any:
    """POST `payload` to the gateway's `path` and return its answer, as etcd3gw's `post` does
    (its exceptions, each raised from the requests error or status that caused it), with the
    JSON encoded and decoded by `fastjson`: the leader writes several records per task, and
    the standard library's coder of those bodies was about 5% of its CPU in a fill."""
    try:
        resp = gw.session.post(
            gw.get_url(path), data=fastjson.dumps(payload), headers=_JSON_BODY, timeout=gw.timeout
        )
    except requests.exceptions.Timeout as exc:
        raise gw_exceptions.ConnectionTimeoutError(str(exc)) from exc
    except requests.exceptions.ConnectionError as exc:
        raise gw_exceptions.ConnectionFailedError(str(exc)) from exc
    if resp.status_code in _GW_ERRORS:
        raise _GW_ERRORS[resp.status_code](resp.text, resp.reason)
    if resp.status_code != requests.codes.ok:
        raise gw_exceptions.Etcd3Exception(resp.text, resp.reason)
    return fastjson.loads(resp.content)


_JSON_BODY = {"Content-Type": "application/json"}
# The statuses etcd3gw's own `post` raises its exceptions for.
_GW_ERRORS: dict[int, type[gw_exceptions.Etcd3Exception]] = {
    500: gw_exceptions.InternalServerError,
    503: gw_exceptions.ConnectionFailedError,
    408: gw_exceptions.ConnectionTimeoutError,
    504: gw_exceptions.ConnectionTimeoutError,
    412: gw_exceptions.PreconditionFailedError,
}

_RETRYABLE = (
    gw_exceptions.ConnectionFailedError,
    gw_exceptions.ConnectionTimeoutError,
    gw_exceptions.InternalServerError,
)


class StoreClient:
    """A client for one etcd cluster, given the client URLs of some or all of its members
    and, for a cell's store (https), the TLS files that let it in (`tls`).

    Each request goes to the endpoint that last answered; on a connection failure, a timeout
    or a 5xx it moves to the next endpoint, at most once round the list. Reads, puts, deletes
    and lease calls are safe to repeat; a transaction is repeated only if it never reached
    etcd, otherwise `StoreOutcomeUnknown` is raised. Thread safe.
    """

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        timeout: float = DEFAULT_TIMEOUT_S,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        *,
        tls: StoreTLS | None = None,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        scheme = endpoint_scheme(endpoints, tls)
        self.endpoints = [f"{scheme}://{h}:{p}" for h, p in map(normalize_endpoint, endpoints)]
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.tls = tls
        self._gateways = [
            etcd3gw.Etcd3Client(
                host=host,
                port=port,
                protocol=scheme,
                # The cell's CA verifies the member; the client certificate is what etcd
                # checks (--client-cert-auth): without it no request is served.
                ca_cert=tls.ca_file if tls else None,
                cert_cert=tls.cert_file if tls else None,
                cert_key=tls.key_file if tls else None,
                # (connect, read): requests applies the read timeout to each socket read.
                timeout=(connect_timeout, timeout),  # type: ignore[arg-type]
                # etcd >= 3.4 serves /v3/; naming it saves a /version round trip.
                api_path="/v3/",
            )
            for host, port in map(normalize_endpoint, self.endpoints)
        ]
        for gw in self._gateways:
            # etcd is reached at explicit member addresses, never through an HTTP proxy, and
            # reading the proxy variables from the environment on every request cost about 3%
            # of a busy leader's CPU (docs/decisions.md).
            gw.session.trust_env = False
        self._gateway_of = dict(zip(self.endpoints, self._gateways, strict=True))
        self._members = Endpoints(self.endpoints)

    # -- keys ------------------------------------------------------------------------------

    def get(self, key: ops.Key) -> tuple[bytes, int] | None:
        """The key's value and mod_revision, or None if it does not exist."""
        kv = self.get_kv(key)
        return None if kv is None else (kv.value, kv.mod_revision)

    def get_kv(self, key: ops.Key) -> ops.KeyValue | None:
        """The key with all its metadata (create_revision, lease, ...), or None."""
        result = self._post("kv/range", {"key": ops.b64(key)})
        kvs = result.get("kvs", [])
        return ops.parse_kv(kvs[0]) if kvs else None

    def get_prefix(
        self, prefix: ops.Key, revision: int | None = None
    ) -> tuple[list[tuple[bytes, bytes, int]], int]:
        """Every (key, value, mod_revision) under `prefix`, sorted by key, and the revision
        of the store the read reflects (start a watch at that revision + 1 to follow on).
        With `revision`, the keys as they were at that past revision (one range read: etcd
        answers it from its history, until a compaction drops that revision)."""
        request = {"key": ops.b64(prefix), "range_end": ops.b64(ops.prefix_range_end(prefix))}
        if revision is not None:
            request["revision"] = str(revision)
        result = self._post("kv/range", request)
        kvs = [ops.parse_kv(kv) for kv in result.get("kvs", [])]
        return [(kv.key, kv.value, kv.mod_revision) for kv in kvs], ops.header_revision(result)

    def revision(self) -> int:
        """The current revision of the store (a linearizable read)."""
        return ops.header_revision(self._post("kv/range", {"key": ops.b64(b"\0"), "limit": 1}))

    def put(self, key: ops.Key, value: ops.Key, lease: Lease | None = None) -> int:
        """Write the key; returns the revision of the write."""
        payload: dict[str, Any] = {"key": ops.b64(key), "value": ops.b64(value)}
        if lease is not None:
            payload["lease"] = str(lease.id)
        return ops.header_revision(self._post("kv/put", payload))

    def delete(self, key: ops.Key) -> bool:
        """Delete the key; returns whether it existed."""
        return bool(self._call(lambda gw: gw.delete(ops.to_bytes(key))))

    def delete_prefix(self, prefix: ops.Key) -> int:
        """Delete every key under `prefix`; returns how many there were."""
        payload = {"key": ops.b64(prefix), "range_end": ops.b64(ops.prefix_range_end(prefix))}
        return int(self._post("kv/deleterange", payload).get("deleted", 0))

    def txn(
        self,
        compare: Sequence[ops.Compare],
        success: Sequence[ops.Op],
        failure: Sequence[ops.Op] = (),
    ) -> tuple[bool, int]:
        """Apply `success` if every compare holds, else `failure`, atomically.

        Returns (succeeded, revision of the store after the transaction). Build the
        arguments with `reference.store.ops`. Raises `StoreOutcomeUnknown` if the request
        may have been applied but no answer came back.
        """
        result = self.txn_result(compare, success, failure)
        return result.succeeded, result.revision

    def txn_result(
        self,
        compare: Sequence[ops.Compare],
        success: Sequence[ops.Op],
        failure: Sequence[ops.Op] = (),
    ) -> ops.TxnResult:
        """`txn`, also returning the responses of the ops that ran (e.g. `ops.get` results)."""
        request = ops.txn_request(list(compare), list(success), list(failure))
        return ops.parse_txn(self._call(lambda gw: gateway_post(gw, "/kv/txn", request), idempotent=False))

    # -- JSON values -------------------------------------------------------------------------

    def put_json(self, key: ops.Key, document: Any, lease: Lease | None = None) -> int:
        """Write `document` as compact, key-sorted JSON; returns the revision of the write."""
        return self.put(key, dumps(document), lease)

    def get_json(self, key: ops.Key) -> tuple[Any, int] | None:
        """The key's value parsed as JSON and its mod_revision, or None if it does not exist."""
        found = self.get(key)
        return None if found is None else (json.loads(found[0]), found[1])

    # -- leases ------------------------------------------------------------------------------

    def lease(self, ttl: int) -> Lease:
        """Grant a lease of `ttl` seconds (etcd may raise it to its minimum TTL)."""
        result = self._post("lease/grant", {"TTL": int(ttl), "ID": 0})
        return Lease(id=int(result["ID"]), ttl=int(result["TTL"]))

    def refresh(self, lease: Lease) -> int:
        """Keep the lease alive; returns its new TTL in seconds, or -1 if it has expired."""
        return self._call(lambda gw: GwLease(lease.id, gw).refresh())

    def revoke(self, lease: Lease) -> None:
        """Revoke the lease now, deleting its keys. Revoking an expired lease is not an error."""
        try:
            self._call(lambda gw: GwLease(lease.id, gw).revoke())
        except StoreError as exc:
            if "lease not found" not in str(exc):
                raise

    def time_to_live(self, lease: Lease) -> int:
        """Seconds left on the lease as etcd sees it, or -1 if it has expired."""
        result = self._post("kv/lease/timetolive", {"ID": str(lease.id)})
        return int(result.get("TTL", -1))

    # -- watches -----------------------------------------------------------------------------

    def watch_prefix(
        self,
        prefix: ops.Key,
        start_revision: int,
        callback: WatchCallback,
        *,
        on_compacted: Callable[[int], None] | None = None,
        idle_timeout: float = 5.0,
    ) -> PrefixWatch:
        """Follow every change under `prefix` from `start_revision` in a background thread.

        `callback(events, revision)` gets the events of each revision in order; `events` is
        empty for a progress notification (nothing changed up to `revision`). On a member
        failure the watch reconnects to the next endpoint from the last delivered revision
        + 1, so no event is lost or repeated. If that revision was compacted away,
        `on_compacted(compact_revision)` is called and the watch ends: the caller must read
        the prefix again and start a new watch. Call `.stop()` on the result.
        """
        return PrefixWatch(
            self.endpoints,
            prefix,
            start_revision,
            callback,
            on_compacted=on_compacted,
            connect_timeout=self.connect_timeout,
            idle_timeout=idle_timeout,
            first_endpoint=self._members.start,
            tls=self.tls,
        )

    # -- plumbing ----------------------------------------------------------------------------

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST to the gateway (idempotent requests only)."""
        return self._call(lambda gw: gateway_post(gw, path, payload))

    def _call(self, request: Callable[[etcd3gw.Etcd3Client], T], idempotent: bool = True) -> T:
        """Run `request` against each endpoint in turn until one answers."""
        failures = []
        for url in self._members.order():
            try:
                result = request(self._gateway_of[url])
            except _RETRYABLE as exc:
                detail = f"{url}: {type(exc).__name__} {_detail(exc)}"
                if not idempotent and not never_reached_server(exc):
                    raise StoreOutcomeUnknown(detail) from exc
                failures.append(detail)
                continue
            except gw_exceptions.Etcd3Exception as exc:
                raise StoreError(f"{url}: {_detail(exc)}") from exc
            self._members.answered(url)
            return result
        raise StoreUnavailable("no etcd endpoint answered: " + "; ".join(failures))

    def close(self) -> None:
        for gateway in self._gateways:
            gateway.session.close()

    def __enter__(self) -> StoreClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def dumps(document: Any) -> bytes:
    """The stored form of a JSON value: compact and key-sorted, so equal documents are equal bytes."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _detail(exc: gw_exceptions.Etcd3Exception) -> str:
    text = exc.detail_text or ""
    try:
        # The gateway answers errors as {"error": ..., "code": ..., "message": ...}.
        return str(json.loads(text).get("message", text))
    except (ValueError, AttributeError):
        return text or str(exc)
