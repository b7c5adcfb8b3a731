"""The section-5 experiments: compaction's search against an exhaustive one, the fit rule, the workload model, and a tiny run of each."""

from pathlib import Path

import pytest

from bench.section5 import __main__ as cli
from bench.section5.compaction import (
    PackResult,
    compact,
    fits,
    machine_order,
    pack,
    reclaimed_shares,
    reservation,
    summarize,
)
from bench.section5.experiments import bucketed, next_power, split_jobs
from bench.section5.report import write_section
from bench.section5.workload import (
    PROD_CPU_SHARE,
    PROD_RAM_SHARE,
    GiB,
    Work,
    machines_for,
    synthetic_workload,
)
from reference.scheduler import PendingTask
from spec.model import Machine, Resources, TaskId


def work(job: str, priority: int, cpu: int, ram_gib: int = 1, used_cpu: int = 0, index: int = 0) -> Work:
    request = Resources.of(cpu=cpu, ram=ram_gib * GiB)
    return Work(PendingTask(TaskId(job, index), job, priority, request), Resources.of(cpu=used_cpu, ram=0))


def machine(name: str, cpu: int, ram_gib: int = 16) -> Machine:
    return Machine(name, Resources.of(cpu=cpu, ram=ram_gib * GiB))


def exhaustive(pool, tasks, seed, margin=None):
    """The smallest n for which the first n machines of the seeded order fit: every size tried."""
    order = machine_order(pool, seed)
    for n in range(1, len(order) + 1):
        if fits(tasks, pack(order[:n], tasks, seed, margin)):
            return n
    return None


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("margin", [None, 0.25])
def test_compaction_finds_the_size_an_exhaustive_search_finds(seed, margin):
    tasks = synthetic_workload(60, seed)
    pool = machines_for(tasks, seed)
    found = compact(pool, tasks, seed, margin)
    assert found.machines == exhaustive(pool, tasks, seed, margin)
    assert found.packs < len(pool)  # the search tried fewer sizes than the exhaustive one


def test_a_workload_that_fits_on_no_size_of_the_pool_is_reported_as_such():
    tasks = [work("prod/big", 200, 8000)]
    found = compact([machine("m0", 4000), machine("m1", 4000)], tasks, 0)
    assert found.machines is None and found.result is None
    assert summarize([3, None]).p90 is None  # one trial that does not fit: no compacted size


def test_fits_needs_every_prod_task_and_99_percent_of_the_non_prod_requests():
    tasks = [work("prod/a", 200, 1000)] + [work("batch/b", 100, 10, index=i) for i in range(100)]
    everything = {w.task.id: "m0" for w in tasks}
    assert fits(tasks, PackResult(everything, 1, {}))
    one_batch_left = {k: v for k, v in everything.items() if k != TaskId("batch/b", 0)}
    assert fits(tasks, PackResult(one_batch_left, 1, {}))  # 990 of 1000 millicores: 99%
    two_left = {k: v for k, v in one_batch_left.items() if k != TaskId("batch/b", 1)}
    assert not fits(tasks, PackResult(two_left, 1, {}))  # 980 of 1000: 98%
    no_prod = {k: v for k, v in everything.items() if k.job != "prod/a"}
    assert not fits(tasks, PackResult(no_prod, 1, {}))


def test_reservation_is_usage_plus_the_margin_and_never_above_the_limit():
    w = work("prod/a", 200, 4000, used_cpu=1000)
    assert reservation(w, 0.25).get("cpu") == 1250  # 1000 x 1.25
    assert reservation(work("prod/a", 200, 4000, used_cpu=3900), 0.25).get("cpu") == 4000  # 4875 capped at the limit


def test_non_prod_runs_in_what_a_prod_task_requested_but_does_not_reserve():
    cell = [machine("m0", 4000)]
    tasks = [work("prod/a", 200, 4000, used_cpu=1000), work("batch/b", 100, 2000, used_cpu=1000)]
    assert set(pack(cell, tasks, 0).placed) == {TaskId("prod/a", 0)}  # at requests the machine is full
    on = pack(cell, tasks, 0, margin=0.25)
    assert set(on.placed) == {TaskId("prod/a", 0), TaskId("batch/b", 0)}
    # 6000m placed on a 4000m machine: (6000 - 4000) / 6000 = 1/3 of the CPU runs in reclaimed resources
    assert on.reclaimed_share["cpu"] == pytest.approx(1 / 3)
    assert reclaimed_shares(cell, tasks, {TaskId("prod/a", 0): "m0"})["cpu"] == 0.0


def test_power_of_two_buckets_start_at_half_a_core_and_one_gib():
    assert [next_power(x, 500) for x in (1, 500, 501, 1000, 1001, 12000)] == [500, 500, 1000, 1000, 2000, 16000]
    (w,) = bucketed([work("batch/b", 100, 1200, ram_gib=3)])
    assert w.task.request.get("cpu") == 2000 and w.task.request.get("ram") == 4 * GiB


def test_subcells_take_whole_jobs_and_the_same_seed_splits_the_same_way():
    tasks = synthetic_workload(300, 0)
    parts = split_jobs(tasks, 5, 7)
    assert sum(len(p) for p in parts) == len(tasks)
    homes = [{w.task.id.job for w in p} for p in parts]
    assert all(not (a & b) for i, a in enumerate(homes) for b in homes[i + 1 :])
    assert split_jobs(tasks, 5, 7) == parts


def test_the_synthetic_workload_is_seeded_and_gives_prod_its_published_shares():
    assert synthetic_workload(500, 3) == synthetic_workload(500, 3)
    tasks = synthetic_workload(20000, 0)
    assert len(tasks) == 20000
    for resource, share in (("cpu", PROD_CPU_SHARE), ("ram", PROD_RAM_SHARE)):
        prod = sum(w.task.request.get(resource) for w in tasks if w.prod)
        assert prod / sum(w.task.request.get(resource) for w in tasks) == pytest.approx(share, abs=0.08)
    assert all(w.usage.get("cpu") <= w.task.request.get("cpu") for w in tasks)


def test_writing_a_section_again_replaces_its_block_and_keeps_the_rest(tmp_path):
    report = tmp_path / "r.md"
    write_section(report, "a", "first\n")
    report.write_text(report.read_text() + "\nhand-written discussion\n")
    write_section(report, "b", "other\n")
    write_section(report, "a", "second\n")
    text = report.read_text()
    assert "second" in text and "first" not in text and "hand-written discussion" in text and "other" in text
    assert text.count("<!-- begin a -->") == 1


OPENB_PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos
p0,4000,8192,1,1000,,LS
p1,2000,4096,0,0,,BE
p2,8000,16384,1,500,,Burstable
p3,1000,2048,0,0,,LS
p4,2000,4096,2,1000,,BE
p5,6000,4096,0,0,,Guaranteed
"""
OPENB_MACHINES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},16000,65536,2,V100\n" for i in range(6))


@pytest.mark.parametrize("experiment", ["segregation", "subcells", "bucketing", "reclamation"])
@pytest.mark.parametrize("workload", ["synthetic", "openb"])
def test_each_experiment_writes_its_section_with_its_figures_and_plot(tmp_path: Path, experiment, workload):
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "openb_pod_list_default.csv").write_text(OPENB_PODS)
    (trace / "openb_node_list_all_node.csv").write_text(OPENB_MACHINES)
    report, plots = tmp_path / "borg-section5.md", tmp_path / "section5"
    args = [experiment, "--workload", workload, "--trials", "2", "--tasks", "40", "--pods", "6", "--trace", str(trace)]
    assert cli.main([*args, "--report", str(report), "--plots", str(plots)]) == 0
    text = report.read_text()
    name = f"{experiment}-{workload}"
    assert f"<!-- begin {name} -->" in text and f"<!-- end {name} -->" in text
    assert (plots / f"{name}.png").stat().st_size > 0
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| setting")]
    assert rows and all(line.split("|")[2].strip().isdigit() for line in rows)  # every row fits, with its p90
    assert f"python3 -m bench.section5 {experiment} --workload {workload} --trials 2" in text
    assert cli.main([*args, "--report", str(report), "--plots", str(plots), "--report-only"]) == 0
    assert report.read_text().count(f"<!-- begin {name} -->") == 1


def test_a_task_whose_buckets_fit_no_machine_keeps_its_own_request():
    cell = [machine("m0", 96000, ram_gib=768), machine("m1", 16000, ram_gib=1024)]
    # 70000m -> 128000m: more than any machine has, so the task keeps 70000m and 600 GiB
    (w,) = bucketed([work("prod/a", 200, 70000, ram_gib=600)], cell)
    assert w.task.request.get("cpu") == 70000 and w.task.request.get("ram") == 600 * GiB
    (w,) = bucketed([work("prod/a", 200, 40000, ram_gib=300)], cell)  # 64000m and 512 GiB fit m0
    assert w.task.request.get("cpu") == 64000 and w.task.request.get("ram") == 512 * GiB
