"""The lean YAML reader against PyYAML's safe loader: on any text, the same document (types and
key order included) or UNREAD, never a different answer; and the job files users write read
without PyYAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference import jobtext, plainyaml

REPO = Path(__file__).resolve().parents[2]
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def pyyaml(text: str) -> tuple[bool, Any]:
    try:
        return True, yaml.load(text, Loader=LOADER)
    except yaml.YAMLError:
        return False, None
    except RecursionError:
        return False, None


def same(a: Any, b: Any) -> bool:
    """Equal with types: 1, 1.0 and True are three answers here."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(same(ka, kb) and same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def agrees(text: str) -> Any:
    """The lean reader's answer, after checking it against PyYAML's."""
    lean = plainyaml.parse(text)
    if lean is plainyaml.UNREAD:
        return lean
    ok, expected = pyyaml(text)
    assert ok, f"PyYAML refuses {text!r}, the lean reader gave {lean!r}"
    assert same(lean, expected), f"{text!r}: lean {lean!r}, PyYAML {expected!r}"
    return lean


def test_the_project_s_job_files_read_without_pyyaml() -> None:
    files = sorted(REPO.glob("examples/**/*.yaml")) + sorted(REPO.glob("examples/*.yaml"))
    assert files
    for path in files:
        assert agrees(path.read_text()) is not plainyaml.UNREAD, path


TYPICAL = """\
# yaml-language-server: $schema=../docs/job.schema.json
name: web   # a comment
user: alice
priority: production
task_count: 3
request: {cpu: 100m, ram: 64MiB}
limit:
  cpu: 0.5
  ram: 128MiB
command: [python3, -c, 'print("it''s up")']
args:
- --port
- "8080"
- -v
env:
  URL: http://example:80/x#frag
  EMPTY:
  QUOTED: 'a: b # not a comment'
  FLAG: yes
  OFF: off
  NOTHING: ~
  NEGATIVE: -3
  RATIO: +2.50
constraints:
  - attribute: arch
    op: "=="
    value: x86
  - {attribute: zone, op: in, value: [a, b]}
tags: []
labels: {}
"""


def test_a_typical_job_file_reads_the_same_without_pyyaml() -> None:
    lean = agrees(TYPICAL)
    assert lean is not plainyaml.UNREAD
    assert lean["env"]["FLAG"] is True and lean["env"]["EMPTY"] is None and lean["limit"]["cpu"] == 0.5
    assert lean["command"] == ["python3", "-c", "print(\"it's up\")"]
    assert lean["constraints"][1]["value"] == ["a", "b"]


def test_what_it_leaves_to_pyyaml() -> None:
    """Forms whose reading has traps: each is UNREAD, so PyYAML (and its error messages) decides."""
    for text in [
        "a: 010\n",  # YAML 1.1 octal: 8
        "a: 0x1f\n", "a: 1_000\n", "a: 1:30\n", "a: .inf\n", "a: 2024-01-01\n",  # fmt: skip
        "a: |\n  x\n", "a: >\n  x\n", "a: &x 1\nb: *x\n", "a: !!str 1\n",
        '"a\\tb": 1\n', "a: 'x\n  y'\n", "a: [1,\n  2]\n", "a: x\n  y\n",
        "---\na: 1\n", "a:\tb\n", "a: caf\u00e9\n", "<<: {a: 1}\n", "? a\n: b\n",
        "a: b: c\n", "a: [1, 2,]\n", "a\x00: 1\n", "a: 1\r\nb: 2\r\n", "a: 1\n b: 2\n",
        "x" * 1100 + ": 1\n",
    ]:
        assert plainyaml.parse(text) is plainyaml.UNREAD, text


def test_jobtext_takes_the_lean_reading_and_pyyaml_for_the_rest() -> None:
    assert jobtext.parse("a: 010\n") == {"a": 8}  # PyYAML's answer
    assert jobtext.parse("a: 10\n") == {"a": 10}
    assert jobtext.parse("") is None


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=True, width=32),
    st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
    st.sampled_from(["yes", "No", "on", "~", "null", "010", "0x1", "1_0", "1:20", "2024-01-01", ".5", "-.5",
                     "1e3", "1.", "+1", "-0", "<<", "=", "a #b", "a: b", "http://x", "- a", "-a", "'", '"', "#"]),
)  # fmt: skip
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(scalars.filter(lambda k: k == k), inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents, st.sampled_from([False, True, None]), st.sampled_from([None, "'", '"']), st.integers(2, 6),
       st.integers(20, 120))  # fmt: skip
def test_documents_pyyaml_writes_read_the_same(doc: Any, flow: Any, style: Any, indent: int, width: int) -> None:
    text = yaml.safe_dump(doc, default_flow_style=flow, default_style=style, indent=indent, width=width, sort_keys=False)
    agrees(text)
    agrees(text.replace("\n", "  # note\n"))


FRAGMENTS = ["a", "b c", "- ", "-", ": ", ":", " #", "#x", "'", '"', "''", "[", "]", "{", "}", ", ", ",", "yes",
             "no", "null", "~", "1", "01", "1.5", "0x1", "1_0", ".inf", "2024-01-01", "?", "&a", "*a", "!x", "|",
             ">", "%", "@", "http://z", "<<", "=", "1e3", "+1", "-0", ".5", "'it''s'", "\\", "  ", "x:y", "\"q\""]  # fmt: skip
lines = st.tuples(st.integers(0, 6), st.lists(st.sampled_from(FRAGMENTS), max_size=6)).map(
    lambda t: " " * t[0] + "".join(t[1])
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(lines, min_size=1, max_size=8))
def test_any_text_reads_the_same_or_is_left_to_pyyaml(body: list[str]) -> None:
    agrees("\n".join(body) + "\n")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["k: ", "k:", "- ", "-", "- k: ", "k2: ", "k3:"]),
                          st.sampled_from(["", "v", "1", "[a, b]", "{c: d}", "'q'", "yes", "# c"])), min_size=1, max_size=10))  # fmt: skip
def test_block_shapes_read_the_same_or_are_left_to_pyyaml(shape: list[tuple[int, str, str]]) -> None:
    agrees("".join(" " * (2 * depth) + head + tail + "\n" for depth, head, tail in shape))


def test_a_deeply_nested_file_is_left_to_pyyaml_which_refuses_it_in_words() -> None:
    """A hostile job file nested thousands deep: no RecursionError escapes the lean reader, and
    the file is refused as not YAML, not with a traceback."""
    import pytest

    flow = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    block = "".join(" " * depth + "k:\n" for depth in range(3000))
    assert plainyaml.parse(flow) is plainyaml.UNREAD
    assert plainyaml.parse(block) is plainyaml.UNREAD
    with pytest.raises(jobtext.NotParsed, match="nesting depth"):
        jobtext.parse(flow)
