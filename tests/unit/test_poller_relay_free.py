"""One path for a borglet's facts: a sync relayed through a shard is answered with an
acknowledgement, which writes nothing and frees its machine for its next sync at once; the
facts come in the shard's report, read against the tasks of the sync its fence names, even
when it was read before a newer sync that is already acknowledged (no second staleness check);
and a removed machine, which no shard polls, is read from its whole answer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from reference.master.cell import MachineInfo
from reference.master.poller import Poller
from reference.master.shardreports import MachineSync
from spec.model import TaskId

A, B = TaskId("u/web", 0), TaskId("u/web", 1)


class _Link:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.sent: list[dict[str, Any]] = []

    def owner(self, machine: str) -> str:
        return "r1"

    def relay(self, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.sent.extend(items)
        return [{"machine": i["machine"], "status": 200, "body": self.body} for i in items]


class _Writer:
    """Any write from a relayed answer fails the test: an acknowledgement changes nothing."""

    def __init__(self) -> None:
        self.mutated: list[Any] = []

    def submit(self, change: Any, done: Any) -> None:
        raise AssertionError("a relayed answer's facts are written from the shard's report, not here")

    def mutate(self, change: Any) -> None:
        self.mutated.append(change)


def _poller(body: dict[str, Any], machines: tuple[str, ...]) -> tuple[Poller, _Link, _Writer]:
    cell = SimpleNamespace(state=SimpleNamespace(machines={"a": SimpleNamespace(up=True)}),
                           machines={"a": MachineInfo(address="http://a")}, replicas={"r1": "http://r1"}, leader="m0=http://m0")  # fmt: skip
    link, writer = _Link(body), _Writer()
    poller = Poller(SimpleNamespace(cell=lambda: cell), writer, cell_name="c", master_name="m0", epoch=2, link=link)  # type: ignore[arg-type]
    for name in machines:
        poller._machines[name] = MachineSync(inflight=True)
    return poller, link, writer


def test_an_acknowledgement_writes_nothing_and_frees_its_machine_at_once() -> None:
    poller, link, writer = _poller({"fence": {"epoch": 2, "seq": 1}}, ("a",))
    answered: list[str] = []
    poller._answer = lambda name, reply, ids, cell=None: answered.append(name)  # type: ignore[method-assign]
    try:
        poller._poll_through("r1", [("a", "http://a", [], frozenset({"t"}), {A}, 1)])
        assert not answered and not writer.mutated  # the facts come in the shard's report
        st = poller._machines["a"]
        assert not st.inflight and "a" in poller._pending
        seq = link.sent[0]["seq"]
        assert st.acked_seq == seq and st.sent_ids == {seq: frozenset({A})}
    finally:
        poller._pool.shutdown(wait=False)


def test_a_report_read_before_an_acknowledged_sync_is_taken_against_the_sync_it_names() -> None:
    """The case the second staleness check used to drop (and ask the machine whole again for):
    sync 2 is acknowledged, then the shard's report read after sync 1 arrives."""
    poller, link, _ = _poller({"fence": {"epoch": 2, "seq": 2}}, ("a",))
    taken: list[set[TaskId]] = []
    poller._answer = lambda name, reply, ids, cell=None: taken.append(ids)  # type: ignore[method-assign]
    try:
        poller._poll_through("r1", [("a", "http://a", [], frozenset({"t0"}), {A}, 1)])
        poller._poll_through("r1", [("a", "http://a", [], frozenset({"t0", "t1"}), {A, B}, 2)])
        first, second = (item["seq"] for item in link.sent)
        old = {"tasks": [], "fence": {"epoch": 2, "seq": first}}
        answer = poller.accept({"shard": "r1", "reports": {"a": {"version": 1, "report": old}}})
        assert answer["need_full"] == [] and taken == [{A}]  # sync 1's tasks: B was not sent yet
        new = {"fence": {"epoch": 2, "seq": second}}
        poller.accept({"shard": "r1", "reports": {"a": {"version": 2, "base": 1, "change": {"fields": new}}}})
        assert taken == [{A}, {A, B}]
        assert set(poller._machines["a"].sent_ids) == {second}  # the borglet moved past sync 1
        # A report of the last term names no sync of this one: taken, read against no tasks.
        poller.accept({"shard": "r1", "reports": {"a": {"version": 3, "report": {"fence": {"epoch": 1, "seq": 9}}}}})
        assert taken[-1] == set()
    finally:
        poller._pool.shutdown(wait=False)


def test_a_removed_machine_is_read_from_its_whole_answer() -> None:
    """No shard polls a machine removed from the cell: the shard that relays its sync hands
    its whole answer back, and the processes it still runs are read from it."""
    report = {"tasks": [{"task_id": "u/web/0#0@1", "state": "RUNNING"}], "fence": {"epoch": 2, "seq": 1}}
    poller, _, writer = _poller(report, ("gone",))
    try:
        poller._poll_through("r1", [("gone", "http://gone", [], frozenset(), set(), 1)])
        assert poller._reported["gone"] == {"u/web/0#0@1": "RUNNING"} and not writer.mutated
        assert not poller._machines["gone"].inflight
    finally:
        poller._pool.shutdown(wait=False)


def test_a_borglets_word_that_a_task_ran_its_first_second_is_the_leaders_until_it_changes() -> None:
    """rollout.is_up's confirmation (poller.ready): taken from a shard's report of the machine,
    given up with the next report that does not say it, and never given for another machine."""
    from reference.master.cell import borglet_task_id
    from tests.unit import master_cells

    cell = master_cells.placed_cell(seen=True, borglet_state="RUNNING", started_at=5.0)
    t0, t1 = TaskId("alice/web", 0, 0), TaskId("alice/web", 1, 0)
    poller = Poller(SimpleNamespace(cell=lambda: cell), _Writer(), cell_name="c", master_name="m0", epoch=2,  # type: ignore[arg-type]
                    link=_Link({}))  # fmt: skip
    try:
        poller._machines["m1"] = MachineSync(sent_ids={1: frozenset({t0, t1})})

        def report(version: int, ready0: bool) -> dict[str, Any]:
            tasks = [{"task_id": borglet_task_id(t, cell.task_info(t)), "state": "RUNNING", "started_at": 5.0,
                      "ready": ready} for t, ready in ((t0, ready0), (t1, False))]  # fmt: skip
            return {"version": version, "report": {"fence": {"epoch": 2, "seq": 1}, "tasks": tasks}}

        b0, b1 = borglet_task_id(t0, cell.task_info(t0)), borglet_task_id(t1, cell.task_info(t1))
        assert poller.ready("m1", b0) is None  # no report of m1 yet: no word
        poller.accept({"shard": "r1", "reports": {"m1": report(1, True)}})
        assert poller.ready("m1", b0) is True and poller.ready("m1", b1) is False
        assert poller.ready("m2", b0) is None and poller.ready(None, b0) is None
        poller.accept({"shard": "r1", "reports": {"m1": report(2, False)}})  # restarted in place
        assert poller.ready("m1", b0) is False
        # A report that names a sync this leader did not send (another term's): still the word.
        other = report(3, True)
        other["report"]["fence"] = {"epoch": 1, "seq": 9}
        poller.accept({"shard": "r1", "reports": {"m1": other}})
        assert poller.ready("m1", b0) is True
    finally:
        poller._pool.shutdown(wait=False)


def test_a_regular_sync_is_skipped_while_the_borglet_reports_holding_the_set_it_would_carry() -> None:
    """Anti-entropy without the traffic: when a machine's regular sync comes due and its
    borglet's latest report names the acknowledged sync of this very set, nothing is sent; a
    report that no longer names it (a restarted borglet, an earlier term's fence), a refused
    or unanswered sync, or a changed set bring the sync back."""
    from reference.master import work

    poller, link, _ = _poller({"fence": {"epoch": 2, "seq": 1}}, ("a",))
    poller._answer = lambda name, reply, ids, cell=None: None  # type: ignore[method-assign]
    poller._pool.shutdown(wait=False)
    poller._pool = SimpleNamespace(submit=lambda f, *args: f(*args))  # type: ignore[assignment]
    cell = poller.cache.cell()
    cell.revision = 1
    signature = frozenset({"u/web/0#0@1"})
    poller._machines["a"].inflight = False
    poller._plan["a"], poller._signatures["a"] = ([], {A}), signature
    poller._reported["a"] = {}
    poller._pending = {"a"}  # known from its shard's first report
    clock = [100.0]
    poller.clock = lambda: clock[0]  # type: ignore[method-assign]

    def due() -> int:
        """Let the machine's regular sync come due and run a turn's sending: syncs sent."""
        clock[0] = poller._machines["a"].schedule.next_at + 0.1
        before = len(link.sent)
        poller._send_due(cell, clock[0])
        return len(link.sent) - before

    def report(epoch: int, seq: int, version: int) -> None:
        poller.accept({"shard": "r1", "reports": {"a": {"version": version, "report": {"fence": {"epoch": epoch, "seq": seq}}}}})

    skipped = work.snapshot().get("syncs_skipped", 0)
    assert due() == 1  # never acknowledged: sent
    seq = link.sent[-1]["seq"]
    assert due() == 1  # acknowledged, but no report names it yet: sent again
    seq = link.sent[-1]["seq"]
    report(2, seq, 1)
    assert due() == 0 and due() == 0  # the borglet says it holds it: nothing to send
    assert work.snapshot()["syncs_skipped"] == skipped + 2
    report(0, 0, 2)  # the borglet restarted: its report names no sync of this term
    assert due() == 1
    report(2, link.sent[-1]["seq"], 3)
    assert due() == 0
    # A changed set goes at once, due or not; unanswered, it leaves nothing acknowledged, and
    # the regular sync of the set after it goes.
    unanswered = link.relay
    link.relay = lambda owner, items: [{"machine": i["machine"], "status": 0} for i in items]  # type: ignore[method-assign]
    poller._signatures["a"] = frozenset({"u/web/0#0@1", "u/web/1#0@1"})
    poller._pending.add("a")  # as a replan that changed its set does
    sent = poller._seq
    poller._send_due(cell, clock[0])
    assert poller._seq == sent + 1 and poller._machines["a"].acked is None
    link.relay = unanswered  # type: ignore[method-assign]
    poller._signatures["a"] = signature
    poller._pending.add("a")
    poller._send_due(cell, clock[0])
    assert poller._seq == sent + 2  # changed back: sent at once, and acknowledged
    report(2, poller._seq, 4)
    assert due() == 0
