"""The task sandbox, attacked from inside a container task of a live cell whose borglet runs the
docker runtime (`--runtime docker`): each test runs one attack of issue 38, or a variant of it,
from a container of user mallory, and fails if it succeeds.

- the store: a container shares the host's network, so it can reach etcd's client and peer
  URLs; without the cell's client certificate (over https, or plain http) it reads and writes
  nothing;
- the cell's TLS keys, channel key, admin token and another user's logs are not in the
  container's file system; its only mount of the cell's files is its own log directory;
- the task runs as its job user's unprivileged uid, with no capability (none in its bounding
  set either), no-new-privileges, on a read-only root;
- a fork flood stops at the job's pids limit (`pids_max`, default 1024);
- a child forked first in a 64 MiB container that touches 300 MiB is OOM-killed;
- a variable exported by whoever started the cell is not in the container's environment;
- the container cannot signal another user's task, nor the borglet, nor see them.

Needs a Docker engine and the images (`sh images/engine.sh`); without an engine the tests
skip, except in CI (`CI` set), where a missing engine fails them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from reference import images
from reference.borglet import taskusers
from reference.client import CellClient
from tests.integration.cellkit import LocalCell, docker_engine, wait_for
from tests.security.taskio import REACH, cell_secrets, ended, output

pytestmark = [pytest.mark.integration, pytest.mark.docker]

# Exported by "the operator" before the cell starts: no container may see it.
OPERATOR_VARIABLE = "MINBORG_OPERATOR_SECRET_FOR_CONTAINER_TEST"
IMAGE = "minborg/hello_world"  # Debian minbase with python3 (images/base.sh)


@pytest.fixture(scope="module")
def docker_client() -> Any:
    if os.geteuid() != 0:
        pytest.skip(f"a docker-runtime borglet runs its containers as job users' uids: it must be root, not uid {os.geteuid()}")
    client = docker_engine("the container attacks")
    images.build_all(say=lambda _msg: None)  # skipped steps when they are built already
    return client


@pytest.fixture(scope="module")
def cell(docker_client: Any) -> Iterator[LocalCell]:
    sandbox = Path(tempfile.mkdtemp(prefix="minborg-containers-", dir="/tmp"))
    name = f"sec{uuid.uuid4().hex[:8]}"  # the label that finds this cell's containers
    os.environ[OPERATOR_VARIABLE] = "the operator's secret"
    try:
        c = LocalCell(
            sandbox / "cell", masters=1, borglets=1, poll_interval=0.3, cell=name,
            capacity="cpu=4000m,ram=4GiB", borglet_args=("--runtime", "docker", "--cell", name),
        )  # fmt: skip
        c.start()  # the borglet inherits the operator's environment, variable included
    finally:
        del os.environ[OPERATOR_VARIABLE]
    try:
        yield c
    finally:
        c.stop()
        for box in docker_client.containers.list(all=True, filters={"label": f"minborg.cell={name}"}):
            box.remove(force=True)
        shutil.rmtree(sandbox, ignore_errors=True)


@pytest.fixture(scope="module")
def api(cell: LocalCell) -> Iterator[CellClient]:
    with CellClient([m.url for m in cell.masters], retry_s=15, token=cell.admin_token) as client:
        yield client


def python_job(name: str, user: str, code: str, *args: str, **extra: Any) -> dict[str, Any]:
    """A job whose one container runs `code` with python3 in IMAGE."""
    job: dict[str, Any] = {
        "name": name, "user": user, "task_count": 1, "priority": "batch", "image": IMAGE,
        "command": ["python3", "-c", textwrap.dedent(code), *args],
        "request": {"cpu": "500m", "ram": "64MiB"}, "restart_policy": "never",
    }  # fmt: skip
    job.update(extra)
    return job


# --- the store -------------------------------------------------------------------------------------

STORE = r"""
import base64, json, socket, ssl, sys
from urllib.parse import urlsplit

def b64(s):
    return base64.b64encode(s.encode()).decode()

# Every key (a range from "\0"), and a user record of the attacker's choosing.
CALLS = (("range", "/v3/kv/range", {"key": "AA==", "range_end": "AA=="}),
         ("put", "/v3/kv/put", {"key": b64(sys.argv[1]), "value": b64('{"name": "mallory", "admin": true}')}),
         ("members", "/members", None))

def call(host, port, tls, method, path, body):
    s = socket.create_connection((host, port), timeout=5)
    try:
        if tls:  # no certificate of ours, and we trust whatever the server shows
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            s = ctx.wrap_socket(s)
        data = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        s.sendall(head.encode() + data)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        return "answered " + got.split(b"\r\n", 1)[0].decode(errors="replace") if got else "closed"
    except OSError as err:  # ssl.SSLError too
        return type(err).__name__
    finally:
        s.close()

out = {}
for kind, url in zip(sys.argv[2::2], sys.argv[3::2]):
    parts = urlsplit(url)
    for scheme in ("https", "http"):
        for name, path, body in CALLS:
            if (kind == "client") == (name == "members"):
                continue  # the client URL's KV API; the peer URL's member list
            method = "GET" if body is None else "POST"
            try:
                out[f"{kind} {scheme} {name}"] = call(parts.hostname, parts.port, scheme == "https", method, path, body)
            except OSError as err:  # the connection itself: the attack could not even be tried
                out[f"{kind} {scheme} {name}"] = "connect " + type(err).__name__
print(json.dumps(out))
"""


def test_a_container_cannot_read_nor_write_the_store_without_the_cells_certificate(
    cell: LocalCell, api: CellClient
) -> None:
    client_url = cell.etcd.client_urls[0]
    host = urlsplit(client_url).hostname
    peer_url = f"https://{host}:{cell.etcd.members[0].peer_port}"
    # The same request with the cell's certificate reads: the URL is the store's, and the
    # attack would read it were the certificate not required.
    tls = cell.etcd.client_tls
    assert tls is not None, "the cell's store runs without TLS"
    control = requests.post(f"{client_url}/v3/kv/range", json={"key": "AA==", "range_end": "AA=="}, timeout=5,
                            **tls.requests_kwargs())  # fmt: skip
    assert control.status_code == 200 and control.json().get("kvs"), control.text
    user_key = f"/minborg/{cell.cell}/users/mallory"  # an admin of the attacker's making
    seen = output(cell, api, python_job("store", "mallory", STORE, user_key, "client", client_url, "peer", peer_url))
    assert len(seen) == 6, seen  # range and put on the client URL, the member list on the peer URL; each twice
    for attempt, result in seen.items():
        assert not result.startswith("connect "), f"{attempt}: the container could not reach the store: {result}"
        assert not result.startswith("answered HTTP/1.1 2"), f"{attempt}: the store answered a container: {result}"
        # Over https the handshake fails (no certificate); over http the member closes the
        # connection (or says, in a 400, that it speaks TLS).
        assert result.startswith(("SSLError", "ConnectionResetError", "closed", "answered HTTP/1.0 400",
                                  "answered HTTP/1.1 400")), (attempt, result)  # fmt: skip
    with cell.store() as store:  # nothing was written
        assert store.get(user_key) is None


# --- what a container can reach --------------------------------------------------------------------

def test_a_container_cannot_reach_the_cells_keys_nor_another_users_logs(cell: LocalCell, api: CellClient) -> None:
    secrets = cell_secrets(cell, api, python_job)
    seen = output(cell, api, python_job("reach", "mallory", REACH, *map(str, secrets)))
    assert seen["paths"] == {str(p): "FileNotFoundError" for p in secrets}
    assert seen["logs"] == ["stderr", "stdout"]
    # Of the cell's directory the container has its own log directory, and nothing else.
    cells = [root for root in seen["mount_roots"] if str(cell.workdir) in root]
    assert len(cells) <= 1 and all("/tasks/mallory_reach" in root for root in cells), seen["mount_roots"]
    assert not [r for r in seen["mount_roots"] if str(cell.workdir).startswith(r.rstrip("/") + "/") and r != "/"]


WHO = """
import errno, json, os
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
out = {"uids": status["Uid"].split(), "gids": status["Gid"].split(), "groups": os.getgroups(),
       "no_new_privs": int(status["NoNewPrivs"])}
out.update({name: int(status[name], 16) for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")})
for name, attempt in (("setuid", lambda: os.setuid(0)), ("setgid", lambda: os.setgid(0)),
                      ("chroot", lambda: os.chroot("/tmp")), ("write_root", lambda: open("/var/tmp/owned", "w")),
                      ("mknod", lambda: os.mknod("/tmp/disk", 0o600 | 0o060000, os.makedev(8, 0)))):
    try:
        attempt()
        out[name] = "done"
    except OSError as err:
        out[name] = errno.errorcode[err.errno]
out["env"] = dict(os.environ)
print(json.dumps(out))
"""


def test_a_container_runs_as_its_job_users_uid_with_no_capability_nor_way_to_one(
    cell: LocalCell, api: CellClient
) -> None:
    seen = output(cell, api, python_job("who", "mallory", WHO))
    uid = int(seen["uids"][0])
    assert uid >= taskusers.FIRST_UID, f"the container ran as uid {uid}"
    assert seen["uids"] == [str(uid)] * 4 and seen["gids"] == [str(uid)] * 4, seen  # real, effective, saved, fs
    assert seen["groups"] in ([], [uid]), seen
    caps = {k: seen[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    assert caps == dict.fromkeys(caps, 0), caps  # none, and none a setuid program could regain
    assert seen["no_new_privs"] == 1, seen
    assert (seen["setuid"], seen["setgid"], seen["chroot"], seen["mknod"]) == ("EPERM",) * 4, seen
    # /var/tmp is anyone's to write (1777) on the image: only a read-only root refuses it.
    assert seen["write_root"] == "EROFS", seen


def test_the_operators_environment_does_not_reach_a_container(cell: LocalCell, api: CellClient) -> None:
    seen = output(cell, api, python_job("env", "mallory", WHO, env={"MINE": "the job's"}))
    env = seen["env"]
    assert OPERATOR_VARIABLE not in env, sorted(env)
    assert env["MINE"] == "the job's"
    # Nothing but what the job asked, Minborg's own variables, the engine's and the interpreter's.
    minborg = {"HOME", "HOST", "PORT", "TASK_INDEX", "TASK_ID", "BNS_NAME", "MINBORG_MACHINE", "MINBORG_TASK_ID",
               "MINBORG_BORGLET_DIR", "PYTHONPATH", "PYTHONUNBUFFERED"}  # fmt: skip
    engine_set = {"PATH", "HOSTNAME"}
    shell = {"PWD"}  # the container's `sh -c` that redirects the task's streams
    python = {"LC_CTYPE"}
    assert set(env) - minborg - engine_set - shell - python == {"MINE"}, sorted(env)
    assert not [k for k, v in env.items() if "secret" in v]


# --- the container's limits -------------------------------------------------------------------------

FORKS = """
import json, os, sys, time
limit = open("/sys/fs/cgroup/pids/pids.max").read().strip()
made = []
for _ in range(int(sys.argv[1])):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            os.execv("/bin/sleep", ["sleep", "60"])
        finally:
            os._exit(1)
    made.append(pid)
for pid in made:
    os.kill(pid, 9)
for pid in made:
    os.waitpid(pid, 0)
print(json.dumps({"forked": len(made), "pids_max": limit}))
"""


def test_a_fork_flood_stops_at_the_jobs_pids_limit(cell: LocalCell, api: CellClient) -> None:
    seen = output(cell, api, python_job("forks", "mallory", FORKS, "100", pids_max=32))
    # 32 processes and threads at most: the container's init, the task's own process and 30
    # children (where the limit not kept, all 100 forks would succeed).
    assert seen["pids_max"] == "32", seen
    assert 24 <= seen["forked"] <= 30, seen


def test_a_fork_flood_stops_at_1024_when_the_job_names_no_limit(cell: LocalCell, api: CellClient) -> None:
    spec = python_job("flood", "mallory", FORKS, "1200", request={"cpu": "1000m", "ram": "512MiB"})
    seen = output(cell, api, spec)
    assert seen["pids_max"] == "1024", seen
    assert 1000 <= seen["forked"] <= 1022, seen


FORK_FIRST = """
import json, os
child = os.fork()  # before anything else
if child == 0:
    hog = b"x" * (300 << 20)  # every page written: 300 MiB of the container's 64 MiB
    os._exit(0)
_, status = os.waitpid(child, 0)
said = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
print(json.dumps({"child": said}))
"""


def test_a_child_forked_first_is_oom_killed_at_the_containers_limit(cell: LocalCell, api: CellClient) -> None:
    assert cell.submit(python_job("forkfirst", "mallory", FORK_FIRST)).status_code == 201
    task = ended(api, "mallory/forkfirst")
    out = api.logs("mallory/forkfirst", 0).decode()
    # Either the child was OOM-killed (the parent says so) or the whole container was.
    assert '"exit 0"' not in out, f"the first child escaped the 64 MiB limit: {out!r}"
    kinds = [e["kind"] for e in task["events"]]
    assert '"signal 9"' in out or "oom" in kinds, (kinds, out, task)


# --- other users' tasks -----------------------------------------------------------------------------

SIGNALS = """
import json, os, signal, sys
out = {}
for name, pid in zip(("victim", "borglet"), map(int, sys.argv[1:])):
    try:
        os.kill(pid, signal.SIGKILL)
        out[name] = "signalled"
    except OSError as err:
        out[name] = type(err).__name__
try:
    os.kill(-1, signal.SIGKILL)  # every process it may signal, but its init and itself
    out["all"] = "signalled"
except OSError as err:
    out["all"] = type(err).__name__
out["visible"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps(out))
"""


def test_a_container_cannot_signal_another_users_task_nor_the_borglet(cell: LocalCell, api: CellClient) -> None:
    victim = python_job("victim", "bob", "import time; time.sleep(600)", restart_policy="always")
    assert cell.submit(victim).status_code == 201
    running = wait_for(
        lambda: (t := api.task("bob/victim", 0))["state"] == "RUNNING" and t.get("pid") and t, 60, "bob's container"
    )
    pid, borglet = running["pid"], cell.borglets[0].pid
    assert borglet is not None
    seen = output(cell, api, python_job("killer", "mallory", SIGNALS, str(pid), str(borglet)))
    assert seen["victim"] in ("ProcessLookupError", "PermissionError"), seen
    assert seen["borglet"] in ("ProcessLookupError", "PermissionError"), seen
    # Its own pid namespace: its init, itself and what it forked (nothing of the host's).
    assert pid not in seen["visible"] and borglet not in seen["visible"] and max(seen["visible"]) < 100, seen
    task = api.task("bob/victim", 0)
    assert (task["state"], task["pid"], task["restarts"]) == ("RUNNING", pid, 0), task
    assert cell.borglets[0].alive
