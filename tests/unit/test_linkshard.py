"""A link shard's bookkeeping, with its reads and its leader replaced: whole reports first, then only changes; a lost batch or a leader without the base starts a machine again whole; misses are counted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference.master import shards
from reference.master.linkshard import LinkShard


@dataclass
class FakeInfo:
    address: str


@dataclass
class FakeState:
    machines: dict[str, object]


@dataclass
class FakeCell:
    machines: dict[str, FakeInfo]
    state: FakeState
    replicas: dict[str, str] = field(default_factory=lambda: {"r1": "http://r1"})
    leader: str = "r1=http://r1"
    leader_revision: int = 7


class _Cache:
    def __init__(self, names: list[str]) -> None:
        self.view = FakeCell({n: FakeInfo(f"http://b/{n}") for n in names}, FakeState({n: object() for n in names}))

    def cell(self) -> FakeCell:
        return self.view


class _Leader:
    """Keeps what a leader would rebuild from the batches, and can refuse or lose them."""

    def __init__(self) -> None:
        self.copies: dict[str, tuple[int, dict[str, Any]]] = {}
        self.batches: list[dict[str, Any]] = []
        self.lose_next = False

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any] | None:
        if self.lose_next:
            self.lose_next = False
            return None
        self.batches.append(batch)
        need_full = []
        for m, entry in batch["reports"].items():
            if "report" in entry:
                self.copies[m] = (entry["version"], entry["report"])
            elif m in self.copies and self.copies[m][0] == entry["base"]:
                self.copies[m] = (entry["version"], shards.apply(self.copies[m][1], entry["change"]))
            else:
                need_full.append(m)
        return {"need_full": need_full}


def _shard(names: list[str]) -> tuple[LinkShard, _Leader, dict[str, dict[str, Any] | None]]:
    leader = _Leader()
    shard = LinkShard(_Cache(names), name="r1", send=leader, interval=1.0)  # type: ignore[arg-type]
    answers: dict[str, dict[str, Any] | None] = {}
    shard._read = lambda machine, address: answers.get(machine)  # type: ignore[method-assign]
    return shard, leader, answers


def _report(*tasks: tuple[str, str], cpu: int = 0) -> dict[str, Any]:
    return {"usage": {"cpu": cpu}, "tasks": [{"task_id": t, "state": s} for t, s in tasks]}


def test_whole_reports_first_then_only_what_changed() -> None:
    shard, leader, answers = _shard(["m1", "m2"])
    answers.update(m1=_report(("a", "RUNNING")), m2=_report(("b", "RUNNING")))
    shard.round()
    assert shard.flush() == 1
    assert {m: "report" in e for m, e in leader.batches[-1]["reports"].items()} == {"m1": True, "m2": True}

    shard.round()  # nothing changed: nothing is sent
    assert shard.flush() == 0

    answers["m2"] = _report(("b", "FINISHED"))
    shard.round()
    assert shard.flush() == 1
    batch = leader.batches[-1]["reports"]
    assert list(batch) == ["m2"] and batch["m2"]["change"] == {"tasks": [{"task_id": "b", "state": "FINISHED"}]}
    assert shards.same(leader.copies["m2"][1], answers["m2"])  # type: ignore[arg-type]
    shard.stop()


def test_a_lost_batch_and_a_leader_without_the_base_start_again_whole() -> None:
    shard, leader, answers = _shard(["m1"])
    answers["m1"] = _report(("a", "RUNNING"))
    shard.round()
    shard.flush()
    answers["m1"] = _report(("a", "RUNNING"), cpu=5)
    shard.round()
    leader.lose_next = True
    assert shard.flush() == 0  # lost: whether the leader applied it is unknown
    shard.flush()
    assert "report" in leader.batches[-1]["reports"]["m1"]  # so the next one goes whole

    leader.copies.clear()  # a leader that lost its copies (it asks for the whole report)
    answers["m1"] = _report(("a", "RUNNING"), cpu=7)
    shard.round()
    assert shard.flush() == 2  # the change, refused for want of its base; then the whole report
    assert "change" in leader.batches[-2]["reports"]["m1"]
    assert "report" in leader.batches[-1]["reports"]["m1"]
    assert leader.copies["m1"][1] == answers["m1"]
    shard.stop()


def test_misses_are_counted_and_the_answer_after_them_goes_whole() -> None:
    shard, leader, answers = _shard(["m1"])
    answers["m1"] = _report(("a", "RUNNING"))
    shard.round()
    shard.flush()
    answers["m1"] = None
    for misses in (1, 2):
        shard.round()
        shard.flush()
        assert leader.batches[-1]["missed"] == {"m1": misses}
    answers["m1"] = _report(("a", "RUNNING"))  # back, reading as before its silence
    shard.round()
    shard.flush()
    assert "report" in leader.batches[-1]["reports"]["m1"]
    assert shard.stats()["poll_interval_s"]["count"] == 3  # a gap between each two of the four polls
    shard.stop()


def test_a_new_term_of_the_same_leader_gets_every_report_whole_even_unchanged_ones() -> None:
    # A leader that lost its lease and won it again keeps its name, but its new term starts
    # with no reports: an idle machine whose report never changes must still be sent to it,
    # or the new term never syncs that machine (its placed tasks would never start).
    shard, leader, answers = _shard(["m1", "m2"])
    answers.update(m1=_report(("a", "RUNNING")), m2=_report())
    shard.round()
    assert shard.flush() == 1
    shard.round()
    assert shard.flush() == 0  # unchanged: nothing to send in the same term
    leader.copies.clear()
    shard.cache.view.leader_revision += 1  # type: ignore[attr-defined]
    shard.round()
    assert shard.flush() == 1
    assert {m: "report" in e for m, e in leader.batches[-1]["reports"].items()} == {"m1": True, "m2": True}
    shard.stop()


def test_a_refusal_is_an_answer_sent_once_with_its_reason_not_a_miss() -> None:
    from reference.master.linkshard import Refused

    shard, leader, answers = _shard(["m1"])
    refusal = Refused(401, "X-Minborg-Channel-Time: clock skew: request signed at 1.000, borglet clock 61.000")
    answers["m1"] = refusal  # type: ignore[assignment]
    shard.round()
    shard.flush()
    assert leader.batches[-1]["refused"] == {"m1": refusal.reason} and leader.batches[-1]["missed"] == {}
    shard.round()  # the same refusal again: nothing new to send
    assert shard.flush() == 0
    shard.stop()


def test_a_heartbeat_arrives_with_nothing_new_and_the_answer_hands_machines_over() -> None:
    names = [f"m{i}" for i in range(1, 9)]
    shard, _, answers = _shard(names)
    answers.update({m: _report() for m in names})
    # r1 follows r3; r3, the leader, polls none of them (shards.pollers): r1 and r2 share them.
    owner_of = {m: shards.owner(m, ["r1", "r2", "r3"], "r3") for m in names}
    shard.cache.view.replicas = {"r1": "http://r1", "r2": "http://r2", "r3": "http://r3"}  # type: ignore[attr-defined]
    shard.cache.view.leader = "r3=http://r3"  # type: ignore[attr-defined]
    theirs = sorted(m for m, o in owner_of.items() if o == "r2")
    assert theirs and all(o != "r3" for o in owner_of.values())
    mine = sorted(m for m, o in owner_of.items() if o == "r1")
    sent: list[dict[str, Any]] = []
    handed: dict[str, str] = {m: f"http://b/{m}" for m in theirs}

    def leader(batch: dict[str, Any]) -> dict[str, Any]:
        sent.append(batch)
        return {"need_full": [], "poll": dict(handed)}

    shard.send = leader
    shard.round()
    assert sorted(shard._machines) == mine  # its own share only
    assert shard.heartbeat() and sent[-1]["shard"] == "r1"
    shard.round()  # the leader handed it r2's machines: it polls them too
    assert sorted(shard._machines) == sorted(mine + theirs)
    handed.clear()
    shard.heartbeat()
    shard.round()  # handed back: its own share again
    assert sorted(shard._machines) == mine
    shard.stop()


def test_a_relayed_syncs_answer_is_reported_once_and_the_leader_gets_the_fence() -> None:
    """The borglet's answer to a sync is its state: the shard reports it with its changes (the
    leader gets it once, in a batch) and hands the leader back only the fence; a read begun
    before the answer came is older, and dropped; a machine the shard does not poll is
    answered whole."""
    shard, leader, answers = _shard(["m1"])
    answers["m1"] = _report(("a", "RUNNING"))
    shard.round()
    shard.flush()
    after = {**_report(("a", "RUNNING"), ("b", "QUEUED")), "fence": {"epoch": 2, "seq": 9}}
    relayed = {"m1": {"machine": "m1", "status": 200, "body": after},
               "gone": {"machine": "gone", "status": 200, "body": _report(("c", "RUNNING"))}}  # fmt: skip
    shard._relay_one = lambda item: relayed[item["machine"]]  # type: ignore[method-assign]
    # A poll of m1 begins before the sync is relayed and ends after its answer was taken.
    begun = shard._poll("m1", "http://b/m1")  # reads the state before the sync: only "a"
    out = shard.relay([{"machine": "m1", "body": {}}, {"machine": "gone", "body": {}}])
    assert out[0]["body"] == {"fence": {"epoch": 2, "seq": 9}, "epoch": None}  # no facts: an acknowledgement
    assert out[1]["body"] == _report(("c", "RUNNING"))  # not polled here: answered whole
    shard._record([begun])  # the older read does not overwrite the sync's answer
    assert shard.flush() == 1
    assert list(leader.batches[-1]["reports"]) == ["m1"]
    assert leader.copies["m1"][1] == after
    answers["m1"] = after  # the next poll reads what the answer said: nothing new to send
    shard.round()
    assert shard.flush() == 0
    shard.stop()
