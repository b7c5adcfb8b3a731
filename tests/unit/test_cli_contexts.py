"""Contexts, as kubectl's: `minborg config set-context|use-context|get-contexts|current-context`
keep them in a file only its owner reads; every command that talks to a cell and names none
uses the current one; a job's NAME alone means the context's (or the token's) user's job."""

from __future__ import annotations

import stat
import warnings
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from reference.cellfile import ClientError
from reference.cli import contexts
from reference.cli import plain as cli_plain
from reference.cli.app import app

CELL_ENV = ("MINBORG_MASTER", "MINBORG_STATE_DIR", "MINBORG_TOKEN", "MINBORG_USER", "MINBORG_CONTEXT", "MINBORG_CA")


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home" / "minborg" / "config"
    monkeypatch.setenv(contexts.CONFIG_ENV, str(path))
    for name in CELL_ENV:
        monkeypatch.delenv(name, raising=False)
    return path


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["config", *args])


def test_set_use_get_and_current_context(config: Path, tmp_path: Path) -> None:
    assert "no contexts in" in run("get-contexts").output
    assert run("current-context").exit_code == 1  # none yet: says how to set one
    token = tmp_path / "alice.token"
    token.write_text("mbt_secret-alice\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    result = run("set-context", "prod", "--master", "https://borg.example:8443", "--ca", str(ca), "--token-file", str(token))
    assert result.exit_code == 0 and "context prod (current)" in result.output  # the first one made is current
    assert run("set-context", "lab", "--master", "http://127.0.0.1:8080", "--user", "demo").exit_code == 0
    assert run("current-context").output == "prod\n"
    # Only its owner reads the file: it holds tokens; its directory is the owner's too.
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    listing = run("get-contexts").output
    assert "mbt_secret-alice" not in listing  # tokens are never printed
    current, other = listing.splitlines()[2:]  # lab first (by name), prod marked current
    assert other.split()[:3] == ["*", "prod", "https://borg.example:8443"] and current.split()[0] == "lab"
    assert run("use-context", "lab").exit_code == 0 and run("current-context").output == "lab\n"
    assert run("get-contexts", "-o", "name").output == "lab\nprod\n"
    # Changing one field keeps the others.
    assert run("set-context", "prod", "--user", "alice").exit_code == 0
    doc = contexts.load(config)
    assert doc["contexts"]["prod"] == {"master": "https://borg.example:8443", "ca": str(ca.resolve()),
                                       "token": "mbt_secret-alice", "user": "alice"}  # fmt: skip
    assert run("delete-context", "lab").exit_code == 0 and run("current-context").exit_code == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [(["use-context", "nope"], "no context named 'nope' (known: none yet)"),
     (["set-context", "a/b", "--master", "http://x"], "context name 'a/b'"),
     (["set-context", "fresh"], "context fresh has no master: give --master URL"),
     (["set-context", "x", "--master", "http://x", "--ca", "/nonexistent.pem"], "is not a file")],
)  # fmt: skip
def test_a_bad_context_command_says_what_to_change(config: Path, args: list[str], words: str) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split())
    assert not config.exists()  # nothing half-written


def test_a_context_applies_to_commands_that_talk_to_a_cell_and_name_none(config: Path) -> None:
    doc = contexts.load(config)
    contexts.set_context(doc, "prod", master="http://10.0.0.5:8080", token="mbt_p", user="alice", ca="/etc/ca.pem")
    contexts.set_context(doc, "lab", master="http://10.0.0.9:8080")
    contexts.save(doc, config)

    def applied(args: list[str], **env: str) -> tuple[list[str], dict[str, str]]:
        environ = dict(env)
        return contexts.apply(args, environ), environ

    rest, env = applied(["job", "show", "web"])
    assert rest == ["job", "show", "web"]
    assert env == {"MINBORG_MASTER": "http://10.0.0.5:8080", "MINBORG_TOKEN": "mbt_p", "MINBORG_USER": "alice",
                   "MINBORG_CA": "/etc/ca.pem", contexts.IN_USE_ENV: "prod"}  # fmt: skip
    # --context picks another for one command, and is taken off the arguments; --token stays.
    rest, env = applied(["--token", "t", "--context", "lab", "task", "list", "web"])
    assert rest == ["--token", "t", "task", "list", "web"]
    assert env == {"MINBORG_MASTER": "http://10.0.0.9:8080", contexts.IN_USE_ENV: "lab"}
    assert applied(["cell", "status"])[1]["MINBORG_MASTER"] == "http://10.0.0.5:8080"
    # What is more explicit wins: a --master, a --state-dir, the environment's cell or token.
    assert applied(["job", "list", "--master", "http://h:1"])[1] == {}
    assert applied(["job", "list", "--state-dir=/tmp/c"])[1] == {}
    assert applied(["job", "list"], MINBORG_STATE_DIR="/tmp/c")[1] == {"MINBORG_STATE_DIR": "/tmp/c"}
    assert applied(["job", "list"], MINBORG_TOKEN="mine")[1]["MINBORG_TOKEN"] == "mine"
    # A local cell's lifecycle never looks at a context.
    for args in (["cell", "up"], ["cell", "down"], ["master", "--help"], ["--version"]):
        assert applied(args) == (args, {})
    with pytest.raises(contexts.ContextError, match="the context 'gone' is not in"):
        applied(["--context", "gone", "job", "list"])


def test_an_unreachable_contexts_cell_is_one_line_naming_the_context(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from reference.cli import fast as cli_fast

    doc = contexts.load(config)
    contexts.set_context(doc, "gone", master="http://127.0.0.1:9")  # nothing listens on port 9
    contexts.save(doc, config)
    monkeypatch.setattr("sys.argv", ["minborg", "job", "list"])
    from reference.cli.http import PlainCell

    # Refused connections are not retried for the client's 12 s.
    monkeypatch.setattr(PlainCell.__init__, "__kwdefaults__", {**PlainCell.__init__.__kwdefaults__, "retry_s": 0.0})
    for name in (contexts.IN_USE_ENV, "MINBORG_MASTER"):
        monkeypatch.setenv(name, "")  # set by apply below; restored after the test
    with pytest.raises(SystemExit) as exit_:
        cli_fast.main()
    assert exit_.value.code == 1
    assert capsys.readouterr().err == ("minborg: no cell answers at http://127.0.0.1:9 (context gone): check it with "
                                       "'minborg config get-contexts', or pass --context or --master\n")  # fmt: skip


def test_no_config_file_leaves_every_command_as_it_was(config: Path) -> None:
    environ: dict[str, str] = {}
    assert contexts.apply(["job", "list"], environ) == ["job", "list"] and environ == {}


def test_a_jobs_name_alone_is_the_context_users_else_the_tokens_else_the_cells_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(cli_plain.USER_ENV, raising=False)
    jobs = [{"key": "demo/web", "name": "web"}, {"key": "bob/web", "name": "web"}]

    def unreachable() -> list[dict[str, Any]]:
        raise AssertionError("not listed: the user is known")

    assert cli_plain.job_by_name("web", unreachable, lambda: {"user": "bob", "admin": False}) == "bob/web"
    # The admin owns no jobs of its own; a master without /v1/whoami answers 404: the cell's one job.
    one = [{"key": "demo/api", "name": "api"}]
    assert cli_plain.job_by_name("api", lambda: one, lambda: {"user": "admin", "admin": True}) == "demo/api"

    def old_master() -> dict[str, Any]:
        raise ClientError(404, "Not Found")

    assert cli_plain.job_by_name("api", lambda: one, old_master) == "demo/api"
    with pytest.raises(ValueError, match="2 jobs are named 'web'"):
        cli_plain.job_by_name("web", lambda: jobs, lambda: {"user": None, "admin": None})
    monkeypatch.setenv(cli_plain.USER_ENV, "alice")  # a context's user
    assert cli_plain.job_by_name("web", unreachable, lambda: {"user": "bob"}) == "alice/web"


def test_whoami_names_the_tokens_user() -> None:
    from reference.master.access import AccessConfig, hash_token
    from reference.master.api import make_app
    from reference.master.leader import LeaderConfig
    from reference.master.replica import Replica

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    replica = Replica(name="m0", url="http://127.0.0.1:1", etcd=["http://127.0.0.1:9"],
                      config=LeaderConfig(cell_name="c", master_name="m0"))  # fmt: skip
    app_ = make_app(replica, AccessConfig(admin_hash=hash_token("mbt_admin")))
    client = TestClient(app_)  # its lifespan not run: the replica never starts
    # A never-started replica's cache is stale: allow_stale, as every read of it needs.
    answer = client.get("/v1/whoami?allow_stale=1", headers={"Authorization": "Bearer mbt_admin"})
    assert answer.status_code == 200 and answer.json() == {"user": "admin", "admin": True}
    assert client.get("/v1/whoami?allow_stale=1").status_code == 401  # no token: no one
