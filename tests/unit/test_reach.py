"""reach.judge: a machine is down only when no replica that can vouch reaches it; the owner's miss hands it to the others (table tests)."""

from __future__ import annotations

import pytest

from reference.master import reach
from reference.master.reach import Sighting

R = ("r1", "r2", "r3")
M = "m7"
ORDER = reach.ranked(M, R)
OWNER, SECOND, THIRD = ORDER
ANSWERED, MISS = Sighting(True), (lambda n: Sighting(False, n))
DOWN_AFTER, GRACE = 3, 8.0


def judge(sightings: dict[str, Sighting], handed_at: float | None = None, now: float = 100.0,
          replicas: tuple[str, ...] = R) -> reach.Verdict:  # fmt: skip
    return reach.judge(M, replicas, sightings, DOWN_AFTER, handed_at=handed_at, now=now, grace_s=GRACE)


def test_ranked_puts_the_rendezvous_owner_first() -> None:
    from reference.master import shards

    assert ORDER[0] == shards.owner(M, R) and sorted(ORDER) == sorted(R)


@pytest.mark.parametrize(
    ("name", "sightings", "handed_at", "down", "pollers"),
    [
        # Nothing said yet: the owner polls alone, nothing is down.
        ("nothing said", {}, None, False, "owner"),
        ("the owner answers", {OWNER: ANSWERED}, None, False, "owner"),
        # The owner misses once: every replica polls it, nobody declares it down yet.
        ("owner misses once", {OWNER: MISS(1)}, None, False, "all"),
        # The owner is cut for 40 polls; the others answer: up, still handed over (issue 42's leader cut).
        ("owner cut, others answer", {OWNER: MISS(40), SECOND: ANSWERED, THIRD: ANSWERED}, 60.0, False, "all"),
        # Only one other answers: enough, one replica reaches it.
        ("owner and one cut", {OWNER: MISS(40), SECOND: MISS(40), THIRD: ANSWERED}, 60.0, False, "all"),
        # All three missed 3 in a row (down_after 3): down.
        ("all miss 3", {OWNER: MISS(3), SECOND: MISS(3), THIRD: MISS(3)}, 95.0, True, "all"),
        # One of them at 2 < 3: not yet.
        ("one at 2", {OWNER: MISS(9), SECOND: MISS(3), THIRD: MISS(2)}, 95.0, False, "all"),
        # Handed over 2 s ago (< grace 8 s) and the others said nothing: wait for their polls.
        ("others silent, within grace", {OWNER: MISS(5)}, 98.0, False, "all"),
        # Handed over 8 s ago and they still said nothing: they cannot vouch; the owner's misses decide.
        ("others silent past grace", {OWNER: MISS(5)}, 92.0, True, "all"),
        # A stale miss from a former poller while another answers (the flap after a heal): up.
        ("stale miss, fresh answer", {OWNER: ANSWERED, THIRD: MISS(40)}, None, False, "owner"),
        # The owner answers again after a cut: it polls alone again.
        ("owner back", {OWNER: ANSWERED, SECOND: ANSWERED, THIRD: ANSWERED}, 60.0, False, "owner"),
    ],
)
def test_judge(name: str, sightings: dict[str, Sighting], handed_at: float | None, down: bool, pollers: str) -> None:
    verdict = judge(sightings, handed_at)
    assert verdict.down is down, name
    assert verdict.pollers == (ORDER if pollers == "all" else (OWNER,)), name
    if down:
        assert M in verdict.reason and "no replica reached" in verdict.reason


def test_a_replica_that_cannot_vouch_is_not_counted_either_way() -> None:
    # r-second is not heard from lately (the caller leaves it out): its old answer holds nothing up,
    # and the two that vouch both missed.
    two = (OWNER, THIRD)
    verdict = judge({OWNER: MISS(3), SECOND: ANSWERED, THIRD: MISS(3)}, handed_at=90.0, replicas=two)
    assert verdict.down


def test_one_replica_alone_decides_as_before() -> None:
    only = (OWNER,)
    assert not judge({OWNER: MISS(2)}, handed_at=None, replicas=only).down
    assert judge({OWNER: MISS(3)}, handed_at=None, replicas=only).down


def test_a_refusal_counts_as_an_answer() -> None:
    # A borglet answering 401 (its clock 60 s ahead) is alive: the shard reports it as answered.
    assert not judge({OWNER: ANSWERED, SECOND: ANSWERED, THIRD: ANSWERED}, handed_at=0.0).down


def test_no_replica_is_nothing_to_judge() -> None:
    assert judge({OWNER: MISS(9)}, replicas=()) == reach.Verdict(False, ())


def test_the_leader_ranks_last_while_another_replica_is_there() -> None:
    for leader in R:
        order = reach.ranked(M, R, leader)
        assert order[-1] == leader and sorted(order) == sorted(R)
        assert [r for r in order if r != leader] == [r for r in ORDER if r != leader]
    assert reach.ranked(M, ("r1",), "r1") == ("r1",)
    # The leader's owner among the others is the one the shards compute.
    from reference.master import shards

    assert reach.ranked(M, R, OWNER)[0] == shards.owner(M, R, OWNER)
