"""Which uid a task runs as (borglet/taskusers.py): one per job user, stable, never shared."""

from __future__ import annotations

import hashlib

from reference.borglet import taskusers


def derived(user: str, first: int = taskusers.FIRST_UID, count: int = taskusers.UID_COUNT) -> int:
    return first + int.from_bytes(hashlib.sha256(user.encode()).digest()[:8], "big") % count


def test_the_user_is_the_jobs_first_part() -> None:
    assert taskusers.user_of("alice/web", "alice/web/3#0@1") == "alice"
    assert taskusers.user_of("", "bob/batch/0#0") == "bob"  # a hand-written sync names no job
    assert taskusers.user_of("", "") == taskusers.NO_USER


def test_a_users_uid_comes_from_its_name_so_every_borglet_of_a_host_agrees() -> None:
    uid = taskusers.assign("alice", {})
    assert uid == derived("alice")
    assert taskusers.FIRST_UID <= uid < taskusers.FIRST_UID + taskusers.UID_COUNT < 2**31
    assert taskusers.assign("alice", {"bob": derived("bob")}) == uid


def test_a_recorded_uid_is_kept_even_if_the_name_would_derive_another() -> None:
    assert taskusers.assign("alice", {"alice": 2_000_000_123}) == 2_000_000_123


def test_a_uid_another_user_holds_is_never_given_the_next_free_one_is() -> None:
    # Range of 4 uids from 10: alice derives 10 + h % 4; if bob holds it, alice takes the next
    # one (wrapping), and if that one is held too, the one after.
    first, count = 10, 4
    home = derived("alice", first, count)
    after = first + (home - first + 1) % count
    assert taskusers.assign("alice", {"bob": home}, first, count) == after
    then = first + (home - first + 2) % count
    assert taskusers.assign("alice", {"bob": home, "carol": after}, first, count) == then


def test_a_full_range_is_an_error_saying_so() -> None:
    taken = {f"u{i}": 10 + i for i in range(4)}
    try:
        taskusers.assign("alice", taken, 10, 4)
    except ValueError as err:
        assert "all 4 task uids" in str(err)
    else:
        raise AssertionError("a full range gave a uid")
