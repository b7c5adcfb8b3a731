"""`minborg help [COMMAND [SUBCOMMAND] | TOPIC]` on both command lines: the listing, a topic, a
command's own --help, an unknown word named with what to choose; the job-file topic names every
field of the job file's schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reference.cli import complete as cli_complete
from reference.cli import fast, topics
from reference.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_help_alone_lists_the_commands_and_the_topics(capsys: pytest.CaptureFixture[str]) -> None:
    assert fast.run(["help"]) == 0
    out = capsys.readouterr().out
    assert "Commands (their --help):" in out and "Topics:" in out
    for name in ("job", "task", "cell", "help", *topics.TOPICS):
        assert f"\n  {name} " in out, name


def test_a_topic_is_printed_by_both_command_lines(capsys: pytest.CaptureFixture[str]) -> None:
    for name, (_, text) in topics.TOPICS.items():
        assert fast.run(["help", name]) == 0
        assert capsys.readouterr().out == text
        result = runner.invoke(app, ["help", name])
        assert result.exit_code == 0 and result.output == text, name


def test_the_job_file_topic_names_every_field_of_the_schema() -> None:
    schema = json.loads((ROOT / "docs" / "job.schema.json").read_text())
    text = topics.TOPICS["job-file"][1]
    missing = sorted(field for field in schema["properties"] if field not in text)
    assert not missing, f"`minborg help job-file` does not name {missing}"


def test_help_on_a_command_is_its_own_help(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["minborg", "help", "job", "run"])
    with pytest.raises(fast.Fallback):
        fast.run(["help", "job", "run"])
    assert sys.argv[1:] == ["job", "run", "--help"]  # what the full command line then prints
    result = runner.invoke(app, ["help", "job", "run"])
    assert result.exit_code == 0 and "Usage: minborg job run" in result.output


def test_an_unknown_word_says_what_to_choose(capsys: pytest.CaptureFixture[str]) -> None:
    assert fast.run(["help", "jobfile"]) == 2
    err = capsys.readouterr().err
    assert "'jobfile'" in err and "job-file" in err and "job," in err
    result = runner.invoke(app, ["help", "jobfile"])
    assert result.exit_code == 2 and "job-file" in result.output


def test_completion_offers_the_topics() -> None:
    assert set(topics.TOPICS) <= set(cli_complete.complete(["help"], lambda: []))
