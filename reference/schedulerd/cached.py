"""A real cell behind the scheduler process's interfaces: a watch cache of etcd as its `CellSource`, the leader's signed plans endpoint as its `Leader`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx

from reference import channel
from reference.master.cache import WatchCache
from reference.master.cell import machine_images
from reference.master.codec import Keys
from reference.scheduler.wire import PLANS_PATH
from reference.schedulerd.process import View
from reference.store.client import StoreClient

log = logging.getLogger(__name__)

# How long the process waits for the leader's answer to a plan: the leader commits a plan of
# up to `SetAside.pass_max` placements in parts of 1,000 (as many a write as the writer's pace
# fits in about a second while no other change waits: `leader.parts_a_write`), each write
# behind those queued before it, which on a loaded 10,000-machine cell took 1-3 s a part. A
# plan given up on is planned again on a view that lacks its placements (conflicts, and the
# work twice): with a 30 s wait, plans of about 30,000 were given up on (4,000 conflicts by the
# middle of a fill).
PLAN_ANSWER_S = 300.0


class CachedCell:
    """The cell from etcd, through the same watch cache every master replica keeps."""

    def __init__(self, client: StoreClient, keys: Keys) -> None:
        self.client = client
        self.cache = WatchCache(client, keys)

    def view(self) -> View:
        cell = self.cache.cell()
        name, _, url = cell.leader.partition("=")
        return View(
            revision=cell.revision,
            state=cell.state,
            leader=(name, url) if url else None,
            capacity_epoch=cell.capacity_epoch,
            work=cell.work,
            running=cell.running,
            images=machine_images(cell.machines),
        )

    def wait_revision(self, revision: int, timeout: float) -> bool:
        return self.cache.wait_revision(revision, timeout)

    def on_change(self, fn: Callable[[int], None]) -> None:
        self.cache.on_change(fn)

    def start(self) -> None:
        self.cache.start()

    def stop(self) -> None:
        self.cache.stop()
        self.client.close()


class HttpLeader:
    """Plans POSTed to the leader's /internal/ endpoint, signed with the cell's channel key
    for that replica (`channel.replica_peer`)."""

    def __init__(self, key: bytes | None) -> None:
        self._http = httpx.Client(
            timeout=httpx.Timeout(PLAN_ANSWER_S, connect=1.0), auth=channel.client_auth(key), verify=channel.peer_verify()
        )

    def propose(self, leader: tuple[str, str], doc: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        name, url = leader
        try:
            response = self._http.post(
                f"{url.rstrip('/')}{PLANS_PATH}", json=doc, headers=channel.to_machine(channel.replica_peer(name))
            )
        except httpx.HTTPError as err:
            log.info("plan not delivered to %s: %s", url, err)
            return None
        if response.status_code != 200:
            return response.status_code, {"text": response.text[:200]}
        try:
            answer = response.json()
        except ValueError:
            return 502, {"text": response.text[:200]}
        return 200, answer if isinstance(answer, dict) else {}

    def close(self) -> None:
        self._http.close()
