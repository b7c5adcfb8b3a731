"""The actions of the sync protocol: pure functions `action(state, ...) -> new state | None`.

The shape is spec/actions.py's: the guard first (None when it is false), then the new values;
what is not named stays as it was. Faults are ordinary actions: a message duplicated or
dropped, a leader deposed by a new epoch whose view lags, a borglet restarted, a process that
exits by itself. A delay is a message not delivered yet, so it needs no action. The borglet's
behaviour depends on the `Rules` (the new fence and tombstone rule, or the old ones), bound
into the action table by `actions_for`.

Replies from borglets are not modelled: the only master decisions a reply feeds are commits
(a task lost or finished), and `commit_kill` and `commit_place` are already enabled whenever
etcd's state allows them, so a reply could only narrow what the model already explores.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from .protocol_model import (
    NOWHERE,
    Borglet,
    Bounds,
    Fence,
    Inc,
    Leader,
    Phase,
    ProtocolState,
    Rules,
    Slot,
    Sync,
    bag_add,
    bag_remove,
    desired_on,
    inc_name,
)

# --- committed cell state: etcd, written by the leader ---------------------------------------


def _commit(s: ProtocolState, index: int, slot: Slot) -> ProtocolState:
    cell = s.cell[:index] + (slot,) + s.cell[index + 1 :]
    leader = replace(s.leader, view=s.revision + 1)  # the writer sees its own write
    return s.with_(history=s.history + (cell,), leaders=s.leaders[:-1] + (leader,))


def commit_place(s: ProtocolState, index: int, machine: int, *, bounds: Bounds) -> ProtocolState | None:
    """Guard: the leader's view is current, the index is not desired anywhere, and a new incarnation is within the bound.
    Effect: the index's next incarnation is placed on the machine, desired; the revision grows by one."""
    slot = s.cell[index]
    if s.leader.view != s.revision or slot.desired or slot.incarnation + 1 >= bounds.incarnations:
        return None
    if not 0 <= machine < len(s.borglets):
        return None
    return _commit(s, index, Slot(slot.incarnation + 1, machine, desired=True))


def commit_kill(s: ProtocolState, index: int) -> ProtocolState | None:
    """Guard: the leader's view is current and the index is desired on a machine.
    Effect: it is no longer desired (killed, lost or to be rescheduled), never again; the revision grows by one."""
    slot = s.cell[index]
    if s.leader.view != s.revision or not slot.desired:
        return None
    return _commit(s, index, Slot(slot.incarnation, NOWHERE, desired=False))


# --- leaders ---------------------------------------------------------------------------------


def elect(s: ProtocolState, view: int, *, bounds: Bounds) -> ProtocolState | None:
    """Guard: an epoch is left within the bound and the view is a committed revision.
    Effect: a new leader of the next epoch, whose watch cache reflects that (possibly old) revision; the deposed one stops sending (or, in scopes that say so, sends on until it notices)."""
    if s.leader.epoch >= bounds.epochs or not 0 <= view <= s.revision:
        return None
    new = Leader(epoch=s.leader.epoch + 1, view=view)
    return s.with_(leaders=(s.leaders if bounds.deposed_send else ()) + (new,))


def _leader(s: ProtocolState, epoch: int) -> int | None:
    """Where the leader of `epoch` is in `s.leaders`, if it may still act."""
    for i, ld in enumerate(s.leaders):
        if ld.epoch == epoch:
            return i
    return None


def catch_up(s: ProtocolState, epoch: int) -> ProtocolState | None:
    """Guard: that epoch's leader has a view older than the committed revision.
    Effect: its view becomes the committed revision."""
    i = _leader(s, epoch)
    if i is None or s.leaders[i].view >= s.revision:
        return None
    leader = replace(s.leaders[i], view=s.revision)
    return s.with_(leaders=s.leaders[:i] + (leader,) + s.leaders[i + 1 :])


def send_sync(s: ProtocolState, epoch: int, machine: int, *, bounds: Bounds) -> ProtocolState | None:
    """Guard: that epoch's leader has syncs left in the bound and the network has room.
    Effect: a sync (epoch, its next seq, its view's revision, the machine's desired set at that revision) is in flight."""
    i = _leader(s, epoch)
    if i is None or not 0 <= machine < len(s.borglets):
        return None
    leader = s.leaders[i]
    if leader.seq >= bounds.syncs_per_epoch or len(s.network) >= bounds.in_flight:
        return None
    msg = Sync(epoch, leader.seq + 1, leader.view, machine, desired_on(s.history[leader.view], machine))
    leaders = s.leaders[:i] + (replace(leader, seq=leader.seq + 1),) + s.leaders[i + 1 :]
    return s.with_(leaders=leaders, network=bag_add(s.network, msg))


# --- the network -----------------------------------------------------------------------------


def duplicate(s: ProtocolState, msg: Sync, *, bounds: Bounds) -> ProtocolState | None:
    """Guard: the sync is in flight and the network has room.
    Effect: a second copy of it is in flight."""
    if msg not in s.network or len(s.network) >= bounds.in_flight:
        return None
    return s.with_(network=bag_add(s.network, msg))


def drop(s: ProtocolState, msg: Sync) -> ProtocolState | None:
    """Guard: the sync is in flight.
    Effect: one copy of it is lost."""
    if msg not in s.network:
        return None
    return s.with_(network=bag_remove(s.network, msg))


def accepts(rules: Rules, fence: Fence, msg: Sync) -> bool:
    """Would a borglet whose last applied sync is `fence` apply `msg`? (Rule 1.)"""
    if not rules.revision_fence:
        return msg.epoch >= fence.epoch
    return (msg.epoch, msg.seq) > (fence.epoch, fence.seq) and msg.revision >= fence.top_revision


def apply_sync(b: Borglet, msg: Sync) -> tuple[Borglet, tuple[Inc, ...]]:
    """The borglet after applying `msg` (rule 2), and the incarnations it killed.

    Listed and unknown: queued (the queue is replaced by these). Listed and tombstoned:
    restored as ended, never started. Known and not listed: a running one is killed (stopping),
    an ended one is forgotten into the tombstones at the sync's revision.
    """
    listed = set(msg.desired)
    known = dict(b.tasks)
    stones = dict(b.tombstones)
    tasks: dict[Inc, Phase] = {}
    killed: list[Inc] = []
    for x, phase in known.items():
        if x in listed:
            tasks[x] = phase
        elif phase is Phase.RUNNING:
            tasks[x] = Phase.STOPPING
            killed.append(x)
        elif phase is Phase.STOPPING:
            tasks[x] = phase
        else:
            stones[x] = msg.revision
    queue = []
    for x in msg.desired:
        if x in known:
            continue
        if x in stones:
            del stones[x]
            tasks[x] = Phase.ENDED
        else:
            queue.append(x)
    fence = Fence(msg.epoch, msg.seq, msg.revision, max(b.fence.top_revision, msg.revision))
    return (
        Borglet(fence, tuple(sorted(tasks.items())), tuple(sorted(queue)), tuple(sorted(stones.items()))),
        tuple(killed),
    )


def deliver(s: ProtocolState, msg: Sync, *, rules: Rules) -> ProtocolState | None:
    """Guard: the sync is in flight.
    Effect: one copy arrives; its borglet applies it if the fence accepts it (rule 1: newer (epoch, seq), revision no lower), else nothing changes."""
    if msg not in s.network:
        return None
    s = s.with_(network=bag_remove(s.network, msg))
    b = s.borglets[msg.machine]
    if not accepts(rules, b.fence, msg):
        return s
    b, killed = apply_sync(b, msg)
    ghost = s.ghost
    if killed:
        ghost = replace(ghost, killed=tuple(sorted({*ghost.killed, *((x, msg.machine) for x in killed)})))
    return s.with_borglet(msg.machine, b).with_(ghost=ghost)


def refused_forever(rules: Rules, fence: Fence, msg: Sync) -> bool:
    """Will every borglet whose fence is at or past `fence` refuse `msg`? Fences only grow."""
    return not accepts(rules, fence, msg)


def prune(s: ProtocolState, rules: Rules) -> ProtocolState:
    """The state without the syncs their borglets will refuse forever.

    Refusing a sync changes nothing, so such a sync can only take room in the bag; the state
    without it is reachable (by `drop`) and can do all the other can. The explorer applies this
    after every step, which cuts the states it must tell apart without hiding any violation.
    """
    keep = tuple(g for g in s.network if not refused_forever(rules, s.borglets[g.machine].fence, g))
    return s if len(keep) == len(s.network) else s.with_(network=keep)


# --- the borglet -----------------------------------------------------------------------------


def start_next(s: ProtocolState, machine: int, x: Inc) -> ProtocolState | None:
    """Guard: the incarnation is queued and no other process of its index is running or stopping on the machine.
    Effect: it is recorded as running (write-ahead), then its process starts."""
    b = s.borglets[machine]
    if x not in b.queue:
        return None
    if any(y[0] == x[0] and p is not Phase.ENDED for y, p in b.tasks):
        return None
    b = replace(b, queue=tuple(y for y in b.queue if y != x), tasks=tuple(sorted(b.tasks + ((x, Phase.RUNNING),))))
    ghost = replace(s.ghost, started=tuple(sorted(s.ghost.started + ((x, machine),))))
    return s.with_borglet(machine, b).with_(ghost=ghost)


def _set_phase(s: ProtocolState, machine: int, x: Inc, was: Phase, now: Phase) -> ProtocolState | None:
    b = s.borglets[machine]
    if b.phase(x) is not was:
        return None
    tasks = tuple((y, now if y == x else p) for y, p in b.tasks)
    return s.with_borglet(machine, replace(b, tasks=tasks))


def process_exits(s: ProtocolState, machine: int, x: Inc) -> ProtocolState | None:
    """Guard: the incarnation is running on the machine.
    Effect: its process has ended by itself (finished, or failed past its in-place restarts)."""
    return _set_phase(s, machine, x, Phase.RUNNING, Phase.ENDED)


def stop_finished(s: ProtocolState, machine: int, x: Inc) -> ProtocolState | None:
    """Guard: the incarnation is stopping on the machine.
    Effect: its process is gone; it is ended and never restarted (rule 4)."""
    return _set_phase(s, machine, x, Phase.STOPPING, Phase.ENDED)


def restart_borglet(s: ProtocolState, machine: int) -> ProtocolState | None:
    """Guard: the borglet holds something in memory only (a queue).
    Effect: it restarts from its persisted fence, tasks and tombstones; processes live on; the queue is lost."""
    b = s.borglets[machine]
    if not b.queue:
        return None  # nothing volatile: a restart is the identity
    return s.with_borglet(machine, replace(b, queue=()))


def drop_tombstone(s: ProtocolState, machine: int, x: Inc, *, rules: Rules) -> ProtocolState | None:
    """Guard: the incarnation is tombstoned and (rule 3) the borglet applied a sync of a strictly greater revision than its tombstone's.
    Effect: the tombstone is forgotten."""
    b = s.borglets[machine]
    rev = b.tombstone(x)
    if rev is None:
        return None
    if rules.tombstone_gc_after_newer_revision and not b.fence.top_revision > rev:
        return None
    return s.with_borglet(machine, replace(b, tombstones=tuple(t for t in b.tombstones if t[0] != x)))


# --- the action table ------------------------------------------------------------------------

ACTIONS: dict[str, Callable[..., ProtocolState | None]] = {
    "commit_place": commit_place,
    "commit_kill": commit_kill,
    "elect": elect,
    "catch_up": catch_up,
    "send_sync": send_sync,
    "duplicate": duplicate,
    "drop": drop,
    "deliver": deliver,
    "start_next": start_next,
    "process_exits": process_exits,
    "stop_finished": stop_finished,
    "restart_borglet": restart_borglet,
    "drop_tombstone": drop_tombstone,
}


def actions_for(rules: Rules, bounds: Bounds) -> dict[str, Callable[..., ProtocolState | None]]:
    """The action table with the rules and the scope's bounds bound in, so a step names only
    its own arguments (which index, machine, message)."""
    given = {"rules": rules, "bounds": bounds}
    table = {}
    for name, fn in ACTIONS.items():
        wanted = {k: v for k, v in given.items() if k in inspect.signature(fn).parameters}
        table[name] = partial(fn, **wanted) if wanted else fn
    return table


@dataclass(frozen=True, order=True)
class Step:
    """One action with its arguments: the unit of a trace."""

    action: str
    args: tuple[Any, ...]

    def __str__(self) -> str:
        args = [inc_name(a) if isinstance(a, tuple) else a for a in self.args]
        return FORMAT[self.action].format(*args)


FORMAT = {
    "commit_place": "commit_place: etcd places index {0}'s next incarnation on m{1}",
    "commit_kill": "commit_kill: etcd no longer wants index {0}",
    "elect": "elect: a new leader, its view at rev{0}",
    "catch_up": "catch_up: leader e{0} catches up with etcd",
    "send_sync": "send_sync: leader e{0} sends m{1} its desired set",
    "duplicate": "duplicate: {0} is duplicated",
    "drop": "drop: {0} is lost",
    "deliver": "deliver: {0} arrives",
    "start_next": "start_next: m{0} starts queued {1}",
    "process_exits": "process_exits: {1} exits by itself on m{0}",
    "stop_finished": "stop_finished: {1} is gone from m{0}",
    "restart_borglet": "restart_borglet: m{0}'s borglet restarts",
    "drop_tombstone": "drop_tombstone: m{0} forgets the tombstone of {1}",
}
