"""A txn whose answer was lost may still commit later (etcd keeps the proposal): the writer's
txns are guarded on the keys they write, so such a late copy cannot undo a newer write.

The nemesis campaign's finding (docs/decisions.md, "A late copy of a retried txn"): a kill's
delete timed out, a read said it had not landed, the writer retried it; the first copy
committed 14 s later, after the same name was submitted again, and deleted the new job.
"""

from __future__ import annotations

import threading

import pytest

from reference.master import codec
from reference.master import writer as writer_mod
from reference.master.cell import Cell, Draft, MachineInfo
from reference.master.mutations import ApiError, remove_machine
from reference.master.writer import WriteFailed, Writer
from reference.store import ops
from reference.store.client import StoreOutcomeUnknown, StoreUnavailable
from spec.model import Machine, Resources

KEYS = codec.Keys("c1")


def machine(name: str) -> Machine:
    return Machine(name, Resources.of(cpu=1000, ram=2**30))


class Store:
    """etcd in little: keys with mod revisions, txns that honour MOD compares, and a txn
    whose answer is lost held back (`ghost`) to commit when the test says."""

    def __init__(self) -> None:
        self.kv: dict[bytes, tuple[bytes, int]] = {}
        self.revision = 1
        self.lock = threading.Lock()
        self.view = Cell()

    def get(self, key: ops.Key) -> tuple[bytes, int] | None:
        return self.kv.get(ops.to_bytes(key))

    def apply(self, batch: list[ops.Op], compares: list[ops.Compare]) -> int | None:
        with self.lock:
            for c in compares:
                if c["target"] == "CREATE":  # a marker required absent
                    assert c["result"] == "EQUAL" and c["create_revision"] == "0", c
                    if ops.unb64(c["key"]) in self.kv:
                        return None
                    continue
                assert c["target"] == "MOD" and c["result"] == "LESS", c
                first = ops.unb64(c["key"])
                if "range_end" in c:  # every key in [key, range_end), as etcd's range compare
                    end = ops.unb64(c["range_end"])
                    mods = [mod for k, (_, mod) in self.kv.items() if first <= k < end]
                else:
                    mods = [self.kv.get(first, (b"", 0))[1]]
                if not all(mod < int(c["mod_revision"]) for mod in mods):
                    return None
            self.revision += 1
            for op in batch:
                if "request_put" in op:
                    req = op["request_put"]
                    self.kv[ops.unb64(req["key"])] = (ops.unb64(req["value"]), self.revision)
                else:
                    self.kv.pop(ops.unb64(op["request_delete_range"]["key"]), None)
            names = [k.decode().rsplit("/", 1)[-1] for k in self.kv if k.startswith(KEYS.machines.encode())]
            state = Cell().state
            for name in names:
                state = state.with_(machines=state.machines.set(name, machine(name)))
            self.view = Cell(state, {n: MachineInfo() for n in names}, {}, {}, self.revision)
            return self.revision


class Cache:
    def __init__(self, store: Store) -> None:
        self.store = store

    def cell(self) -> Cell:
        return self.store.view

    def wait_revision(self, revision: int, timeout: float) -> bool:
        return True

    def expect(self, writes: list) -> None:
        """Records about to be written: this view is built from the commits, not a watch."""


class Election:
    """The fence always holds; the first txn after `lose_next` is answered with a timeout
    and kept as a ghost, uncommitted."""

    def __init__(self, store: Store) -> None:
        self.store = self.client = store
        self.is_leader = True
        self.lose_next = False
        self.ghost: tuple[list[ops.Op], list[ops.Compare]] | None = None
        self.candidate_name, self.lease_id = "m0", 7
        self.fencing_token = 7
        self.poisoned: list[str] = []
        self.poison_fails = False

    def poison(self, marker: str, lease_id: int) -> bool:
        """The marker written as etcd would: a put of its own revision."""
        if self.poison_fails:
            raise StoreUnavailable("no etcd endpoint answered")
        assert lease_id == self.lease_id
        with self.store.lock:
            self.store.revision += 1
            self.store.kv[ops.to_bytes(marker)] = (b"m0", self.store.revision)
        self.poisoned.append(marker)
        return True

    def fenced_commit(self, batch: list[ops.Op], extra_compares: list[ops.Compare] = ()) -> int | None:  # type: ignore[assignment]
        if self.lose_next:
            self.lose_next = False
            self.ghost = (list(batch), list(extra_compares))
            raise StoreOutcomeUnknown("read timed out")
        return self.store.apply(batch, list(extra_compares))


def add(name: str):
    def change(d: Draft) -> None:
        if name in d.state.machines:
            raise ApiError(409, "name", f"machine {name} exists")
        assert d.step("machine_add", machine(name)), name

    return change


def test_a_late_copy_of_a_retried_delete_cannot_undo_a_newer_put() -> None:
    store = Store()
    election = Election(store)
    w = Writer(Cache(store), election, KEYS)  # type: ignore[arg-type]
    w.mutate(add("m1"))
    election.lose_next = True
    w.mutate(lambda d: remove_machine(d, "m1"))  # lost answer, not landed, retried: removed
    assert election.ghost is not None and store.get(KEYS.machine("m1")) is None
    w.mutate(add("m1"))  # the name again, acknowledged
    assert store.get(KEYS.machine("m1")) is not None
    batch, compares = election.ghost
    store.apply(batch, compares)  # the first copy commits now, under the same leader term
    assert store.get(KEYS.machine("m1")) is not None, "a late copy of the old delete removed the new machine"
    with pytest.raises(ApiError) as err:
        w.mutate(lambda d: remove_machine(d, "m2"))
    assert err.value.status == 404


def test_a_key_changed_behind_the_view_fails_the_write_without_deposing() -> None:
    store = Store()
    election = Election(store)
    w = Writer(Cache(store), election, KEYS)  # type: ignore[arg-type]
    w.mutate(add("m1"))
    stale = store.view
    store.apply([ops.put(KEYS.machine("m1"), b"newer")], [])  # a write the view has not seen
    w.cache = type("Behind", (), {"cell": lambda self: stale, "wait_revision": lambda self, r, t: True,
                             "expect": lambda self, writes: None})()  # type: ignore[assignment]
    with pytest.raises(WriteFailed, match="did not confirm"):
        w.mutate(lambda d: remove_machine(d, "m1"))
    assert store.get(KEYS.machine("m1")) == (b"newer", store.revision) and election.is_leader


def test_a_late_copy_of_a_retried_put_cannot_bring_back_a_deleted_key() -> None:
    """The 30-minute nemesis's acknowledged kill whose job came back: an add whose answer was
    lost, retried and acknowledged; the name removed (acknowledged); then the add's first copy
    commits. The key guard alone passes it (a deleted key's mod_revision is 0, as a
    never-written one's); the attempt's marker, written before the retry, fails it."""
    store = Store()
    election = Election(store)
    w = Writer(Cache(store), election, KEYS)  # type: ignore[arg-type]
    w.mutate(add("m0"))
    election.lose_next = True
    w.mutate(add("m1"))  # lost answer, not landed, retried: added
    assert election.ghost is not None and store.get(KEYS.machine("m1")) is not None
    assert len(election.poisoned) == 1 and election.poisoned[0].startswith(KEYS.txns)
    w.mutate(lambda d: remove_machine(d, "m1"))  # acknowledged: m1 is gone
    assert store.get(KEYS.machine("m1")) is None
    batch, compares = election.ghost
    assert store.apply(batch, compares) is None, "the first copy of the add committed after the remove"
    assert store.get(KEYS.machine("m1")) is None


def test_no_write_goes_out_while_an_unanswered_txn_may_still_land() -> None:
    """Where the marker of an unanswered attempt cannot be written, the write fails (may have
    been made) and so does every later one, until the marker is written."""
    store = Store()
    election = Election(store)
    w = Writer(Cache(store), election, KEYS)  # type: ignore[arg-type]
    w.mutate(add("m0"))
    election.lose_next, election.poison_fails = True, True
    with pytest.raises(WriteFailed, match="still in doubt"):
        w.mutate(add("m1"))
    revision = store.revision
    with pytest.raises(WriteFailed, match="still in doubt"):
        w.mutate(add("m2"))
    assert store.revision == revision and store.get(KEYS.machine("m2")) is None
    election.poison_fails = False
    w.mutate(add("m2"))  # the marker first, then the write
    assert store.get(KEYS.machine("m2")) is not None and len(election.poisoned) == 1
    batch, compares = election.ghost
    assert store.apply(batch, compares) is None and store.get(KEYS.machine("m1")) is None


def test_waiting_counts_the_changes_queued_behind_a_group_being_committed() -> None:
    """What a large plan asks before it writes more than one part at a time (leader.parts_a_write):
    the changes that wait for the writer, none once they were committed."""
    store = Store()
    w = Writer(Cache(store), Election(store), KEYS)  # type: ignore[arg-type]
    assert w.waiting() == 0
    done = threading.Event()
    with w._lock:  # a group being committed: what is submitted now waits
        w.submit(add("m1"), lambda r: None)
        w.submit(add("m2"), lambda r: done.set())
        assert w.waiting() == 2
    assert done.wait(5.0)
    assert w.waiting() == 0
    assert store.get(KEYS.machine("m1")) is not None and store.get(KEYS.machine("m2")) is not None


def test_the_pace_is_learned_from_large_groups_only_and_follows_the_recent_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """`op_s`, the seconds per op a large plan sizes its writes by (leader.parts_a_write): unknown
    until a group of OP_S_MIN_OPS ops or more; a smaller group (a txn's round trip, mostly) does
    not move it; each large group weighs OP_S_WEIGHT, so a host that got faster (or slower)
    shows within a few groups."""
    monkeypatch.setattr(writer_mod, "OP_S_MIN_OPS", 3)
    store = Store()
    w = Writer(Cache(store), Election(store), KEYS)  # type: ignore[arg-type]
    w.mutate(add("m0"))
    assert w.op_s is None  # one op: no pace
    w.mutate(lambda d: [add(f"m{i}")(d) for i in range(1, 5)])  # four ops
    assert w.op_s is not None and 0 < w.op_s < 1.0
    w.op_s = 100.0  # as if the last groups ran at 100 s an op
    w.mutate(add("x"))  # one op: not a sample
    assert w.op_s == 100.0
    w.mutate(lambda d: [add(f"n{i}")(d) for i in range(1, 5)])  # a fast large group: half way down
    assert 50.0 < w.op_s < 50.5  # 100 + OP_S_WEIGHT * (a fast pace - 100)
