"""The chaos load's history and its check: the client records every read it makes, a stale one
included, and the checker fails a history that holds one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

from chaos import checker
from chaos.history import Op, read_ops, read_result
from harness import history as hh

KEY = "chaos/kv-1-0-0"


def write_history(root: Path, ops: list[Op], final_t: float) -> Path:
    path = root / "history.jsonl"
    path.write_text("".join(json.dumps(asdict(o)) + "\n" for o in ops))
    (root / "final.json").write_text(json.dumps({"t": final_t, "keys": 1}))
    return path


def test_one_op_and_outcome_for_harness_and_chaos() -> None:
    assert Op is hh.Op and checker.Outcome is hh.Outcome


def test_a_stale_read_in_the_history_fails_the_check(tmp_path: Path) -> None:
    # The update was acknowledged at revision 5; a later read answered at revision 3 shows the
    # value before it. The final read shows the update: it survived, but the read was stale.
    ops = [
        Op(1, "submit", KEY, {"cpu": 1}, 0.0, 1.0, "ok", {"status": 201, "revision": 4}),
        Op(2, "update", KEY, {"cpu": 2}, 2.0, 3.0, "ok", {"status": 200, "revision": 5}),
        Op(3, "read", KEY, None, 4.0, 5.0, "ok", read_result(1, revision=3, floor=5)),
        Op(4, "read", KEY, None, 10.0, 10.1, "ok", read_result(2, revision=5, floor=5)),
    ]
    verdict = checker.check_file(write_history(tmp_path, ops, final_t=10.0))
    assert not verdict.ok
    assert verdict.nonlinearizable_keys == [KEY]
    assert [w["value"] for w in verdict.lost_writes] == [{"cpu": 2}]
    assert verdict.details["final_reads_check"]["ok"]  # the final read alone does not see it
    # The same history with the read fresh passes.
    ops[2].result = read_result(2, revision=5, floor=5)
    assert checker.check_file(write_history(tmp_path, ops, final_t=10.0)).ok


def test_the_final_reads_use_the_harness_judgement(tmp_path: Path) -> None:
    ops = [
        Op(1, "submit", KEY, {"cpu": 1}, 0.0, 1.0, "ok"),
        Op(2, "update", KEY, {"cpu": 5}, 1.5, 9.0, "unknown"),  # cannot explain what the final read shows
        Op(3, "update", KEY, {"cpu": 2}, 2.0, 3.0, "ok"),
        Op(4, "read", KEY, None, 10.0, 10.1, "ok", {"cpu": 1}),
    ]
    own = checker.final_reads_check(ops, final_t=10.0)
    assert not own.ok and [w["value"] for w in own.lost_writes] == [{"cpu": 2}]
    assert checker.final_reads_check(ops[:3], final_t=10.0).details["unread_keys"] == [KEY]


def test_read_result_marks_a_read_below_the_floor() -> None:
    assert read_result(7, revision=3, floor=5) == {"cpu": 7, "revision": 3, "stale": True}
    assert read_result(7, revision=5, floor=5) == {"cpu": 7, "revision": 5}
    assert read_result(None, revision=0, floor=5) is None


# The load's client, driven against canned answers in a process of its own (locust patches
# the interpreter it is imported in): each read is one request, recorded as it was answered.
CLIENT = textwrap.dedent(
    """
    import locust  # first, as the locust command does: it patches ssl before requests loads it
    import json, sys, types
    from chaos import locustfile as lf

    class Answer:
        def __init__(self, status, doc):
            self.status_code, self._doc, self.text = status, doc, json.dumps(doc)
        def json(self):
            return self._doc

    class Session:
        def __init__(self, answers):
            self.answers, self.sent = list(answers), []
        def request(self, method, url, json=None, headers=None, timeout=None):
            self.sent.append({"method": method, "url": url, "headers": headers})
            return self.answers.pop(0)

    job = {"request": {"cpu": "1m"}}
    user = types.SimpleNamespace(
        http=Session([Answer(200, {"job": job, "revision": 3}), Answer(404, {"detail": []})]),
        urls=["http://m0", "http://m1"], turn=0, acked={"kv-1-0-0"},
        environment=types.SimpleNamespace(events=types.SimpleNamespace(
            request=types.SimpleNamespace(fire=lambda **kw: None))),
    )
    user._done = lambda *a, **kw: lf.KVUser._done(user, *a, **kw)
    lf.FLOOR["revision"] = 5
    for _ in range(2):
        op = lf.HISTORY.invoke("read", "chaos/kv-1-0-0", None)
        lf.KVUser._call(user, op, "GET", "/v1/jobs/chaos/kv-1-0-0", None)
    print(json.dumps(user.http.sent))
    """
)


def test_the_client_records_stale_reads_and_sends_its_floor(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "cell.json").write_text(json.dumps({
        "cell": "test", "state_dir": str(state), "workdir": str(tmp_path), "started_at": 0.0,
        "master_urls": ["http://m0", "http://m1"], "etcd_urls": [], "borglet_urls": {},
    }))  # fmt: skip
    run = tmp_path / "run"
    env = {"CHAOS_STATE_DIR": str(state), "CHAOS_RUN_DIR": str(run), "CHAOS_RUN_ID": "1", "PATH": ""}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", CLIENT], env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    sent = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(sent) == 2  # one request a read: neither answer was retried
    assert all(s["headers"] == {"X-Minborg-Min-Revision": "5"} for s in sent)
    reads = read_ops(run / "history.jsonl")
    assert [(o.outcome, o.result) for o in reads] == [
        ("ok", {"cpu": 1, "revision": 3, "stale": True}),  # below the floor: recorded as it came
        ("ok", None),  # no job, though its submit was acknowledged: recorded as read
    ]
    assert len((run / "stale_reads.jsonl").read_text().splitlines()) == 2
