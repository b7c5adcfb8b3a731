"""How many feasible machines a class's sample collects: relaxed randomization's k, widened to
one machine per task only for a job of more tasks than k (its tasks spread), never for a class
that is large only because many small jobs share it (their packing stays what k gives)."""

from collections import Counter

from reference.scheduler import SchedulerConfig, Snapshot, plan_pass
from tests.unit.scheduler_cells import machine, pending

# 100 machines of 8.0 to 17.9 cores in a scrambled order: best fit's tightest machine in the
# whole cell is seldom among the first k = max(50, 5% of 100) = 50 that the walk reaches.
SIZED = tuple(machine(f"m{i:03d}", cpu=8000 + (i * 37) % 100 * 100) for i in range(100))


def test_a_job_of_ten_thousand_tasks_spreads_over_every_machine():
    # The overload bench's job: 10,000 tasks of 1m CPU on 100 machines of 64 cores. The class
    # samples one machine per task of its job (10,000, at most the cell's 100), so the skew
    # term evens it out at 100 a machine instead of 200 a machine on the first 50.
    machines = tuple(machine(f"m{i:03d}", cpu=64000) for i in range(100))
    snap = Snapshot(machines, (), tuple(pending("load/flood", 100, 1, i) for i in range(10_000)))
    counts = Counter(p.machine for p in plan_pass(snap, SchedulerConfig(policy="best_fit")).placements)
    assert sum(counts.values()) == 10_000
    assert len(counts) == 100 and max(counts.values()) == min(counts.values()) == 100


def test_a_large_class_of_one_task_jobs_keeps_the_sample_each_task_would_have_alone():
    # 1,000 one-task jobs with one request are one class of 1,000 tasks, but no job has more
    # than one: the class samples k = 50 machines, as each task does when classes are off, so
    # the placements are the same task for task (scores afresh both ways: no cache drift).
    snap = Snapshot(SIZED, (), tuple(pending(f"u/job{j:04d}", 100, 700) for j in range(1000)))

    def where(**techniques: bool) -> list[str]:
        cfg = SchedulerConfig(policy="best_fit", score_cache=False, **techniques)
        return [p.machine for p in plan_pass(snap, cfg).placements]

    shared = where()
    assert len(shared) == 1000
    assert shared == where(equivalence_classes=False)
    # What the class would do with a sample of the whole cell: a different packing (this is
    # what a class sized by its task count did to the openb traces' packing figures).
    assert shared != where(relaxed_randomization=False)


def test_a_class_samples_by_its_largest_job():
    # One class, two jobs: 10 one-task jobs and a job of 80 tasks. The 80-task job widens the
    # class's sample to 80 machines of the 100, so it lands on 80 machines, one each.
    tasks = [pending(f"u/one{j}", 100, 100) for j in range(10)]
    tasks += [pending("u/wide", 100, 100, i) for i in range(80)]
    snap = Snapshot(SIZED, (), tuple(tasks))
    placed = plan_pass(snap, SchedulerConfig(policy="best_fit")).placements
    wide = Counter(p.machine for p in placed if p.task.job == "u/wide")
    assert sum(wide.values()) == 80 and len(wide) == 80
