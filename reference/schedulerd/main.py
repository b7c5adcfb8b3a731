"""`minborg scheduler`: the scheduler process's command line; wires a `SchedulerProcess` to a real cell."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable

from reference import channel, gctune
from reference.master.codec import Keys
from reference.scheduler import SchedulerConfig
from reference.schedulerd.cached import CachedCell, HttpLeader
from reference.schedulerd.process import SchedulerProcess
from reference.store import tls as store_tls
from reference.store.client import StoreClient
from reference.store.election import Election
from reference.store.tls import StoreTLS


def connect(
    *, name: str, etcd: list[str], cell: str, lease_ttl: float = 2.0, config: SchedulerConfig | None = None,
    key: bytes | None = None, etcd_tls: StoreTLS | None = None,
) -> SchedulerProcess:  # fmt: skip
    """A scheduler process for cell `cell` in etcd (not started)."""
    keys = Keys(cell)
    client = StoreClient(etcd, timeout=2.0, tls=etcd_tls)

    def lease(elected: Callable[[int], None], deposed: Callable[[str], None]) -> Election:
        return Election(
            client, keys.scheduler, f"{name}=scheduler", ttl_s=lease_ttl,
            on_elected=elected, on_deposed=deposed, refresh_in_process=True,
        )  # fmt: skip

    return SchedulerProcess(
        name=name, cell=CachedCell(client, keys), leader=HttpLeader(key), lease=lease, config=config
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="minborg scheduler", description="the scheduler as a process of its own")
    parser.add_argument("--name", required=True, help="this scheduler's name, unique in the cell")
    parser.add_argument("--etcd", required=True, help="etcd client URLs, comma separated")
    store_tls.add_arguments(parser)
    channel.add_tls_arguments(parser, serves=False)
    parser.add_argument("--cell", required=True, help="cell name")
    parser.add_argument("--lease-ttl", type=float, default=2.0, help="scheduler lease TTL in seconds")
    parser.add_argument("--channel-key-file", default=None, help="the cell's channel key: plans are signed with it")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    if args.lease_ttl < 1:
        parser.error("--lease-ttl must be >= 1")
    logging.basicConfig(
        level=args.log_level.upper(), format=f"%(asctime)s scheduler[{args.name}] %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        key = channel.load_key(args.channel_key_file) if args.channel_key_file else None
        etcd_tls = store_tls.from_arguments(args)
        channel.tls_from_arguments(args)  # the leader's https URL is verified with the cell's CA
    except (channel.ChannelKeyError, ValueError) as err:
        parser.error(str(err))
    process = connect(
        name=args.name, etcd=args.etcd.split(","), cell=args.cell, lease_ttl=args.lease_ttl, key=key, etcd_tls=etcd_tls
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    gctune.tune()
    process.start()
    done.wait()
    process.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
