"""The pure core of the API's access checks (reference/master/access.py): token hashes, the bearer header, who may do what, and the per-user token bucket."""

from __future__ import annotations

import hashlib

import pytest

from reference.master import access
from reference.master.access import Identity, RateLimit, UserRecord

ADMIN = Identity("admin", admin=True)
ALICE = Identity("alice")
BOB = Identity("bob")


def test_a_token_is_stored_as_its_sha256_and_never_as_itself() -> None:
    token = access.new_token()
    assert token.startswith(access.TOKEN_PREFIX) and len(token) > 40
    assert access.hash_token(token) == hashlib.sha256(token.encode()).hexdigest()
    assert token not in access.hash_token(token)
    assert access.new_token() != token  # 256 random bits each


def test_hashes_compare_in_constant_time_and_exactly() -> None:
    h = access.hash_token("mbt_x")
    assert access.same_hash(h, access.hash_token("mbt_x"))
    assert not access.same_hash(h, access.hash_token("mbt_y"))
    assert not access.same_hash(h, h[:-1])
    assert not access.same_hash(h, "é" * 64)  # not ASCII: refused, not an exception


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),  # the scheme is case-insensitive (RFC 7235)
        ("  Bearer   abc  ", "abc"),
        (None, None),
        ("", None),
        ("Basic YWxpY2U6c2VjcmV0", None),
        ("Bearer", None),
        ("Bearer a b", None),
    ],
)
def test_the_bearer_header(header: str | None, token: str | None) -> None:
    assert access.bearer(header) == token


def test_a_token_names_the_admin_a_stored_user_or_no_one() -> None:
    admin_hash, alice_hash = access.hash_token("mbt_admin"), access.hash_token("mbt_alice")
    alice = UserRecord("alice", alice_hash)
    assert access.identify(admin_hash, admin_hash, None) == ADMIN
    assert access.identify(alice_hash, admin_hash, alice) == ALICE
    assert access.identify(alice_hash, None, alice) == ALICE
    assert access.identify(access.hash_token("mbt_guess"), admin_hash, None) is None
    # A record found under another hash (the index is stale) does not vouch for this one.
    assert access.identify(access.hash_token("mbt_guess"), None, alice) is None


@pytest.mark.parametrize(
    ("who", "method", "path", "allowed"),
    [
        # reads: anyone authenticated may read the cell (users excepted)
        (BOB, "GET", "/v1/jobs/alice/web", True),
        (BOB, "GET", "/v1/machines", True),
        (BOB, "GET", "/v1/quotas", True),
        (BOB, "GET", "/ui/jobs/alice/web", True),
        (BOB, "GET", "/v1/users", False),
        (ADMIN, "GET", "/v1/users", True),
        # jobs: the owner (the part before the slash) or the admin
        (ALICE, "PATCH", "/v1/jobs/alice/web", True),
        (BOB, "PATCH", "/v1/jobs/alice/web", False),
        (BOB, "DELETE", "/v1/jobs/alice/web", False),
        (BOB, "DELETE", "/v1/jobs/alice/web/tasks/0", False),
        (ALICE, "DELETE", "/v1/jobs/alice/web/tasks/0", True),
        (ADMIN, "DELETE", "/v1/jobs/alice/web", True),
        (BOB, "POST", "/v1/jobs", True),  # the owner is in the body: may_act_for, in the handler
        # machines, quotas, users: the admin's
        (BOB, "POST", "/v1/machines", False),
        (BOB, "DELETE", "/v1/machines/b0", False),
        (BOB, "PUT", "/v1/quotas/bob/batch", False),
        (BOB, "DELETE", "/v1/quotas/bob/batch", False),  # not even a user's own quota
        (BOB, "GET", "/v1/quotas/bob/batch", True),  # reading one is anyone's, as reading the list
        (ADMIN, "PUT", "/v1/quotas/*/production", True),
        (ADMIN, "DELETE", "/v1/quotas/bob/batch", True),
        (BOB, "POST", "/v1/users", False),
        (BOB, "DELETE", "/v1/users/alice", False),
        (ADMIN, "POST", "/v1/machines", True),
        (ADMIN, "DELETE", "/v1/users/alice", True),
        # anything else that changes something: the admin's
        (BOB, "POST", "/v1/something-new", False),
    ],
)
def test_who_may_do_what(who: Identity, method: str, path: str, allowed: bool) -> None:
    refusal = access.authorise(who, method, path)
    assert (refusal is None) == allowed, refusal


def test_a_refusal_of_another_users_job_names_its_owner() -> None:
    refusal = access.authorise(BOB, "PATCH", "/v1/jobs/alice/web")
    assert refusal is not None and "user alice" in refusal and "bob" in refusal
    assert access.may_act_for(BOB, "alice") == refusal
    assert access.may_act_for(BOB, "bob") is None and access.may_act_for(ADMIN, "alice") is None


@pytest.mark.parametrize(
    ("path", "metrics_open", "needs"),
    [
        ("/healthz", True, False),
        ("/readyz", True, False),
        ("/metrics", True, False),
        ("/metrics", False, True),
        ("/openapi.json", True, False),
        ("/internal/sync", True, False),  # the cell key's, checked elsewhere
        ("/v1/cell", True, True),
        ("/ui", True, True),
    ],
)
def test_which_paths_take_a_token(path: str, metrics_open: bool, needs: bool) -> None:
    assert access.needs_token(path, metrics_open=metrics_open) is needs


def test_the_bucket_allows_a_burst_then_the_rate() -> None:
    limit = RateLimit(rate=2.0, burst=3.0)
    assert [limit.take("alice", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]  # the burst of 3
    # Empty: the next token comes in 1/2 s.
    assert limit.take("alice", 0.0) == pytest.approx(0.5)
    # 0.25 s later half a token is back: (1 - 0.5) / 2 = 0.25 s still to wait.
    assert limit.take("alice", 0.25) == pytest.approx(0.25)
    assert limit.take("alice", 0.5) == 0.0  # 0.5 s * 2/s = one token
    # Another user has a bucket of its own.
    assert limit.take("bob", 0.5) == 0.0


def test_the_bucket_refills_only_to_the_burst_and_off_is_off() -> None:
    limit = RateLimit(rate=10.0, burst=2.0)
    limit.take("alice", 0.0)
    # 100 s idle refills to 2, not 1000.
    assert [limit.take("alice", 100.0) for _ in range(3)][-1] == pytest.approx(0.1)
    off = RateLimit(rate=0.0, burst=0.0)
    assert all(off.take("alice", 0.0) == 0.0 for _ in range(10_000))


@pytest.mark.parametrize(("wait", "header"), [(0.01, 1), (1.0, 1), (1.2, 2)])
def test_retry_after_is_whole_seconds_never_zero(wait: float, header: int) -> None:
    assert access.retry_after(wait) == header
