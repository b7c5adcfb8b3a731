"""Records of machines, jobs, tasks, quotas and allocs survive a round trip through their etcd form."""

from __future__ import annotations

import json

import pytest

from reference.jobspec import parse_job
from reference.master import codec
from reference.master.cell import JobInfo, MachineInfo, TaskInfo
from spec.model import (
    Alloc,
    Band,
    DeathCause,
    Machine,
    QuotaKey,
    Resources,
    Task,
    TaskId,
    TaskState,
)


def test_machine_round_trip() -> None:
    m = Machine("m1", Resources.of(cpu=4000, ram=2**33), (("rack", "r1"),), "fd1", up=False)
    info = MachineInfo("http://127.0.0.1:7001", "rlimit", (("cpu_milli", 12),))
    assert codec.decode_machine(codec.encode_machine(m, info)) == (m, info)


def test_job_round_trip_keeps_spec_fields_and_file() -> None:
    spec = parse_job({"name": "web", "user": "alice", "priority": 210, "task_count": 2,
                      "request": {"cpu": "250m", "ram": "64MiB"}, "command": ["sleep", "1"],
                      "constraints": [{"attr": "rack", "op": "ne", "value": "r9"}]})  # fmt: skip
    job = spec.to_spec_job(version=4)
    info = JobInfo(spec, 1234.5)
    assert codec.decode_job(codec.encode_job(job, info)) == (job, info)


@pytest.mark.parametrize("state", list(TaskState))
def test_task_round_trip(state: TaskState) -> None:
    t = Task(
        TaskId("alice/web", 3, 7),
        state,
        machine="m1" if state is TaskState.RUNNING else None,
        priority=200,
        request=Resources.of(cpu=250),
        cause=DeathCause.LOST if state is TaskState.DEAD else None,
    )
    info = TaskInfo(port=8080, healthy=True, restarts=2, borglet_state="RUNNING", started_at=1.5,
                    seen=True, placement=3, usage=(("cpu_milli", 5),),
                    history=(("PENDING", 1.0, "submitted"), ("RUNNING", 2.0, "scheduled")))  # fmt: skip
    assert codec.decode_task(codec.encode_task(t, info)) == (t, info)


def test_a_task_record_leaves_out_what_holds_its_default_and_old_full_records_still_read() -> None:
    dead = Task(TaskId("load/flood", 0, 0), TaskState.DEAD, None, 100, Resources.of({}), DeathCause.KILLED)
    info = TaskInfo(placement=1, machine="m0", history=(("PENDING", 1.0, "submitted"), ("DEAD", 2.0, "job killed")))
    raw = codec.encode_task(dead, info)
    assert set(json.loads(raw)) == {"schema", "job", "index", "incarnation", "state", "priority", "cause",
                                    "placement", "last_machine", "history"}  # fmt: skip
    assert codec.decode_task(raw) == (dead, info)
    # Values that differ from the default only in type or falsiness are kept: healthy False is no None.
    sick = TaskInfo(healthy=False, seen=True)
    assert json.loads(codec.encode_task(dead, sick))["healthy"] is False
    assert codec.decode_task(codec.encode_task(dead, sick))[1] == sick
    # A record written whole (every field, as before) reads the same.
    whole = {"schema": 1, "job": "load/flood", "index": 0, "incarnation": 0, "state": "DEAD", "machine": None,
             "priority": 100, "request": {}, "cause": "killed", "reservation": None, "port": 0, "healthy": None,
             "restarts": 0, "borglet_state": "", "started_at": 0.0, "seen": False, "placement": 1, "reason": "",
             "usage": {}, "history": [["PENDING", 1.0, "submitted"], ["DEAD", 2.0, "job killed"]],
             "draining_since": 0.0, "pid": 0, "last_machine": "m0", "events": [], "pending": ""}  # fmt: skip
    assert codec.decode_task(json.dumps(whole).encode()) == (dead, info)


def test_quota_round_trip() -> None:
    key, amount = QuotaKey("*", Band.PRODUCTION), Resources.of(cpu=10_000)
    assert codec.decode_quota(codec.encode_quota(key, amount)) == (key, amount)


def test_other_schema_is_refused() -> None:
    with pytest.raises(codec.SchemaError):
        codec.decode_quota(b'{"schema": 2}')
    with pytest.raises(codec.SchemaError):
        codec.loads(b"not json")


def test_key_layout() -> None:
    keys = codec.Keys("c1")
    assert keys.task(TaskId("alice/web", 3, 1)) == "/minborg/c1/state/tasks/alice/web/3/1"
    assert keys.job("alice/web") == "/minborg/c1/state/jobs/alice/web"
    assert keys.leader == "/minborg/c1/leader"


def test_alloc_round_trip_and_key() -> None:
    a = Alloc("alice/logs", 2, "m3", Resources.of(cpu=500, ram=2**28), 200, "alice")
    assert codec.decode_alloc(codec.encode_alloc(a)) == a
    # The key ends with the spec's name, so a deleted key names the alloc it removes.
    assert codec.Keys("c1").alloc(a.name) == "/minborg/c1/state/allocs/alice/logs/2"


@pytest.mark.parametrize(
    "odd",
    [
        {"retry_at": float("inf")},  # orjson would write null: the standard library keeps it
        {"started_at": float("nan")},
        {"reason": "naïve — 日本 \u2028 \x00 \"quoted\" null"},  # non-ASCII, a NUL, the word null
        {"usage": (("cpu_milli", 2**70),)},  # beyond 64 bits: orjson refuses it
        {"history": (("PENDING", 1e16, "x"), ("RUNNING", 1e-7, "y"))},
    ],
)
def test_a_record_reads_back_as_written_whatever_encoder_wrote_it(odd: dict) -> None:
    t = Task(TaskId("alice/web", 0, 0), TaskState.PENDING, priority=100, request=Resources.of(cpu=10))
    info = TaskInfo(**odd)
    raw = codec.encode_task(t, info)
    back = codec.decode_task(raw)[1]
    for field, value in odd.items():
        got = getattr(back, field)
        if isinstance(value, float) and value != value:  # NaN
            assert got != got
        else:
            assert got == value, (field, got, value)
    # The same document as the standard library's encoding of it, key for key.
    doc = json.loads(raw)
    assert list(doc) == sorted(doc)


def test_evolve_is_replace() -> None:
    from dataclasses import replace

    info = TaskInfo(port=1, history=(("PENDING", 1.0, "a"),))
    assert info.evolve(port=2, reason="r") == replace(info, port=2, reason="r")
    assert info.evolve() == info and info.evolve() is not info
    with pytest.raises(TypeError, match="no field 'prot'"):
        info.evolve(prot=2)


def test_task_info_of_is_the_constructor_and_names_a_missing_or_extra_field() -> None:
    from dataclasses import asdict

    from reference.master.cell import task_info_of

    info = TaskInfo(port=3, history=(("PENDING", 1.0, "a"),), retry_at=2.5)
    assert task_info_of(asdict(info)) == info
    values = asdict(info)
    del values["port"]
    with pytest.raises(TypeError, match="port"):
        task_info_of(values)
    with pytest.raises(TypeError, match="colour"):
        task_info_of({**asdict(info), "colour": 1})
