"""The writer's group commit: queued changes share one txn, each sees the ones before it, a
change that raises is dropped alone, and a failed commit fails every change in its group."""

from __future__ import annotations

import threading
import time

import pytest

from reference.master import codec
from reference.master.cell import Cell, Draft, MachineInfo
from reference.master.writer import NotLeader, WriteFailed, Writer
from reference.store import ops
from reference.store.client import StoreUnavailable
from spec.model import Machine, Resources


class FakeCache:
    """Applies committed ops' machine records back into the cell, as the watch would."""

    def __init__(self) -> None:
        self.view = Cell()
        self.lock = threading.Lock()

    def cell(self) -> Cell:
        with self.lock:
            return self.view

    def wait_revision(self, revision: int, timeout: float) -> bool:
        return True

    def expect(self, writes: list) -> None:
        """Records about to be written: this view is built from the commits, not a watch."""


class FakeElection:
    def __init__(self, cache: FakeCache, *, delay: float = 0.0) -> None:
        self.cache, self.delay = cache, delay
        self.is_leader = True
        self.txns: list[list[ops.Op]] = []
        self.revision = 1
        self.fail_with: Exception | None = None
        self.fenced = False
        self.client = None
        self.committing = threading.Event()  # a commit began
        self.gate: threading.Event | None = None  # when set: each commit waits for it
        self.candidate_name, self.lease_id = "fake", 1
        self.fencing_token = 1
        self.poisoned: list[str] = []

    def poison(self, marker: str, lease_id: int) -> bool:
        self.poisoned.append(marker)
        return True

    def fenced_commit(self, batch: list[ops.Op], extra_compares: list[ops.Compare] = ()) -> int | None:  # type: ignore[assignment]
        self.committing.set()
        if self.gate is not None:
            assert self.gate.wait(10), "the test never let the commit go on"
        time.sleep(self.delay)
        if self.fail_with is not None:
            raise self.fail_with
        if self.fenced:
            return None
        self.txns.append(batch)
        self.revision += 1
        names = [ops.unb64(op["request_put"]["key"]).decode().rsplit("/", 1)[-1] for op in batch]
        with self.cache.lock:
            state = self.cache.view.state
            machines = dict(self.cache.view.machines)
            for name in names:
                state = state.with_(machines=state.machines.set(name, machine(name)))
                machines[name] = MachineInfo()
            self.cache.view = Cell(state, machines, {}, {}, self.revision)
        return self.revision


def machine(name: str) -> Machine:
    return Machine(name, Resources.of(cpu=1000, ram=2**30))


def add(name: str):
    def change(d: Draft) -> int:
        assert d.step("machine_add", machine(name)), name
        return len(d.state.machines)

    return change


def writer(delay: float = 0.0) -> tuple[Writer, FakeElection]:
    cache = FakeCache()
    election = FakeElection(cache, delay=delay)
    return Writer(cache, election, codec.Keys("c1")), election  # type: ignore[arg-type]


def queued(w: Writer, n: int) -> None:
    """Wait (polling, 10 s at most) until `n` changes wait in the writer's queue."""
    deadline = time.monotonic() + 10
    while len(w._queue) < n:
        assert time.monotonic() < deadline, f"{len(w._queue)} of {n} changes queued"
        time.sleep(0.005)


def test_one_change_commits_one_txn_and_returns_its_revision() -> None:
    w, election = writer()
    assert w.mutate(add("m0")) == (1, 2)
    assert len(election.txns) == 1 and w.groups == 1 and w.grouped == 1
    assert w.mutate(lambda d: "nothing") == ("nothing", 2)  # no change: no txn
    assert len(election.txns) == 1


def test_concurrent_changes_share_txns_and_see_each_other() -> None:
    w, election = writer(delay=0.05)
    results: dict[int, tuple[int, int]] = {}

    def submit(i: int) -> None:
        results[i] = w.mutate(add(f"m{i}"))

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(results) == 20
    assert sorted(r[0] for r in results.values()) == list(range(1, 21))  # each saw all before it
    assert len(election.txns) < 20 and w.grouped == 20  # some shared a txn
    assert sum(len(b) for b in election.txns) == 20  # every machine written exactly once
    assert len(w.cache.cell().state.machines) == 20


def test_a_change_that_raises_is_dropped_alone() -> None:
    w, election = writer()
    election.gate = threading.Event()
    errors: list[BaseException] = []
    done: list[int] = []

    def bad(d: Draft) -> None:
        d.step("machine_add", machine("bad"))
        raise ValueError("refused")

    def run(change) -> None:
        try:
            done.append(w.mutate(change)[0])
        except ValueError as err:
            errors.append(err)

    blocker = threading.Thread(target=run, args=(add("m0"),))
    blocker.start()
    assert election.committing.wait(10)  # m0 is committing: the next three queue behind it
    threads = [threading.Thread(target=run, args=(c,)) for c in (add("m1"), bad, add("m2"))]
    for t in threads:
        t.start()
    queued(w, 3)
    election.gate.set()
    for t in [blocker, *threads]:
        t.join(10)
    assert len(errors) == 1 and str(errors[0]) == "refused"
    assert sorted(done) == [1, 2, 3]
    assert [len(b) for b in election.txns] == [1, 2]  # the three made one group, less the bad one
    assert "bad" not in w.cache.cell().state.machines
    assert sorted(w.cache.cell().state.machines.keys()) == ["m0", "m1", "m2"]


def test_a_failed_commit_fails_every_change_of_its_group() -> None:
    w, election = writer()
    election.fail_with = StoreUnavailable("etcd down")
    with pytest.raises(WriteFailed):
        w.mutate(add("m0"))
    election.fail_with = None
    election.fenced = True
    with pytest.raises(NotLeader):
        w.mutate(add("m0"))
    election.is_leader = False
    with pytest.raises(NotLeader):
        w.mutate(add("m0"))
    assert election.txns == []


def test_group_size_is_bounded() -> None:
    w, election = writer()
    w.max_group = 3
    election.gate = threading.Event()
    threads = [threading.Thread(target=w.mutate, args=(add(f"m{i}"),)) for i in range(10)]
    for t in threads:
        t.start()
    assert election.committing.wait(10)
    queued(w, 7)  # the first group took 3 at most: 7 or more wait behind it
    election.gate.set()
    for t in threads:
        t.join(10)
    assert max(len(b) for b in election.txns) == 3  # full groups, none larger
    assert len(w.cache.cell().state.machines) == 10


class Answers:
    """What `Writer.submit` called back with, by name."""

    def __init__(self) -> None:
        self.got: dict[str, object] = {}
        self.cond = threading.Condition()

    def callback(self, name: str):
        def done(r) -> None:
            assert r.done
            with self.cond:
                self.got[name] = r.error if r.error is not None else (r.result, r.revision)
                self.cond.notify_all()

        return done

    def wait(self, n: int) -> dict[str, object]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.got) >= n, 10), self.got
            return dict(self.got)


def test_submitted_changes_are_committed_by_the_writers_thread_and_called_back() -> None:
    w, election = writer(delay=0.02)
    answers = Answers()
    caller = threading.get_ident()
    threads: set[int] = set()

    def add_here(name: str):
        inner = add(name)

        def change(d: Draft) -> int:
            threads.add(threading.get_ident())
            return inner(d)

        return change

    for i in range(10):
        w.submit(add_here(f"m{i}"), answers.callback(f"m{i}"))
    got = answers.wait(10)
    assert sorted(v[0] for v in got.values()) == list(range(1, 11))  # each saw those before it
    revisions = [got[f"m{i}"][1] for i in range(10)]
    assert revisions == sorted(revisions) and revisions[-1] == election.revision
    assert caller not in threads  # the submitter never ran a change
    assert len(election.txns) < 10 and w.grouped == 10
    assert sorted(w.cache.cell().state.machines.keys()) == sorted(f"m{i}" for i in range(10))


def test_submitted_changes_fail_alone_or_with_their_group() -> None:
    w, election = writer()
    answers = Answers()

    def bad(d: Draft) -> None:
        raise ValueError("refused")

    w.submit(bad, answers.callback("bad"))
    w.submit(add("m0"), answers.callback("m0"))
    got = answers.wait(2)
    assert isinstance(got["bad"], ValueError) and got["m0"] == (1, 2)

    election.fail_with = StoreUnavailable("etcd down")
    w.submit(add("m1"), answers.callback("m1"))
    assert isinstance(answers.wait(3)["m1"], WriteFailed)
    election.fail_with = None
    election.is_leader = False
    w.submit(add("m2"), answers.callback("m2"))
    assert isinstance(answers.wait(4)["m2"], NotLeader)


def test_the_writers_thread_outlives_a_group_that_broke() -> None:
    w, election = writer()
    answers = Answers()
    real_cell = w.cache.cell
    broken = [True]

    def cell() -> Cell:
        if broken.pop() if broken else False:
            raise RuntimeError("cache broke")
        return real_cell()

    w.cache.cell = cell  # type: ignore[method-assign]
    w.submit(add("m0"), answers.callback("m0"))
    got = answers.wait(1)
    assert isinstance(got["m0"], WriteFailed)  # answered, not left hanging
    w.submit(add("m1"), answers.callback("m1"))
    assert answers.wait(2)["m1"] == (1, 2)


class HoldClock:
    """The writer's monotonic clock, frozen until the test moves it. The writer reads it only
    while it holds a group open, with the queue locked: each reading notes how many changes
    were queued then, so the test knows what the writer saw before it sends the next one."""

    def __init__(self) -> None:
        self.now = 0.0
        self.writer: Writer | None = None
        self.seen: list[int] = []
        self.cond = threading.Condition()

    def __call__(self) -> float:
        assert self.writer is not None
        with self.cond:
            self.seen.append(len(self.writer._queue))
            self.cond.notify_all()
            return self.now

    def saw(self, queued: int, since: int, times: int = 1) -> None:
        """Wait until the writer, holding a group open, read the clock `times` times with
        `queued` changes queued, among the readings from index `since` on."""
        with self.cond:
            ok = self.cond.wait_for(lambda: self.seen[since:].count(queued) >= times, 10)
            assert ok, f"the writer held no group open with {queued} queued: {self.seen[since:][-20:]}"


def test_the_writers_thread_holds_a_group_open_for_concurrent_writers_only() -> None:
    cache = FakeCache()
    election = FakeElection(cache)
    clock = HoldClock()
    # The hold is timed on the frozen clock: however long the host takes, only the test
    # ends it. group_delay is short in real time, so a hold wakes often to read the clock.
    w = Writer(cache, election, codec.Keys("c1"), clock=clock, group_delay=0.05)  # type: ignore[arg-type]
    clock.writer = w
    answers = Answers()
    w.submit(add("m0"), answers.callback("m0"))  # alone: committed at once
    assert answers.wait(1)["m0"] == (1, 2)

    # A change that holds the writer's thread while two more queue: those two then make
    # one group. After it the writer waits for one change more than that group held, and
    # commits those that trickle in, one at a time, together.
    gate, running = threading.Event(), threading.Event()

    def blocker(d: Draft) -> None:
        running.set()
        assert gate.wait(5)

    w.submit(blocker, answers.callback("blocker"))
    assert running.wait(5)
    w.submit(add("m1"), answers.callback("m1"))
    w.submit(add("m2"), answers.callback("m2"))
    assert clock.seen == []  # after a lone change, no hold: the blocker was taken at once
    gate.set()
    answers.wait(4)
    assert got_pair(answers) and w._last_group == 2
    before = len(election.txns)
    for i, name in enumerate(["m3", "m4", "m5"]):
        clock.saw(i, since=0)  # the writer holds the group open with i changes queued
        w.submit(add(name), answers.callback(name))
    got = answers.wait(7)
    assert len(election.txns) == before + 1  # one txn for all of them
    assert got["m3"][1] == got["m4"][1] == got["m5"][1]  # type: ignore[index]
    assert len(w.cache.cell().state.machines) == 6

    # A group of three: the writer holds the next open for a fourth, until the clock says
    # group_delay passed. Real time alone never ends it: it reads the clock again and again.
    since = len(clock.seen)
    clock.saw(0, since)
    w.submit(add("m6"), answers.callback("m6"))
    clock.saw(1, since, times=3)
    assert "m6" not in answers.got and len(election.txns) == before + 1
    with clock.cond:
        clock.now += 0.05
    assert answers.wait(8)["m6"] == (7, election.revision)
    assert len(election.txns) == before + 2


def got_pair(answers: Answers) -> bool:
    """m1 and m2 were committed in one txn (the same revision)."""
    return answers.got["m1"][1] == answers.got["m2"][1]
