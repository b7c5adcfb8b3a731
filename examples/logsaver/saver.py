"""The logsaver: every few seconds, copies the access log of the web task in its alloc to a directory standing in for the distributed file system."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from examples.logsaver.web import log_path

EVERY_S = 2.0


def save(source: Path, dfs: Path, name: str) -> bool:
    """Copy `source` into `dfs` as `name`, replacing the copy whole (a reader never sees half); False if no log yet."""
    if not source.exists():
        return False
    dfs.mkdir(parents=True, exist_ok=True)
    partial = dfs / f".{name}.partial"
    shutil.copyfile(source, partial)
    os.replace(partial, dfs / name)
    return True


def main() -> None:
    root = os.environ.get("LOGSAVER_ROOT", "/tmp/minborg-logsaver")
    index = os.environ.get("TASK_INDEX", "0")
    while True:
        save(log_path(root, index), Path(root) / "dfs", f"web-{index}.log")
        time.sleep(EVERY_S)


if __name__ == "__main__":
    main()
