"""The task id's one parser and formatter, as a table: good ids both ways, bad ids refused
with the part that is wrong."""

import pytest

from spec.model import TaskId
from spec.taskid import PlacedTaskId, by_index, format_task_id, parse_task_id, running_twice


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("alice/web/3#1@2", PlacedTaskId("alice/web", 3, 1, 2)),
        ("alice/web/3#1", PlacedTaskId("alice/web", 3, 1, None)),  # no placement
        ("bob/c8-1/2#1@1", PlacedTaskId("bob/c8-1", 2, 1, 1)),
        ("a/b/0#12@0", PlacedTaskId("a/b", 0, 12, 0)),
        ("j/0#0", PlacedTaskId("j", 0, 0, None)),
    ],
)
def test_a_task_id_parses_and_formats_back(text: str, parsed: PlacedTaskId) -> None:
    assert parse_task_id(text) == parsed
    assert str(parsed) == text
    assert format_task_id(parsed.task, parsed.placement) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("alice/web/3", "no '#incarnation'"),
        ("alice/web/3@1", "no '#incarnation'"),
        ("t#0", "no job before the index"),
        ("3#1@0", "no job before the index"),
        ("alice/web/x#1@0", "index 'x' is not a number"),
        ("alice/web/#1@0", "index '' is not a number"),
        ("alice/web/3#y@0", "incarnation 'y' is not a number"),
        ("alice/web/3#@0", "incarnation '' is not a number"),
        ("alice/web/3#1@", "placement '' is not a number"),
        ("alice/web/3#1@z", "placement 'z' is not a number"),
        ("", "no '#incarnation'"),
    ],
)
def test_a_bad_task_id_is_refused_saying_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_task_id(text)
    assert str(err.value) == f"task id {text!r}: {why}; expected 'user/job/index#incarnation' or 'user/job/index#incarnation@placement'"


def test_the_formatter_builds_what_the_master_sends() -> None:
    assert format_task_id(TaskId("u/j", 3, 1), 2) == "u/j/3#1@2"
    assert format_task_id(TaskId("u/j", 3, 1)) == str(TaskId("u/j", 3, 1)) == "u/j/3#1"


def test_a_task_runs_twice_when_one_index_has_two_live_ids() -> None:
    ids = ["u/j/0#0@1", "u/j/1#0@1", "u/j/1#1@1", "u/k/1#0@1"]
    assert by_index(ids) == {("u/j", 0): ["u/j/0#0@1"], ("u/j", 1): ["u/j/1#0@1", "u/j/1#1@1"], ("u/k", 1): ["u/k/1#0@1"]}
    assert running_twice(ids) == {("u/j", 1): ["u/j/1#0@1", "u/j/1#1@1"]}
    # one id reported by two borglets is two copies; as a set, one
    assert running_twice(["u/j/0#0@1", "u/j/0#0@1"]) == {("u/j", 0): ["u/j/0#0@1", "u/j/0#0@1"]}
    assert running_twice({"u/j/0#0@1"}) == {}
    with pytest.raises(ValueError, match="no '#incarnation'"):
        running_twice(["u/j/0"])
