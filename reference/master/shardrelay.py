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

from reference import fastjson
from reference.channel import replica_peer
from reference.master import shards
from reference.master.borgletreads import KeptAlive
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
        # Kept-alive connections of the bare HTTP/1.1 client the shards poll with (a fraction of
        # a general client's cost per request); an owner that is not there is known in a second.
        self._peers = KeptAlive(timeout, connect_timeout=1.0)
        self.through_owners = 0  # batches of syncs an owner's shard took
        self.fallbacks = 0  # batches sent through this replica's own shard instead

    def close(self) -> None:
        self._peers.close()

    def owner(self, machine: str) -> str:
        return shards.owner(machine, self.shard.members(), shards.leader_name(self.shard.cache.cell().leader)) or self.shard.name

    def relay(self, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        url = self.shard.cache.cell().replicas.get(owner, "")
        if owner != self.shard.name and url:
            try:
                answer = self._peers.post_json(
                    f"{url.rstrip('/')}{RELAY_PATH}", fastjson.dumps({"items": items}), self.shard.key, replica_peer(owner)
                )
                if answer.status == 200:
                    replies = fastjson.loads(answer.body).get("replies")
                    if isinstance(replies, list):
                        self.through_owners += 1
                        return replies
                log.info("relay through %s answered %d", owner, answer.status)
            except (OSError, ValueError, AttributeError) as err:
                log.info("relay through %s failed: %s", owner, err)
            self.fallbacks += 1
        return self.shard.relay(items)
