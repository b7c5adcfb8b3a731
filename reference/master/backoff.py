"""The master's restart back-off: how long a task index waits before its next incarnation, as pure arithmetic.

A DEAD task that its job's policy restarts (after a non-zero exit, a spawn failure, an OOM
kill, a failed health check that ended it, a loss, or a finish under `always`) gets its new
incarnation only once its index has waited out a delay that doubles with each consecutive
short-lived incarnation: none after the first failure (a task lost with its machine comes back
at once), then 1 s, 2 s, 4 s ... capped at 60 s. An incarnation that ran at least RESET_AFTER_S
counts as healthy and starts the count again. The borglet's own in-place
restarts back off the same way on a shorter scale (reference/borglet/decisions.py: 0.1 s
doubling to 10 s); this one is for the restarts that cost the cell a new incarnation, a
scheduling pass and a placement. See docs/decisions.md, "Restarts back off".
"""

from __future__ import annotations

INITIAL_S = 1.0
CAP_S = 60.0
RESET_AFTER_S = 60.0  # a run this long was healthy: the next failure counts as the first


def delay(failures: int) -> float:
    """Seconds to wait before the restart that follows the `failures`-th consecutive failure
    (1-based): none after the first, 1 s after the second, doubling, at most CAP_S."""
    if failures <= 1:
        return 0.0
    return min(INITIAL_S * 2.0 ** min(failures - 2, 30), CAP_S)


def failures_after(previous: int, ran_for_s: float) -> int:
    """The index's consecutive failures once an incarnation ended after running `ran_for_s`
    seconds (0 when its process never started): `previous` + 1, or 1 after a healthy run."""
    return 1 if ran_for_s >= RESET_AFTER_S else max(previous, 0) + 1


def retry_at(previous: int, started_at: float, died_at: float) -> tuple[int, float]:
    """(failures, when the next incarnation may be made) for an incarnation that started at
    `started_at` (0: it never did) and died at `died_at`, after `previous` failures before it."""
    ran_for = died_at - started_at if started_at > 0 else 0.0
    failures = failures_after(previous, ran_for)
    return failures, died_at + delay(failures)


def ran_since(history: tuple[tuple[str, float, str], ...]) -> float:
    """When a task's latest placement began: its history's last RUNNING entry (0: never placed)."""
    for state, at, _ in reversed(history):
        if state == "RUNNING":
            return at
    return 0.0


def died_at(history: tuple[tuple[str, float, str], ...], now: float) -> float:
    """When a DEAD task died, as its history says (`now` if it does not)."""
    if history and history[-1][0] == "DEAD":
        return history[-1][1]
    return now


def of_death(previous: int, history: tuple[tuple[str, float, str], ...], now: float) -> tuple[int, float]:
    """retry_at for a DEAD task incarnation told by its state history (state, at, reason)."""
    return retry_at(previous, ran_since(history), died_at(history, now))


def most_restarts(window_s: float) -> int:
    """The most new incarnations an index that fails at once can get within `window_s` seconds
    of its first death: the bound the live test holds the cell to."""
    n, waited = 0, 0.0
    while True:
        waited += delay(n + 1)
        if waited > window_s:
            return n
        n += 1
