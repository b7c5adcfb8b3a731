"""One machine's answer cannot stop a link shard polling the others. A state read answered with
JSON nested deeper than the standard library's reader recurses (orjson refuses it at depth 1,024,
then `json` raised RecursionError, not the ValueError every reader of fastjson.loads catches)
escaped KeptAlive.get_json, ended the shard's round at that machine's chunk, and did so every
round: the machines polled with it or after it were never read again, and went lost."""

from __future__ import annotations

from typing import Any

import pytest

from reference import fastjson
from reference.master import intake, shards
from reference.master.linkshard import KeptAlive, LinkShard
from tests.unit.fakehttp import JsonHandler, serving
from tests.unit.test_linkshard import FakeCell, FakeInfo, FakeState

DEEP = b"[" * 100_000 + b"]" * 100_000
HONEST = {"usage": {"cpu": 0}, "tasks": [{"task_id": "t", "state": "RUNNING"}]}


class Hostile(JsonHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.answer(200, DEEP)


class Honest(JsonHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.answer(200, fastjson.dumps(HONEST))


@pytest.mark.parametrize("raw", [DEEP, b'{"a": ' * 100_000 + b"1" + b"}" * 100_000])
def test_json_nested_too_deep_is_not_json(raw: bytes) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(raw)


def test_a_state_read_nested_too_deep_is_no_answer() -> None:
    with serving(Hostile) as base:
        assert KeptAlive(timeout=2.0).get_json(f"{base}/v1/state") is None


class _Cache:
    def __init__(self, addresses: dict[str, str]) -> None:
        self.view = FakeCell({n: FakeInfo(a) for n, a in addresses.items()}, FakeState({n: object() for n in addresses}))

    def cell(self) -> FakeCell:
        return self.view


def test_one_machines_answer_does_not_stop_the_round_for_the_others() -> None:
    batches: list[dict[str, Any]] = []

    def leader(batch: dict[str, Any]) -> dict[str, Any]:
        batches.append(batch)
        return {"need_full": []}

    with serving(Hostile) as bad, serving(Honest) as good:
        # "a" sorts first: its chunk, and every chunk after it, were lost with it.
        shard = LinkShard(_Cache({"a-hostile": bad, "b-honest": good}), name="r1", send=leader, interval=1.0)  # type: ignore[arg-type]
        try:
            shard.round()
            assert shard.rounds == 1
            assert shard.flush() == 1
        finally:
            shard.stop()
    reported = batches[-1]["reports"]
    assert reported["b-honest"]["report"]["tasks"] == HONEST["tasks"]


class _Leader:
    """Keeps each machine's report as a leader rebuilds it from the batches (shards.apply)."""

    def __init__(self) -> None:
        self.copies: dict[str, dict[str, Any]] = {}

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        for m, entry in batch["reports"].items():
            self.copies[m] = entry["report"] if "report" in entry else shards.apply(self.copies[m], entry["change"])
        return {"need_full": []}


@pytest.mark.parametrize("odd", [5, "abc", {"task_id": "t"}, None])
def test_a_report_whose_tasks_are_no_list_costs_no_other_machine_its_news(odd: Any) -> None:
    # The shard sends what changed; its difference of a report whose "tasks" is no list raised
    # (TypeError), at every batch: no machine of the shard was reported again.
    leader = _Leader()
    shard = LinkShard(_Cache({"a": "http://a", "b": "http://b"}), name="r1", send=leader, interval=1.0)  # type: ignore[arg-type]
    answers: dict[str, Any] = {"a": {"tasks": odd}, "b": {"tasks": [{"task_id": "t", "state": "RUNNING"}]}}
    shard._read = lambda machine, address: answers[machine]  # type: ignore[method-assign]
    try:
        shard.round()
        assert shard.flush() == 1
        answers["a"] = {"tasks": odd, "n": 2}
        answers["b"] = {"tasks": [{"task_id": "t", "state": "RUNNING"}, {"task_id": "u", "state": "RUNNING"}]}
        shard.round()
        assert shard.flush() == 1
    finally:
        shard.stop()
    assert [t["task_id"] for t in leader.copies["b"]["tasks"]] == ["t", "u"]


@pytest.mark.parametrize("fence", [{"epoch": "x"}, {"epoch": "1e300", "seq": [1]}, {"epoch": float("inf")}, {"seq": {"a": 1}}])
def test_a_report_with_a_fence_of_no_numbers_is_read_unfenced(fence: dict[str, Any]) -> None:
    # The leader reads each report's fence before it takes any machine of the batch: one that
    # raised (ValueError, TypeError) lost the whole batch, every machine of the shard.
    report = {"fence": fence, "tasks": []}
    assert intake.fence_of(report) == intake.Fence(0, 0)
    assert intake.read_report(report, epoch=3, sent={})[0] is intake.Reading.TAKE_UNFENCED


def test_a_read_that_raises_costs_only_its_own_machine() -> None:
    # Whatever a read of one machine raises (a reply no parser foresaw), the round goes on: it
    # is that machine's miss, and the machines after it are read and reported.
    batches: list[dict[str, Any]] = []

    def leader(batch: dict[str, Any]) -> dict[str, Any]:
        batches.append(batch)
        return {"need_full": []}

    def read(machine: str, address: str) -> dict[str, Any]:
        if machine == "a":
            raise RuntimeError("a reply no parser foresaw")
        return HONEST

    shard = LinkShard(_Cache({"a": "http://a", "b": "http://b"}), name="r1", send=leader, interval=1.0)  # type: ignore[arg-type]
    shard._read = read  # type: ignore[method-assign]
    try:
        shard.round()
        assert shard.rounds == 1
        assert shard.flush() == 1
    finally:
        shard.stop()
    assert batches[-1]["reports"]["b"]["report"]["tasks"] == HONEST["tasks"]
    assert "a" in batches[-1]["missed"]
