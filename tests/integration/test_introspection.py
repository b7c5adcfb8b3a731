"""Introspection of a live cell: task logs (tail, follow across restarts), typed events for
each way a task ends, pending reasons, and watches resumed from a revision."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reference.borglet import cgroups
from reference.client import CellClient, ClientError
from tests.integration.cellkit import REPO, TASK_PYTHON, LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

CGROUPS = cgroups.CgroupTree("probe-introspection").usable() is None


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = LocalCell(
        tmp_path_factory.mktemp("cell"), masters=1, borglets=2, poll_interval=0.3,
        isolation="auto" if CGROUPS else "rlimit",
    )  # fmt: skip
    with c:
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


@pytest.fixture(scope="module")
def api(cell: LocalCell) -> Iterator[CellClient]:
    with CellClient([m.url for m in cell.masters], retry_s=15, token=cell.admin_token) as client:
        yield client


def py_job(name: str, code: str, **extra: object) -> dict:
    extra.setdefault("restart_policy", "never")
    # Enough CPU for Python to start quickly under a cgroup's CPU quota.
    extra.setdefault("request", {"cpu": "500m", "ram": "64MiB"})
    return sleeper_job(name, user="ivy", command=[TASK_PYTHON, "-c", code], **extra)


def kinds(task: dict) -> list[str]:
    return [e["kind"] for e in task["events"]]


def dead(api: CellClient, key: str, index: int = 0) -> dict | None:
    task = api.task(key, index)
    return task if task["state"] == "DEAD" else None


def test_a_task_that_exits_3_has_both_streams_and_an_exit_event(cell: LocalCell, api: CellClient) -> None:
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)"
    assert cell.submit(py_job("exit3", code)).status_code == 201
    task = wait_for(lambda: dead(api, "ivy/exit3"), 20, "the task to die")
    assert task["cause"] == "failed"
    assert kinds(task)[:2] == ["submitted", "scheduled"] and kinds(task)[-1] == "exited", task["events"]
    assert task["events"][-1]["detail"] == "exit code 3"
    assert task["last_machine"] in ("b0", "b1") and task["machine"] is None
    assert api.logs("ivy/exit3", 0) == b"to stdout\n"
    assert api.logs("ivy/exit3", 0, stream="stderr") == b"to stderr\n"
    with pytest.raises(ClientError) as refused:
        api.logs("ivy/exit3", 0, stream="both")
    assert refused.value.status == 422 and "stream" in str(refused.value)


def test_a_task_that_cannot_spawn_says_why(cell: LocalCell, api: CellClient) -> None:
    job = sleeper_job("nospawn", user="ivy", command=["/nonexistent/program"], restart_policy="never")
    assert cell.submit(job).status_code == 201
    task = wait_for(lambda: dead(api, "ivy/nospawn"), 20, "the task to die")
    last = task["events"][-1]
    assert last["kind"] == "spawn_failed" and "/nonexistent/program" in last["detail"], task["events"]
    assert api.logs("ivy/nospawn", 0) == b""  # its files exist, empty: it wrote nothing


@pytest.mark.skipif(not CGROUPS, reason="cgroup v1 hierarchies are not writable here: no memory limit to hit")
def test_an_oom_killed_task_has_an_oom_event(cell: LocalCell, api: CellClient) -> None:
    code = "import sys, time; print('growing', flush=True); x = bytearray(400 * 2**20); time.sleep(30)"
    assert cell.submit(py_job("hog", code, request={"cpu": "100m", "ram": "64MiB"})).status_code == 201
    task = wait_for(lambda: dead(api, "ivy/hog"), 30, "the task to be OOM-killed")
    assert task["events"][-1]["kind"] == "oom", task["events"]
    assert api.logs("ivy/hog", 0) == b"growing\n"


def test_an_evicted_task_names_its_preemptor_and_a_pending_one_why(cell: LocalCell, api: CellClient) -> None:
    # Two batch tasks take 3 of the 4 CPUs of each machine; a production task of 2 CPUs
    # preempts one of them, which goes back to PENDING and finds no room anywhere.
    batch = sleeper_job("filler", user="ivy", count=2, priority=100, request={"cpu": "3000m", "ram": "16MiB"})
    assert cell.submit(batch).status_code == 201
    wait_for(lambda: cell.running("ivy", "filler", 2), 20, "both fillers to run")
    prod = sleeper_job("vip", user="ivy", priority=300, request={"cpu": "2000m", "ram": "16MiB"})
    assert cell.submit(prod).status_code == 201
    wait_for(lambda: cell.running("ivy", "vip", 1), 20, "the production task to run")
    victim = wait_for(
        lambda: next((t for t in api.tasks("ivy/filler") if "evicted" in kinds(t)), None), 10, "an eviction"
    )
    evicted = next(e for e in victim["events"] if e["kind"] == "evicted")
    assert "preempted by ivy/vip/0#0" in evicted["detail"], victim["events"]
    pending = wait_for(
        lambda: (t := api.task("ivy/filler", victim["index"]))["pending_reason"] and t, 15, "a pending reason"
    )
    assert pending["state"] == "PENDING" and pending["pending_reason"].startswith("0 of 2 machines fit: ")
    assert "cpu" in pending["pending_reason"]
    job = api.job("ivy/filler")
    assert job["pending"] and job["pending"][0]["indices"] == [victim["index"]]
    # Its logs are still those of the placement it was evicted from.
    assert api.logs("ivy/filler", victim["index"]) == b""
    api.kill("ivy/vip")
    api.kill("ivy/filler")


def test_logs_of_a_task_that_never_started_are_a_404_naming_why(cell: LocalCell, api: CellClient) -> None:
    job = sleeper_job("nowhere", user="ivy", constraints=[{"attr": "rack", "op": "eq", "value": "r9"}])
    assert cell.submit(job).status_code == 201
    task = wait_for(lambda: (t := api.task("ivy/nowhere", 0))["pending_reason"] and t, 15, "a pending reason")
    assert "rack" in task["pending_reason"]
    with pytest.raises(ClientError) as missing:
        api.logs("ivy/nowhere", 0)
    assert missing.value.status == 404
    assert "never started" in str(missing.value) and "rack" in str(missing.value)
    api.kill("ivy/nowhere")


def test_follow_streams_across_restarts_in_place(cell: LocalCell, api: CellClient) -> None:
    code = "import os, time; print('run', os.getpid(), flush=True); time.sleep(0.5); raise SystemExit(1)"
    assert cell.submit(py_job("ticker", code, restart_policy="on_failure")).status_code == 201
    wait_for(lambda: "started" in kinds(api.task("ivy/ticker", 0)), 15, "a first start")
    params = {"stream": "stdout", "tail": 0, "follow": "true", "max_s": 6}
    started = time.monotonic()
    text = b"".join(api.stream("/v1/jobs/ivy/ticker/tasks/0/logs", params, max_s=6)).decode()
    assert time.monotonic() - started < 12  # bounded in time
    # Restarts in place back off 0.1, 0.2, 0.4, 0.8 s...: several runs within the 6 s.
    runs = {line for line in text.splitlines() if line.startswith("run ")}
    assert len(runs) >= 2, text  # lines of two processes of the same incarnation, in one stream
    task = api.task("ivy/ticker", 0)
    assert task["restarts"] >= 2 and "restarted" in kinds(task), task["events"]
    api.kill("ivy/ticker")


def test_logs_and_events_through_the_cli(cell: LocalCell, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from reference.cli.app import app

    master = cell.masters[0].url
    token = ["--token", cell.admin_token]
    shown = CliRunner().invoke(app, [*token, "task", "show", "ivy/exit3", "0", "--master", master])
    assert shown.exit_code == 0, shown.output
    assert "exit code 3" in shown.output and "scheduled" in shown.output
    logs = CliRunner().invoke(app, [*token, "task", "logs", "ivy/exit3", "0", "--stderr", "--master", master])
    assert logs.exit_code == 0 and logs.output == "to stderr\n"


def test_a_watch_resumed_from_a_revision_misses_nothing(cell: LocalCell, api: CellClient) -> None:
    r0 = int(api.send("GET", "/v1/jobs").json()["revision"])
    for name in ("w1", "w2"):
        assert cell.submit(py_job(name, "import sys; sys.exit(3)")).status_code == 201
    wait_for(lambda: dead(api, "ivy/w1"), 20, "w1 to die")
    api.kill("ivy/w1")
    seen = [
        (m.event, m.data["job"]["name"], m.revision)
        for m in api.watch("/v1/jobs", since=r0, timeout_s=2, user="ivy")
        if m.event != "bookmark"
    ]
    names = [(e, n) for e, n, _ in seen]
    assert names[0] == ("ADDED", "w1") and ("ADDED", "w2") in names and names[-1] == ("DELETED", "w1"), seen
    assert [r for *_, r in seen] == sorted(r for *_, r in seen)
    # Resumed from the revision of the second message: exactly what came after it.
    resumed = [
        (m.event, m.data["job"]["name"])
        for m in api.watch("/v1/jobs", since=seen[1][2], timeout_s=1, user="ivy")
        if m.event != "bookmark"
    ]
    assert resumed == names[2:], (resumed, names)
    # The cell's event stream replays the task events of that time too.
    stream = api.watch("/v1/events", since=r0, timeout_s=1, job="ivy/w2")
    kinds_seen = [(m.event, m.data["kind"]) for m in stream if m.event != "bookmark"]
    assert ("job", "submitted") in kinds_seen
    assert {("task", "submitted"), ("task", "scheduled"), ("task", "exited")} <= set(kinds_seen), kinds_seen
    # A revision older than the log holds is a 410 that says to list again.
    with pytest.raises(ClientError) as old:
        next(api.watch("/v1/jobs", since=0, timeout_s=1))
    assert old.value.status == 410 and "list again" in str(old.value)
    tasks = [m for m in api.watch("/v1/jobs/ivy/w2/tasks", timeout_s=1) if m.event == "ADDED"]
    assert [m.data["task"]["index"] for m in tasks] == [0]


def test_follow_moves_to_the_next_incarnation_when_the_machine_dies(cell: LocalCell, api: CellClient) -> None:
    """Last in this file: it kills a borglet of the module's cell."""
    code = "import os, time; print('run', os.getpid(), flush=True); time.sleep(120)"
    assert cell.submit(py_job("mover", code, restart_policy="on_failure")).status_code == 201
    first = wait_for(lambda: (t := api.task("ivy/mover", 0))["started_at"] and t, 20, "a first start")
    follower = subprocess.Popen(
        [sys.executable, "-m", "reference.cli", "task", "logs", "ivy/mover", "0", "-f", "--for", "20",
         "--master", cell.masters[0].url],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "MINBORG_TOKEN": cell.admin_token},
    )  # fmt: skip
    try:
        time.sleep(3.0)  # the command is up and following incarnation 0
        machine = next(b for b in cell.borglets if b.name == first["machine"])
        machine.kill()  # SIGKILL: the machine goes down, its task is lost and restarted elsewhere
        out, err = follower.communicate(timeout=40)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(5)
    assert follower.returncode == 0, err
    runs = [line for line in out.splitlines() if line.startswith("run ")]
    assert len(set(runs)) == 2, (out, err)  # one line of each incarnation, in one command
    assert "--- incarnation 1 on " in err, err
    second = api.task("ivy/mover", 0)
    assert second["incarnation"] == 1 and second["last_machine"] != first["machine"]
    assert "lost" in second["events"][0]["detail"], second["events"]
