"""Which leader a replica names in /v1/cell: only one it knows to hold a live lease."""

from __future__ import annotations

import pytest

from reference.master.replica import LeaderRef, named_leader

KEY = "m0=http://127.0.0.1:7000"
M0 = LeaderRef("m0", "http://127.0.0.1:7000")


@pytest.mark.parametrize(
    ("value", "self_name", "self_leads", "fresh", "named"),
    [
        (KEY, "m1", False, True, M0),  # a follower with a fresh cache names the key's holder
        (KEY, "m0", True, True, M0),  # the leader names itself while its lease is live
        # The key names this replica, which does not lead: a dead predecessor's key (a restart
        # within the old lease) or a term that just ended. No leader until the key is gone.
        (KEY, "m0", False, True, None),
        (KEY, "m1", False, False, None),  # a cache past its staleness bound names nobody
        (KEY, "m0", True, False, None),
        ("", "m1", False, True, None),  # no leader key
        ("garbage", "m1", False, True, None),  # not name=url
        ("=http://x", "m1", False, True, None),  # no name
    ],
)
def test_named_leader(value: str, self_name: str, self_leads: bool, fresh: bool, named: LeaderRef | None) -> None:
    assert named_leader(value, self_name=self_name, self_leads=self_leads, fresh=fresh) == named
