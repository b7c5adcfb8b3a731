"""A sync relayed through a shard frees each machine for its next sync as soon as its own
answer is recorded: one answer whose write waits (behind a job's kill of 10,000 records, say)
no longer holds back the other machines of the same request."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from reference.master.poller import Poller


class _Link:
    def owner(self, machine: str) -> str:
        return "r1"

    def relay(self, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"machine": i["machine"], "status": 200, "body": {"tasks": []}} for i in items]


class _SlowWriter:
    """Holds every write until `go` is set, as a group commit behind a long write does."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.entered = threading.Event()
        self.written: list[Any] = []

    def mutate(self, change: Any) -> None:
        self.entered.set()
        assert self.go.wait(10)
        self.written.append(change)


def test_a_machine_whose_answer_writes_nothing_is_freed_while_anothers_write_waits() -> None:
    writer = _SlowWriter()
    poller = Poller(None, writer, cell_name="c", master_name="m0", epoch=1, link=_Link())  # type: ignore[arg-type]
    try:
        machines = {name: SimpleNamespace(inflight=True) for name in ("a", "b", "c")}
        poller._machines = machines  # type: ignore[assignment]
        poller._prepare = lambda name, desired, signature, revision: (1, {"tasks": []})  # type: ignore[method-assign]
        poller._settle = lambda name, address, seq, signature, status, body, text: body  # type: ignore[method-assign]
        change = object()
        # Only machine a's answer changes the cell (it must be written); b's and c's do not.
        poller._answer = lambda name, reply, ids: change if name == "a" else None  # type: ignore[method-assign]
        items = [(name, f"http://{name}", [], frozenset(), set(), 1) for name in machines]
        through = threading.Thread(target=poller._poll_through, args=("r1", items))
        through.start()
        assert writer.entered.wait(10)
        # a's write waits; b and c may already be sent their next sync.
        assert machines["a"].inflight and not machines["b"].inflight and not machines["c"].inflight
        writer.go.set()
        through.join(10)
        assert not through.is_alive() and writer.written == [change]
        assert not any(m.inflight for m in machines.values())
    finally:
        poller._pool.shutdown(wait=False)
        poller._http.close()
