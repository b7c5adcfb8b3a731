"""The leader's side of the link shards: which replica owns a machine, and the leader's syncs sent through that replica's shard; with the two internal routes between shards and leader.

A borglet hears its syncs from the shard that polls it: the leader posts a batch of syncs to
the owner's `RELAY_PATH`, and that shard sends each to its borglet and answers with each
borglet's reply (linkshard.LinkShard.relay). When the owner cannot be reached, or answers
anything but its replies, the leader relays through its own shard (`fallbacks` counts those):
the leader can always reach a borglet itself. Shards send their batches to the leader's
`REPORTS_PATH` (shardreports.py takes them).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import httpx

from reference import channel, fastjson
from reference.channel import replica_peer
from reference.master import shards
from reference.master.cache import WatchCache

log = logging.getLogger(__name__)

REPORTS_PATH = "/internal/v1/shard/reports"  # a shard's batch, to the leader
RELAY_PATH = "/internal/v1/shard/sync"  # the leader's syncs, to the shard that carries them


class Carrier(Protocol):
    """What the relay needs of this replica's own link shard (linkshard.LinkShard)."""

    cache: WatchCache
    name: str
    key: bytes | None

    def members(self) -> list[str]: ...

    def relay(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]: ...


class ShardRelay:
    """The leader's side of the link shards: which replica owns a machine, and syncs sent
    through that replica's shard (through this replica's own when the owner cannot be
    reached: the leader can always reach a borglet itself)."""

    def __init__(self, shard: Carrier, timeout: float = 30.0) -> None:
        self.shard = shard
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=1.0), auth=channel.client_auth(shard.key), verify=channel.peer_verify()
        )
        self.fallbacks = 0

    def close(self) -> None:
        self._http.close()

    def owner(self, machine: str) -> str:
        return shards.owner(machine, self.shard.members(), shards.leader_name(self.shard.cache.cell().leader)) or self.shard.name

    def relay(self, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        url = self.shard.cache.cell().replicas.get(owner, "")
        if owner != self.shard.name and url:
            try:
                response = self._http.post(
                    f"{url.rstrip('/')}{RELAY_PATH}", json={"items": items}, headers=channel.to_machine(replica_peer(owner))
                )
                if response.status_code == 200:
                    replies = fastjson.loads(response.content).get("replies")
                    if isinstance(replies, list):
                        return replies
                log.info("relay through %s answered %d", owner, response.status_code)
            except (httpx.HTTPError, ValueError, AttributeError) as err:
                log.info("relay through %s failed: %s", owner, err)
            self.fallbacks += 1
        return self.shard.relay(items)
