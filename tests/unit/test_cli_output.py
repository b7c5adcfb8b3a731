"""The command line's output for programs: JSON with one unit per quantity and ISO 8601 times,
`-o name`, `-o jsonpath=...`, `-w` on task and machine listings, and `job submit --detach`
on the fast path; the fast path and the full command line print the same."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from reference.cli import fast as cli_fast
from reference.cli import output as cli_output
from reference.cli.app import app
from tests.unit.fakehttp import JsonHandler, serving

JOB = {"key": "demo/web", "name": "web", "user": "demo", "priority": 200, "task_count": 2,
       "request": {"cpu": "100m", "ram": 67108864}, "env": {"cpu": "4"}, "restart_policy": "always",
       "appclass": "batch", "version": 1, "submitted_at": 1.7e9}  # fmt: skip
MACHINES = [{"name": "b0", "state": "up", "capacity": {"cpu": 4000, "ram": 8 << 30, "gpu": 2},
             "reserved": {"cpu": 100, "ram": 64 << 20}, "usage": {"cpu_milli": 3, "ram_bytes": 9 << 20}, "tasks": 1},
            {"name": "b1", "state": "down", "capacity": {"cpu": 2000, "ram": 4 << 30}, "tasks": 0}]  # fmt: skip
TASKS = [{"job": "demo/web", "index": i, "incarnation": 0, "state": "RUNNING", "confirmed": True, "machine": "b0",
          "restarts": 0, "started_at": 1.7e9 + i, "events": [{"kind": "started", "at": 1.7e9, "detail": "pid 9"}]}
         for i in (0, 1)]  # fmt: skip
# What a watch of the machines or of demo/web's tasks streams after the listing's revision 3.
CHANGES = {"/v1/machines": [(4, "MODIFIED", {"machine": {**MACHINES[1], "state": "up"}})],
           "/v1/jobs/demo/web/tasks": [(4, "MODIFIED", {"task": {**TASKS[1], "state": "DEAD", "machine": None}})]}  # fmt: skip


# --- one unit per quantity, ISO times --------------------------------------------------------------


def test_json_states_each_quantity_once_with_its_unit_in_its_name_and_times_in_iso_too() -> None:
    shown = cli_output.one_unit({"job": JOB, "machines": MACHINES, "retry_in": 4.1, "at": 0})
    # A request's "100m" and a capacity's 4000 (milli-CPU) both become cpu_milli numbers.
    assert shown["job"]["request"] == {"cpu_milli": 100, "ram_bytes": 67108864}
    assert shown["machines"][0]["capacity"] == {"cpu_milli": 4000, "ram_bytes": 8 << 30, "gpu": 2}
    assert shown["machines"][0]["usage"] == {"cpu_milli": 3, "ram_bytes": 9 << 20}  # already so: kept
    assert shown["job"]["env"] == {"cpu": "4"}  # a user's own words are never renamed
    # 1.7e9 s after the epoch is 2023-11-14 22:13:20 UTC; the epoch figure stays beside it.
    assert shown["job"]["submitted_at"] == 1.7e9 and shown["job"]["submitted_at_iso"] == "2023-11-14T22:13:20.000Z"
    assert "retry_in_iso" not in shown and "at_iso" not in shown  # a duration, and a zero time, are no dates
    assert cli_output.milli_cpu("0.5") == 500 and cli_output.milli_cpu("2") == 2000


# --- -o name, -o jsonpath --------------------------------------------------------------------------


def test_name_is_what_a_command_taking_one_names_it_by() -> None:
    assert cli_output.render([JOB], "name") == "demo/web"
    assert cli_output.render(MACHINES, "name") == "b0\nb1"
    assert cli_output.render(TASKS, "name") == "0\n1"  # `minborg task show demo/web INDEX`
    assert cli_output.render({"job": JOB, "tasks": {"RUNNING": 2}}, "name") == "demo/web"  # job show's answer
    assert cli_output.render({"event": "task", "task": "demo/web/0#0", "index": 0, "job": "demo/web"}, "name") == "demo/web/0#0"


@pytest.mark.parametrize(
    ("data", "template", "expected"),
    [
        (MACHINES, "{.items[*].name}", "b0 b1"),
        (MACHINES, "{.items[0].capacity.cpu_milli}", "4000"),
        (MACHINES, "{.items[-1].state}", "down"),
        (MACHINES, '{.items[*].name}{"\\n"}', "b0 b1\n"),
        (MACHINES, "names: {.items[*].name}.", "names: b0 b1."),
        ({"job": JOB}, "{.job.request}", '{"cpu_milli": 100, "ram_bytes": 67108864}'),
        ({"job": JOB}, "{.job.submitted_at_iso}", "2023-11-14T22:13:20.000Z"),
        ({"job": JOB}, "{$.job.missing}", ""),
        ({"job": JOB}, "{.job['key']}", "demo/web"),
        (TASKS, "{.items[*].events[0].kind}", "started started"),
    ],
)
def test_jsonpath_subset(data: Any, template: str, expected: str) -> None:
    assert cli_output.render(data, f"jsonpath={template}") == expected


@pytest.mark.parametrize("template", ["{range .items[*]}{.name}{end}", "{.items[?(@.state=='up')]}", "{items}", "{.a"])
def test_a_template_outside_the_subset_is_refused_with_what_is_understood(template: str) -> None:
    with pytest.raises(cli_output.TemplateError):
        cli_output.render(MACHINES, f"jsonpath={template}")


# --- against a master --------------------------------------------------------------------------------


@pytest.fixture
def master() -> Iterator[tuple[str, list[Any]]]:
    posted: list[Any] = []

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            path, _, query = self.path.partition("?")
            if "watch=true" in query:
                return self.stream(path, int(query.split("since=")[1].split("&")[0]))
            body: dict[str, Any] = {"revision": 3}
            if path == "/v1/machines":
                body["machines"] = MACHINES
            elif path == "/v1/jobs/demo/web/tasks":
                body["tasks"] = TASKS
            elif path.startswith("/v1/jobs/demo/web/tasks/"):
                body["task"] = TASKS[int(path.rsplit("/", 1)[1])]
            elif path == "/v1/jobs/demo/web":
                body.update(job=JOB, tasks={"RUNNING": 2, "running_confirmed": 2})
            elif path == "/v1/whoami":
                body = {"user": "demo", "admin": False}
            elif path == "/v1/cell":
                body.update(cell="c1", leader="m0", leader_url=self.headers["Host"], jobs=1, tasks={"RUNNING": 2},
                            replicas=[{"name": "m0", "role": "leader", "url": "http://" + self.headers["Host"]}])  # fmt: skip
            else:
                body["jobs"] = [JOB]
            self.answer(200, json.dumps(body).encode())

        def do_POST(self) -> None:  # noqa: N802
            doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            posted.append(doc)
            if "command" not in doc:
                self.answer(422, json.dumps({"detail": [{"field": "command", "error": "required field is missing"}]}).encode())
                return
            job = {**doc, "key": f"{doc['user']}/{doc['name']}", "request": {"cpu": "250m", "ram": 134217728},
                   "priority": 100, "task_count": doc.get("task_count", 1)}  # fmt: skip
            self.answer(201, json.dumps({"job": job, "revision": 9}).encode())

        def stream(self, path: str, since: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for rev, event, data in [*CHANGES[path], (4, "bookmark", {"revision": 4})]:
                if rev > since or event == "bookmark":
                    chunk = f"id: {rev}\nevent: {event}\ndata: {json.dumps(data)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")

    with serving(Handler) as url:
        yield url, posted


def full(args: list[str]) -> Any:
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize(
    "args",
    [["job", "list", "-o", "name"], ["job", "list", "-o", "json"], ["job", "show", "demo/web", "-o", "json"],
     ["job", "list", "-o", "jsonpath={.items[*].request.cpu_milli}"], ["machine", "list", "-o", "name"],
     ["machine", "list", "-o", "jsonpath={.items[*].capacity.ram_bytes}"], ["task", "list", "demo/web", "-o", "name"],
     ["task", "show", "demo/web", "1", "-o", "jsonpath={.started_at_iso}"], ["job", "show", "web", "-o", "name"],
     ["cell", "status"], ["cell", "status", "-o", "json"]],
)  # fmt: skip
def test_fast_and_full_print_the_same_names_templates_and_json(
    master: tuple[str, list[Any]], capsys: pytest.CaptureFixture[str], args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MINBORG_USER", raising=False)
    url, _ = master
    assert cli_fast.run([*args, "--master", url]) == 0
    fast = capsys.readouterr().out
    result = full([*args, "--master", url])
    assert result.exit_code == 0, result.output
    assert fast == result.output and fast.strip()
    if args[0] == "job" and args[-1] == "json":
        assert '"cpu_milli": 100' in fast and '"submitted_at_iso": "2023-11-14T22:13:20.000Z"' in fast


def test_a_bad_template_is_a_usage_error_naming_the_option(master: tuple[str, list[Any]]) -> None:
    url, _ = master
    with pytest.raises(cli_fast.Fallback):  # the full command line words it
        cli_fast.run(["machine", "list", "-o", "jsonpath={range .items[*]}", "--master", url])
    result = full(["machine", "list", "-o", "jsonpath={range .items[*]}", "--master", url])
    assert result.exit_code == 2 and "{range}...{end} is not supported" in result.output


@pytest.mark.parametrize(
    ("args", "change"),
    [(["machine", "list", "-w"], "MODIFIED  b1                    up     tasks=0"),
     (["task", "list", "demo/web", "-w"], "MODIFIED  1#0       DEAD       -")],
)  # fmt: skip
def test_watch_prints_the_listing_then_each_change_after_its_revision(
    master: tuple[str, list[Any]], args: list[str], change: str
) -> None:
    url, _ = master
    started = time.monotonic()
    result = full([*args, "--for", "1", "--master", url])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith(("b0", "0 ")) for line in lines)  # the listing first
    changes = [line for line in lines if change in line]
    assert len(changes) == 1 and changes[0].split()[0] == "4", result.output  # once, though the stream reconnects
    assert time.monotonic() - started < 10


def test_submit_detach_on_the_fast_path_posts_the_file_as_written(
    master: tuple[str, list[Any]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, posted = master
    path = tmp_path / "web.yaml"
    path.write_text("name: web\nuser: demo\nrequest: {cpu: 250m, ram: 128MiB}\ncommand: [sleep, '60']\n")
    assert cli_fast.run(["job", "submit", "--detach", str(path), "--master", url]) == 0
    assert posted[-1] == {"name": "web", "user": "demo", "request": {"cpu": "250m", "ram": "128MiB"}, "command": ["sleep", "60"]}
    fast = capsys.readouterr().out
    assert fast == "submitted demo/web: 1 task(s) of cpu=250m ram=128MiB at priority 100 (revision 9)\n"
    result = full(["job", "submit", "--detach", str(path), "--master", url])
    assert result.exit_code == 0 and result.output == fast  # the full command line says the same
    # Refused as invalid (422): the full command line validates the file itself and names the field.
    path.write_text("name: web\nuser: demo\n")
    with pytest.raises(cli_fast.Fallback):
        cli_fast.run(["job", "submit", "--detach", str(path), "--master", url])
    for args in (["job", "submit", str(path)], ["job", "submit", "--dry-run", "--detach", str(path)]):
        with pytest.raises(cli_fast.Fallback):  # it waits, or it plans: the full command line
            cli_fast.run([*args, "--master", url])
