"""Where a report's figures come from: the commit of the tree that produced them."""

from __future__ import annotations

import subprocess


def commit() -> str:
    """The short hash of HEAD, saying so when tracked files differ from it; "unknown" outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
        return head + (" (with uncommitted changes in the working tree)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
