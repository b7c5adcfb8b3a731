"""A sync relayed through a shard frees each machine for its next sync as soon as its own
answer is recorded, and the changes the answers make go to the writer together: one answer
whose write waits (behind a job's kill of 10,000 records, say) holds back neither the other
machines of the same request nor the thread that sent it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from reference.master.intake import Answer, Said
from reference.master.poller import Poller
from reference.master.writer import NotLeader


class _Link:
    def owner(self, machine: str) -> str:
        return "r1"

    def relay(self, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"machine": i["machine"], "status": 200, "body": {"tasks": []}} for i in items]


class _QueuingWriter:
    """Queues what is submitted and commits it when the test says (a busy leader's writer)."""

    def __init__(self) -> None:
        self.queued: list[tuple[Any, Any]] = []

    def submit(self, change: Any, done: Any) -> None:
        self.queued.append((change, done))

    def mutate(self, change: Any) -> None:
        raise AssertionError("a relayed answer's change is queued, never written on the sending thread")


def _poller(writer: _QueuingWriter, names: tuple[str, ...]) -> tuple[Poller, dict[str, SimpleNamespace]]:
    poller = Poller(None, writer, cell_name="c", master_name="m0", epoch=1, link=_Link())  # type: ignore[arg-type]
    machines = {name: SimpleNamespace(inflight=True) for name in names}
    poller._machines = machines  # type: ignore[assignment]
    poller._prepare = lambda name, desired, signature, revision: (1, {"tasks": []})  # type: ignore[method-assign]
    poller._settle = lambda name, address, seq, signature, status, body, text: Answer(Said.REPLY, reply=body)  # type: ignore[method-assign]
    return poller, machines


def test_answers_that_change_the_cell_are_queued_together_and_free_their_machines_once_written() -> None:
    writer = _QueuingWriter()
    poller, machines = _poller(writer, ("a", "b", "c"))
    try:
        changes = {"a": object(), "c": object()}
        # a's and c's answers change the cell (they must be written); b's does not.
        poller._answer = lambda name, reply, ids: changes.get(name)  # type: ignore[method-assign]
        items = [(name, f"http://{name}", [], frozenset(), set(), 1) for name in machines]
        poller._poll_through("r1", items)  # returns with the writes still queued
        assert [change for change, _ in writer.queued] == [changes["a"], changes["c"]]
        assert machines["a"].inflight and not machines["b"].inflight and machines["c"].inflight
        _, done_a = writer.queued[0]
        done_a(SimpleNamespace(error=None))
        assert not machines["a"].inflight and machines["c"].inflight
        _, done_c = writer.queued[1]
        done_c(SimpleNamespace(error=NotLeader("deposed")))  # a failed write frees it too
        assert not any(m.inflight for m in machines.values())
    finally:
        poller._pool.shutdown(wait=False)
