"""The `minborg` command line without a cell: help, job schema, local job-file validation,
error formatting, finding the cell, and the client's retries, failover and balancing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from reference import launcher
from reference.cli import jobs as cli_jobs
from reference.cli.app import app
from reference.cli.common import client_error_message
from reference.client import (
    MASTER_ENV,
    STATE_DIR_ENV,
    CellClient,
    ClientError,
    RoundRobin,
    format_detail,
    master_urls,
    split_key,
    split_urls,
)

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_cell_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test starts with no cell in sight: no env settings, an empty working directory."""
    monkeypatch.delenv(MASTER_ENV, raising=False)
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)


def write_cell_file(state_dir: Path, urls: list[str]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    info = launcher.CellInfo("local", str(state_dir), str(state_dir), 0.0, tuple(urls), (), {})
    info.save()


# --- help ------------------------------------------------------------------------------------


def test_top_level_help_lists_every_command_group() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in (
        "cell",
        "job",
        "task",
        "machine",
        "bns",
        "master",
        "borglet",
        "bench",
        "report",
        "spec",
        "demo",
    ):
        assert command in result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["cell", "up", "--help"], "--replicas"),
        (["cell", "up", "--help"], "--toxiproxy"),
        (["job", "submit", "--help"], "--master"),
        (["job", "update", "--help"], "--tasks"),
        (["task", "list", "--help"], "[USER/]NAME"),
        (["job", "kill", "--help"], "USER/NAME"),
        (["machine", "list", "--help"], "--json"),
        (["bns", "resolve", "--help"], "minborg"),
        (["demo", "--help"], "--replicas"),
    ],
)
def test_command_help(args: list[str], expected: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert expected in result.output


def test_pass_through_help_reaches_the_borglet_parser() -> None:
    result = runner.invoke(app, ["borglet", "--help"])
    assert result.exit_code == 0
    assert "--kill-tasks-on-exit" in result.output  # argparse's help, not Typer's


def test_pass_through_arguments_reach_the_spec_explorer() -> None:
    result = runner.invoke(app, ["spec", "explore", "--help"])
    assert result.exit_code == 0
    assert "--machines" in result.output


def test_pass_through_arguments_reach_the_write_path_bench() -> None:
    result = runner.invoke(app, ["bench", "writes", "--help"])
    assert result.exit_code == 0
    assert "--runs" in result.output and "direct etcd" in result.output


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["bench", "packing"], "the packing benchmark needs matplotlib: pip install -e '.[bench]'"),
        (["report", "scheduler"], "the scheduler report needs matplotlib: pip install -e '.[bench]'"),
        (
            ["campaign", "elastic", "--out", "x"],
            "the elastic campaign needs matplotlib, locust, chaostoolkit, toxiproxy: pip install -e '.[campaigns]'",
        ),
    ],
)
def test_a_measurement_command_without_its_extra_names_the_extra_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, command: list[str], message: str
) -> None:
    for module in ("matplotlib", "locust", "chaostoolkit", "toxiproxy"):
        monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    result = runner.invoke(app, command)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"error: {message}"]  # one line, no traceback


def test_the_help_of_a_measurement_command_needs_no_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = runner.invoke(app, ["bench", "packing", "--help"])
    assert result.exit_code == 0 and "--pods" in result.output


# --- job files ------------------------------------------------------------------------------


def test_job_schema_prints_the_json_schema() -> None:
    result = runner.invoke(app, ["job", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert {"name", "user", "command", "request", "priority"} <= set(schema["properties"])


def test_the_schema_describes_every_field_and_the_examples_name_its_copy() -> None:
    import jsonschema
    import yaml

    from reference.jobschema import REPO_PATH, SCHEMA_DIALECT, SCHEMA_ID, fields

    schema = json.loads(runner.invoke(app, ["job", "schema"]).stdout)
    assert schema["$schema"] == SCHEMA_DIALECT and schema["$id"] == SCHEMA_ID
    jsonschema.Draft202012Validator.check_schema(schema)
    described = fields(schema)
    assert len(described) > 25 and "autoscale.target" in described and "constraints.op" in described
    assert [path for path, prop in described.items() if not prop.get("description")] == []
    # The copy editors read is what the command prints (regenerate: minborg job schema > docs/job.schema.json).
    repo = Path(__file__).resolve().parents[2]
    assert json.loads((repo / REPO_PATH).read_text()) == schema
    for path in [*repo.glob("examples/*.yaml"), repo / "examples/logsaver/web.yaml", repo / "examples/logsaver/logsaver.yaml"]:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema="), path
        target = (path.parent / first.partition("$schema=")[2]).resolve()
        assert target == (repo / REPO_PATH).resolve(), path
        assert list(jsonschema.Draft202012Validator(schema).iter_errors(yaml.safe_load(path.read_text()))) == [], path


def test_submit_of_an_invalid_file_exits_2_naming_each_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: web\nuser: alice\ncommand: [sleep, '60']\nrequest: {cpu: lots}\npriorty: 200\n"
    )
    # No cell exists: the file must be refused before any cell is looked for.
    result = runner.invoke(app, ["job", "submit", str(bad)])
    assert result.exit_code == 2
    assert "request.cpu" in result.output
    assert "quantity" in result.output
    assert "priorty" in result.output


def test_submit_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["job", "submit", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "cannot read job file" in result.output


@pytest.mark.parametrize("name", ["hello_world.yaml", "batch.yaml"])
def test_example_job_files_are_valid(name: str) -> None:
    from reference.jobspec import load_job_file

    spec = load_job_file(REPO / "examples" / name)
    assert spec.user == "demo"
    assert spec.command[0] in ("python", "python3") and spec.command[1] == "-m"


def test_submit_sends_the_canonical_job(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(201, json={"job": seen[-1], "revision": 7})

    fake = CellClient(["http://m0"], transport=httpx.MockTransport(handler))
    monkeypatch.setattr(cli_jobs, "client", lambda *a, **kw: fake)
    result = runner.invoke(app, ["job", "submit", "--detach", str(REPO / "examples" / "hello_world.yaml")])
    assert result.exit_code == 0, result.output
    assert "revision 7" in result.output
    assert seen[0]["request"] == {"cpu": "100m", "ram": 64 * 1024 * 1024}
    assert seen[0]["priority"] == 200


def test_bad_job_key_is_a_usage_error() -> None:
    result = runner.invoke(app, ["job", "kill", "no-slash"])  # a change names its job whole
    assert result.exit_code == 2
    assert "USER/NAME" in result.output


# --- error formatting ---------------------------------------------------------------------


def test_format_detail_of_field_errors() -> None:
    detail = [
        {"field": "request.cpu", "error": "must be a quantity like 500m or 2"},
        {"field": "task_count", "error": "must be >= 0"},
    ]
    text = format_detail(detail)
    assert "request.cpu: must be a quantity like 500m or 2" in text
    assert "task_count: must be >= 0" in text
    assert format_detail([detail[0]]) == "request.cpu: must be a quantity like 500m or 2"
    assert format_detail("job demo/x not found") == "job demo/x not found"
    # FastAPI's own shape reads the same way.
    assert (
        format_detail([{"loc": ["body", "name"], "msg": "field required"}])
        == "name: field required"
    )


def test_client_error_messages() -> None:
    assert str(ClientError(404, "no job demo/x")) == "HTTP 404: no job demo/x"
    assert (
        client_error_message(ClientError(404, "no job demo/x"))
        == "HTTP 404 (not found): no job demo/x"
    )
    assert client_error_message(ClientError(0, "nobody home")).startswith("no answer from the cell")


def test_cli_prints_an_api_error_and_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "no job demo/ghost"})

    fake = CellClient(["http://m0"], transport=httpx.MockTransport(handler))
    monkeypatch.setattr(cli_jobs, "client", lambda *a, **kw: fake)
    result = runner.invoke(app, ["job", "show", "demo/ghost"])
    assert result.exit_code == 1
    assert "HTTP 404 (not found): no job demo/ghost" in result.output
    assert "Traceback" not in result.output


def test_cli_exits_2_on_a_422_with_field_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            422, json={"detail": [{"field": "task_count", "error": "must be >= 0"}]}
        )

    fake = CellClient(["http://m0"], transport=httpx.MockTransport(handler))
    monkeypatch.setattr(cli_jobs, "client", lambda *a, **kw: fake)
    result = runner.invoke(app, ["job", "update", "demo/web", "--tasks", "3"])
    assert result.exit_code == 2
    assert "task_count: must be >= 0" in result.output


def test_job_update_needs_a_change() -> None:
    result = runner.invoke(app, ["job", "update", "demo/web", "--master", "http://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "nothing to change" in result.output


# --- finding the cell ----------------------------------------------------------------------


def test_cell_file_is_found_in_the_default_state_dir(tmp_path: Path) -> None:
    write_cell_file(tmp_path / ".minborg", ["http://127.0.0.1:1", "http://127.0.0.1:2"])
    assert master_urls() == ["http://127.0.0.1:1", "http://127.0.0.1:2"]


def test_state_dir_env_then_master_env_then_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_cell_file(tmp_path / "elsewhere", ["http://127.0.0.1:3"])
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "elsewhere"))
    assert master_urls() == ["http://127.0.0.1:3"]
    monkeypatch.setenv(MASTER_ENV, "127.0.0.1:4, http://127.0.0.1:5/")
    assert master_urls() == ["http://127.0.0.1:4", "http://127.0.0.1:5"]
    assert master_urls("http://127.0.0.1:6") == ["http://127.0.0.1:6"]


def test_no_cell_gives_a_hint() -> None:
    with pytest.raises(ClientError, match="minborg cell up"):
        master_urls()
    result = runner.invoke(app, ["job", "list"])
    assert result.exit_code == 1
    assert "no cell found" in result.output


def test_cell_status_without_a_cell() -> None:
    result = runner.invoke(app, ["cell", "status"])
    assert result.exit_code == 1
    assert "no cell" in result.output


def test_cell_info_round_trips(tmp_path: Path) -> None:
    record = launcher.ProcessRecord(launcher.Role.MASTER, "master0", 123, 1.5, "http://x", "/log")
    info = launcher.CellInfo(
        "local",
        str(tmp_path),
        "/w",
        1.0,
        ("http://x",),
        ("http://e",),
        {"m0": "http://b"},
        (record,),
    )
    info.save()
    assert launcher.CellInfo.load(tmp_path) == info


def test_split_helpers() -> None:
    assert split_key("demo/hello_world") == ("demo", "hello_world")
    for bad in ("demo", "/x", "a/b/c", "a/"):
        with pytest.raises(ValueError, match="USER/NAME"):
            split_key(bad)
    assert split_urls(" a:1 ,, http://b:2/ ") == ["http://a:1", "http://b:2"]


# --- launcher arguments (nothing is started) -----------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replicas": 2}, "--replicas must be one of"),
        ({"machines": -1}, "--machines"),
        ({"machine_capacity": "cpu=lots"}, "--machine-capacity"),
        ({"cell": "Not_Valid"}, "invalid cell name"),
    ],
)
def test_launcher_refuses_bad_arguments(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(launcher.LauncherError, match=message):
        launcher.up(tmp_path / "cell", **kwargs)
    assert not (tmp_path / "cell").exists()


def test_missing_toxiproxy_server_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(launcher.TOXIPROXY_ENV, str(tmp_path / "no-such-server"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(launcher.LauncherError, match="needs the Toxiproxy server"):
        launcher.find_toxiproxy_server(project=tmp_path)


def test_launcher_refuses_a_foreign_state_dir(tmp_path: Path) -> None:
    (tmp_path / "etcd").mkdir()
    with pytest.raises(launcher.LauncherError, match="does not look like a minborg state dir"):
        launcher.up(tmp_path)


# --- the client: retries, failover, balancing ---------------------------------------------


def test_client_retries_503_then_succeeds() -> None:
    answers = [
        httpx.Response(503, headers={"Retry-After": "1"}, json={"detail": "no leader"}),
        httpx.Response(200, json={"leader": "master1"}),
    ]
    slept: list[float] = []
    client = CellClient(
        ["http://m0"], transport=httpx.MockTransport(lambda r: answers.pop(0)), sleep=slept.append
    )
    assert client.cell() == {"leader": "master1"}
    assert slept == [1.0]


def test_client_gives_up_on_503_after_its_bound() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    client = CellClient(
        ["http://m0"],
        transport=httpx.MockTransport(lambda r: httpx.Response(503, json={"detail": "no leader"})),
        sleep=sleep,
        clock=lambda: now[0],
        retry_s=5.0,
    )
    with pytest.raises(ClientError) as caught:
        client.cell()
    assert caught.value.status == 503
    assert now[0] <= 5.0


def test_client_moves_to_the_next_replica_and_remembers_it() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.host)
        if request.url.host == "m0":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={"jobs": [], "revision": 3})

    client = CellClient(["http://m0", "http://m1"], transport=httpx.MockTransport(handler))
    assert client.jobs() == []
    assert client.jobs() == []
    assert calls == ["m0", "m1", "m1"]


def test_client_does_not_retry_an_uncertain_write() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    client = CellClient(["http://m0", "http://m1"], transport=httpx.MockTransport(handler))
    with pytest.raises(ClientError, match="may or may not"):
        client.submit({"name": "x"})


def test_round_robin_over_endpoints() -> None:
    endpoints = [
        {"index": i, "bns": f"{i}.web.demo.local.minborg", "host": "127.0.0.1", "port": 9000 + i}
        for i in (2, 0, 1)
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/jobs/demo/web/endpoints"
        return httpx.Response(200, json={"endpoints": endpoints, "revision": 1})

    client = CellClient(["http://m0"], transport=httpx.MockTransport(handler))
    balancer = RoundRobin(client, "demo/web")
    picked = [balancer.next().port for _ in range(6)]
    assert picked == [9000, 9001, 9002, 9000, 9001, 9002]
    balancer.close()


# --- what the everyday commands say ----------------------------------------------------------


def test_dry_run_words_the_quota_and_exits_1_when_the_job_would_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = {"dry_run": True, "job": "demo/hello_world", "placed": [{"task": "demo/hello_world/0#0", "machine": "b0"}],
              "pending": [{"task": "demo/hello_world/1#0", "reason": "0 of 1 machines fit: cpu"}], "preempted": [],
              "quota": {"user": "demo", "band": "production", "quota": {"cpu": 12000, "ram": 134217728},
                        "used_by_others": {}, "job": {"cpu": 300, "ram": 201326592}}, "seed": 0, "revision": 9}  # fmt: skip
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=answer))
    monkeypatch.setattr(cli_jobs, "client", lambda *a, **kw: CellClient(["http://m0"], transport=transport))
    result = runner.invoke(app, ["job", "submit", "--dry-run", str(REPO / "examples" / "hello_world.yaml")])
    assert result.exit_code == 1, result.output
    assert "quota: demo's production quota cpu=12000m ram=128MiB; its other jobs there hold nothing; " \
           "this job asks cpu=300m ram=192MiB" in result.output  # fmt: skip
    assert "{" not in result.output  # no Python dict
    assert "would not fit: 1 of 3 task(s) would stay PENDING" in result.output
    answer["pending"] = []
    result = runner.invoke(app, ["job", "submit", "--dry-run", str(REPO / "examples" / "hello_world.yaml")])
    assert result.exit_code == 0, result.output


def test_a_cell_that_does_not_answer_is_one_line_that_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    from reference.cli import fast as cli_fast
    from reference.cli import http as cli_http

    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    write_cell_file(tmp_path / ".minborg", [url])
    expected = f"minborg: no cell answers at {url}: start one with 'minborg cell up' or pass --master"
    # Connections refused are retried as a 503 is (12 s); 0.5 s here.
    monkeypatch.setattr(cli_jobs, "client", lambda m, s, **kw: CellClient.discover(m, s, retry_s=0.5))
    result = runner.invoke(app, ["job", "list", "-w"])  # the full command line
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [expected]
    monkeypatch.setattr(cli_http.PlainCell.__init__, "__kwdefaults__", {"retry_s": 0.5, "sleep": cli_http.time.sleep, "timeout": 5.0})
    monkeypatch.setattr(sys, "argv", ["minborg", "job", "kill", "demo/x"])  # the fast path
    with pytest.raises(SystemExit) as exit_:
        cli_fast.main()
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [expected]


def test_every_command_with_its_own_help_ends_it_with_examples() -> None:
    import typer.main

    def leaves(command, path):  # type: ignore[no-untyped-def]
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from leaves(sub, [*path, name])
        elif command.add_help_option:  # the pass-through ones show their program's own help
            yield " ".join(path), command

    missing = [name for name, command in leaves(typer.main.get_command(app), []) if "Examples:" not in (command.epilog or "")]
    assert missing == []
    result = runner.invoke(app, ["job", "update", "--help"])
    assert "Examples:\n    minborg job update demo/hello_world --tasks 5\n" in result.output  # kept as written


def test_a_stopped_cell_is_said_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from reference.cli import fast as cli_fast

    state_dir = tmp_path / ".minborg"
    state_dir.mkdir()
    launcher.CellInfo("local", str(state_dir), str(state_dir), 0.0, ("http://127.0.0.1:9",), (), {},
                      stopped_at=time.time()).save()  # as `minborg cell down` leaves it  # fmt: skip
    expected = ["minborg: no cell answers at http://127.0.0.1:9: start one with 'minborg cell up' or pass --master"]
    started = time.monotonic()
    result = runner.invoke(app, ["job", "list", "-w"])  # the full command line
    assert result.exit_code == 1 and result.output.strip().splitlines() == expected
    monkeypatch.setattr(sys, "argv", ["minborg", "machine", "list"])  # the fast path
    with pytest.raises(SystemExit) as exit_:
        cli_fast.main()
    assert exit_.value.code == 1 and capsys.readouterr().err.strip().splitlines() == expected
    assert time.monotonic() - started < 5  # not the client's 12 s of retries
