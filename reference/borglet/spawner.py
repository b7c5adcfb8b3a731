"""The spawn helper, minborg-spawn: found or built once, checked before root runs it, and a task
started through it (reference/borglet/spawn/minborg_spawn.c says what it does, step by step).

The borglet starts the helper by CPython's vfork path (no ids to change, no hook) with an empty
environment; the helper joins the task's cgroups, sets its limits and ids, enters its working
directory as the user, reads the job's environment from a memfd and execs the task, which keeps
its pid. What it could not do comes back on a pipe as "STEP ERRNO[ DETAIL]" and is raised here
as the exception CPython's own spawn raises for the same failure (docs/decisions.md, "The spawn
helper").
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("spawn") / "minborg_spawn.c"
BUILD_SCRIPT = SOURCE.with_name("build.sh")
PROJECT = Path(__file__).resolve().parents[2]
#: The borglet's environment variable that chooses CPython's fork path instead (measurement).
SPAWN_ENV = "MINBORG_SPAWN"
#: What a start costs the borglet on each path (docs/decisions.md), for the one log line.
FORK_COST = "4-8 ms of the borglet's CPU a start instead of about 0.7"


class HelperUnusable(Exception):
    """The helper cannot be built, found or trusted here: tasks start by CPython's fork path."""


class SpawnStepError(Exception):
    """A step of the helper other than entering the working directory or the exec failed (joining
    a cgroup, a limit, the ids): the task did not run."""


def binary_path(source: Path = SOURCE) -> Path:
    """Where build.sh puts the helper built from `source`: named by the source's hash, so a
    changed source is never run as an old binary."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    tools = os.environ.get("MINBORG_TOOLS_BIN") or str(PROJECT / "tools" / "bin")
    return Path(tools) / f"minborg-spawn-{digest}"


def trusted(path: Path, euid: int | None = None) -> str | None:
    """None when only root (or this process's user) can change the file at `path`: it and each
    directory above it belong to one of them and no other user may write them (a sticky
    directory, /tmp, may be writable by all); else why not. A root borglet execs this file."""
    euid = os.geteuid() if euid is None else euid
    owners = {0, euid}
    path = path.resolve()
    try:
        info = os.stat(path)
    except OSError as err:
        return f"{path}: {err.strerror}"
    if not stat.S_ISREG(info.st_mode) or not info.st_mode & stat.S_IXUSR:
        return f"{path} is not an executable file"
    if info.st_uid not in owners or info.st_mode & 0o022:
        return f"{path} belongs to uid {info.st_uid} or other users may write it (mode {info.st_mode & 0o7777:o})"
    for directory in path.parents:
        d = os.stat(directory)
        if d.st_uid not in owners or (d.st_mode & 0o022 and not d.st_mode & stat.S_ISVTX):
            return f"{directory} belongs to uid {d.st_uid} or other users may write it (mode {d.st_mode & 0o7777:o})"
    return None


def build(source: Path = SOURCE) -> Path:
    """The helper's path, built by build.sh if it is not there yet; HelperUnusable says why not."""
    if not source.is_file():
        raise HelperUnusable(f"no helper source at {source}")
    path = binary_path(source)
    if not path.exists():
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0 or not path.exists():
            said = (done.stderr or done.stdout).strip().splitlines()
            raise HelperUnusable(
                f"building it failed ({said[-1] if said else f'exit {done.returncode}'})"
            )
    problem = trusted(path)
    if problem:
        raise HelperUnusable(f"not run as root: {problem}")
    return path


@functools.cache
def helper() -> str | None:
    """The helper to start tasks with, or None: CPython's fork path, with one log line saying why."""
    if os.environ.get(SPAWN_ENV) == "fork":
        log.info("tasks start by CPython's fork path: %s=fork", SPAWN_ENV)
        return None
    try:
        path = build()
    except (HelperUnusable, OSError, subprocess.SubprocessError) as err:
        log.warning(
            "minborg-spawn unusable, tasks start by CPython's fork path (%s): %s", FORK_COST, err
        )
        return None
    log.info("tasks start through %s", path)
    return str(path)


def start(
    helper_path: str,
    command: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    stdout: int,
    stderr: int,
    uid: int | None,
    cgroup_dirs: Sequence[str] = (),
    rlimit_as: int | None = None,
) -> subprocess.Popen:
    """Start `command` through the helper in a session of its own, stdin from /dev/null; returns
    once it runs the task's program. A failure raises what CPython's fork path raises for it:
    OSError with `cwd` as its filename for the working directory, with the program's for the
    exec (so processes.spawn_error says the same), SpawnStepError for any other step;
    HelperUnusable if the helper itself could not be exec'd (the task did not start)."""
    env_fd = os.memfd_create("minborg-task-env", os.MFD_CLOEXEC)
    try:
        _write_all(
            env_fd, b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in env.items())
        )
        os.lseek(env_fd, 0, os.SEEK_SET)
        status_r, status_w = os.pipe()
    except BaseException:
        os.close(env_fd)
        raise
    argv = [helper_path, "-s", str(status_w), "-e", str(env_fd)]
    for directory in cgroup_dirs:
        argv += ["-c", directory]
    if rlimit_as is not None:
        argv += ["-a", str(rlimit_as)]
    if uid is not None:
        argv += ["-u", str(uid), "-g", str(uid)]
    if cwd is not None:
        argv += ["-d", cwd]
    argv += ["--", *command]
    try:
        try:
            proc = subprocess.Popen(
                argv, env={}, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                start_new_session=True, close_fds=True, pass_fds=(env_fd, status_w),
            )  # fmt: skip
        except OSError as err:
            raise HelperUnusable(f"{helper_path} did not start: {err}") from None
        finally:
            os.close(env_fd)
            os.close(status_w)
        said = _read_all(status_r)
    finally:
        os.close(status_r)
    if said:
        proc.wait()  # it exits at once, having run nothing
        raise failure(said.decode(errors="replace"), command, cwd)
    return proc


def failure(said: str, command: Sequence[str], cwd: str | None) -> Exception:
    """The exception for the helper's "STEP ERRNO[ DETAIL]" line."""
    step, _, rest = said.strip().partition(" ")
    number, _, detail = rest.partition(" ")
    if not number.isdigit():
        return SpawnStepError(f"the spawn helper said {said.strip()!r}")
    err = int(number)
    if step == "chdir":
        return OSError(err, os.strerror(err), cwd)
    if step == "exec":
        return OSError(err, os.strerror(err), command[0] if command else "")
    where = f" ({detail})" if detail else ""
    return SpawnStepError(f"{step}{where}: {os.strerror(err)}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)
