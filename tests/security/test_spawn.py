"""The task sandbox, attacked from inside a process task of a live cell whose borglet runs as
root (the default setup): each test runs one attack that succeeded before the spawn path was
rebuilt (issue 38) and fails if it succeeds again.

- a job's LD_PRELOAD ran its constructor as root (inside `setpriv`) and read the channel key;
- tasks ran as root whenever the borglet's Python lived under /root;
- a child forked at once escaped the task's memory limit (the pid joined its cgroup late);
- a task could fork without limit (pids.max was `max`);
- a variable exported by whoever started the cell reached every task;
- a root task read the cell's keys and another user's logs, signalled another user's task,
  raised its own limits and left its cgroup.

The cell's directory is made passable by other users (0711) so that only each file's own
protection stands between a task and it, as on a host where the state dir is /var/lib/minborg.
Every attack runs against both spawn paths: the spawn helper (minborg-spawn, the default) and
CPython's fork path (where no C compiler could build the helper; MINBORG_SPAWN=fork).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reference.borglet import cgroups, spawner, taskusers
from reference.client import CellClient
from tests.integration.cellkit import TASK_PYTHON, LocalCell, sleeper_job, wait_for
from tests.security.taskio import REACH, SIGNALS, cell_secrets, ended, output

ROOT = os.geteuid() == 0
CGROUPS = ROOT and cgroups.CgroupTree("probe-security").usable() is None
GCC = shutil.which("gcc") or shutil.which("cc")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not CGROUPS,
        reason="the sandbox is a root borglet's with cgroup v1 isolation; this host runs the tests "
        f"as uid {os.geteuid()}" + ("" if ROOT else ", not root") + ", or has no writable cgroup v1",
    ),
]

# Exported by "the operator" before the cell starts: no task may see it.
OPERATOR_VARIABLE = "MINBORG_OPERATOR_SECRET_FOR_TEST"


@pytest.fixture(scope="module", params=["helper", "fork"])
def spawn_path(request: pytest.FixtureRequest) -> str:
    """How the cell's borglet starts its tasks (its MINBORG_SPAWN)."""
    return str(request.param)


@pytest.fixture(scope="module")
def sandbox(spawn_path: str) -> Iterator[Path]:
    """A directory every user may pass but not list (0711), for the cell and the attack files."""
    path = Path(tempfile.mkdtemp(prefix=f"minborg-sandbox-{spawn_path}-", dir="/tmp"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def cell(sandbox: Path, spawn_path: str) -> Iterator[LocalCell]:
    os.environ[OPERATOR_VARIABLE] = "the operator's secret"
    os.environ[spawner.SPAWN_ENV] = spawn_path
    try:
        c = LocalCell(
            sandbox / "cell", masters=1, borglets=1, poll_interval=0.3, isolation="cgroup",
            capacity="cpu=4000m,ram=4GiB",
        )  # fmt: skip
        c.start()  # the borglet inherits the operator's environment, variable included
    finally:
        del os.environ[OPERATOR_VARIABLE]
        del os.environ[spawner.SPAWN_ENV]
    (sandbox / "cell").chmod(0o711)
    try:
        yield c
    finally:
        c.stop()
    assert c.leftovers() == [], "processes of the cell are still running"


@pytest.fixture(scope="module")
def api(cell: LocalCell) -> Iterator[CellClient]:
    with CellClient([m.url for m in cell.masters], retry_s=15, token=cell.admin_token) as client:
        yield client


def job(name: str, user: str, command: list[str], **extra: Any) -> dict[str, Any]:
    extra.setdefault("restart_policy", "never")
    extra.setdefault("request", {"cpu": "500m", "ram": "64MiB"})  # room for Python to start
    return sleeper_job(name, user=user, command=command, **extra)


def python_job(name: str, user: str, code: str, *args: str, **extra: Any) -> dict[str, Any]:
    return job(name, user, [TASK_PYTHON, "-c", textwrap.dedent(code), *args], **extra)


def compile_c(directory: Path, name: str, source: str, shared: bool = False) -> Path:
    src = directory / f"{name}.c"
    src.write_text(textwrap.dedent(source))
    out = directory / (f"{name}.so" if shared else name)
    flags = ["-shared", "-fPIC"] if shared else []
    subprocess.run([str(GCC), *flags, "-O1", "-o", str(out), str(src)], check=True, capture_output=True)
    out.chmod(0o755)
    return out


def test_the_borglet_starts_tasks_by_the_path_under_test(cell: LocalCell, api: CellClient, spawn_path: str) -> None:
    output(cell, api, python_job("path", "alice", "print('{}')"))
    said = {"helper": "tasks start through ", "fork": "tasks start by CPython's fork path"}[spawn_path]
    assert said in cell.borglets[0].log.read_text()


# --- who a task is --------------------------------------------------------------------------------

WHO = """
import json, os
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print(json.dumps({"uids": status["Uid"].split(), "gids": status["Gid"].split(), "groups": os.getgroups(),
                  "cap_eff": int(status["CapEff"], 16), "cap_prm": int(status["CapPrm"], 16),
                  "env": dict(os.environ)}))
"""


def test_a_task_runs_as_its_job_users_uid_with_no_capability_left(cell: LocalCell, api: CellClient) -> None:
    seen = output(cell, api, python_job("who", "alice", WHO))
    uid = int(seen["uids"][0])
    assert uid >= taskusers.FIRST_UID, f"the task ran as uid {uid}"
    assert seen["uids"] == [str(uid)] * 4 and seen["gids"] == [str(uid)] * 4  # real, effective, saved, fs
    assert seen["groups"] == [] and seen["cap_eff"] == 0 and seen["cap_prm"] == 0


def test_the_operators_environment_does_not_reach_a_task(cell: LocalCell, api: CellClient) -> None:
    seen = output(cell, api, python_job("env", "alice", WHO, env={"MINE": "the job's"}))
    env = seen["env"]
    assert OPERATOR_VARIABLE not in env
    assert env["MINE"] == "the job's" and env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    # Nothing but what the job asked, Minborg's own variables and the cell's --task-env.
    minborg = {"PATH", "HOME", "HOST", "PORT", "TASK_INDEX", "TASK_ID", "BNS_NAME", "MINBORG_MACHINE",
               "MINBORG_TASK_ID", "MINBORG_BORGLET_DIR", "PYTHONPATH", "PYTHONUNBUFFERED"}  # fmt: skip
    # The interpreter may add these itself (the C locale coerced to UTF-8).
    python = {"LC_CTYPE"}
    assert set(env) - minborg - python == {"MINE"}, sorted(env)


# --- LD_PRELOAD --------------------------------------------------------------------------------------

PRELOAD = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Runs in every process the loader starts with this library: writes who it ran as, and
   whether it could open the file EVIL_KEY names, to a file of its own in EVIL_OUT. */
__attribute__((constructor)) static void grab(void) {
    const char *out = getenv("EVIL_OUT"), *key = getenv("EVIL_KEY");
    char path[4096], line[256];
    if (!out || !key) return;
    snprintf(path, sizeof path, "%s/%d", out, (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) return;
    int k = open(key, O_RDONLY);
    int n = snprintf(line, sizeof line, "%d %d %s\n", (int)getuid(), (int)geteuid(), k >= 0 ? "read" : "denied");
    write(fd, line, n);
    close(fd);
}
"""


@pytest.mark.skipif(GCC is None, reason="no C compiler to build the preloaded library")
def test_a_jobs_ld_preload_never_runs_as_root_nor_reads_the_channel_key(
    cell: LocalCell, api: CellClient, sandbox: Path
) -> None:
    lib_dir = sandbox / "preload"
    lib_dir.mkdir(mode=0o755)
    lib = compile_c(lib_dir, "evil", PRELOAD, shared=True)
    out = sandbox / "preload-out"
    out.mkdir()
    out.chmod(0o1777)
    env = {"LD_PRELOAD": str(lib), "EVIL_OUT": str(out), "EVIL_KEY": str(cell.channel_key_file)}
    spec = job("preload", "mallory", ["/bin/sh", "-c", "exit 0"], env=env)
    assert cell.submit(spec).status_code == 201
    task = ended(api, "mallory/preload")
    lines = [f.read_text().split() for f in out.iterdir()]
    # The library did run (in the task's own process, at least): the attack was tried.
    assert lines, (task, api.logs("mallory/preload", 0, stream="stderr"))
    for uid, euid, key in lines:
        assert uid != "0" and euid != "0", f"the job's LD_PRELOAD ran as uid {uid}, euid {euid}"
        assert key == "denied", "the job's LD_PRELOAD read the channel key"


# --- the task's limits, from its first instruction ----------------------------------------------------

FORK_FIRST = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks before anything else; the child touches 300 MiB, over the task's 64 MiB. */
int main(void) {
    pid_t child = fork();
    if (child == 0) {
        size_t n = 300UL << 20;
        volatile char *p = malloc(n);  /* volatile: every page is touched, none optimized away */
        if (!p) _exit(2);
        for (size_t i = 0; i < n; i += 4096) p[i] = 1;
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    if (WIFSIGNALED(status)) printf("{\"child\": \"signal %d\"}\n", WTERMSIG(status));
    else printf("{\"child\": \"exit %d\"}\n", WEXITSTATUS(status));
    fflush(stdout);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
"""


@pytest.mark.skipif(GCC is None, reason="no C compiler to build the forking program")
def test_a_child_forked_first_is_under_the_tasks_memory_limit(
    cell: LocalCell, api: CellClient, sandbox: Path
) -> None:
    bin_dir = sandbox / "forkfirst"
    bin_dir.mkdir(mode=0o755)
    program = compile_c(bin_dir, "forkfirst", FORK_FIRST)
    spec = job("forkfirst", "mallory", [str(program)], request={"cpu": "500m", "ram": "64MiB"})
    assert cell.submit(spec).status_code == 201
    task = ended(api, "mallory/forkfirst")
    out = api.logs("mallory/forkfirst", 0).decode()
    # Either the child was OOM-killed (the parent says so and fails) or the whole task was.
    assert '"exit 0"' not in out, f"the first child escaped the 64 MiB limit: {out!r}"
    assert task["cause"] != "finished", task
    kinds = [e["kind"] for e in task["events"]]
    assert "oom" in kinds or '"signal 9"' in out, (kinds, out)


FORKS = """
import json, os, sys, time
limit = open("/sys/fs/cgroup/pids" + [l.split(":", 2)[2] for l in open("/proc/self/cgroup").read().splitlines()
              if l.split(":")[1] == "pids"][0] + "/pids.max").read().strip()
made = []
for _ in range(int(sys.argv[1])):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    made.append(pid)
for pid in made:
    os.kill(pid, 9)
print(json.dumps({"forked": len(made), "pids_max": limit}))
"""


def test_a_task_cannot_fork_past_its_pids_limit(cell: LocalCell, api: CellClient) -> None:
    seen = output(cell, api, python_job("forks", "mallory", FORKS, "60", pids_max=16))
    # 16 processes and threads at most: the task's own process and 15 children.
    assert seen == {"forked": 15, "pids_max": "16"}


def test_a_task_has_a_pids_limit_when_its_job_names_none(cell: LocalCell, api: CellClient) -> None:
    seen = output(cell, api, python_job("forks-default", "mallory", FORKS, "0"))
    assert seen == {"forked": 0, "pids_max": "1024"}


# --- what a task can reach -------------------------------------------------------------------------

def test_a_task_cannot_read_the_cells_keys_nor_another_users_logs(cell: LocalCell, api: CellClient) -> None:
    secrets = cell_secrets(cell, api, python_job)
    seen = output(cell, api, python_job("reach", "mallory", REACH, *map(str, secrets)))
    assert seen["paths"] == {str(p): "PermissionError" for p in secrets}


def test_a_task_cannot_signal_another_users_task_nor_the_borglet(cell: LocalCell, api: CellClient) -> None:
    victim = job("victim", "bob", [TASK_PYTHON, "-c", "import time; time.sleep(600)"], restart_policy="always")
    assert cell.submit(victim).status_code == 201
    pid = wait_for(lambda: api.task("bob/victim", 0)["pid"], 30, "bob's task to start")
    borglet = cell.borglets[0].pid
    assert borglet is not None
    seen = output(cell, api, python_job("killer", "mallory", SIGNALS, str(pid), str(borglet)))
    assert seen == {"victim": "PermissionError", "borglet": "PermissionError"}
    task = api.task("bob/victim", 0)
    assert (task["state"], task["pid"], task["restarts"]) == ("RUNNING", pid, 0)
    assert cell.borglets[0].alive


CGROUP_ESCAPE = """
import json, os
groups = {l.split(":")[1]: l.split(":", 2)[2] for l in open("/proc/self/cgroup").read().splitlines()}
out = {}
for name, controller, value in (("memory.limit_in_bytes", "memory", "8589934592"),
                                ("cpu.cfs_quota_us", "cpu", "-1"), ("pids.max", "pids", "max")):
    try:
        with open(f"/sys/fs/cgroup/{controller}{groups[controller]}/{name}", "w") as f:
            f.write(value)
        out[name] = "written"
    except OSError as err:
        out[name] = type(err).__name__
for controller in ("memory", "cpu", "pids"):
    try:
        with open(f"/sys/fs/cgroup/{controller}/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
        out["root " + controller] = "moved"
    except OSError as err:
        out["root " + controller] = type(err).__name__
after = {l.split(":")[1]: l.split(":", 2)[2] for l in open("/proc/self/cgroup").read().splitlines()}
out["stayed"] = all(after[c] == groups[c] for c in ("memory", "cpu", "pids"))
out["in_a_task_group"] = "minborg-" in groups["memory"]
print(json.dumps(out))
"""


def test_a_task_cannot_raise_its_own_limits_nor_leave_its_cgroups(cell: LocalCell, api: CellClient) -> None:
    seen = output(cell, api, python_job("escape", "mallory", CGROUP_ESCAPE))
    refused = {k: v for k, v in seen.items() if k not in ("stayed", "in_a_task_group")}
    assert set(refused.values()) <= {"PermissionError", "OSError"}, seen
    assert seen["stayed"] and seen["in_a_task_group"], seen


def test_a_task_its_user_cannot_run_fails_to_spawn_saying_what_to_change(
    cell: LocalCell, api: CellClient, sandbox: Path
) -> None:
    private = sandbox / "private"
    private.mkdir(mode=0o700)
    program = private / "tool"
    program.write_text("#!/bin/sh\necho ran\n")
    program.chmod(0o755)
    assert cell.submit(job("private", "alice", [str(program)])).status_code == 201
    task = ended(api, "alice/private")
    last = task["events"][-1]
    assert last["kind"] == "spawn_failed", task["events"]
    assert str(program) in last["detail"] and "other users" in last["detail"], last


def test_a_task_enters_its_working_directory_as_its_user(cell: LocalCell, api: CellClient, sandbox: Path) -> None:
    # Inside a directory its user may not pass, one it could use if it were already there:
    # a child that entered it as root (before dropping its ids) would run in it.
    inner = sandbox / "private-cwd" / "open"
    inner.mkdir(parents=True)
    inner.parent.chmod(0o700)
    inner.chmod(0o777)
    spec = job("cwd", "alice", ["/bin/sh", "-c", "pwd; ls"], cwd=str(inner))
    assert cell.submit(spec).status_code == 201
    task = ended(api, "alice/cwd")
    last = task["events"][-1]
    assert last["kind"] == "spawn_failed", task["events"]
    assert f"may not enter its working directory '{inner}'" in last["detail"], last
