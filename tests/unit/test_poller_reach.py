"""The leader's side of reach.judge, through Poller.accept: a shard cut from a machine hands it
to the others and takes nothing down while one of them reaches it; a stale miss after a heal
takes nothing down (the flap of issue 42); a machine no replica reaches goes down, with its reason."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from reference.master import reach
from reference.master.cell import MachineInfo
from reference.master.intake import Said
from reference.master.poller import Poller

R = ("r1", "r2", "r3")
M = "m1"
# The poller runs on the leader, r1: it ranks last (it owns no machine while others are there).
OWNER, SECOND, THIRD = reach.ranked(M, R, "r1")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _poller() -> tuple[Poller, list[str], _Clock, dict[str, Any]]:
    machine = SimpleNamespace(up=True)
    cell = SimpleNamespace(
        state=SimpleNamespace(machines={M: machine}),
        machines={M: MachineInfo(address="http://b/m1")},
        replicas={r: f"http://{r}" for r in R},
        leader="r1=http://r1",
    )
    cache = SimpleNamespace(cell=lambda: cell)
    clock = _Clock()
    poller = Poller(cache, None, cell_name="c", master_name="r1", epoch=1, down_after=3, clock=clock, link=SimpleNamespace(owner=lambda m: OWNER))  # type: ignore[arg-type]
    downs: list[str] = []

    def mark_down(name: str, reason: str) -> None:
        downs.append(reason)
        machine.up = False

    poller._mark_down = mark_down  # type: ignore[method-assign]
    poller._answer = lambda name, report, ids, cell=None: None  # type: ignore[method-assign]
    return poller, downs, clock, {"machine": machine}


def _batch(shard: str, *, missed: int = 0, answered: bool = False) -> dict[str, Any]:
    return {
        "shard": shard,
        "reports": {M: {"version": 1, "report": {"tasks": []}}} if answered else {},
        "missed": {M: missed} if missed else {},
    }


def test_an_owner_cut_from_its_borglet_for_40_polls_takes_nothing_down() -> None:
    poller, downs, clock, _ = _poller()
    try:
        for r in R:
            poller.accept(_batch(r, answered=(r == OWNER)))
        handed_to: set[str] = set()
        for misses in range(1, 41):  # 40 s of an owner that cannot reach the machine
            clock.now += 1
            poller.accept(_batch(OWNER, missed=misses))
            for r in (SECOND, THIRD):  # the others poll it once handed over, and reach it
                answer = poller.accept(_batch(r, answered=M in handed_to or misses > 1))
                if M in answer["poll"]:
                    handed_to.add(r)
        assert downs == []
        assert handed_to == {SECOND, THIRD}
        assert poller._carrier(M) in (SECOND, THIRD)  # syncs go through a replica that reaches it
        clock.now += 1
        poller.accept(_batch(OWNER, answered=True))  # healed
        assert poller.accept(_batch(SECOND))["poll"] == {}  # handed back
        assert poller._carrier(M) == OWNER
    finally:
        poller._pool.shutdown(wait=False)


def test_a_stale_miss_after_a_heal_takes_nothing_down() -> None:
    poller, downs, clock, _ = _poller()
    try:
        for r in R:
            poller.accept(_batch(r, answered=True))
        clock.now += 1
        # A shard that was cut sends the miss count it held when its link came back, after the
        # owner's answer: "missed 40 polls" must not mark the machine down.
        poller.accept(_batch(THIRD, missed=40))
        assert downs == []
    finally:
        poller._pool.shutdown(wait=False)


def test_a_machine_no_replica_reaches_goes_down_with_its_reason() -> None:
    poller, downs, clock, state = _poller()
    try:
        for r in R:
            poller.accept(_batch(r, answered=True))
        for misses in range(1, 4):
            clock.now += 1
            for r in R:
                poller.accept(_batch(r, missed=misses))
        assert len(downs) == 1 and "no replica reached machine m1" in downs[0]
        assert not state["machine"].up
    finally:
        poller._pool.shutdown(wait=False)


def test_a_replica_the_leader_no_longer_hears_cannot_hold_a_machine_up() -> None:
    poller, downs, clock, _ = _poller()
    try:
        for r in R:
            poller.accept(_batch(r, answered=True))
        clock.now += 30  # SECOND and THIRD fall silent (cut from the leader): they cannot vouch
        for misses in range(1, 4):
            clock.now += 1
            poller.accept(_batch(OWNER, missed=misses))
        assert len(downs) == 1
    finally:
        poller._pool.shutdown(wait=False)


def test_a_borglet_refusing_every_request_is_never_down_and_its_reason_is_recorded() -> None:
    # The borglet's clock is 60 s ahead: every shard's read is refused (401). It answers: no
    # machine_down, so its tasks are neither lost nor started elsewhere (nothing runs twice),
    # and the reason is written on the machine record once.
    poller, downs, clock, _ = _poller()
    written: list[Any] = []
    poller.writer = SimpleNamespace(mutate=written.append)  # type: ignore[assignment]
    reason = "X-Minborg-Channel-Time: clock skew: request signed at 1000.000, borglet clock 1060.000"
    try:
        for _ in range(60):  # a minute of refusals from every replica
            clock.now += 1
            for r in R:
                poller.accept({"shard": r, "reports": {}, "missed": {}, "refused": {M: reason}})
        assert downs == []
        assert len(written) == 1  # the reason, once
        assert poller._refusing[M] == reason
        # A relayed sync refused the same way adds nothing; its body names the cause.
        body = {"detail": [{"field": "X-Minborg-Channel-Time", "error": reason.split(": ", 1)[1]}]}
        assert poller._settle(M, "http://b/m1", 1, frozenset(), 401, body, "").said is Said.DISTRUSTED
        assert len(written) == 1
    finally:
        poller._pool.shutdown(wait=False)


# --- a borglet that refuses every replica: asked to stand down, then down ---------------------------

KEY_REASON = "X-Minborg-Channel-Signature: the signature does not match: signed with another key"


def _cell_of_three() -> tuple[Poller, list[str], _Clock, list[str]]:
    """A leader r1 over three machines, m1 to m3; `downs` lists the machines marked down."""
    machines = {m: SimpleNamespace(up=True) for m in ("m1", "m2", "m3")}
    cell = SimpleNamespace(
        state=SimpleNamespace(machines=machines),
        machines={m: MachineInfo(address=f"http://b/{m}") for m in machines},
        replicas={r: f"http://{r}" for r in R},
        leader="r1=http://r1",
    )
    clock = _Clock()
    poller = Poller(SimpleNamespace(cell=lambda: cell), None, cell_name="c", master_name="r1", epoch=1, down_after=3, clock=clock, link=SimpleNamespace(owner=lambda m: reach.ranked(m, R, "r1")[0]))  # type: ignore[arg-type]
    downs: list[str] = []
    reasons: list[str] = []

    def mark_down(name: str, reason: str) -> None:
        if machines[name].up:
            downs.append(name)
            reasons.append(reason)
        machines[name].up = False

    poller._mark_down = mark_down  # type: ignore[method-assign]
    poller._answer = lambda name, report, ids, cell=None: None  # type: ignore[method-assign]
    poller.writer = SimpleNamespace(mutate=lambda change: None)  # type: ignore[assignment]
    poller.reasons = reasons  # type: ignore[attr-defined]
    return poller, downs, clock, reasons


def _word(shard: str, refused: dict[str, str], answered: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "shard": shard, "missed": {}, "refused": refused,
        "reports": {m: {"version": 1, "report": {"tasks": []}} for m in answered},
    }  # fmt: skip


def test_a_borglet_refusing_every_replica_is_asked_to_stand_down_then_declared_down() -> None:
    from reference.master.shardreports import STAND_DOWN_WAIT_S

    poller, downs, clock, reasons = _cell_of_three()
    try:
        for r in R:
            poller.accept(_word(r, {}, answered=("m2", "m3")))
        asked_at = None
        for second in range(int(STAND_DOWN_WAIT_S) + 5):
            clock.now += 1
            for r in R:  # every replica's signature is refused by m1's borglet, said once (news)
                refused = {"m1": KEY_REASON} if second == 0 else {}
                answer = poller.accept(_word(r, refused, answered=("m2", "m3")))
                if "m1" in answer.get("stand_down", ()) and asked_at is None:
                    asked_at = clock.now
            if downs:
                break
        assert asked_at is not None and downs == ["m1"]
        # Down no sooner than the wait after it was first asked: the borglet's tasks are stopped by then.
        assert clock.now - asked_at >= STAND_DOWN_WAIT_S
        assert "refused every replica" in reasons[0] and "another key" in reasons[0]
        # It answers again (its key put right): asked no more.
        clock.now += 1
        answer = poller.accept(_word("r2", {}, answered=("m1", "m2", "m3")))
        assert "stand_down" not in answer
    finally:
        poller._pool.shutdown(wait=False)


def test_a_replica_with_the_wrong_key_takes_nothing_down_and_asks_nothing() -> None:
    # Only the owner of m1 is refused (its own key is wrong); the others reach m1.
    poller, downs, clock, _ = _cell_of_three()
    owner = reach.ranked("m1", R, "r1")[0]
    try:
        for _ in range(int(3 * channel_wait())):
            clock.now += 1
            for r in R:
                refused = {"m1": KEY_REASON} if r == owner else {}
                answered = ("m2", "m3") if r == owner else ("m1", "m2", "m3")
                answer = poller.accept(_word(r, refused, answered=answered))
                assert "stand_down" not in answer
        assert downs == []
    finally:
        poller._pool.shutdown(wait=False)


def test_half_the_cell_refusing_is_the_masters_fault_nobody_is_asked_nothing_down() -> None:
    poller, downs, clock, _ = _cell_of_three()
    try:
        for _ in range(int(3 * channel_wait())):
            clock.now += 1
            for r in R:
                answer = poller.accept(_word(r, {"m1": KEY_REASON, "m2": KEY_REASON}, answered=("m3",)))
                assert "stand_down" not in answer
        assert downs == []
    finally:
        poller._pool.shutdown(wait=False)


def channel_wait() -> float:
    from reference.master.shardreports import STAND_DOWN_WAIT_S

    return STAND_DOWN_WAIT_S
