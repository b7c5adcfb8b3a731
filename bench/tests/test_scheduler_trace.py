"""The trace reader on small pod lists of the openb family: defaults for absent columns, clear errors."""

from pathlib import Path

import pytest

from bench.scheduler import packing_bench
from bench.scheduler.packing import arrived_prefix, gpu_capacity, unallocated, workload
from bench.scheduler.study import compact, compaction
from bench.scheduler.trace import (
    DEFAULT_QOS,
    QOS_PRIORITY,
    TraceError,
    read_machines,
    read_pods,
)
from reference.scheduler import SchedulerConfig
from spec.model import Machine, Resources

MiB = 2**20


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_pod_list_with_only_the_required_columns_loads_with_the_documented_defaults(tmp_path):
    p = write(tmp_path, "pods.csv", "cpu_milli,memory_mib,num_gpu,gpu_milli\n4000,1024,1,500\n2000,512,0,0\n")
    pods = read_pods(p)
    assert [x.created for x in pods] == [0, 1]  # arrival in file order
    assert all(x.deleted is None for x in pods)  # never departs
    first = pods[0].task
    assert first.user == DEFAULT_QOS and first.priority == QOS_PRIORITY[DEFAULT_QOS]
    assert first.constraints == ()  # any GPU model
    assert first.request == Resources.of(cpu=4000, ram=1024 * MiB, gpu=500)
    assert first.id.job == f"{DEFAULT_QOS}/pod-00000"


def test_empty_optional_cells_take_the_defaults_too(tmp_path):
    p = write(
        tmp_path, "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,creation_time,deletion_time\n"
        "a,1000,10,2,1000,,,,\nb,1000,10,1,1000,V100|T4,LS,5,9\n",
    )
    a, b = read_pods(p)
    assert (a.created, a.deleted, a.task.user) == (0, None, DEFAULT_QOS)
    assert (b.created, b.deleted, b.task.priority) == (5, 9, 200)
    assert b.task.constraints[0].values == ("V100", "T4")


@pytest.mark.parametrize(
    "row, where",
    [
        ("1000,10,one,0", "line 3, column 'num_gpu': 'one' is not a number"),
        ("1000,10,1,2.5", "line 3, column 'gpu_milli': '2.5' is not a whole number"),
        ("-5,10,0,0", "line 3, column 'cpu_milli': '-5' is negative"),
        (",10,0,0", "line 3, column 'cpu_milli': is empty"),
        ("1000,10,0,0,7", "line 3: 5 cells for 4 columns"),
    ],
)
def test_a_malformed_row_names_file_line_and_column(tmp_path, row, where):
    p = write(tmp_path, "pods.csv", f"cpu_milli,memory_mib,num_gpu,gpu_milli\n1000,10,0,0\n{row}\n")
    with pytest.raises(TraceError) as e:
        read_pods(p)
    assert str(p) in str(e.value) and where in str(e.value)


def test_a_missing_required_column_or_file_is_a_clear_error(tmp_path):
    p = write(tmp_path, "pods.csv", "cpu_milli,num_gpu\n1000,0\n")
    with pytest.raises(TraceError, match="lacks required column.*memory_mib, gpu_milli"):
        read_pods(p)
    with pytest.raises(TraceError, match="cannot read it"):
        read_pods(tmp_path / "absent.csv")
    q = write(tmp_path, "pods.csv", "cpu_milli,memory_mib,num_gpu,gpu_milli,qos\n1,1,0,0,Gold\n")
    with pytest.raises(TraceError, match="column 'qos': 'Gold' is not one of"):
        read_pods(q)


def test_machine_lists_default_to_no_gpu(tmp_path):
    p = write(tmp_path, "nodes.csv", "cpu_milli,memory_mib\n8000,1024\n")
    (m,) = read_machines(p)
    assert m.name == "node-00000" and m.capacity.get("gpu") == 0 and m.attrs == ()


def _machines(n: int) -> list[Machine]:
    return [Machine(f"m{i}", Resources.of(cpu=4000, ram=4 * MiB, gpu=2000)) for i in range(n)]


def test_compaction_that_does_not_fit_says_so():
    from reference.scheduler.snapshot import PendingTask
    from spec.model import TaskId

    big = [PendingTask(TaskId("u/j", 0), "u", 100, Resources.of(cpu=8000, ram=MiB))]
    assert compact(_machines(3), big, SchedulerConfig(), 1) is None
    assert compaction(_machines(3), big, SchedulerConfig(), [1, 2]) == (None, [None, None])


def test_packing_workload_and_the_arrived_prefix(tmp_path):
    p = write(tmp_path, "pods.csv", "cpu_milli,memory_mib,num_gpu,gpu_milli\n100,1,1,500\n100,1,0,0\n100,1,1,1000\n")
    ms = _machines(2)  # 4 GPUs: 4000 milli
    tasks = workload(read_pods(p), gpu_capacity(ms), seed=3)
    asked = sum(t.request.get("gpu") for t in tasks)
    assert asked >= 1.3 * 4000 and len({t.id for t in tasks}) == len(tasks)  # copies are tasks of their own
    prefix = arrived_prefix(tasks, 4000)
    assert sum(t.request.get("gpu") for t in prefix) >= 4000 > sum(t.request.get("gpu") for t in prefix[:-1])
    r = unallocated(ms, tasks, SchedulerConfig(policy="best_fit"), 3)
    assert 0.0 <= r.unallocated_pct <= 100.0 and r.placed + r.skipped == r.arrived_tasks == len(prefix)


def test_bench_packing_on_tiny_files_writes_its_report(tmp_path):
    pods = write(tmp_path, "pods.csv", "cpu_milli,memory_mib,num_gpu,gpu_milli\n100,1,1,500\n100,1,0,0\n100,1,1,1000\n")
    nodes = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\na,4000,64,2,T4\nb,4000,64,2,T4\n")
    args = ["--pods", str(pods), "--nodes", str(nodes), "--seeds", "2", "--off-seeds", "1",
            "--policy", "best_fit", "--policy", "fgd", "--out", str(tmp_path / "out")]
    assert packing_bench.main(args) == 0
    report = (tmp_path / "out" / "packing.md").read_text()
    assert "| fgd | " in report and "(n=2)" in report and "minborg bench packing --pods" in report
    bad = write(tmp_path, "bad.csv", "cpu_milli,memory_mib,num_gpu,gpu_milli\n1,1,x,0\n")
    assert packing_bench.main(["--pods", str(bad), "--nodes", str(nodes), "--out", str(tmp_path / "o2")]) == 2
