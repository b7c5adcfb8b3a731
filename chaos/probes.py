"""Chaos Toolkit probes (python providers): steady state, failover timing, fencing, task placement."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any

import httpx

from chaos import cellfile, checker, events, fence, jobs, load
from chaos.events import run_dir
from chaos.history import HistoryFile, Outcome, read_ops
from reference.launcher import CellInfo, Role, ask_leader, is_alive
from reference.waiting import wait_until
from spec.taskid import by_index, running_twice

HELLO_JOB = "demo/hello_world"


def _client_get(info: CellInfo, path: str, timeout: float = 1.0) -> httpx.Response | None:
    """GET through the client proxies, trying each master once."""
    with httpx.Client(timeout=timeout, headers=cellfile.admin_headers(info)) as http:
        for url in info.master_urls:
            try:
                response = http.get(url + path)
            except httpx.HTTPError:
                continue
            if response.status_code < 500:
                return response
    return None


# --- steady state ---------------------------------------------------------------------------


def api_answers(state_dir: str, within_s: float = 20.0) -> bool:
    """The API answers /v1/cell and names a leader (launcher.ask_leader, through the client proxies)."""
    info = cellfile.load(state_dir)
    with httpx.Client(timeout=1.0, headers=cellfile.admin_headers(info)) as http:
        try:
            return wait_until(
                lambda: ask_leader(http, info.master_urls) is not None, within_s, "the API to name a leader", 0.5
            )
        except TimeoutError:
            return False


def hello_world_answers(state_dir: str, within_s: float = 30.0) -> bool:
    """Every hello_world task resolves through BNS and answers."""
    info = cellfile.load(state_dir)

    def ok() -> bool:
        for index in range(3):
            response = _client_get(info, f"/v1/bns/{index}.hello_world.demo.{info.cell}.minborg")
            if response is None or response.status_code != 200:
                return False
            target = response.json()
            try:
                if (
                    httpx.get(f"http://{target['host']}:{target['port']}/", timeout=1.0).status_code
                    != 200
                ):
                    return False
            except httpx.HTTPError:
                return False
        return True

    try:
        return wait_until(ok, within_s, "every hello_world task to answer", 0.5)
    except TimeoutError:
        return False


def no_acknowledged_write_lost(state_dir: str, run: str) -> bool:
    """Stop the load, read every key back from the leader, and judge the history."""
    root = run_dir(run)
    history = root / "history.jsonl"
    if not history.exists():
        return True  # before the method: no load has run yet
    load.stop(run)
    info = cellfile.load(state_dir)
    keys = sorted({op.key for op in read_ops(history)})
    writer = HistoryFile(history)
    # Reads from here on are the final reads: the load is over and the cell healed.
    (root / "final.json").write_text(json.dumps({"t": time.time(), "keys": len(keys)}))
    for key in keys:
        _final_read(info, writer, key)
    verdict = checker.check_file(history)
    (root / "check.json").write_text(json.dumps(asdict(verdict), indent=2, default=str))
    return verdict.ok


def _final_read(info: CellInfo, writer: HistoryFile, key: str) -> None:
    """A read of `key` from the leader (whose cache holds every committed write), retried."""
    op = writer.invoke("read", key, None)
    for _ in range(60):
        leader = cellfile.leader(info)
        if leader is not None:
            try:
                response = httpx.get(
                    f"{leader.record.url}/v1/jobs/{key}", timeout=2.0, headers=cellfile.admin_headers(info)
                )
            except httpx.HTTPError:
                response = None
            if response is not None and response.status_code == 404:
                writer.complete(op, Outcome.OK, None)
                return
            if response is not None and response.status_code == 200:
                writer.complete(
                    op, Outcome.OK, {"cpu": jobs.register_value(response.json()["job"])}
                )
                return
        time.sleep(0.5)
    writer.complete(op, Outcome.FAILED, {"error": "no leader answered"})


# --- failover -----------------------------------------------------------------------------


def new_leader_within(state_dir: str, run: str, within_s: float = 15.0) -> float:
    """Seconds from the last fault's start until a master other than the old leader leads."""
    info = cellfile.load(state_dir)
    start = events.last_start(events.read(run_dir(run)))
    if start is None:
        raise RuntimeError("no fault was started")
    old = start.get("master")
    try:
        found = wait_until(lambda: cellfile.leader(info, not_named=old), within_s, "a new leader", 0.1)
    except TimeoutError:
        raise AssertionError(f"no new leader within {within_s}s of {events.fault_kind(start)}") from None
    seconds = time.time() - start["t"]
    events.record(
        "measure", run, name="failover_s", fault=events.fault_kind(start), value=seconds, leader=found.name
    )
    return seconds


def old_leader_steps_down_within(state_dir: str, run: str, within_s: float = 5.0) -> float:
    """The leader cut from etcd stops claiming leadership (its /healthz, through
    launcher.ask_leader) within its lease: it answers, and not that it leads (no answer is no
    step-down)."""
    cut = json.loads((run_dir(run) / "cut.json").read_text())

    def follower(http: httpx.Client) -> bool:
        heard: list[str] = []
        return ask_leader(http, [cut["url"]], itself=True, timeout=0.5, heard=heard) is None and bool(heard)

    with httpx.Client() as http:
        try:
            wait_until(lambda: follower(http), within_s, "the cut leader to follow", 0.05)
        except TimeoutError:
            raise AssertionError(f"{cut['master']} still claims to lead {within_s}s after the cut") from None
    seconds = time.time() - cut["at"]
    events.record("measure", run, name="step_down_s", value=seconds, master=cut["master"])
    return seconds


def fencing_held(state_dir: str, run: str) -> dict[str, Any]:
    """No write of the cut leader landed after the new election: its committed-txn count did
    not move since the cut, and etcd refuses a txn fenced by its old token."""
    info = cellfile.load(state_dir)
    cut = json.loads((run_dir(run) / "cut.json").read_text())
    now = fence.leader_key(info)
    committed = fence.committed_txns(cut["url"])
    result = {
        "old_token": cut["token"], "new_token": now[1] if now else None,
        "new_leader": now[0].split("=")[0] if now else None,
        "committed_at_cut": cut["committed_at_cut"], "committed_now": committed,
        "old_token_refused": fence.old_token_refused(info, cut["leader_value"], cut["token"]),
    }  # fmt: skip
    events.record("measure", run, name="fencing", **result)
    if result["new_token"] == cut["token"]:
        raise AssertionError(f"the leader key still carries the old token: {result}")
    if committed != cut["committed_at_cut"] or not result["old_token_refused"]:
        raise AssertionError(f"a write of the old leader may have landed: {result}")
    return result


# --- machines and tasks -----------------------------------------------------------------------


def no_machine_down_for(state_dir: str, seconds: float = 20.0) -> int:
    """Sample /v1/machines for `seconds`: no machine may be declared down meanwhile."""
    info = cellfile.load(state_dir)
    end, samples = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        response = _client_get(info, "/v1/machines", timeout=2.0)
        if response is not None and response.status_code == 200:
            down = [m["name"] for m in response.json()["machines"] if m["state"] != "up"]
            if down:
                raise AssertionError(f"machines declared down under latency: {down}")
            samples += 1
        time.sleep(0.5)
    return samples


def tasks_moved_off_within(state_dir: str, run: str, within_s: float = 20.0) -> float:
    """Every hello_world task runs, per the API, on a machine other than the cut one."""
    info = cellfile.load(state_dir)
    machine = json.loads((run_dir(run) / "borglet_cut.json").read_text())["machine"]
    start = events.last_start(events.read(run_dir(run)), "cut_borglet")

    def moved() -> bool:
        response = _client_get(info, f"/v1/jobs/{HELLO_JOB}/tasks")
        if response is None or response.status_code != 200:
            return False
        tasks = response.json()["tasks"]
        return len(tasks) == 3 and all(
            t["state"] == "RUNNING" and t["machine"] != machine for t in tasks
        )

    try:
        wait_until(moved, within_s, f"the tasks to move off {machine}", 0.25)
    except TimeoutError:
        raise AssertionError(f"hello_world tasks not rescheduled off {machine} within {within_s}s") from None
    seconds = time.time() - (start["t"] if start else time.time())
    events.record("measure", run, name="reschedule_s", value=seconds, machine=machine)
    return seconds


def no_double_running_within(state_dir: str, run: str, within_s: float = 20.0) -> float:
    """After the machine returns, each task runs on exactly one borglet (duplicates killed)."""
    info = cellfile.load(state_dir)
    began = time.time()

    def single() -> bool:
        ids = cellfile.live_task_ids(info, HELLO_JOB + "/")
        return len(by_index(ids)) == 3 and not running_twice(ids)

    try:
        wait_until(single, within_s, "one copy of each task", 0.25)
    except TimeoutError:
        raise AssertionError(
            f"hello_world copies after {within_s}s: {by_index(cellfile.live_task_ids(info, HELLO_JOB + '/'))}"
        ) from None
    seconds = time.time() - began
    events.record("measure", run, name="duplicates_killed_s", value=seconds)
    return seconds


def tasks_restarted_within(state_dir: str, run: str, within_s: float = 20.0) -> float:
    """The killed task processes were replaced by new ones on their borglets and answer."""
    info = cellfile.load(state_dir)
    killed = set(json.loads((run_dir(run) / "tasks_killed.json").read_text()))
    start = events.last_start(events.read(run_dir(run)), "kill_task_process")

    def restarted() -> bool:
        pids = []
        for machine in info.borglet_urls:
            state = cellfile.borglet_state(info, machine)
            if state is None:
                return False
            pids += [t["pid"] for t in state["tasks"]
                     if t["task_id"].startswith(HELLO_JOB + "/") and t["state"] == "RUNNING" and t["healthy"]]  # fmt: skip
        return len(pids) == 3 and not killed & set(pids)

    try:
        wait_until(restarted, within_s, "the killed tasks to be replaced", 0.2)
    except TimeoutError:
        raise AssertionError(f"hello_world tasks not restarted within {within_s}s") from None
    seconds = time.time() - (start["t"] if start else time.time())
    events.record("measure", run, name="task_restart_s", value=seconds)
    events.record("fault-end", run, fault="kill_task_process")
    return seconds


# --- etcd quorum --------------------------------------------------------------------------------


def _write(info: CellInfo, key: str, value: int, retry_s: float) -> int:
    """One register write through the client proxies; returns the final HTTP status (0: none)."""
    status, end = 0, time.monotonic() + retry_s
    body = jobs.register_patch(value)
    with httpx.Client(timeout=3.0, headers=cellfile.admin_headers(info)) as http:
        while True:
            for url in info.master_urls:
                try:
                    status = http.patch(f"{url}/v1/jobs/{key}", json=body).status_code
                except httpx.HTTPError:
                    continue
                if status != 503:
                    return status
            if time.monotonic() >= end:
                return status
            time.sleep(0.2)


def writes_succeed_for(state_dir: str, seconds: float = 8.0) -> int:
    """Writes keep succeeding (with the client's usual failover retry) for `seconds`."""
    info = cellfile.load(state_dir)
    _ensure_probe_job(info)
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += 1
        status = _write(info, "chaos/probe", n % 900 + 1, retry_s=5.0)
        if status != 200:
            raise AssertionError(f"a write failed with a minority of etcd down: HTTP {status}")
        time.sleep(0.3)
    return n


def writes_refused_reads_served(state_dir: str, within_s: float = 15.0) -> dict[str, Any]:
    """Majority of etcd down: writes answer 503; reads that accept staleness answer from the
    watch cache (stamped with the revision they reflect) while plain reads are refused, since
    no replica can vouch for its cache; running tasks serve."""
    info = cellfile.load(state_dir)
    try:
        refused = wait_until(lambda: _write(info, "chaos/probe", 7, retry_s=0.0) == 503, within_s, "a write refused", 0.5)
    except TimeoutError:
        refused = False
    read = _client_get(info, f"/v1/jobs/{HELLO_JOB}?allow_stale=true")
    result = {"write_503": refused, "stale_read_status": read.status_code if read else None,
              "hello": hello_world_answers(state_dir, within_s=5.0)}  # fmt: skip
    if not (result["write_503"] and result["stale_read_status"] == 200 and result["hello"]):
        raise AssertionError(f"with a majority of etcd down: {result}")
    return result


def writes_recover_within(state_dir: str, run: str, within_s: float = 30.0) -> float:
    info = cellfile.load(state_dir)
    began = time.time()
    try:
        wait_until(lambda: _write(info, "chaos/probe", 9, retry_s=0.0) == 200, within_s, "a write to succeed", 0.5)
    except TimeoutError:
        raise AssertionError(f"writes did not recover within {within_s}s of etcd's return") from None
    seconds = time.time() - began
    events.record("measure", run, name="write_recovery_s", value=seconds)
    return seconds


def _ensure_probe_job(info: CellInfo) -> None:
    with httpx.Client(timeout=3.0, headers=cellfile.admin_headers(info)) as http:
        for url in info.master_urls:
            try:
                status = http.post(url + "/v1/jobs", json=jobs.register_job("probe", 1)).status_code
            except httpx.HTTPError:
                continue
            if status in (201, 409):
                return


def masters_alive(state_dir: str) -> bool:
    info = cellfile.load(state_dir)
    return all(is_alive(r) for r in info.of_role(Role.MASTER))
