"""Tests of the borglet's small pure helpers: cgroup parsing, CFS quota, names, records, CLI."""

import json
import os
import re

import pytest

from reference.borglet import cgroups, store
from reference.borglet.cli import parse_listen, parse_task_env, run_tasks_as_users
from reference.borglet.processes import check_strings, sanitize, spawn_error
from reference.borglet.protocol import SyncRequest, TaskSpec
from reference.borglet.task import Task

PROC_CGROUP = """\
9:name=systemd:/
4:memory:/process_api/af91
3:cpu,cpuacct:/user.slice
8:pids:/
0::/
"""


def test_parse_proc_cgroup_splits_joined_controllers_and_skips_v2():
    assert cgroups.parse_proc_cgroup(PROC_CGROUP) == {
        "name=systemd": "/",
        "memory": "/process_api/af91",
        "cpu": "/user.slice",
        "cpuacct": "/user.slice",
        "pids": "/",
    }


@pytest.mark.parametrize(
    ("milli", "quota"),
    [
        (500, 50_000),  # half a core: 50 ms per 100 ms period
        (2000, 200_000),  # two cores
        (1, 1_000),  # below the kernel's 1 ms minimum: clamped up
        (0, -1),  # no request: unlimited
    ],
)
def test_cfs_quota(milli, quota):
    assert cgroups.cfs_quota_us(milli) == quota


def test_parse_oom_kills():
    assert cgroups.parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n") == 2
    assert cgroups.parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n") is None


def test_sanitize_is_safe_and_collision_free():
    a, b = sanitize("alice/web/3#0"), sanitize("alice_web_3_0")
    assert a.startswith("alice_web_3_0-") and "/" not in a
    assert a != b
    assert sanitize("../..").startswith("task-")


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:7001", ("127.0.0.1", 7001)),
        (":0", ("127.0.0.1", 0)),
        ("[::1]:80", ("[::1]", 80)),
    ],
)
def test_parse_listen(text, address):
    assert parse_listen(text) == address


def test_parse_listen_rejects():
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_listen("localhost")


SPEC = {
    "task_id": "alice/web/3#0",
    "job": "alice/web",
    "index": 3,
    "incarnation": 0,
    "bns": "3.web.alice.local.minborg",
    "command": ["python", "-m", "examples.hello_world.server"],
    "env": {"K": "V"},
    "cwd": None,
    "port": 0,
    "request": {"cpu": 500, "ram": 268435456},
    "priority": 200,
    "restart_policy": "on_failure",
    "health_check": {"path": "/healthz", "interval_s": 1.0},
}


def test_sync_request_parses_the_protocol_example():
    request = SyncRequest.model_validate({"master": "m1", "epoch": 17, "tasks": [SPEC]})
    spec = request.tasks[0]
    assert (spec.request.cpu, spec.request.ram, spec.health_check.interval_s) == (500, 2**28, 1.0)


def test_task_record_round_trips_through_the_table(tmp_path):
    task = Task(spec=TaskSpec.model_validate(SPEC), key=sanitize(SPEC["task_id"]))
    task.pid, task.port, task.start_ticks, task.restarts = 1234, 4000, 150, 2
    task.group = {"memory": "/sys/fs/cgroup/memory/x"}
    path = str(tmp_path / "tasks.json")
    store.save(path, {"epoch": 3, "tasks": {SPEC["task_id"]: task.to_record()}})
    table = store.load(path)
    again = Task.from_record(table["tasks"][SPEC["task_id"]])
    assert table["epoch"] == 3
    assert again.report(1.0) == task.report(1.0)
    assert (again.group, again.start_ticks, again.spec) == (task.group, 150, task.spec)


def test_store_load_of_a_missing_table_is_empty(tmp_path):
    assert store.load(str(tmp_path / "none.json")) == {}


@pytest.mark.parametrize(
    ("command", "env", "cwd", "named"),
    [
        (["sh", "-c", "a\0b"], {}, None, "command[2]"),
        (["sh"], {"K\0": "v"}, None, "environment name"),
        (["sh"], {"A=B": "v"}, None, "environment name"),
        (["sh"], {"K": "v\0"}, None, "environment variable K"),
        (["sh"], {}, "/tmp\0x", "cwd"),
    ],
)
def test_a_string_the_kernel_cannot_take_is_named_before_the_spawn(command, env, cwd, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        check_strings(command, env, cwd)  # named: a plain string, not a pattern


def test_check_strings_passes_what_the_kernel_takes():
    check_strings(["sh", "-c", "echo =x"], {"K": "a=b", "EMPTY": ""}, "/tmp")


@pytest.mark.parametrize(
    ("err", "command", "cwd", "says"),
    [
        # exec refused: the program, and where to put one the user can run
        (PermissionError(13, "Permission denied", "/root/py/bin/python"), ["/root/py/bin/python"], "/w",
         "may not run '/root/py/bin/python'.*/usr/bin/python3"),
        # chdir refused: CPython names the directory
        (PermissionError(13, "Permission denied", "/root/x"), ["sh"], "/root/x", "may not enter its working directory '/root/x'"),
        (FileNotFoundError(2, "No such file or directory", "/nope"), ["sh"], "/nope", "working directory '/nope' does not exist"),
        (FileNotFoundError(2, "No such file or directory", "pyhton"), ["pyhton"], None, "no program 'pyhton' on its PATH \\(/usr/bin\\)"),
        (ValueError("embedded null byte"), ["sh"], None, "^spawn: embedded null byte$"),
    ],
)
def test_a_spawn_error_says_what_to_change(err, command, cwd, says):
    reason = spawn_error(err, command, cwd, 2_000_000_001, "/usr/bin")
    assert reason.startswith("spawn: ")  # the master's events call it spawn_failed
    assert re.search(says, reason), reason


def test_store_saves_swap_the_table_with_its_spare_and_create_no_file_after_the_second(tmp_path):
    path = str(tmp_path / "tasks.json")
    store.save(path, {"epoch": 1})
    store.save(path, {"epoch": 2})
    inodes = {os.stat(path).st_ino, os.stat(store.spare_path(path)).st_ino}
    for epoch in range(3, 8):
        store.save(path, {"epoch": epoch, "tasks": {} if epoch % 2 else {"t": {"pid": 1}}})
        assert store.load(path)["epoch"] == epoch
        # The spare holds the table before, and the two inodes only trade names.
        assert json.loads(open(store.spare_path(path), "rb").read())["epoch"] == epoch - 1
        assert {os.stat(path).st_ino, os.stat(store.spare_path(path)).st_ino} == inodes
    assert sorted(os.listdir(tmp_path)) == [".tasks.json.next", "tasks.json"]
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_store_a_torn_spare_leaves_the_table_and_a_system_without_the_exchange_renames(tmp_path, monkeypatch):
    path = str(tmp_path / "tasks.json")
    store.save(path, {"epoch": 1, "tasks": {"a": {"pid": 1}, "b": {"pid": 2}}})
    store.save(path, {"epoch": 2})
    with open(store.spare_path(path), "wb") as torn:  # a crash in the middle of a save
        torn.write(b'{"epoch": 3, "ta')
    assert store.load(path)["epoch"] == 2
    monkeypatch.setattr(store, "exchange", lambda a, b: False)
    store.save(path, {"epoch": 4})
    assert store.load(path)["epoch"] == 4
    assert os.listdir(tmp_path) == ["tasks.json"]


def test_a_root_borglet_runs_tasks_as_their_users_unless_told_otherwise():
    # Never root by accident: no fallback, whatever Python the borglet runs (it used to fall
    # back to root when its own Python was under a private /root).
    assert run_tasks_as_users("auto", 0) == (True, "")
    assert run_tasks_as_users("job-user", 0) == (True, "")
    assert run_tasks_as_users("borglet", 0) == (False, "--run-tasks-as borglet")  # the admin's explicit choice
    as_users, why = run_tasks_as_users("auto", 1000)
    assert not as_users and "uid 1000, not root" in why


def test_parse_task_env():
    assert parse_task_env(["PYTHONPATH=/a:/b", "EMPTY=", "K=a=b"]) == (("PYTHONPATH", "/a:/b"), ("EMPTY", ""), ("K", "a=b"))
    for bad in ("NOVALUE", "=x", "K=a\0b"):
        with pytest.raises(ValueError, match="NAME=VALUE"):
            parse_task_env([bad])


def test_a_task_is_ready_once_its_process_ran_a_second_and_not_before_or_after_it_ended():
    from reference.borglet.protocol import READY_AFTER_S

    task = Task(spec=TaskSpec.model_validate(SPEC), key=sanitize(SPEC["task_id"]))
    assert task.report(100.0)["ready"] is False  # QUEUED
    task.phase, task.started_at = "RUNNING", 100.0
    assert task.report(100.0 + READY_AFTER_S - 0.01)["ready"] is False
    assert task.report(100.0 + READY_AFTER_S)["ready"] is True
    task.phase = "STARTING"  # restarted in place: a new process, not yet a second old
    assert task.report(105.0)["ready"] is False
    task.phase = "FAILED"
    assert task.report(105.0)["ready"] is False


@pytest.mark.parametrize(
    "listen, host",
    [("10.200.0.7", "10.200.0.7"), ("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("", "127.0.0.1"),
     ("::", "127.0.0.1"), ("[::1]", "::1")],
)  # fmt: skip
def test_tasks_listen_where_their_borglet_serves_and_a_wildcard_means_loopback(listen, host):
    from reference.borglet.cli import task_host

    assert task_host(listen) == host


def test_a_health_probe_goes_to_the_address_the_task_was_given(tmp_path):
    """A task told HOST=127.0.0.2 (a netns host's address, here a second loopback address)
    that listens there only: probed there it is healthy; probed at 127.0.0.1 it is not."""
    import http.server
    import threading

    from reference.borglet.health import probe

    server = http.server.HTTPServer(("127.0.0.2", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert probe(port, "/", 2.0, "127.0.0.2") is True
        assert probe(port, "/", 2.0, "127.0.0.1") is False
    finally:
        server.shutdown()
