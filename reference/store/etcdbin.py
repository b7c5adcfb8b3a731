"""Which etcd server a cell runs: the project's pinned build, found or built, never one too old;
and what a member's log says when it exits."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import reference


class EtcdClusterError(RuntimeError):
    """The cluster could not be started, found or stopped as asked."""


# The etcd this project builds (reference/store/etcdbuild/go.mod pins it) and the oldest it
# runs: 3.6 renamed the flags the members are started with (--watch-progress-notify-interval),
# and 3.5 before 3.5.6 loses data when a member is killed (docs/decisions.md).
PINNED_ETCD = "3.6.6"
MIN_ETCD_VERSION = (3, 6, 0)
ETCD_ENV = "MINBORG_ETCD"
PROJECT = Path(reference.__file__).resolve().parent.parent
INSTALL_SCRIPT = "reference/store/install_etcd.sh"
_version_cache: dict[tuple[str, int, int], tuple[int, int, int] | None] = {}


def find_etcd_binary(*, build: bool = True, say: Callable[[str], None] | None = None) -> str:
    """The etcd server to run: $MINBORG_ETCD, else the project's tools/bin/etcd (built by
    reference/store/install_etcd.sh), else etcd on PATH, the first that is etcd
    MIN_ETCD_VERSION or later. With none, the project's pinned etcd is built on the spot
    (`build`; once, with a message: a few minutes) or an EtcdClusterError says what to do.
    A binary that is too old is never used, whichever way it was found."""
    say = say or _tell_stderr
    rejected: list[str] = []
    for candidate in _etcd_candidates():
        version = etcd_version(candidate)
        if version is not None and version >= MIN_ETCD_VERSION:
            return candidate
        rejected.append(f"{candidate} ({'etcd ' + _dotted(version) if version else 'no etcd version'})")
    too_old = f"; too old or unreadable: {', '.join(rejected)}" if rejected else ""
    need = f"etcd {_dotted(MIN_ETCD_VERSION)} or later"
    if build and shutil.which("go") and shutil.which("bash"):
        say(f"etcd: no {need} found{too_old}; building etcd {PINNED_ETCD} with `bash {INSTALL_SCRIPT}` (once, a few minutes)")
        done = subprocess.run(["bash", str(PROJECT / INSTALL_SCRIPT)], capture_output=True, text=True)
        _version_cache.clear()
        built = PROJECT / "tools" / "bin" / "etcd"
        version = etcd_version(str(built))
        if done.returncode == 0 and version is not None and version >= MIN_ETCD_VERSION:
            say(f"etcd: built {built} (etcd {_dotted(version)})")
            return str(built)
        raise EtcdClusterError(
            f"building etcd {PINNED_ETCD} failed (bash {INSTALL_SCRIPT}, exit {done.returncode}):\n"
            + (done.stdout + done.stderr)[-2000:]
        )
    raise EtcdClusterError(
        f"no {need}{too_old}: build it with `bash {INSTALL_SCRIPT}` (needs Go; it goes to "
        f"tools/bin/etcd) or point ${ETCD_ENV} at one"
    )


def etcd_version(binary: str) -> tuple[int, int, int] | None:
    """What `binary --version` says it is ((3, 6, 6)), or None if it is no runnable etcd."""
    try:
        stat = os.stat(binary)
    except OSError:
        return None
    key = (binary, stat.st_mtime_ns, stat.st_size)
    if key not in _version_cache:
        _version_cache[key] = _read_version(binary)
    return _version_cache[key]


def _read_version(binary: str) -> tuple[int, int, int] | None:
    if not os.access(binary, os.X_OK):
        return None
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"^etcd Version: (\d+)\.(\d+)\.(\d+)", out, re.MULTILINE)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def _etcd_candidates() -> list[str]:
    found = [os.environ.get(ETCD_ENV, ""), str(PROJECT / "tools" / "bin" / "etcd"), shutil.which("etcd") or ""]
    return [c for c in dict.fromkeys(found) if c]


def _dotted(version: tuple[int, ...] | None) -> str:
    return ".".join(map(str, version)) if version else "?"


def _tell_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def why_exited(log_lines: list[str]) -> str:
    """The cause a member's log gives last: etcd logs JSON lines, and its last fatal or error
    line holds the message and the error; else the log's last line."""
    for line in reversed(log_lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("level") in ("fatal", "panic", "error"):
            return ": ".join(str(entry[k]) for k in ("msg", "error") if entry.get(k))
    return log_lines[-1] if log_lines else "(no log)"
