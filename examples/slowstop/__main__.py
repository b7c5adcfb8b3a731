"""Run until killed; on SIGTERM keep running $SLOWSTOP_S more seconds, like a server draining.

Used to show that a new incarnation of a task index never starts while the old one is still
stopping: the old one stays alive through most (or all) of the borglet's kill grace.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType


def _drain_then_exit(_: int, __: FrameType | None) -> None:
    time.sleep(float(os.environ.get("SLOWSTOP_S", "2")))
    sys.exit(0)


def main() -> None:
    signal.signal(signal.SIGTERM, _drain_then_exit)
    print(f"slowstop {os.environ.get('TASK_ID', '?')} pid {os.getpid()}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
