"""The scheduler as a process of its own: plans on its own cached copy of the cell and proposes the placements to the leader.

Borg (Verma et al. 2015, section 3.4) runs its scheduler apart from the Borgmaster: it works
on a cached copy of the cell state, and the master accepts its assignments unless they are
inappropriate (based on out-of-date state), in which case the tasks go back to the queue for
the scheduler's next pass. Here:

- `minborg scheduler` keeps a watch cache of the cell from etcd (the same class every master
  replica keeps), and runs while it holds the cell's scheduler lease (`Keys.scheduler`): one
  process schedules at a time, the others wait on standby.
- Each pass plans the pending tasks with the scheduler library exactly as the leader's own
  pass would (`plan_for`, the same config, the same set aside of tasks found unschedulable
  while nothing freed capacity), and posts the plan, with the revision it was computed at, to
  the leader (`PLANS_PATH`). It then waits for its cache to reach the revision the leader
  committed at, so it never plans twice on the same state.
- The leader (`Term.accept_plan`) commits each placement, with its preemptions, only if every
  one of its spec steps is still allowed in the cell as it is now (the task still pending, the
  machine up and with room, each victim still running there): optimistic concurrency. A
  placement that fails that check is a conflict; its task stays PENDING and is planned again.
- While the leader hears from a scheduler process (a plan, or an empty one as a heartbeat,
  every `HEARTBEAT_S`), it leaves scheduling to it and keeps restarts, rolling updates and
  polling; when it has heard nothing for `Term.SCHEDULER_GRACE_S`, it schedules again itself.

So the leader's event loop and writer no longer share a GIL with scheduling passes.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from typing import Any

import httpx

from reference import channel, gctune
from reference.master import codec
from reference.master.cache import WatchCache
from reference.master.cell import machine_images
from reference.master.leader import Unschedulable
from reference.master.linkshard import replica_peer
from reference.scheduler import SchedulerConfig, plan_for
from reference.scheduler.wire import plan_to_json
from reference.store import tls as store_tls
from reference.store.client import StoreClient, StoreError
from reference.store.election import Election
from reference.store.tls import StoreTLS
from spec.model import TaskState

log = logging.getLogger(__name__)

PLANS_PATH = "/internal/v1/plans"  # a scheduler process's plan, to the leader
HEARTBEAT_S = 0.5  # an idle scheduler tells the leader it is there this often


class SchedulerProcess:
    def __init__(
        self, *, name: str, etcd: list[str], cell: str, lease_ttl: float = 2.0, config: SchedulerConfig | None = None,
        key: bytes | None = None, etcd_tls: StoreTLS | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self.keys = codec.Keys(cell)
        self.client = StoreClient(etcd, timeout=2.0, tls=etcd_tls)
        self.cache = WatchCache(self.client, self.keys)
        self.config = config or SchedulerConfig()
        self.election = Election(
            self.client, self.keys.scheduler, f"{name}=scheduler", ttl_s=lease_ttl,
            on_elected=self._elected, on_deposed=self._deposed, refresh_in_process=True,
        )  # fmt: skip
        self._active = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()
        # Plans go to the leader's /internal/ endpoint, signed with the cell's channel key.
        self._http = httpx.Client(timeout=httpx.Timeout(30.0, connect=1.0), auth=channel.client_auth(key))
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self.unschedulable = Unschedulable()
        self.passes = 0
        self.proposed = {"plans": 0, "placements": 0, "placed": 0, "conflicts": 0, "refused": 0}

    def start(self) -> None:
        self.cache.start()
        self.cache.on_change(lambda _rev: self._wake.set())
        self.election.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        try:
            self.election.resign()
        except StoreError as err:
            log.info("resign failed: %s", err)
        self._thread.join(5)
        self.cache.stop()
        self.client.close()
        self._http.close()

    def _elected(self, token: int) -> None:
        log.info("%s schedules the cell (lease %d)", self.name, token)
        self._active.set()
        self._wake.set()

    def _deposed(self, reason: str) -> None:
        log.warning("%s no longer schedules: %s", self.name, reason)
        self._active.clear()

    # --- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        last_sent = 0.0
        while not self._stop.is_set():
            self._wake.wait(HEARTBEAT_S)
            self._wake.clear()
            if not self._active.is_set():
                continue
            try:
                sent = self.step(heartbeat=time.monotonic() - last_sent >= HEARTBEAT_S)
            except Exception:  # one bad pass must not end scheduling
                log.exception("scheduling pass failed")
                sent = False
            if sent:
                last_sent = time.monotonic()

    def step(self, heartbeat: bool = False) -> bool:
        """One pass: plan what is pending and propose it; with `heartbeat`, propose even an
        empty plan. Returns whether a proposal went out."""
        cell = self.cache.cell()
        leader_name, _, leader = cell.leader.partition("=")
        if not leader:
            return False
        pending = set()
        work = cell.work if cell.work is not None else set(cell.state.tasks)
        for tid in work:
            t = cell.state.tasks.get(tid)
            # A task whose job record has not arrived yet (a large job is written in several
            # txns, tasks first) is left for the pass that sees its job.
            if t is not None and t.state is TaskState.PENDING and tid.job in cell.state.jobs:
                pending.add(tid)
        pending -= self.unschedulable.known(cell.capacity_epoch)
        to_plan = self.unschedulable.to_plan(pending, cell.capacity_epoch) if pending else set()
        if not to_plan and not heartbeat:
            return False
        doc: dict[str, Any] = {"scheduler": self.name, "revision": cell.revision, "plan": {}}
        plan = None
        if to_plan:
            plan = plan_for(
                cell.state, self.config, seed=self.passes, pending_ids=to_plan,
                running_ids=cell.running if cell.running is not None else None,
                images=machine_images(cell.machines),
            )  # fmt: skip
            self.passes += 1
            doc["plan"] = plan_to_json(plan)
            self.proposed["placements"] += len(plan.placements)
        try:
            response = self._http.post(
                f"{leader.rstrip('/')}{PLANS_PATH}", json=doc, headers=channel.to_machine(replica_peer(leader_name))
            )
        except httpx.HTTPError as err:
            log.info("plan not delivered to %s: %s", leader, err)
            return False
        if response.status_code != 200:
            self.proposed["refused"] += 1
            log.info("the leader refused the plan: %d %s", response.status_code, response.text[:200])
            return False
        answer = response.json()
        self.proposed["plans"] += 1
        self.proposed["placed"] += int(answer.get("placed") or 0)
        self.proposed["conflicts"] += int(answer.get("conflicts") or 0)
        if plan is not None:
            # Set aside only the tasks the pass found no place for, with reasons; a task it did
            # not get to is planned again at once.
            self.unschedulable.found({u.task for u in plan.unschedulable}, pending, cell.capacity_epoch)
            # Plan again only on the state the leader's commit made.
            self.cache.wait_revision(int(answer.get("revision") or 0), 5.0)
        return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="minborg scheduler", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--name", required=True, help="this scheduler's name, unique in the cell")
    parser.add_argument("--etcd", required=True, help="etcd client URLs, comma separated")
    store_tls.add_arguments(parser)
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
    except (channel.ChannelKeyError, ValueError) as err:
        parser.error(str(err))
    process = SchedulerProcess(
        name=args.name, etcd=args.etcd.split(","), cell=args.cell, lease_ttl=args.lease_ttl, key=key,
        etcd_tls=etcd_tls,
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
