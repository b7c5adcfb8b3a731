"""What the launcher asks of a local cell's API once its processes run: a leader among its own masters, and its machines registered."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor

import httpx

from reference.cellfile import auth_headers, read_admin_token
from reference.client import CellClient, ClientError
from reference.launcher import tls as cell_tls
from reference.launcher.cellfile import CellInfo, LauncherError, Role, is_alive
from reference.launcher.processes import check_running, log_tail
from reference.launcher.roles import is_hollow, rack_of
from reference.launcher.toxiproxy import borglet_address
from reference.resources import parse_pairs
from reference.waiting import wait_until

# An election needs one lease TTL at most after the masters are up.
LEADER_TIMEOUT_S = 45.0
REGISTER_IN_FLIGHT = 8  # machine registrations sent at once


def ask_leader(
    http: httpx.Client,
    urls: Iterable[str],
    not_named: str | None = None,
    own: Collection[str] | None = None,
    problems: list[str] | None = None,
    *,
    itself: bool = False,
    timeout: float | None = None,
    heard: list[str] | None = None,
) -> str | None:
    """Find the leader: the name the first of the masters at `urls` to answer /v1/cell gives
    (not `not_named`), or None. With `own` (the cell's master names), a leader outside it means
    the answer came from another cell, whose process took a master's port: LauncherError. Each
    master that names no leader (or `not_named`), or does not answer, is noted in `problems`.
    `itself`: believe only a master that says it leads itself (its /healthz role, open to
    anyone and answered however stale its cache), not the leader a replica's view names.
    `timeout`: seconds for each request, where not the client's own.
    `heard`: each master whose answer (a 200) was read is appended, leader named or not: what
    tells a master that says it does not lead from one that did not answer.

    The one reading of "who leads" from outside the masters: the launcher, the test cell,
    chaos, the load tests, the benchmarks and the demo ask through it."""
    limit = {} if timeout is None else {"timeout": timeout}
    for url in urls:
        try:
            if itself:
                response = http.get(url + "/healthz", **limit)
                body = response.json() if response.status_code == 200 else {}
                leader = body.get("name") if body.get("role") == "leader" else None
            else:
                response = http.get(url + "/v1/cell", **limit)
                leader = response.json().get("leader") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as err:
            if problems is not None:
                problems.append(f"{url}: {err}")
            continue
        if heard is not None and response.status_code == 200:
            heard.append(url)
        if problems is not None and (not leader or leader == not_named):
            problems.append(f"{url}: HTTP {response.status_code}, leader {leader or 'none'}")
        if leader and own is not None and leader not in own:
            raise LauncherError(
                f"{url} answers for another cell (its leader is {leader}, not one "
                f"of {sorted(own)}): its port was taken; run `cell up` again"
            )
        if leader and leader != not_named:
            return str(leader)
    return None


def wait_for_leader(
    info: CellInfo, timeout: float = LEADER_TIMEOUT_S, not_named: str | None = None
) -> str:
    """Poll /v1/cell on every live master until one names a leader (other than `not_named`).

    Only a leader among this cell's own masters counts: if another process took a master's
    port before it could bind, the answer would come from a different cell.
    """
    masters = info.of_role(Role.MASTER)
    own = {m.name for m in masters}
    problems: list[str] = []
    headers = auth_headers(read_admin_token(info.state_dir))
    with httpx.Client(timeout=1.0, headers=headers, verify=cell_tls.client_verify(info.state_dir)) as http:

        def leader_named() -> str | None:
            live = [m for m in masters if is_alive(m)]
            if not live:
                check_running(masters[0])
            problems.clear()
            return ask_leader(http, [m.url for m in live], not_named, own, problems)

        try:
            return wait_until(leader_named, timeout, "a leader", 0.1)
        except TimeoutError:
            tail = log_tail(masters[0].log)
            raise LauncherError(
                f"no leader elected after {timeout:.0f}s ({'; '.join(problems) or 'no master answered'}); end of {masters[0].log}:\n{tail}"
            ) from None


def register_machines(info: CellInfo, capacity: str) -> None:
    """Register every borglet of the cell file as a machine of `capacity` (one already
    registered is fine: a retried registration). Hollow machines carry `hollow=true`."""
    # Quantities go as the user wrote them ("4000m", "8GiB"): the API parses them itself.
    declared = parse_pairs(capacity)
    machines = []
    for i, (name, url) in enumerate(info.borglet_urls.items()):
        attrs = {"rack": rack_of(i), **({"hollow": "true"} if is_hollow(url) else {})}
        machines.append(
            {
                "name": name,
                # The masters reach a machine at the address it is registered with.
                "address": borglet_address(info.proxies, i, url),
                "capacity": declared,
                "attrs": attrs,
                "failure_domain": rack_of(i),
            }
        )
    ca = str(cell_tls.ca_file(info.state_dir))  # an https cell's
    with CellClient(list(info.master_urls), token=read_admin_token(info.state_dir), ca=ca) as client:

        def register(machine: dict[str, object]) -> None:
            try:
                client.add_machine(machine)
            except ClientError as err:
                if err.status != 409:  # already registered: fine on a retried registration
                    raise LauncherError(f"could not register machine {machine['name']}: {err}") from None

        # Thousands of hollow machines, one write each: a few in flight keep the leader's
        # group commit busy instead of waiting for each write in turn.
        with ThreadPoolExecutor(max_workers=REGISTER_IN_FLIGHT) as pool:
            list(pool.map(register, machines))
