"""`task exec -it`'s pure parts: the session requests' checks (execspec), the borglet's output ring, and its sessions' binding to their task and user."""

from __future__ import annotations

import base64

import pytest

from reference import execspec
from reference.borglet.terminal import Output, Terminals


@pytest.mark.parametrize(
    ("payload", "field"),
    [({"command": []}, "command"), ({"command": ["sh"], "rows": 0}, "rows"), ({"command": ["sh"], "cols": True}, "cols"),
     ({"command": ["sh"], "tty": True}, "tty"), ("sh", "")],
)  # fmt: skip
def test_a_bad_session_request_names_its_field(payload: object, field: str) -> None:
    with pytest.raises(execspec.ExecError) as err:
        execspec.parse_terminal(payload)
    assert err.value.errors[0]["field"] == field


def test_session_requests_are_read_as_sent() -> None:
    assert execspec.parse_terminal({"command": ["sh"]}) == execspec.TerminalRequest(("sh",), 24, 80)
    # 1453.0 is JSON's integer 1453 (as JSON Schema reads it); 80.5 is not a size
    assert execspec.parse_terminal({"command": ["sh"], "rows": 208, "cols": 1453.0}) == execspec.TerminalRequest(("sh",), 208, 1453)
    with pytest.raises(execspec.ExecError):
        execspec.parse_terminal({"command": ["sh"], "cols": 80.5})
    assert execspec.parse_input({"data": base64.b64encode(b"ls\r").decode(), "rows": 30, "cols": 100}) == (b"ls\r", 30, 100)
    assert execspec.parse_input({}) == (b"", None, None)
    assert execspec.parse_output({"offset": 7}) == (7, execspec.OUTPUT_WAIT_S)
    for payload, field in (({"data": "not base64!"}, "data"), ({"data": base64.b64encode(b"x" * 70_000).decode()}, "data")):
        with pytest.raises(execspec.ExecError) as err:
            execspec.parse_input(payload)
        assert err.value.errors[0]["field"] == field
    for payload, field in (({"offset": -1}, "offset"), ({"wait_s": 60}, "wait_s")):
        with pytest.raises(execspec.ExecError) as err:
            execspec.parse_output(payload)
        assert err.value.errors[0]["field"] == field
    assert execspec.valid_session("0" * 32) and not execspec.valid_session("../" + "0" * 29)


def test_the_output_keeps_its_last_bytes_and_says_how_many_a_late_reader_lost() -> None:
    out = Output(kept=10)
    out.add(b"0123456789")
    assert out.after(4) == (b"456789", 10, 0)
    out.add(b"abcdef")
    assert out.after(0) == (b"6789abcdef", 16, 6)
    assert out.after(16) == (b"", 16, 0)


def test_a_session_answers_only_its_task_and_its_user_and_the_idle_are_reaped() -> None:
    now = [0.0]
    terminals = Terminals(clock=lambda: now[0], idle_s=60)
    session = terminals.open("alice/web/0#0@1", "alice")
    assert session is not None
    assert terminals.find(session.id, "alice/web/0#0@1", "alice") is session
    assert terminals.find(session.id, "victor/own/0#0@1", "alice") is None
    assert terminals.find(session.id, "alice/web/0#0@1", "victor") is None
    assert terminals.find("f" * 32, "alice/web/0#0@1", "alice") is None
    now[0] = 61.0
    assert terminals.find(session.id, "alice/web/0#0@1", "alice") is None, "idle past its limit: gone"
