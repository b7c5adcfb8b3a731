"""Hollow machines: simulated start, finish and kill on an injected clock, the real borglet's fencing, and the hollow server's routes and channel checks."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from reference import channel
from reference.borglet.core import SyncRefused
from reference.borglet.hollow import (
    HollowConfig,
    HollowMachine,
    machine_names,
    simulated_usage,
    sleep_seconds,
)
from reference.borglet.hollow_server import HollowApp
from reference.borglet.protocol import Request, SyncRequest


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spec(
    tid: str, command: list[str] | None = None, index: int = 0, **extra: Any
) -> dict[str, Any]:
    return {
        "task_id": tid, "job": "a/j", "index": index, "command": command or ["server"],
        "request": {"cpu": 1000, "ram": 4096}, **extra,
    }  # fmt: skip


def request(
    seq: int, *tasks: dict[str, Any], epoch: int = 1, revision: int = 0, **extra: Any
) -> SyncRequest:
    body = {"master": "m", "epoch": epoch, "seq": seq, "revision": revision, **extra}
    if "delta" not in extra:
        body["tasks"] = list(tasks)
    return SyncRequest.model_validate(body)


def make(delay: float = 0.1) -> tuple[HollowMachine, Clock]:
    clock = Clock()
    return HollowMachine(
        HollowConfig("hollow0000", {"cpu": 4000}, {"hollow": "true"}, "", delay), clock
    ), clock


def states(machine: HollowMachine) -> dict[str, str]:
    return {t["task_id"]: t["state"] for t in machine.report()["tasks"]}


@pytest.mark.parametrize(
    ("command", "want"),
    [
        (["/bin/sleep", "5"], 5.0),
        (["sleep", "0.5"], 0.5),
        (["sleep 3"], 3.0),
        (["sleep", "forever"], None),  # not a number: runs until removed
        (["sleep", "-1"], None),
        (["python", "-m", "server"], None),
        (["/bin/sleep", "1", "2"], None),
    ],
)
def test_sleep_seconds(command, want) -> None:
    assert sleep_seconds(command) == want


def test_simulated_usage_is_half_the_cpu_and_all_the_ram() -> None:
    # 1000m * 0.5 = 500m; 333m * 0.5 = 166.5 -> 166m
    assert simulated_usage(Request(cpu=1000, ram=2**20)) == (500, 2**20)
    assert simulated_usage(Request(cpu=333, ram=0)) == (166, 0)


def test_machine_names_sort_and_never_look_like_real_ones() -> None:
    assert machine_names(3) == ["hollow0000", "hollow0001", "hollow0002"]
    names = machine_names(10_001)
    assert names[-1] == "hollow10000" and len(set(names)) == 10_001
    assert names == sorted(names)


def test_a_task_runs_after_the_start_delay_with_pid_0_and_usage() -> None:
    machine, clock = make(delay=0.5)
    report = machine.sync(request(1, spec("t@1")))
    assert [t["state"] for t in report["tasks"]] == ["QUEUED"]
    clock.now += 0.4
    assert states(machine) == {"t@1": "QUEUED"}
    clock.now += 0.1
    (task,) = machine.report()["tasks"]
    assert (task["state"], task["pid"], task["phase"]) == ("RUNNING", 0, "running")
    assert task["started_at"] == 1000.5  # the moment the delay ended, not the moment it was read
    assert task["usage"] == {"cpu_milli": 500, "ram_bytes": 4096}
    assert machine.report()["usage"] == {"cpu_milli": 500, "ram_bytes": 4096}
    assert machine.report()["isolation"] == "hollow"


def test_a_sleep_task_finishes_after_its_seconds_of_running() -> None:
    machine, clock = make(delay=0.1)
    machine.sync(request(1, spec("s@1", ["/bin/sleep", "2"]), spec("r@1", ["server"], index=1)))
    clock.now += 2.0  # started at +0.1: still 0.1 s to run
    assert states(machine) == {"s@1": "RUNNING", "r@1": "RUNNING"}
    clock.now += 0.1
    assert states(machine) == {"s@1": "FINISHED", "r@1": "RUNNING"}
    finished = machine.report()["tasks"][0]
    assert (finished["exit_code"], finished["pid"], finished["usage"]["cpu_milli"]) == (0, None, 0)
    clock.now += 3600
    assert states(machine)["r@1"] == "RUNNING"  # any other command runs until removed


def test_a_sleep_task_with_restart_always_restarts_after_a_backoff() -> None:
    machine, clock = make(delay=0.0)
    machine.sync(request(1, spec("s@1", ["sleep", "1"], restart_policy="always")))
    clock.now += 1.0
    (task,) = machine.report()["tasks"]
    assert (task["state"], task["restarts"]) == ("STARTING", 0)
    clock.now += 0.1  # decisions.backoff_delay(0) = 0.1 s
    (task,) = machine.report()["tasks"]
    assert (task["state"], task["restarts"], task["started_at"]) == ("RUNNING", 1, 1001.1)
    assert machine.starts["s@1"] == 1  # a restart in place is not a second start of the id


def test_a_removed_task_is_killed_at_once_then_forgotten_as_on_a_borglet() -> None:
    machine, clock = make()
    machine.sync(request(1, spec("t@1"), spec("q@1", index=1), revision=5))
    clock.now += 1
    clock_queued = machine.sync(
        request(2, spec("t@1"), spec("q@1", index=1), spec("new@1", index=2), revision=6)
    )
    assert {t["task_id"]: t["state"] for t in clock_queued["tasks"]}["new@1"] == "QUEUED"
    report = machine.sync(request(3, revision=7))
    by_id = {t["task_id"]: t for t in report["tasks"]}
    assert {tid: (t["state"], t["reason"]) for tid, t in by_id.items()} == {
        "t@1": ("KILLED", "not_desired"),
        "q@1": ("KILLED", "not_desired"),
        "new@1": ("KILLED", "not_desired"),  # killed before it started
    }
    assert all(t["pid"] is None and t["usage"]["cpu_milli"] == 0 for t in by_id.values())
    clock.now += 1
    assert states(machine)["new@1"] == "KILLED"  # never starts later
    # The next sync forgets them; a tombstone keeps each id from starting again.
    assert machine.sync(request(4, revision=8))["tasks"] == []
    again = machine.sync(request(5, spec("t@1"), revision=8))
    assert [(t["task_id"], t["state"]) for t in again["tasks"]] == [("t@1", "KILLED")]
    assert machine.starts == {"t@1": 1, "q@1": 1}


def test_refusals_are_the_borglets_and_change_nothing() -> None:
    machine, _ = make()
    machine.sync(request(5, spec("t@1"), epoch=2, revision=100))
    for bad, reason in [
        (request(5, epoch=2, revision=100), "stale_seq"),
        (request(9, epoch=1, revision=200), "stale_epoch"),
        (request(1, epoch=3, revision=99), "stale_revision"),
        (
            request(6, epoch=2, revision=100, delta={"base_seq": 4, "add": [], "remove": ["t@1"]}),
            "need_full",
        ),
    ]:
        with pytest.raises(SyncRefused) as refused:
            machine.sync(bad)
        assert refused.value.reason == reason
    assert (machine.fence.epoch, machine.fence.seq, machine.fence.revision) == (2, 5, 100)
    assert list(states(machine)) == ["t@1"] and machine.refused["stale_seq"] == 1


def test_a_delta_on_the_last_sync_applies() -> None:
    machine, _ = make()
    machine.sync(request(1, spec("a@1"), spec("b@1", index=1)))
    report = machine.sync(
        request(2, delta={"base_seq": 1, "add": [spec("c@1", index=2)], "remove": ["a@1"]})
    )
    assert {t["task_id"]: t["state"] for t in report["tasks"]} == {
        "a@1": "KILLED", "b@1": "QUEUED", "c@1": "QUEUED",
    }  # fmt: skip


def test_a_fresh_machine_refuses_a_delta() -> None:
    machine, _ = make()
    with pytest.raises(SyncRefused) as refused:
        machine.sync(request(1, delta={"base_seq": 0, "add": [], "remove": []}))
    assert refused.value.reason == "need_full"


# --- the server's routes -------------------------------------------------------------------


def app() -> tuple[HollowApp, Clock]:
    machine, clock = make()
    return HollowApp({"hollow0000": machine}), clock


def test_sync_and_state_under_the_machines_prefix() -> None:
    server, clock = app()
    body = json.dumps({"epoch": 1, "seq": 1, "tasks": [spec("t@1")]}).encode()
    status, report = server.handle("POST", "/m/hollow0000/v1/sync", body)
    assert status == 200 and report["machine"] == "hollow0000"
    clock.now += 1
    status, report = server.handle("GET", "/m/hollow0000/v1/state", b"")
    assert status == 200 and report["tasks"][0]["state"] == "RUNNING"
    assert server.handle("GET", "/v1/hollow", b"")[1] == {
        "machines": 1, "running": {"hollow0000": ["t@1"]}, "started_twice": [],
    }  # fmt: skip


def test_a_refused_sync_is_409_with_its_reason() -> None:
    server, _ = app()
    body = json.dumps({"epoch": 1, "seq": 1}).encode()
    server.handle("POST", "/m/hollow0000/v1/sync", body)
    status, answer = server.handle("POST", "/m/hollow0000/v1/sync", body)
    assert status == 409
    assert (answer["reason"], answer["seq"], answer["machine"]) == ("stale_seq", 1, "hollow0000")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"", "body"),
        (b"not json", "body"),
        (json.dumps({"seq": "x"}).encode(), "seq"),
        (json.dumps({"tasks": [{"task_id": "t", "command": []}]}).encode(), "tasks.0.command"),
    ],
)
def test_a_bad_sync_is_422_naming_the_field(body, field) -> None:
    server, _ = app()
    status, answer = server.handle("POST", "/m/hollow0000/v1/sync", body)
    assert status == 422
    assert answer["detail"][0]["field"] == field


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/m/machine0/v1/state"),
        ("GET", "/m/hollow0000/v1/nothing"),
        ("GET", "/v1/state"),
        ("GET", "/m/"),
    ],
)
def test_unknown_paths_are_404(method, path) -> None:
    server, _ = app()
    status, answer = server.handle(method, path, b"")
    assert status == 404 and answer["detail"][0]["field"] == "path"


# --- the channel: each machine obeys only requests signed for it -------------------------------

KEY = bytes(range(32))


def signed_server(key: bytes | None = KEY) -> tuple[HollowApp, TestClient]:
    one, _ = make()
    other = HollowMachine(HollowConfig("hollow0001", {"cpu": 4000}))
    server = HollowApp({"hollow0000": one, "hollow0001": other}, channel_key=key)
    return server, TestClient(server)


SYNC = {"master": "m", "epoch": 1, "seq": 1, "tasks": [spec("t@1")]}


def test_a_request_signed_for_the_machine_is_obeyed() -> None:
    server, http = signed_server()
    auth = channel.ClientAuth(KEY)
    answer = http.post("/m/hollow0000/v1/sync", json=SYNC, headers=channel.to_machine("hollow0000"), auth=auth)
    assert answer.status_code == 200 and answer.json()["fence"]["seq"] == 1
    assert http.get("/m/hollow0000/v1/state", headers=channel.to_machine("hollow0000"), auth=auth).status_code == 200
    assert server.refused == 0


@pytest.mark.parametrize(
    ("key", "machine", "field"),
    [
        (None, "hollow0000", channel.SIGNATURE_HEADER),  # unsigned
        (bytes(range(1, 33)), "hollow0000", channel.SIGNATURE_HEADER),  # forged: another cell's key
        (KEY, "hollow0001", channel.MACHINE_HEADER),  # the cell's key, but signed for another machine
    ],
)
def test_an_unsigned_forged_or_other_machines_request_is_401_and_changes_nothing(key, machine, field) -> None:
    server, http = signed_server()
    auth = channel.ClientAuth(key) if key is not None else None
    for method, path in (("POST", "/m/hollow0000/v1/sync"), ("GET", "/m/hollow0000/v1/state")):
        answer = http.request(
            method, path, json=SYNC if method == "POST" else None, headers=channel.to_machine(machine), auth=auth
        )
        assert answer.status_code == 401, (method, answer.text)
        assert answer.json()["detail"][0]["field"] == field
    assert server.machines["hollow0000"].fence.seq == 0 and not server.machines["hollow0000"].tasks
    assert server.refused == 2


def test_a_signed_request_altered_on_the_way_is_refused() -> None:
    server, http = signed_server()
    headers = channel.sign(KEY, "POST", b"/m/hollow0000/v1/sync", b"{}", "hollow0000", time.time())
    answer = http.post("/m/hollow0000/v1/sync", content=json.dumps(SYNC).encode(), headers=headers)
    assert answer.status_code == 401 and answer.json()["detail"][0]["field"] == channel.SIGNATURE_HEADER
    assert server.machines["hollow0000"].fence.seq == 0


def test_health_and_the_servers_own_reads_stay_open() -> None:
    _, http = signed_server()
    for path in ("/healthz", "/v1/hollow", "/v1/hollow/jobs", "/m/hollow0000/healthz"):
        assert http.get(path).status_code == 200, path
    assert http.get("/m/nosuch/v1/state").status_code == 404


def test_without_a_key_every_request_is_obeyed() -> None:
    server, http = signed_server(key=None)
    assert http.post("/m/hollow0000/v1/sync", json=SYNC).status_code == 200
    assert http.get("/m/hollow0000/v1/state").status_code == 200
    assert server.machines["hollow0000"].fence.seq == 1


# --- how a cell registers them ------------------------------------------------------------


def test_hollow_addresses_are_paths_under_the_serving_process() -> None:
    from reference.launcher.roles import hollow_addresses, is_hollow
    from reference.master.machines import MachineBody

    addresses = hollow_addresses("http://127.0.0.1:7000", 2)
    assert addresses == {
        "hollow0000": "http://127.0.0.1:7000/m/hollow0000",
        "hollow0001": "http://127.0.0.1:7000/m/hollow0001",
    }
    assert all(is_hollow(a) for a in addresses.values())
    assert not is_hollow("http://127.0.0.1:7001") and not is_hollow("http://127.0.0.1:7001/")
    # The master accepts an address with a path, and still refuses one with spaces or a query.
    MachineBody(name="hollow0000", address=addresses["hollow0000"], capacity="cpu=1,ram=1GiB")
    for bad in ("http://h:1/m/a b", "http://h:1/m?x=1", "ftp://h:1"):
        with pytest.raises(ValueError):
            MachineBody(name="x", address=bad, capacity="cpu=1,ram=1GiB")


def test_a_cells_processes_get_the_key_unless_it_is_started_unsigned(tmp_path) -> None:
    from reference.launcher.roles import channel_args

    key = str(tmp_path / channel.KEY_FILE)
    assert channel_args(tmp_path, True, borglet=True) == channel_args(tmp_path, True, borglet=False) == [
        "--channel-key-file", key,
    ]  # fmt: skip
    assert channel_args(tmp_path, False, borglet=True) == ["--insecure-channel"]
    assert channel_args(tmp_path, False, borglet=False) == []


def test_jobs_counts_each_running_index_once_and_names_indices_running_twice() -> None:
    clock = Clock()
    machines = {
        name: HollowMachine(HollowConfig(name, {"cpu": 4000}, {"hollow": "true"}, "", 0.1), clock)
        for name in ("hollow0000", "hollow0001")
    }
    server = HollowApp(machines)
    # index 0: incarnation 0 still runs on one machine while incarnation 1 runs on the other
    server.handle("POST", "/m/hollow0000/v1/sync", json.dumps({"epoch": 1, "seq": 1, "tasks": [
        spec("a/j/0#0@1", index=0), spec("a/j/1#0@1", index=1)]}).encode())  # fmt: skip
    server.handle("POST", "/m/hollow0001/v1/sync", json.dumps({"epoch": 1, "seq": 1, "tasks": [
        spec("a/j/0#1@1", index=0)]}).encode())  # fmt: skip
    clock.now += 1
    status, seen = server.handle("GET", "/v1/hollow/jobs", b"")
    assert status == 200
    assert seen["jobs"]["a/j"]["running"] == 2  # indices 0 and 1, not three processes
    assert seen["index_twice"] == 1 and seen["started_twice"] == 0


def test_jobs_give_the_first_and_the_last_start_of_each_job() -> None:
    clock = Clock()
    machine = HollowMachine(HollowConfig("hollow0000", {"cpu": 4000}, {"hollow": "true"}, "", 0.1), clock)
    server = HollowApp({"hollow0000": machine})
    server.handle("POST", "/m/hollow0000/v1/sync", json.dumps({"epoch": 1, "seq": 1, "tasks": [
        spec("a/j/0#0@1", index=0)]}).encode())  # fmt: skip
    clock.now += 5
    server.handle("POST", "/m/hollow0000/v1/sync", json.dumps({"epoch": 1, "seq": 2, "tasks": [
        spec("a/j/0#0@1", index=0), spec("a/j/1#0@1", index=1)]}).encode())  # fmt: skip
    clock.now += 1
    _, seen = server.handle("GET", "/v1/hollow/jobs", b"")
    job = seen["jobs"]["a/j"]
    assert job["running"] == 2
    assert job["last_started_at"] - job["first_started_at"] >= 4.9
