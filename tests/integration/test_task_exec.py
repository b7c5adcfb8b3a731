"""`task exec` on a live cell: a command runs in a running task as its uid, in its cgroups, working directory and environment; its output and exit code come back through the master and the CLI; another user is refused, so is a task that is not running, an absent one and a bad command; a command past its limit is killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reference.borglet import cgroups
from tests.integration.cellkit import REPO, LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

# cgroup isolation where this host can make groups (a root test run); rlimits elsewhere.
ISOLATION = "cgroup" if os.geteuid() == 0 and cgroups.CgroupTree("probe-exec").usable() is None else "rlimit"

# Printed by the command run in the task: what it is, where, as whom.
PROBE = 'echo "uid=$(id -u) cwd=$(pwd) task=$TASK_ID"; cat /proc/self/cgroup >&2; exit 7'


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = LocalCell(
        tmp_path_factory.mktemp("exec"), masters=1, borglets=1, poll_interval=0.3, isolation=ISOLATION
    )
    with c:
        assert c.submit(sleeper_job("web", user="alice")).status_code == 201
        assert c.submit(sleeper_job("done", user="alice", command=["/bin/true"], restart_policy="never")).status_code == 201
        wait_for(lambda: c.running("alice", "web", 1), 30, "alice/web to run")
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


@pytest.fixture(scope="module")
def alice(cell: LocalCell) -> Iterator[httpx.Client]:
    token = cell.add_user("alice")
    with httpx.Client(base_url=cell.masters[0].url, timeout=30.0, headers={"Authorization": f"Bearer {token}"}) as c:
        yield c


def exec_(client: httpx.Client, job: str, index: int, body: object) -> httpx.Response:
    return client.post(f"/v1/jobs/{job}/tasks/{index}/exec", json=body)


def test_a_command_runs_as_the_task_in_its_cgroups_and_directory(cell: LocalCell, alice: httpx.Client) -> None:
    task = cell.tasks("alice", "web")[0]
    pid = task["pid"]
    r = exec_(alice, "alice/web", 0, {"command": ["sh", "-c", PROBE]})
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["exit_code"] == 7 and not result["timed_out"] and result["machine"] == task["machine"]
    said = dict(part.split("=", 1) for part in result["stdout"].split())
    assert said["task"].partition("@")[0] == "alice/web/0#0"  # the borglet's id of the task
    assert int(said["uid"]) == os.stat(f"/proc/{pid}").st_uid
    assert said["cwd"] == os.readlink(f"/proc/{pid}/cwd")
    if ISOLATION == "cgroup":
        assert os.stat(f"/proc/{pid}").st_uid != 0, "a root borglet runs tasks as their job user's uid"
        # The command's groups are the task's, line for line (the memory, cpu, pids ... groups).
        assert sorted(result["stderr"].split()) == sorted(Path(f"/proc/{pid}/cgroup").read_text().split())
    # The replica's log says who ran what, where.
    assert "exec by alice in alice/web/0#0 on " in cell.masters[0].log.read_text()


def test_the_command_line_prints_the_output_and_exits_with_the_code(cell: LocalCell) -> None:
    env = {**os.environ, "MINBORG_MASTER": cell.masters[0].url, "MINBORG_TOKEN": cell.admin_token}
    done = subprocess.run(
        [sys.executable, "-m", "reference.cli", "task", "exec", "alice/web", "0", "--", "sh", "-c", "echo hi; echo oops >&2; exit 3"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (3, "hi\n", "oops\n")


def test_another_user_is_refused(cell: LocalCell) -> None:
    token = cell.add_user("bob")
    r = httpx.post(
        f"{cell.masters[0].url}/v1/jobs/alice/web/tasks/0/exec", json={"command": ["id"]},
        headers={"Authorization": f"Bearer {token}"}, timeout=10,
    )  # fmt: skip
    assert r.status_code == 403 and "alice" in r.text


def test_what_cannot_run_is_refused_naming_why(cell: LocalCell, alice: httpx.Client) -> None:
    wait_for(lambda: cell.tasks("alice", "done")[0]["state"] == "DEAD", 30, "alice/done to end")
    r = exec_(alice, "alice/done", 0, {"command": ["id"]})
    assert r.status_code == 409 and "not running" in r.json()["detail"][0]["error"]
    assert exec_(alice, "alice/web", 5, {"command": ["id"]}).status_code == 404
    assert exec_(alice, "alice/nope", 0, {"command": ["id"]}).status_code == 404
    for body, field in (({"command": []}, "command"), ({"command": ["sh", "a\u0000b"]}, "command.1"),
                        ({"command": ["x" * 70_000, "y" * 70_000]}, "command"), ({"command": ["id"], "timeout_s": 601}, "timeout_s")):  # fmt: skip
        r = exec_(alice, "alice/web", 0, body)
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == field, r.text


def test_a_command_past_its_limit_is_killed(alice: httpx.Client) -> None:
    r = exec_(alice, "alice/web", 0, {"command": ["sh", "-c", "echo started; sleep 30"], "timeout_s": 1})
    result = r.json()
    assert r.status_code == 200 and result["timed_out"], r.text
    assert (result["exit_code"], result["signal"], result["stdout"]) == (137, 9, "started\n")
    assert result["duration_s"] < 5, json.dumps(result)


# --- task exec -it: a terminal session ---------------------------------------------------------


def run_on_a_terminal(cell: LocalCell, args: list[str], keys: list[bytes], until: list[bytes]) -> tuple[int, bytes]:
    """`minborg ARGS` with a pty for its stdin and stdout (as a user's terminal): each of `keys`
    typed once what came back since the key before holds the matching `until`; (its exit
    code, all it printed)."""
    import pty
    import select
    import time

    env = {**os.environ, "MINBORG_MASTER": cell.masters[0].url, "MINBORG_TOKEN": cell.admin_token}
    main, side = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", "from reference.cli.fast import main; main()", *args],
                            stdin=side, stdout=side, stderr=side, env=env, cwd=REPO, start_new_session=True)  # fmt: skip
    os.close(side)
    seen, deadline = b"", time.monotonic() + 120
    try:
        for key, wanted in zip(keys, until, strict=True):
            mark = len(seen)
            while wanted not in seen[mark:]:
                assert time.monotonic() < deadline, f"no {wanted!r} in {seen[-2000:]!r}"
                if select.select([main], [], [], 0.5)[0]:
                    try:
                        seen += os.read(main, 65536)
                    except OSError:  # EIO: the command line ended, its end of the terminal closed
                        raise AssertionError(f"exit {proc.wait()} before {wanted!r}: {seen[-2000:]!r}") from None
            os.write(main, key)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        while select.select([main], [], [], 0.2)[0]:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the command line's end of the terminal closed
                break
            if not chunk:
                break
            seen += chunk
        return code, seen
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main)


def test_a_terminal_session_runs_as_the_task_and_exits_with_its_code(cell: LocalCell) -> None:
    task = cell.tasks("alice", "web")[0]
    pid = task["pid"]
    probe = b'echo "got $((6*7)) uid=$(id -u) cwd=$(pwd) tty=$(tty)"; cat /proc/self/cgroup | sort | tr "\\n" " "; echo DO""NE\r'
    code, seen = run_on_a_terminal(
        cell, ["task", "exec", "-it", "alice/web", "0", "--", "/bin/sh"],
        [probe, b"exit 3\r"], [b"$ ", b"DONE\r\n"],
    )  # fmt: skip
    text = seen.decode(errors="replace")
    assert code == 3, text
    line = next(t for t in text.splitlines() if t.startswith("got 42 "))
    said = dict(part.split("=", 1) for part in line.split()[2:])
    assert int(said["uid"]) == os.stat(f"/proc/{pid}").st_uid
    assert said["cwd"] == os.readlink(f"/proc/{pid}/cwd")
    assert said["tty"].startswith("/dev/pts/"), "the command's stdin is a terminal"
    if ISOLATION == "cgroup":
        groups = sorted(Path(f"/proc/{pid}/cgroup").read_text().split())
        assert " ".join(groups) in text.replace("\r\n", "\n"), "the session runs in the task's cgroups"
    assert "exec -it by admin in alice/web/0#0" in cell.masters[0].log.read_text()


def test_ctrl_d_ends_a_terminal_session_and_ctrl_c_reaches_its_foreground(cell: LocalCell) -> None:
    # Ctrl-C interrupts `sleep 300` (the terminal is the shell's controlling one: its line
    # discipline signals the foreground job), not the session; the prompt comes back, and
    # Ctrl-D at the empty prompt then ends the shell, whose exit code is its last command's:
    # 130, sleep's end by SIGINT. "sleeping" is printed by the foreground job itself, so the
    # Ctrl-C cannot land before the job exists (a `sh` given Ctrl-C between a builtin's echo and
    # its next fork holds the interrupt until that command ends: 300 s).
    code, seen = run_on_a_terminal(
        cell, ["task", "exec", "-it", "alice/web", "0", "--", "/bin/sh"],
        [b"sh -c 'echo sleep\"\"ing; exec sleep 300'\r", b"\x03", b"\x04"], [b"$ ", b"sleeping\r\n", b"$ "],
    )  # fmt: skip
    assert code == 130, seen  # within the helper's 2 minutes: sleep 300 did not run on


def test_piped_stdin_is_streamed_to_the_terminal(cell: LocalCell) -> None:
    env = {**os.environ, "MINBORG_MASTER": cell.masters[0].url, "MINBORG_TOKEN": cell.admin_token}
    done = subprocess.run(
        [sys.executable, "-m", "reference.cli", "task", "exec", "-i", "-t", "alice/web", "0", "--", "sh", "-c", "read a; echo got-$a; exit 4"],
        input="hello\n", capture_output=True, text=True, env=env, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert done.returncode == 4 and "got-hello" in done.stdout, done


def test_a_terminal_session_is_its_owners_alone(cell: LocalCell, alice: httpx.Client) -> None:
    opened = alice.post("/v1/jobs/alice/web/tasks/0/terminal", json={"command": ["/bin/sh"], "rows": 10, "cols": 40})
    assert opened.status_code == 200, opened.text
    session = opened.json()["session"]
    base = f"/v1/jobs/alice/web/tasks/0/terminal/{session}"
    try:
        token = cell.add_user("carol")
        with httpx.Client(base_url=cell.masters[0].url, timeout=30.0, headers={"Authorization": f"Bearer {token}"}) as carol:
            assert carol.post("/v1/jobs/alice/web/tasks/0/terminal", json={"command": ["/bin/sh"]}).status_code == 403
            for action, body in (("input", {"data": "aWQK"}), ("output", {"offset": 0, "wait_s": 0}), ("close", {})):
                r = carol.post(f"{base}/{action}", json=body)
                assert r.status_code == 403 and "alice" in r.text, r.text
        # The owner's keys and output go through; a bad body names its field.
        assert alice.post(f"{base}/input", json={"data": "not base64!"}).json()["detail"][0]["field"] == "data"
        assert alice.post(f"{base}/input", json={"data": "ZWNobyAkKCg2KjcpKQo="}).status_code == 200  # echo $((6*7))
        out, offset = b"", 0
        while b"42" not in out:
            r = alice.post(f"{base}/output", json={"offset": offset, "wait_s": 5})
            assert r.status_code == 200 and not r.json()["exited"], r.text
            import base64

            out += base64.b64decode(r.json()["data"])
            offset = r.json()["offset"]
    finally:
        assert alice.post(f"{base}/close", json={}).status_code == 200
    assert alice.post(f"{base}/output", json={"offset": 0}).status_code == 404, "a closed session is gone"
