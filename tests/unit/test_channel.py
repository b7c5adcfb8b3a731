"""The master-borglet channel (reference/channel.py): each signed part tampered with, times
out of the window, another key, the key file's mode, and the middleware's 401 before any handler."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from reference import channel

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
NOW = 1_800_000_000.0
TARGET = b"/v1/tasks/alice%2Fweb%2F0%230/logs?stream=stdout&tail=10"
BODY = b'{"master":"master0","epoch":3,"seq":9,"tasks":[]}'


def signed(**change: object) -> dict[str, object]:
    """A correctly signed request to machine m1, with `change` applied after signing."""
    request: dict[str, object] = {"method": "POST", "target": TARGET, "body": BODY, "machine": "m1", "now": NOW}
    request["headers"] = channel.sign(KEY, "POST", TARGET, BODY, "m1", NOW)
    request.update(change)
    return request


def check(request: dict[str, object], key: bytes = KEY, machine: str = "m1") -> tuple[str, str] | None:
    return channel.verify(
        key, request["method"], request["target"], request["headers"], request["body"],  # type: ignore[arg-type]
        machine, request["now"],  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_request_signed_with_the_key_for_this_machine_passes() -> None:
    assert check(signed()) is None


@pytest.mark.parametrize(
    "change",
    [
        {"method": "GET"},
        {"target": b"/v1/tasks/bob%2Fweb%2F0%230/logs?stream=stdout&tail=10"},  # another task
        {"target": TARGET.replace(b"tail=10", b"tail=10000")},  # the query
        {"body": BODY.replace(b'"seq":9', b'"seq":99')},  # one digit of the body
        {"body": BODY + b" "},
    ],
    ids=["method", "path", "query", "body", "body-appended"],
)
def test_tampering_with_any_signed_part_is_refused(change: dict[str, object]) -> None:
    problem = check(signed(**change))
    assert problem is not None and problem[0] == channel.SIGNATURE_HEADER
    assert "does not match" in problem[1]


def test_a_changed_signing_time_is_refused() -> None:
    headers = {**signed()["headers"], channel.TIME_HEADER: f"{NOW + 1:.3f}"}  # type: ignore[dict-item]
    assert check(signed(headers=headers))[0] == channel.SIGNATURE_HEADER  # type: ignore[index]


def test_a_request_for_another_machine_is_refused_even_correctly_signed() -> None:
    # A sync signed for m1, replayed to m2 inside the window: m2's fence might accept its seq.
    problem = check(signed(), machine="m2")
    assert problem is not None and problem[0] == channel.MACHINE_HEADER
    assert "'m1'" in problem[1] and "'m2'" in problem[1]
    # Naming m2 in the header without signing it again breaks the signature instead.
    headers = {**signed()["headers"], channel.MACHINE_HEADER: "m2"}  # type: ignore[dict-item]
    assert check(signed(headers=headers), machine="m2")[0] == channel.SIGNATURE_HEADER  # type: ignore[index]


def test_another_cells_key_is_refused() -> None:
    problem = check(signed(), key=OTHER_KEY)
    assert problem is not None and "does not match" in problem[1]


@pytest.mark.parametrize("skew", [-31.0, 31.0, -3600.0, 1e12])
def test_a_time_outside_the_window_is_refused(skew: float) -> None:
    # The borglet's clock is NOW + skew: the request is too old, or from too far ahead.
    problem = check(signed(now=NOW + skew))
    assert problem is not None and problem[0] == channel.TIME_HEADER


@pytest.mark.parametrize("skew", [-29.0, 29.0])
def test_a_time_inside_the_window_passes(skew: float) -> None:
    assert check(signed(now=NOW + skew)) is None


@pytest.mark.parametrize("value", ["", "yesterday", "nan", "inf", "1e999"])
def test_a_malformed_time_is_refused_naming_the_header(value: str) -> None:
    headers = {**signed()["headers"], channel.TIME_HEADER: value}  # type: ignore[dict-item]
    problem = check(signed(headers=headers))
    assert problem is not None and problem[0] == channel.TIME_HEADER


def test_an_unsigned_request_is_refused() -> None:
    problem = check(signed(headers={}))
    assert problem is not None and problem[0] == channel.SIGNATURE_HEADER and "not signed" in problem[1]


# --- the key file ------------------------------------------------------------------------------


def test_a_new_key_file_is_0600_and_kept_when_made_again(tmp_path: Path) -> None:
    path = channel.create_key_file(tmp_path / "channel.key")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key = channel.load_key(path)
    assert len(key) == channel.KEY_BYTES
    assert channel.load_key(channel.create_key_file(path)) == key


def test_a_key_open_to_others_or_malformed_or_missing_is_refused(tmp_path: Path) -> None:
    path = channel.create_key_file(tmp_path / "channel.key")
    os.chmod(path, 0o644)
    with pytest.raises(channel.ChannelKeyError, match="chmod 600"):
        channel.load_key(path)
    os.chmod(path, 0o600)
    path.write_text("not hex\n")
    with pytest.raises(channel.ChannelKeyError, match="64 hex digits"):
        channel.load_key(path)
    with pytest.raises(channel.ChannelKeyError, match="cannot read"):
        channel.load_key(tmp_path / "absent.key")


# --- the middleware and the client auth -----------------------------------------------------------


def verified_app(clock: float = NOW) -> tuple[TestClient, list[bytes]]:
    """A one-endpoint app behind the Verifier for machine m1; `seen` lists the bodies it got."""
    seen: list[bytes] = []
    app = FastAPI()

    @app.post("/v1/sync")
    async def sync(request: Request) -> dict[str, int]:
        seen.append(await request.body())
        return {"ok": 1}

    @app.get("/healthz")
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    app.add_middleware(channel.Verifier, key=KEY, machine="m1", clock=lambda: clock)
    return TestClient(app), seen


def test_the_client_auth_signs_what_the_middleware_accepts() -> None:
    client, seen = verified_app()
    auth = channel.ClientAuth(KEY, clock=lambda: NOW)
    answer = client.post("/v1/sync?x=1", content=BODY, headers=channel.to_machine("m1"), auth=auth)
    assert answer.status_code == 200, answer.text
    assert seen == [BODY]  # the handler read the body the middleware had already read


@pytest.mark.parametrize(
    "how",
    ["unsigned", "other-key", "other-machine", "stale"],
)
def test_a_refused_request_is_a_401_naming_the_header_and_never_reaches_the_handler(how: str) -> None:
    client, seen = verified_app()
    auth = {
        "unsigned": None,
        "other-key": channel.ClientAuth(OTHER_KEY, clock=lambda: NOW),
        "other-machine": channel.ClientAuth(KEY, clock=lambda: NOW),
        "stale": channel.ClientAuth(KEY, clock=lambda: NOW - 60),
    }[how]
    machine = "m2" if how == "other-machine" else "m1"
    if how == "stale":
        # Stale means older than the window before the newest request accepted (skew_floor).
        fresh = channel.ClientAuth(KEY, clock=lambda: NOW)
        assert client.post("/v1/sync", content=BODY, headers=channel.to_machine("m1"), auth=fresh).status_code == 200
        seen.clear()
    answer = client.post("/v1/sync", content=BODY, headers=channel.to_machine(machine), auth=auth)
    assert answer.status_code == 401
    detail = answer.json()["detail"][0]
    assert detail["field"].startswith("X-Minborg-Channel-") and detail["error"]
    assert seen == []


def test_healthz_stays_open() -> None:
    client, _ = verified_app()
    assert client.get("/healthz").status_code == 200


def test_a_borglet_60_s_ahead_says_clock_skew_with_both_times() -> None:
    # The master signs at NOW; the borglet's clock reads NOW + 60.
    problem = check(signed(now=NOW + 60))
    assert problem is not None and problem[0] == channel.TIME_HEADER
    assert problem[1].startswith(f"clock skew: request signed at {NOW:.3f}, borglet clock {NOW + 60:.3f}")
    assert "60 s ahead of the master's" in problem[1]


def test_a_borglet_behind_says_so() -> None:
    problem = check(signed(now=NOW - 45))
    assert problem is not None and "45 s behind the master's" in problem[1]


def test_the_skew_refusal_reaches_the_client_in_the_401_body() -> None:
    client, _ = verified_app(clock=NOW + 60)
    ahead = channel.ClientAuth(KEY, clock=lambda: NOW + 60)
    assert client.post("/v1/sync", content=BODY, headers=channel.to_machine("m1"), auth=ahead).status_code == 200
    # Now a request signed 60 s before the newest one accepted, and 60 s off the borglet's clock.
    answer = client.post("/v1/sync", content=BODY, headers=channel.to_machine("m1"), auth=channel.ClientAuth(KEY, clock=lambda: NOW))
    assert answer.status_code == 401
    assert answer.json()["detail"][0]["error"].startswith("clock skew: request signed at")


def test_skew_floor() -> None:
    assert channel.skew_floor(None) == float("-inf")  # nothing accepted yet: any time passes once
    assert channel.skew_floor(NOW) == NOW - channel.WINDOW_S


def test_a_borglet_60_s_ahead_obeys_its_masters_and_says_how_far_off_it_is() -> None:
    client, seen = verified_app(clock=NOW + 60)
    auth = channel.ClientAuth(KEY, clock=lambda: NOW)
    for _ in range(3):
        answer = client.post("/v1/sync", content=BODY, headers=channel.to_machine("m1"), auth=auth)
        assert answer.status_code == 200
        assert answer.headers[channel.SKEW_HEADER] == "60"
    assert len(seen) == 3


def test_a_replay_older_than_the_window_behind_the_newest_is_refused_on_a_skewed_borglet() -> None:
    client, seen = verified_app(clock=NOW + 60)
    newest = channel.ClientAuth(KEY, clock=lambda: NOW)
    assert client.post("/v1/sync", content=BODY, headers=channel.to_machine("m1"), auth=newest).status_code == 200
    old = channel.ClientAuth(KEY, clock=lambda: NOW - 31)  # 31 s before the newest accepted
    answer = client.post("/v1/sync", content=BODY, headers=channel.to_machine("m1"), auth=old)
    assert answer.status_code == 401 and answer.json()["detail"][0]["error"].startswith("clock skew")
    assert len(seen) == 1


def test_a_master_a_day_ahead_does_not_lock_out_the_others_of_a_borglet_on_time() -> None:
    client, seen = verified_app(clock=NOW)
    ahead = channel.ClientAuth(KEY, clock=lambda: NOW + 86_400)
    on_time = channel.ClientAuth(KEY, clock=lambda: NOW)
    for auth in (ahead, on_time, on_time):
        assert client.post("/v1/sync", content=BODY, headers=channel.to_machine("m1"), auth=auth).status_code == 200
    assert len(seen) == 3


def test_an_answer_within_the_window_carries_no_skew_header() -> None:
    client, _ = verified_app(clock=NOW + 5)
    answer = client.post("/v1/sync", content=BODY, headers=channel.to_machine("m1"), auth=channel.ClientAuth(KEY, clock=lambda: NOW))
    assert answer.status_code == 200 and channel.SKEW_HEADER not in answer.headers


# --- standing down: a borglet that refuses the cell stops its tasks when asked long enough ----------


def test_stand_down_needs_the_asking_for_its_whole_wait_with_nothing_accepted_between() -> None:
    sd = channel.StandDown(after_s=10)
    assert not any(sd.refused(t, asked=False, reason="x") for t in range(0, 30))  # never asked
    assert not any(sd.refused(t, asked=True, reason="key") for t in range(100, 110))
    assert sd.refused(110, asked=True, reason="key") and sd.reason == "key"
    assert not sd.refused(111, asked=True, reason="key")  # said once, again only after another wait
    assert sd.refused(120, asked=True, reason="key") and sd.stood_down == 2
    # An accepted request between undoes the asking: a master gets through.
    sd = channel.StandDown(after_s=10)
    for t in range(200, 209):
        assert not sd.refused(t, asked=True, reason="key")
    sd.accepted()
    assert not any(sd.refused(t, asked=True, reason="key") for t in range(209, 219))
    # A gap in the asking longer than the wait starts the count again.
    sd = channel.StandDown(after_s=10)
    assert not sd.refused(300, asked=True, reason="key")
    assert not sd.refused(315, asked=True, reason="key")
    assert not sd.refused(324, asked=True, reason="key")
    assert sd.refused(325, asked=True, reason="key")


def _standing_app(monotonic: list[float]) -> tuple[TestClient, list[str]]:
    told: list[str] = []
    app = FastAPI()

    @app.get("/v1/state")
    def state() -> dict[str, int]:
        return {"ok": 1}

    app.add_middleware(
        channel.Verifier, key=KEY, machine="m1", clock=lambda: NOW, on_stand_down=told.append,
        monotonic=lambda: monotonic[0],
    )  # fmt: skip
    return TestClient(app), told


def _get(client: TestClient, key: bytes, asked: bool) -> int:
    headers = channel.sign(key, "GET", b"/v1/state", b"", "m1", NOW)
    if asked:
        headers[channel.STAND_DOWN_HEADER] = "1"
    return client.get("/v1/state", headers=headers).status_code


def test_a_borglet_refusing_the_cells_key_stands_down_once_asked_for_the_wait() -> None:
    clock = [0.0]
    client, told = _standing_app(clock)
    for second in range(int(channel.STAND_DOWN_S) + 1):
        clock[0] = float(second)
        assert _get(client, OTHER_KEY, asked=True) == 401  # still refused: standing down is no pass
    assert len(told) == 1 and "X-Minborg-Channel-Signature" in told[0]


def test_asking_without_the_key_cannot_stand_down_a_borglet_its_masters_reach() -> None:
    # Another process on the network sends refused requests that ask; the masters' signed
    # polls get through every second between them: nothing is stopped.
    clock = [0.0]
    client, told = _standing_app(clock)
    for second in range(3 * int(channel.STAND_DOWN_S)):
        clock[0] = float(second)
        assert _get(client, OTHER_KEY, asked=True) == 401
        assert _get(client, KEY, asked=False) == 200
    # Refusals that do not ask (a wrong key, no stand-down asked) stop nothing either.
    for second in range(3 * int(channel.STAND_DOWN_S)):
        clock[0] = 100.0 + second
        assert _get(client, OTHER_KEY, asked=False) == 401
    assert told == []
