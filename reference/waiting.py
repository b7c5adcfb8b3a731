"""Waiting for a condition by polling it until a deadline: the one wait-until of the project."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T | None],
    timeout_s: float,
    what: str,
    every: float = 0.1,
    *,
    ignore: tuple[type[Exception], ...] = (),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """Call `check` at once and after every sleep of `every` seconds until it returns
    something truthy, and return that.

    An exception of a type in `ignore` counts as a falsy answer (a process still starting,
    a replica failing over). A falsy answer at or past `timeout_s` ends the wait with a
    TimeoutError naming `what` and the last answer."""
    deadline = clock() + timeout_s
    while True:
        try:
            last: object = check()
        except ignore as err:
            last = err
        else:
            if last:
                return last  # type: ignore[return-value]
        if clock() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what} (last: {last!r})")
        sleep(every)
