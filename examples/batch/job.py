"""The batch task: computes for $WORK_SECONDS, then exits 0, or 1 when $FAIL=1."""

from __future__ import annotations

import hashlib
import os
import sys
import time


def work(seconds: float) -> int:
    """Hash in a loop for `seconds`; returns the number of rounds done."""
    deadline = time.monotonic() + seconds
    digest = b"minborg"
    rounds = 0
    while time.monotonic() < deadline:
        digest = hashlib.sha256(digest).digest()
        rounds += 1
    return rounds


def main() -> int:
    seconds = float(os.environ.get("WORK_SECONDS", "1"))
    rounds = work(seconds)
    print(f"batch {os.environ.get('TASK_ID', '')}: {rounds} rounds in {seconds}s", flush=True)
    if os.environ.get("FAIL") == "1":
        print("batch: failing as asked (FAIL=1)", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
