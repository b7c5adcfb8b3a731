"""HTTP client of the master's API v1: finds the cell, fails over between replicas, retries 503.

An https cell is verified with its CA: the one given, else $MINBORG_CA (a context's `ca`), else
the local cell's `<state dir>/pki/ca.crt` (`cli.http.ca_file`); a replica whose
certificate that CA does not vouch for fails at once with one line saying what to do.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from reference.cellfile import (  # re-exported: the client's public names
    CELL_FILE,
    DEFAULT_STATE_DIR,
    MASTER_ENV,
    NO_ANSWER,
    STATE_DIR_ENV,
    TOKEN_ENV,
    ClientError,
    auth_headers,
    find_token,
    format_detail,
    master_urls,
    read_cell_file,
    split_urls,
    state_dir_path,
)
from reference.cli.http import (  # the fast path's too
    WRITE_TIMEOUT_S,
    Message,
    ca_file,
    parse_sse,
    tls_context,
    untrusted,
)
from reference.endpoints import Endpoints

__all__ = [
    "CELL_FILE", "DEFAULT_STATE_DIR", "MASTER_ENV", "NO_ANSWER", "STATE_DIR_ENV", "CellClient", "ClientError",
    "Endpoint", "Message", "RoundRobin", "TOKEN_ENV", "find_token", "format_detail", "master_urls", "parse_sse", "read_cell_file",
    "split_key", "split_urls", "state_dir_path",
]  # fmt: skip

# Failover takes about one lease TTL (3 s by default) plus an election; retrying 503 for a
# bit longer than that lets a write issued during failover succeed instead of failing.
DEFAULT_RETRY_S = 12.0
# A Retry-After larger than this is not honoured as is: the client would look hung.
MAX_RETRY_AFTER_S = 3.0


def write_timeout(base: httpx.Timeout) -> httpx.Timeout:
    """`base` with its read at least WRITE_TIMEOUT_S: how long a write's answer is waited for."""
    read = None if base.read is None else max(base.read, WRITE_TIMEOUT_S)  # None: no limit
    return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)


# --- the client ------------------------------------------------------------------------


def retry_after_s(response: httpx.Response, default: float = 0.5) -> float:
    """Seconds to wait from a Retry-After header (seconds form), bounded."""
    try:
        value = float(response.headers.get("Retry-After", default))
    except ValueError:
        value = default
    return min(max(value, 0.1), MAX_RETRY_AFTER_S)


class CellClient:
    """Talks to any master replica; moves to the next one when a replica does not answer.

    A replica that answered last is tried first next time. `503` (no leader yet) is retried
    for at most `retry_s` seconds, honouring Retry-After; other errors raise ClientError.
    Every request carries `token` (default: $MINBORG_TOKEN) as `Authorization: Bearer`.
    https replicas must show a certificate of `ca` (a CA file; default `cli.http.ca_file`:
    $MINBORG_CA, else the local cell's), or `verify` (an ssl.SSLContext) when given.
    """

    def __init__(
        self,
        urls: list[str],
        *,
        timeout: float = 5.0,
        retry_s: float = DEFAULT_RETRY_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
        token: str | None = None,
        ca: str | None = None,
        verify: ssl.SSLContext | None = None,
    ) -> None:
        if not urls:
            raise ValueError("CellClient needs at least one master URL")
        self.masters = Endpoints(urls)
        self.retry_s = retry_s
        self._sleep, self._clock = sleep, clock
        token = token or os.environ.get(TOKEN_ENV)
        https = any(url.startswith("https://") for url in urls)
        self.ca = (ca or ca_file()) if https and verify is None else ca
        tls: ssl.SSLContext | bool = verify or (tls_context(self.ca) if https else True)
        self._http = httpx.Client(timeout=timeout, transport=transport, headers=auth_headers(token), verify=tls)

    @classmethod
    def discover(
        cls,
        master: str | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        token: str | None = None,
        **kw: Any,
    ) -> CellClient:
        """A client of the cell that --master, $MINBORG_MASTER or the state dir names, with the
        token --token, $MINBORG_TOKEN or the state dir's admin token gives, trusting the CA
        $MINBORG_CA or the state dir's gives."""
        urls = master_urls(master, state_dir)
        if any(url.startswith("https://") for url in urls) and not kw.get("verify"):
            kw.setdefault("ca", ca_file(state_dir))
        return cls(urls, token=find_token(token, state_dir), **kw)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CellClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One API call; returns the decoded JSON body of a 2xx answer."""
        return _body(self.send(method, path, json=json, params=params))

    def send(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None
    ) -> httpx.Response:
        """One API call; returns the 2xx answer as it came (ClientError for anything else)."""
        deadline = self._clock() + self.retry_s
        idempotent = method.upper() in ("GET", "HEAD")
        timeout = self._http.timeout if idempotent else write_timeout(self._http.timeout)
        while True:
            failures: list[str] = []
            wait = 0.5
            for url in self.masters.order():
                try:
                    response = self._http.request(method, url + path, json=json, params=params, timeout=timeout)
                except (httpx.ConnectError, httpx.ConnectTimeout) as err:
                    self._refuse_untrusted(url, err)
                    failures.append(f"{url}: {_reason(err)}")  # never reached the replica
                    continue
                except httpx.TransportError as err:
                    if not idempotent:
                        # The write may have been applied; retrying could apply it twice.
                        raise ClientError(
                            NO_ANSWER,
                            f"{url} did not answer {method} {path} ({_reason(err)}); "
                            "the change may or may not have been made: check before retrying",
                            url,
                        ) from None
                    failures.append(f"{url}: {_reason(err)}")
                    continue
                if response.status_code == 503:
                    wait = retry_after_s(response)
                    failures.append(f"{url}: 503 {format_detail(_detail(response))}")
                    continue
                self.masters.answered(url)
                if response.status_code >= 400:
                    raise ClientError(response.status_code, _detail(response), url)
                return response
            if self._clock() + wait > deadline:
                status = 503 if any(": 503" in f for f in failures) else NO_ANSWER
                raise ClientError(  # with no answer at all, `url` names every replica tried
                    status,
                    "no master replica could serve the request: " + "; ".join(failures),
                    ", ".join(self.masters.urls) if status == NO_ANSWER else None,
                )
            self._sleep(wait)

    def _refuse_untrusted(self, url: str, err: Exception) -> None:
        """The one-line ClientError of `cli.http.untrusted` for a failed certificate check:
        another replica would fail it as well, so it is not retried."""
        cause: BaseException | None = err
        while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
            cause = cause.__cause__ or cause.__context__
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise untrusted(url, self.ca, cause.verify_message or str(cause)) from None

    # --- API v1, one method per route ------------------------------------------------------

    def cell(self) -> dict[str, Any]:
        return self.request("GET", "/v1/cell")

    def jobs(self, user: str | None = None) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/jobs", params={"user": user} if user else None)["jobs"]

    def job(self, key: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/jobs/{_key(key)}")

    def submit(self, job: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "/v1/jobs", json=job)

    def update(self, key: str, changes: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", f"/v1/jobs/{_key(key)}", json=changes)

    def kill(self, key: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/jobs/{_key(key)}")

    def tasks(self, key: str) -> list[dict[str, Any]]:
        return self.request("GET", f"/v1/jobs/{_key(key)}/tasks")["tasks"]

    def task(self, key: str, index: int, incarnation: int | None = None) -> dict[str, Any]:
        params = {"incarnation": incarnation} if incarnation is not None else None
        return self.request("GET", f"/v1/jobs/{_key(key)}/tasks/{index}", params=params)["task"]

    def logs(
        self, key: str, index: int, *, stream: str = "stdout", tail: int = 100, incarnation: int | None = None
    ) -> bytes:
        """The last `tail` lines of a task's stdout or stderr, fetched by a master from its machine."""
        params: dict[str, Any] = {"stream": stream, "tail": tail}
        if incarnation is not None:
            params["incarnation"] = incarnation
        return self.send("GET", f"/v1/jobs/{_key(key)}/tasks/{index}/logs", params=params).content

    def stream(self, path: str, params: dict[str, Any], *, max_s: float) -> Iterator[bytes]:
        """A streamed GET (logs that follow, server-sent events), from the first replica that
        answers; ends when the server ends it. ClientError for a refusal."""
        failures: list[str] = []
        timeout = httpx.Timeout(self._http.timeout.connect, read=max_s + 30.0)
        for url in self.masters.order():
            began = False
            try:
                with self._http.stream("GET", url + path, params=params, timeout=timeout) as response:
                    if response.status_code == 503:
                        response.read()
                        failures.append(f"{url}: 503 {format_detail(_detail(response))}")
                        continue
                    if response.status_code >= 400:
                        response.read()
                        raise ClientError(response.status_code, _detail(response), url)
                    self.masters.answered(url)
                    began = True
                    yield from response.iter_raw()
                    return
            except httpx.TransportError as err:
                if began:
                    return  # cut after it began: the stream just ends
                self._refuse_untrusted(url, err)
                failures.append(f"{url}: {_reason(err)}")
        raise ClientError(NO_ANSWER, "no master replica could serve the stream: " + "; ".join(failures))

    def watch(
        self, path: str, *, since: int | None = None, timeout_s: float = 300.0, **params: Any
    ) -> Iterator[Message]:
        """The messages of a watch (`/v1/jobs`, `/v1/jobs/U/N/tasks`, `/v1/machines`, `/v1/events`)."""
        query: dict[str, Any] = {"timeout_s": timeout_s, **{k: v for k, v in params.items() if v is not None}}
        if path != "/v1/events":
            query["watch"] = "true"
        if since is not None:
            query["since"] = since
        yield from parse_sse(self.stream(path, query, max_s=timeout_s))

    def kill_task(self, key: str, index: int) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/jobs/{_key(key)}/tasks/{index}")

    def endpoints(self, key: str) -> list[Endpoint]:
        body = self.request("GET", f"/v1/jobs/{_key(key)}/endpoints")
        return [Endpoint.from_json(e) for e in body.get("endpoints", [])]

    def machines(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/machines")["machines"]

    def add_machine(self, machine: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "/v1/machines", json=machine)

    def resolve(self, bns_name: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/bns/{bns_name}")

    def submit_alloc_set(self, alloc_set: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "/v1/allocs", json=alloc_set)

    def alloc_sets(self, user: str | None = None) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/allocs", params={"user": user} if user else None)["alloc_sets"]

    def alloc_set(self, key: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/allocs/{_key(key)}")["alloc_set"]

    def delete_alloc_set(self, key: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/allocs/{_key(key)}")

    def add_user(self, name: str) -> dict[str, Any]:
        """Add a user (admin only); the answer's `token` is the only copy of its token."""
        return self.request("POST", "/v1/users", json={"name": name})

    def users(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/users")["users"]

    def revoke_user(self, name: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/users/{name}")

    def quotas(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/quotas")["quotas"]

    def set_quota(self, user: str, band: str, amounts: dict[str, Any]) -> dict[str, Any]:
        """Set a user's quota in a band (admin only); `amounts` as a job's request writes them."""
        return self.request("PUT", f"/v1/quotas/{user}/{band}", json=amounts)

    def delete_quota(self, user: str, band: str) -> dict[str, Any]:
        return self.request("DELETE", f"/v1/quotas/{user}/{band}")


def split_key(key: str) -> tuple[str, str]:
    """'alice/web' -> ('alice', 'web'); ValueError with what to type otherwise."""
    user, sep, name = key.strip().partition("/")
    if not sep or not user or not name or "/" in name:
        raise ValueError(f"invalid job {key!r}: expected USER/NAME such as demo/hello_world")
    return user, name


def _key(key: str) -> str:
    user, name = split_key(key)
    return f"{user}/{name}"


def _reason(err: Exception) -> str:
    return str(err) or type(err).__name__


def _detail(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    return body.get("detail", body) if isinstance(body, dict) else body


def _body(response: httpx.Response) -> dict[str, Any]:
    if not response.content:
        return {}
    try:
        body = response.json()
    except ValueError:
        raise ClientError(response.status_code, f"not JSON: {response.text[:200]!r}") from None
    return body if isinstance(body, dict) else {"result": body}


# --- client-side load balancing ----------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """One healthy running task of a job, as the master's endpoints route lists it."""

    index: int
    bns: str
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoint:
        return cls(
            int(data["index"]), str(data.get("bns", "")), str(data["host"]), int(data["port"])
        )


class RoundRobin:
    """Spreads requests over a job's healthy tasks, as Borg clients do: no proxy in the path.

    The endpoint list is refetched every `refresh_s` seconds; an endpoint that refuses a
    connection is skipped until the next refresh.
    """

    def __init__(
        self,
        client: CellClient,
        job: str,
        *,
        refresh_s: float = 2.0,
        timeout: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.client, self.job, self.refresh_s, self._clock = client, job, refresh_s, clock
        self._http = httpx.Client(timeout=timeout, transport=transport)
        self._endpoints: list[Endpoint] = []
        self._fetched_at = float("-inf")
        self._next = 0

    def endpoints(self) -> list[Endpoint]:
        if not self._endpoints or self._clock() - self._fetched_at >= self.refresh_s:
            self._endpoints = sorted(self.client.endpoints(self.job), key=lambda e: e.index)
            self._fetched_at = self._clock()
        return self._endpoints

    def next(self) -> Endpoint:
        endpoints = self.endpoints()
        if not endpoints:
            raise ClientError(503, f"job {self.job} has no healthy endpoint")
        endpoint = endpoints[self._next % len(endpoints)]
        self._next += 1
        return endpoint

    def get(self, path: str = "/") -> tuple[Endpoint, httpx.Response]:
        """GET `path` from the next endpoint; on a refused connection, from the one after."""
        tried: list[str] = []
        for _ in range(max(1, len(self.endpoints()))):
            endpoint = self.next()
            try:
                return endpoint, self._http.get(endpoint.url + path)
            except httpx.TransportError as err:
                tried.append(f"{endpoint.url}: {_reason(err)}")
                self._endpoints = [e for e in self._endpoints if e != endpoint]
                if not self._endpoints:
                    break
        raise ClientError(NO_ANSWER, f"no endpoint of {self.job} answered: " + "; ".join(tried))

    def close(self) -> None:
        self._http.close()
