"""Who may call the master's API and what each caller may do: token hashing, the authorisation table and the per-user token bucket, all pure.

A user is known by the SHA-256 of its bearer token (the token itself is never stored); the
admin may do anything; any user may read the cell (Borg shows its debugging information to
all its users); a job's owner is the part of its name before the slash, and only its owner
or the admin may change it, its tasks included; machines, quotas and users are the admin's.
The shell around these functions is `guard.py` (the ASGI middleware) and `users.py` (the
records in etcd).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
from dataclasses import dataclass, field

ADMIN = "admin"
TOKEN_PREFIX = "mbt_"
# Names become the owner part of job names (user/name), so they follow the job file's rule.
USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
USER_NAME_RULE = "must be 1-63 letters, digits, '-' or '_', starting with a letter or digit"

# Paths answered without a token: liveness and readiness for probes and load balancers, and
# the API's own description. /metrics is open unless the replica is told otherwise.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
METRICS_PATH = "/metrics"
# Replica-to-replica and borglet paths carry the cell key, checked by their own handlers.
INTERNAL_PREFIX = "/internal/"
UI_PREFIX = "/ui"
READS = frozenset({"GET", "HEAD", "OPTIONS"})
ADMIN_PREFIXES = ("/v1/machines", "/v1/quotas", "/v1/users")


@dataclass(frozen=True)
class Identity:
    """The caller a valid token names."""

    name: str
    admin: bool = False


@dataclass(frozen=True)
class UserRecord:
    """A user as stored in etcd: its name, the SHA-256 of its token, and whether it is the admin."""

    name: str
    token_sha256: str
    admin: bool = False
    created_at: float = 0.0


def new_token() -> str:
    """A fresh bearer token: 256 random bits, URL-safe, with a prefix that says what it is."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token: what etcd and a replica's memory hold instead of the token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def same_hash(a: str, b: str) -> bool:
    """Compare two token hashes in time independent of where they differ."""
    return hmac.compare_digest(a.encode("ascii", "replace"), b.encode("ascii", "replace"))


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None for any other header."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


def identify(token_hash: str, admin_hash: str | None, record: UserRecord | None) -> Identity | None:
    """The identity a token's hash proves: the configured admin's, a stored user's, or none."""
    if admin_hash is not None and same_hash(token_hash, admin_hash):
        return Identity(ADMIN, admin=True)
    if record is not None and same_hash(token_hash, record.token_sha256):
        return Identity(record.name, admin=record.admin)
    return None


def needs_token(path: str, *, metrics_open: bool = True) -> bool:
    """Whether a request to `path` must carry a user's token (the cell key's paths are not ours)."""
    if path in OPEN_PATHS or path.startswith(INTERNAL_PREFIX):
        return False
    return not (metrics_open and path == METRICS_PATH)


def is_ui(path: str) -> bool:
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


def job_owner(path: str) -> str | None:
    """The owner of the job a `/v1/jobs/<user>/<name>...` path names, None for other paths."""
    parts = path.split("/")
    if len(parts) >= 5 and parts[1] == "v1" and parts[2] == "jobs" and parts[3] and parts[4]:
        return parts[3]
    return None


def alloc_owner(path: str) -> str | None:
    """The owner of the alloc set a `/v1/allocs/<user>/<name>` path names, None for other paths."""
    parts = path.split("/")
    if len(parts) == 5 and parts[1] == "v1" and parts[2] == "allocs" and parts[3] and parts[4]:
        return parts[3]
    return None


def may_act_for(who: Identity, owner: str) -> str | None:
    """None if `who` may change jobs of user `owner`, else why not (a 403's message)."""
    if who.admin or who.name == owner:
        return None
    return f"the job belongs to user {owner}; user {who.name} may change only its own jobs (user {who.name}/...)"


def authorise(who: Identity, method: str, path: str) -> str | None:
    """None if `who` may make this request, else why not (a 403's message).

    Reads of the cell are anyone's; users are the admin's to list; a change to a job or task
    is its owner's or the admin's (a submission's owner is in its body: `may_act_for`, in the
    handler); a change to machines, quotas or users, or to anything not named here, is the admin's.
    """
    if who.admin:
        return None
    if method.upper() in READS:
        if path.startswith("/v1/users"):
            return f"only the admin may list users; {who.name} is not the admin"
        return None
    owner = job_owner(path)
    if owner is not None:
        return may_act_for(who, owner)
    if path == "/v1/jobs":
        return None
    # An alloc set, like a job, is its owner's to change (a creation's owner is in its body).
    owner = alloc_owner(path)
    if owner is not None and owner != who.name:
        return f"the alloc set belongs to user {owner}; user {who.name} may change only its own alloc sets"
    if owner is not None or path == "/v1/allocs":
        return None
    if path.startswith(ADMIN_PREFIXES):
        what = path.split("/")[2]
        return f"only the admin may change {what}; {who.name} is not the admin"
    return f"only the admin may {method.upper()} {path}"


def may_be_refused(method: str, path: str) -> bool:
    """Whether `authorise` can refuse some non-admin user this operation (for the API document's 403)."""
    return method.upper() not in READS or path.startswith("/v1/users")


# --- the rate limit ----------------------------------------------------------------------------


@dataclass
class Bucket:
    """A token bucket: `tokens` left at time `at`."""

    tokens: float
    at: float


@dataclass
class RateLimit:
    """Each user's requests per second on one replica: `rate` a second on average, `burst` at
    once. A rate of 0 or less turns the limit off. The clock is the caller's."""

    rate: float
    burst: float
    buckets: dict[str, Bucket] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, user: str, now: float) -> float:
        """Take one request from `user`'s bucket: 0.0 if it may go ahead, else the seconds
        until it would be allowed (the caller answers 429 with that as Retry-After)."""
        if not self.enabled:
            return 0.0
        capacity = max(1.0, self.burst)
        b = self.buckets.get(user)
        if b is None:
            b = self.buckets[user] = Bucket(capacity, now)
        b.tokens = min(capacity, b.tokens + max(0.0, now - b.at) * self.rate)
        b.at = now
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return 0.0
        return (1.0 - b.tokens) / self.rate


def retry_after(wait_s: float) -> int:
    """A wait as Retry-After's whole seconds, never 0 (a client would retry at once)."""
    return max(1, math.ceil(wait_s))


# --- a replica's settings ----------------------------------------------------------------------

DEFAULT_RATE = 500.0  # requests per second per user per replica
DEFAULT_BURST = 1000.0


@dataclass(frozen=True)
class AccessConfig:
    """How a replica checks its callers: the admin's token hash (from --admin-token-file), each
    user's rate limit, and whether /metrics takes a token. `enforce=False` turns every check
    off; only the benchmark of what the checks cost sets it."""

    admin_hash: str | None = None
    rate: float = DEFAULT_RATE
    burst: float = DEFAULT_BURST
    metrics_open: bool = True
    enforce: bool = True
