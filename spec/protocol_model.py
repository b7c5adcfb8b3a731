"""The state of the master-borglet sync protocol: committed cell, leaders, network, borglets.

This models the messages, where spec/model.py models the cell. Everything is a frozen,
ordered dataclass of ints and tuples, so states hash (the explorer deduplicates them) and
compare (the symmetry reduction picks the least of a state's permutations). Machines and
task indices are small ints; an incarnation is `(index, incarnation)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

Inc = tuple[int, int]  # (task index, incarnation)
NOWHERE = -1  # a slot on no machine; an index never placed has incarnation NOWHERE too


def inc_name(x: Inc) -> str:
    """`0#1`: task index 0, incarnation 1 (the borglet's task id, short)."""
    return f"{x[0]}#{x[1]}"


class Phase(StrEnum):
    """A known incarnation's process on a borglet. A queued one is in `Borglet.queue`."""

    RUNNING = "running"
    STOPPING = "stopping"  # killed as not desired, its process not gone yet
    ENDED = "ended"


@dataclass(frozen=True, order=True)
class Rules:
    """What the borglet applies and when it may forget a tombstone.

    revision_fence: apply a sync only if its (epoch, seq) is greater than the last applied one
    and its revision is no lower than the highest applied; False: only if its epoch is no lower.
    tombstone_gc_after_newer_revision: a tombstone may go once a sync of a strictly greater
    revision was applied; False: at any time (a count cap as small as 0).
    """

    name: str
    revision_fence: bool
    tombstone_gc_after_newer_revision: bool


NEW_RULES = Rules("new", revision_fence=True, tombstone_gc_after_newer_revision=True)
OLD_RULES = Rules("old", revision_fence=False, tombstone_gc_after_newer_revision=False)
# The two halves apart, to show which half keeps the new rules safe.
EPOCH_FENCE_WITH_GC_RULE = Rules("epoch-fence+gc-rule", False, True)
REVISION_FENCE_WITH_FREE_GC = Rules("revision-fence+free-gc", True, False)
RULES: dict[str, Rules] = {
    r.name: r for r in (NEW_RULES, OLD_RULES, EPOCH_FENCE_WITH_GC_RULE, REVISION_FENCE_WITH_FREE_GC)
}


@dataclass(frozen=True)
class Bounds:
    """The scope: how many machines and task indices, and what bounds the history."""

    machines: int = 2
    indices: int = 1
    incarnations: int = 2  # per index: 0 .. incarnations-1
    epochs: int = 2
    syncs_per_epoch: int = 2  # each leader sends at most this many syncs, to all machines together
    in_flight: int = 2  # syncs in the network at once, duplicates included
    deposed_send: bool = False  # a deposed leader keeps sending syncs of its epoch

    def __str__(self) -> str:
        return (f"machines={self.machines} indices={self.indices} incarnations={self.incarnations} "
                f"epochs={self.epochs} syncs_per_epoch={self.syncs_per_epoch} in_flight={self.in_flight}"
                f"{' deposed_send' if self.deposed_send else ''}")


@dataclass(frozen=True, order=True)
class Slot:
    """What etcd holds for one task index: its current incarnation, where, and whether wanted."""

    incarnation: int = NOWHERE
    machine: int = NOWHERE
    desired: bool = False  # RUNNING on `machine`


Cell = tuple[Slot, ...]  # one slot per task index


def desired_on(cell: Cell, machine: int) -> tuple[Inc, ...]:
    """The incarnations the cell wants running on `machine`: a sync's whole content."""
    return tuple((i, s.incarnation) for i, s in enumerate(cell) if s.desired and s.machine == machine)


@dataclass(frozen=True, order=True)
class Leader:
    """A master that won an epoch. A deposed one keeps its view and may still send syncs."""

    epoch: int
    view: int  # the revision of the committed state its watch cache reflects
    seq: int = 0  # syncs sent in this epoch


@dataclass(frozen=True, order=True)
class Sync:
    """A sync in flight: the complete desired set of one machine, as a leader saw it."""

    epoch: int
    seq: int
    revision: int
    machine: int
    desired: tuple[Inc, ...]

    def __str__(self) -> str:
        listed = ", ".join(inc_name(x) for x in self.desired) or "nothing"
        return f"sync(e{self.epoch} seq{self.seq} rev{self.revision} -> m{self.machine}: {listed})"


@dataclass(frozen=True, order=True)
class Fence:
    """The last sync a borglet applied (persisted), and the highest revision it applied."""

    epoch: int = 0
    seq: int = 0
    revision: int = 0
    top_revision: int = 0


@dataclass(frozen=True, order=True)
class Borglet:
    """One machine's borglet. `fence`, `tasks` and `tombstones` are persisted (tasks.json);
    `queue` (desired, not started yet) is memory only and rebuilt from the next sync."""

    fence: Fence = Fence()
    tasks: tuple[tuple[Inc, Phase], ...] = ()  # sorted by incarnation
    queue: tuple[Inc, ...] = ()  # sorted
    tombstones: tuple[tuple[Inc, int], ...] = ()  # forgotten incarnation -> revision that forgot it

    def phase(self, x: Inc) -> Phase | None:
        return dict(self.tasks).get(x)

    def tombstone(self, x: Inc) -> int | None:
        return dict(self.tombstones).get(x)


@dataclass(frozen=True, order=True)
class Ghost:
    """History for the invariants only; no action reads it."""

    started: tuple[tuple[Inc, int], ...] = ()  # (incarnation, machine) per process start, repeats kept
    killed: tuple[tuple[Inc, int], ...] = ()  # (incarnation, machine) the borglet killed as not desired


@dataclass(frozen=True, order=True)
class ProtocolState:
    history: tuple[Cell, ...]  # the committed cell at each revision; the last is etcd's now
    leaders: tuple[Leader, ...]  # the leaders that may still send, oldest first; the last leads
    network: tuple[Sync, ...]  # a bag: sorted, repeats are duplicates
    borglets: tuple[Borglet, ...]  # one per machine
    ghost: Ghost = field(default_factory=Ghost)
    _hash: int | None = field(default=None, compare=False, repr=False)

    def __hash__(self) -> int:
        # Cached: the explorer hashes each state several times, and a state is a deep tuple.
        if self._hash is None:
            object.__setattr__(self, "_hash", hash((self.history, self.leaders, self.network, self.borglets, self.ghost)))
        return self._hash  # type: ignore[return-value]

    @property
    def revision(self) -> int:
        return len(self.history) - 1

    @property
    def cell(self) -> Cell:
        return self.history[-1]

    @property
    def leader(self) -> Leader:
        return self.leaders[-1]

    def with_(
        self,
        history: tuple[Cell, ...] | None = None,
        leaders: tuple[Leader, ...] | None = None,
        network: tuple[Sync, ...] | None = None,
        borglets: tuple[Borglet, ...] | None = None,
        ghost: Ghost | None = None,
    ) -> ProtocolState:
        # Spelled out rather than dataclasses.replace: the explorer makes a state per step.
        return ProtocolState(
            self.history if history is None else history,
            self.leaders if leaders is None else leaders,
            self.network if network is None else network,
            self.borglets if borglets is None else borglets,
            self.ghost if ghost is None else ghost,
        )

    def with_borglet(self, machine: int, b: Borglet) -> ProtocolState:
        return self.with_(borglets=self.borglets[:machine] + (b,) + self.borglets[machine + 1 :])


def initial_state(machines: int, indices: int) -> ProtocolState:
    """Nothing placed (revision 0), the leader of epoch 1 caught up, no sync sent, borglets empty."""
    return ProtocolState(
        history=(tuple(Slot() for _ in range(indices)),),
        leaders=(Leader(epoch=1, view=0),),
        network=(),
        borglets=tuple(Borglet() for _ in range(machines)),
    )


def bag_add(bag: tuple[Sync, ...], m: Sync) -> tuple[Sync, ...]:
    return tuple(sorted(bag + (m,)))


def bag_remove(bag: tuple[Sync, ...], m: Sync) -> tuple[Sync, ...]:
    i = bag.index(m)
    return bag[:i] + bag[i + 1 :]


def describe(s: ProtocolState) -> str:
    """A compact one-screen rendering of a state, for traces."""
    slots = ", ".join(
        f"{i}: " + ("never placed" if sl.incarnation == NOWHERE else
                    f"{inc_name((i, sl.incarnation))}{' on m' + str(sl.machine) if sl.machine != NOWHERE else ''}"
                    f"{' desired' if sl.desired else ' not desired'}")
        for i, sl in enumerate(s.cell)
    )
    lines = [f"    etcd rev{s.revision}: {slots}"]
    lines.append("    leaders: " + ", ".join(f"e{ld.epoch}(view rev{ld.view}, sent {ld.seq})" for ld in s.leaders))
    lines.append("    in flight: " + (", ".join(str(m) for m in s.network) or "nothing"))
    for m, b in enumerate(s.borglets):
        f = b.fence
        tasks = ", ".join(f"{inc_name(x)} {p.value}" for x, p in b.tasks) or "-"
        queue = ", ".join(inc_name(x) for x in b.queue) or "-"
        stones = ", ".join(f"{inc_name(x)}@rev{r}" for x, r in b.tombstones) or "-"
        lines.append(
            f"    m{m}: applied e{f.epoch} seq{f.seq} rev{f.revision} (top rev{f.top_revision}); "
            f"tasks {tasks}; queued {queue}; tombstones {stones}"
        )
    return "\n".join(lines)
