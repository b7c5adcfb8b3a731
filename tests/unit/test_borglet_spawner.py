"""The spawn helper (reference/borglet/spawn/minborg_spawn.c through borglet/spawner.py), run for
real: each failure a task's input can cause reads as CPython's fork path reads it (the same
`spawn: ...` reason), a bad uid never runs anything, the task keeps the helper's pid and gets
exactly its environment, and, as root, its ids, cgroups and limits are set before it runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference.borglet import cgroups, spawner
from reference.borglet.processes import Confinement, fork_spawn, spawn, spawn_error

CC = shutil.which("cc") or shutil.which("gcc")
ROOT = os.geteuid() == 0
UID = 2_000_000_321
PATH = "/usr/local/bin:/usr/bin:/bin"

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build the spawn helper")


@pytest.fixture(scope="module")
def helper() -> str:
    return str(spawner.build())


@pytest.fixture
def streams(tmp_path: Path) -> Iterator[tuple[int, int]]:
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    err = os.open(tmp_path / "err", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    yield out, err
    os.close(out)
    os.close(err)


def by_helper(helper: str, streams: tuple[int, int], command: list[str], cwd: str | None = None,
              uid: int | None = None, env: dict[str, str] | None = None, **more) -> subprocess.Popen:  # fmt: skip
    return spawner.start(helper, command, env or {"PATH": PATH}, cwd, *streams, uid, **more)


def reason_by_each_path(helper: str, streams: tuple[int, int], command: list[str], cwd: str | None,
                        uid: int | None) -> tuple[str, str]:  # fmt: skip
    """The `spawn: ...` reason each path gives for one bad start (each must raise)."""
    reasons = []
    for start in (
        lambda: by_helper(helper, streams, command, cwd, uid),
        lambda: fork_spawn(command, {"PATH": PATH}, cwd, *streams, uid, Confinement()),
    ):
        with pytest.raises(Exception) as raised:
            start().wait()
        reasons.append(spawn_error(raised.value, command, cwd, uid, PATH))
    return reasons[0], reasons[1]


@pytest.fixture
def sandbox() -> Iterator[Path]:
    """A directory every user may pass (pytest's own tmp_path is under a 0700 one)."""
    path = Path(tempfile.mkdtemp(prefix="minborg-spawner-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def private(sandbox: Path) -> Path:
    """A directory only root may pass, holding one open directory and one runnable script."""
    inner = sandbox / "private" / "open"
    inner.mkdir(parents=True)
    inner.chmod(0o777)
    (inner / "tool").write_text("#!/bin/sh\necho ran\n")
    (inner / "tool").chmod(0o755)
    (sandbox / "private").chmod(0o700)
    return inner


# (command, cwd, what the reason must say); each as the borglet's user (uid None).
SAME_REASON = {
    "a bare name on no PATH entry": (["no-such-program-anywhere"], None, "on its PATH"),
    "a full path to nothing": (["/nonexistent/program"], None, "no program '/nonexistent/program'"),
    "a working directory that does not exist": (["true"], "/nonexistent/directory", "does not exist"),
    "a working directory that is a file": (["true"], "/etc/hostname", "Not a directory"),
}


@pytest.mark.parametrize("case", sorted(SAME_REASON))
def test_a_bad_start_reads_the_same_by_either_path(helper, streams, case):
    command, cwd, says = SAME_REASON[case]
    by_helper_reason, by_fork_reason = reason_by_each_path(helper, streams, command, cwd, None)
    assert by_helper_reason == by_fork_reason
    assert says in by_helper_reason, by_helper_reason


def test_a_program_without_execute_permission_reads_the_same(helper, streams, tmp_path):
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)
    reasons = reason_by_each_path(helper, streams, [str(script)], None, None)
    assert reasons[0] == reasons[1] and "may not run" in reasons[0], reasons


@pytest.mark.skipif(not ROOT, reason="entering a directory as another user needs root")
def test_a_working_directory_the_user_cannot_reach_is_refused_as_the_user(helper, streams, private):
    # Root could enter it; the user may not pass its parent: the chdir is the user's.
    reasons = reason_by_each_path(helper, streams, ["/bin/pwd"], str(private), UID)
    assert reasons[0] == reasons[1], reasons
    assert f"may not enter its working directory '{private}'" in reasons[0], reasons


@pytest.mark.skipif(not ROOT, reason="running a program as another user needs root")
def test_a_program_the_user_cannot_reach_is_refused_as_the_user(helper, streams, private):
    tool = str(private / "tool")
    reasons = reason_by_each_path(helper, streams, [tool], "/", UID)
    assert reasons[0] == reasons[1], reasons
    assert "may not run" in reasons[0] and "other users" in reasons[0], reasons


@pytest.mark.skipif(not ROOT, reason="PATH is looked up as the user only where the user differs")
def test_the_program_is_looked_up_on_the_tasks_path_as_the_user(helper, streams, private, sandbox, tmp_path):
    # The first PATH entry holds `tool` but only root may pass it: the user's lookup goes on
    # to the next entry, whose `tool` it can run (CPython's fork path does the same).
    public = sandbox / "public"
    public.mkdir(mode=0o755)
    (public / "tool").write_text("#!/bin/sh\necho public\n")
    (public / "tool").chmod(0o755)
    env = {"PATH": f"{private}:{public}"}
    proc = by_helper(helper, streams, ["tool"], "/", UID, env=env)
    assert proc.wait() == 0
    assert (tmp_path / "out").read_text() == "public\n"


@pytest.mark.parametrize("uid", [2**32 - 1, -1, 2**32 + UID])
def test_a_bad_uid_runs_nothing(helper, streams, tmp_path, uid):
    # 2**32 - 1 is "leave the id unchanged" to setresuid: a task asked to run as it would stay root.
    with pytest.raises(spawner.SpawnStepError, match="args"):
        by_helper(helper, streams, ["/bin/sh", "-c", "echo ran"], "/", uid)
    assert (tmp_path / "out").read_text() == ""


def test_a_helper_that_may_not_change_ids_runs_nothing(helper, tmp_path):
    # Started by a user who may not set ids (here: nobody), it fails at the first id step.
    if ROOT:
        runner = {"user": 65534, "group": 65534, "extra_groups": []}
    else:
        runner = {}
    env_fd = os.memfd_create("env")
    status_r, status_w = os.pipe()
    argv = [helper, "-u", str(UID), "-g", str(UID), "-e", str(env_fd), "-s", str(status_w), "--", "/bin/true"]
    proc = subprocess.Popen(argv, env={}, pass_fds=(env_fd, status_w), **runner)
    os.close(status_w)
    os.close(env_fd)
    said = os.read(status_r, 4096).decode()
    os.close(status_r)
    assert proc.wait() == 127
    assert said == "setgroups 1\n"
    assert str(spawner.failure(said, ["/bin/true"], None)) == "setgroups: Operation not permitted"


def test_the_task_keeps_the_helpers_pid_and_gets_exactly_its_environment(helper, streams, tmp_path):
    env = {"PATH": PATH, "A": "x=y", "EMPTY": "", "UNICODE": "caf\u00e9", "LD_PRELOAD": ""}
    code = "import json, os; print(json.dumps([os.getpid(), dict(os.environ)]))"
    proc = by_helper(helper, streams, [sys.executable, "-c", code], "/", env=env)
    assert proc.wait() == 0
    pid, seen = json.loads((tmp_path / "out").read_text())
    seen.pop("LC_CTYPE", None)  # the interpreter may coerce the C locale itself
    assert pid == proc.pid and seen == env


def test_the_task_leads_its_own_session_with_only_its_standard_streams(helper, streams, tmp_path):
    code = "import json, os; print(json.dumps([os.getsid(0), os.getpid(), sorted(map(int, os.listdir('/proc/self/fd')))]))"
    proc = by_helper(helper, streams, [sys.executable, "-c", code], "/")
    assert proc.wait() == 0
    sid, pid, fds = json.loads((tmp_path / "out").read_text())
    assert sid == pid == proc.pid
    assert fds[:3] == [0, 1, 2] and len(fds) <= 4, fds  # 0-2, and the listing's own fd


def test_the_address_space_limit_is_set_before_the_task_runs(helper, streams, tmp_path):
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_AS))"
    proc = by_helper(helper, streams, [sys.executable, "-c", code], "/", rlimit_as=1 << 30)
    assert proc.wait() == 0
    assert (tmp_path / "out").read_text().strip() == str((1 << 30, 1 << 30))


CGROUPS = ROOT and cgroups.CgroupTree("probe-spawner").usable() is None


@pytest.mark.skipif(not CGROUPS, reason="needs root and writable cgroup v1 hierarchies")
def test_as_root_the_task_is_its_users_in_its_groups_from_the_start(helper, streams, tmp_path):
    tree = cgroups.CgroupTree(f"spawner-test-{os.getpid()}")
    group = tree.create("t", 100, 64 << 20, pids_max=7)
    try:
        # `cat` reads its /proc/self files as its first act: where it was born, who it is.
        proc = spawn(["/bin/cat", "/proc/self/cgroup", "/proc/self/status"], {"PATH": PATH}, "/",
                     str(tmp_path / "logs"), UID, Confinement(cgroups=group, pids_max=7))  # fmt: skip
        assert proc.wait() == 0
        text = (tmp_path / "logs" / "stdout").read_text()
        born = cgroups.parse_proc_cgroup(text)
        for controller, path in group.items():
            assert path.endswith(born[controller]), (controller, path, born)
        status = dict(line.split(":", 1) for line in text.splitlines() if ":" in line and "\t" in line)
        assert status["Uid"].split() == [str(UID)] * 4 and status["Gid"].split() == [str(UID)] * 4
        assert status["Groups"].split() == [] and int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
        # No extra member was ever counted: the limit stays the job's throughout.
        assert Path(group["pids"], "pids.max").read_text().strip() == "7"
    finally:
        cgroups.remove_group(group)
        tree.remove_bases()


def test_only_a_file_no_other_user_can_change_is_trusted(tmp_path):
    tmp_path.chmod(0o755)
    binary = tmp_path / "minborg-spawn"
    binary.write_bytes(b"")
    binary.chmod(0o755)
    assert spawner.trusted(binary) is None
    binary.chmod(0o775)
    assert "other users may write it" in (spawner.trusted(binary) or "")
    binary.chmod(0o755)
    tmp_path.chmod(0o777)  # a directory anyone may write (no sticky bit): the file could be swapped
    assert str(tmp_path) in (spawner.trusted(binary) or "")
    tmp_path.chmod(0o755)
    if ROOT:
        os.chown(binary, 1234, 1234)
        assert "belongs to uid 1234" in (spawner.trusted(binary) or "")


def test_no_compiler_means_the_fork_path_saying_why(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MINBORG_TOOLS_BIN", str(tmp_path / "bin"))
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(spawner.HelperUnusable, match="building it failed"):
        spawner.build()
    spawner.helper.cache_clear()
    try:
        assert spawner.helper() is None
    finally:
        spawner.helper.cache_clear()
    assert "fork path" in caplog.text and "/nonexistent/cc" in caplog.text


def has_interpreter(binary: Path) -> bool:
    """Whether an ELF file names a program interpreter (PT_INTERP): the dynamic loader."""
    data = binary.read_bytes()
    phoff, phentsize, phnum = int.from_bytes(data[32:40], "little"), data[54] | data[55] << 8, data[56] | data[57] << 8
    return any(int.from_bytes(data[phoff + i * phentsize : phoff + i * phentsize + 4], "little") == 3 for i in range(phnum))


def test_a_build_is_named_by_its_source_and_static_where_the_c_library_allows(tmp_path, monkeypatch):
    monkeypatch.setenv("MINBORG_TOOLS_BIN", str(tmp_path / "bin"))
    built = spawner.build()
    assert built == spawner.binary_path() and built.parent == tmp_path / "bin"
    assert spawner.build() == built  # a second call finds it
    probe = tmp_path / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    static_works = subprocess.run([CC, "-static", "-o", str(tmp_path / "probe"), str(probe)]).returncode == 0
    assert has_interpreter(built) != static_works


def test_a_helper_gone_under_the_borglet_costs_its_task_nothing(tmp_path, monkeypatch, caplog):
    # The helper was found at start, then removed: this task starts by the fork path, and the
    # next start looks for (or builds) the helper again.
    monkeypatch.setattr(spawner, "helper", lambda: str(tmp_path / "gone"))
    monkeypatch.setattr(spawner.helper, "cache_clear", lambda: cleared.append(1), raising=False)
    cleared: list[int] = []
    proc = spawn(["/bin/echo", "ran"], {"PATH": PATH}, None, str(tmp_path / "logs"))
    assert proc.wait() == 0
    assert (tmp_path / "logs" / "stdout").read_text() == "ran\n"
    assert "did not start" in caplog.text and cleared == [1]
