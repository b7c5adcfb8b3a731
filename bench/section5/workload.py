"""Workloads for the section-5 experiments: a synthetic Borg-like cell and the openb trace, each task with a modelled usage.

A workload is a list of `Work`: a pending task (its request is Borg's limit) and the usage
that the cell's reservation estimate would see for it. Every figure below is seeded and
deterministic: the same arguments give the same tasks, in the same order.

Synthetic workload, with where each parameter comes from. "Verma" is Verma et al., Large-
scale cluster management at Google with Borg, EuroSys 2015; "Tirmazi" is Tirmazi et al.,
Borg: the Next Generation, EuroSys 2020 (the 2019 trace); "Reiss" is Reiss et al.,
Heterogeneity and dynamicity of clouds at scale, SoCC 2012 (the 2011 trace).

- Machines (`MACHINE_SHAPES`): the five commonest platforms of the 2011 trace (Reiss, Table 1:
  CPU/RAM normalized 0.50/0.50 for 53%, 0.50/0.25 for 31%, 0.50/0.75 for 8%, 1.00/1.00 for 6%,
  0.25/0.25 for 1%; the rest, under 1% together, left out). Neither Borg paper gives machine
  shapes; the traces normalize them, so 1.0 is our choice: 64 cores and 256 GiB.
- Prod share (`PROD_CPU_SHARE`, `PROD_RAM_SHARE`): "prod jobs are allocated about 70% of the
  total CPU resources ... and about 55% of the total memory" (Verma, section 2.1). We draw each
  job prod with probability `PROD_JOB_SHARE` = 0.4 (our choice: Tirmazi, section 4, finds most
  jobs in the batch tiers) and give prod tasks larger shapes, so that the shares come out at
  70% and 55% (their mean shapes are 3.5x and 1.83x the non-prod ones: 0.7/0.3 x 0.6/0.4 and
  0.55/0.45 x 0.6/0.4). Non-prod jobs are batch (priority 100) or, one in five, best effort
  (priority 0): Tirmazi (section 4) sees most free-tier work move to best-effort batch.
- Task shape (`CPU_MEDIAN_MILLI`, `RAM_MEDIAN_GIB`, `SHAPE_SIGMA`, `SHAPE_CORRELATION`):
  Verma (figure 8) gives only a shape: requests spread over three orders of magnitude with no
  size that most tasks share ("no bucket sizes fit most of the tasks well"). We choose log-
  normal CPU and RAM (sigma 1.0, correlation 0.5), sized so that a median machine (32 cores)
  holds about 25 tasks, the figure Verma gives for a median machine (section 6.2). Every
  task of a job has its job's shape (Verma, section 2.3: a job's tasks run the same binary
  with the same request). Shapes are clipped to 10 millicores-16 cores and 16 MiB-32 GiB, so
  every task fits the commonest machines.
- Job size (`JOB_SIZE_ALPHA`, `JOB_SIZE_MAX`): Tirmazi (section 7) gives only a shape, an
  extremely heavy tail (the top 1% of jobs use over 99% of the resources). We choose tasks per
  job from a Pareto law of index 1.2, cut at 200: 56% of jobs have one task, 6% ten or more.
- Usage (`USAGE_OF_REQUEST`): Verma (figure 11) shows that most tasks use much less than their
  limit, and (section 2.1) that prod is "about 60% of the total CPU usage" and "85% of the total
  memory usage". We choose a cell-wide usage of 50% of the requests for CPU and for RAM (our
  choice; Tirmazi, section 5, reports usage well below allocation in every 2019 cell) and split
  it by band with those shares: prod uses 0.6/0.7 x 50% = 43% of its CPU request and 0.85/0.55
  x 50% = 77% of its RAM request; non-prod 0.4/0.3 x 50% = 67% and 0.15/0.45 x 50% = 17%. Each
  task's ratio is drawn from a Beta law with that mean and concentration 4 (wide: some tasks
  use nearly all of their limit, as the figure's tails show); usage is one steady figure per task.

openb workload: the pods of `bench/scheduler/trace.py`, all present at once, a seeded sample of
`OPENB_PODS` of them (the whole list needs 98% of the trace's GPUs, more than its machines
hold once GPU models and fragmentation count). Prod is the pods whose QoS is LS or Guaranteed
(priority 200); Burstable (100) and BE (0) are non-prod: the reader's own mapping. The trace
has no usage, so the synthetic usage model above, by band, is applied to it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.scheduler.trace import read_trace
from reference.scheduler import PendingTask
from spec.model import CPU, RAM, Job, Machine, Resources, TaskId, is_prod

GiB = 2**30
MiB = 2**20
# (CPU cores, RAM GiB, share of machines): Reiss, Table 1, with 1.0 = 64 cores, 256 GiB.
MACHINE_SHAPES = [(32, 128, 0.535), (32, 64, 0.307), (32, 192, 0.080), (64, 256, 0.063), (16, 64, 0.010)]
PROD_PRIORITY, BATCH_PRIORITY, BEST_EFFORT_PRIORITY = 200, 100, 0
PROD_JOB_SHARE = 0.4
BEST_EFFORT_SHARE = 0.2  # of non-prod jobs
PROD_CPU_SHARE, PROD_RAM_SHARE = 0.70, 0.55
# Lognormal medians: mean = median x exp(sigma^2 / 2) = 1.65 x median for sigma 1.0.
CPU_MEDIAN_MILLI = {True: 1170, False: 333}  # prod / non-prod: means 1.93 and 0.55 cores
RAM_MEDIAN_GIB = {True: 2.9, False: 1.6}  # means 4.8 and 2.6 GiB
SHAPE_SIGMA = 1.0
SHAPE_CORRELATION = 0.5
CPU_CLIP_MILLI = (10, 16_000)
RAM_CLIP_BYTES = (16 * MiB, 32 * GiB)
JOB_SIZE_ALPHA = 1.2
JOB_SIZE_MAX = 200
CELL_USAGE = 0.5
# Mean usage / request by (prod, resource): the cell-wide 50% split by Verma's section-2.1 shares.
USAGE_OF_REQUEST = {
    (True, CPU): CELL_USAGE * 0.60 / 0.70,
    (True, RAM): CELL_USAGE * 0.85 / 0.55,
    (False, CPU): CELL_USAGE * 0.40 / 0.30,
    (False, RAM): CELL_USAGE * 0.15 / 0.45,
}
USAGE_CONCENTRATION = 4.0
OPENB_FOLDER = Path("/work/shared/traces/alibaba-openb-2023")
OPENB_PODS = 1500


@dataclass(frozen=True, slots=True)
class Work:
    """One task of a workload: what it asks (its limit) and what it uses."""

    task: PendingTask
    usage: Resources

    @property
    def prod(self) -> bool:
        return is_prod(self.task.priority)


def usage_for(request: Resources, prod: bool, rng: random.Random) -> Resources:
    """A task's steady usage: per CPU and RAM, a Beta-drawn share of its request (the band's mean)."""
    out = {}
    for r in (CPU, RAM):
        mean = min(0.99, USAGE_OF_REQUEST[(prod, r)])
        share = rng.betavariate(mean * USAGE_CONCENTRATION, (1 - mean) * USAGE_CONCENTRATION)
        out[r] = int(request.get(r) * share)
    return Resources.of(out)


def synthetic_machines(count: int, seed: int) -> list[Machine]:
    rng = random.Random(seed)
    shapes, weights = [s[:2] for s in MACHINE_SHAPES], [s[2] for s in MACHINE_SHAPES]
    out = []
    for i in range(count):
        cores, ram = rng.choices(shapes, weights)[0]
        out.append(Machine(f"m{i:05d}", Resources.of(cpu=cores * 1000, ram=ram * GiB), (), f"rack{i // 40:04d}"))
    return out


def job_size(rng: random.Random) -> int:
    return min(JOB_SIZE_MAX, int(rng.paretovariate(JOB_SIZE_ALPHA)))


def job_shape(prod: bool, rng: random.Random) -> Resources:
    z1 = rng.gauss(0.0, 1.0)
    z2 = SHAPE_CORRELATION * z1 + math.sqrt(1 - SHAPE_CORRELATION**2) * rng.gauss(0.0, 1.0)
    cpu = CPU_MEDIAN_MILLI[prod] * math.exp(SHAPE_SIGMA * z1)
    ram = RAM_MEDIAN_GIB[prod] * GiB * math.exp(SHAPE_SIGMA * z2)
    cpu = min(CPU_CLIP_MILLI[1], max(CPU_CLIP_MILLI[0], int(cpu)))
    ram = min(RAM_CLIP_BYTES[1], max(RAM_CLIP_BYTES[0], int(ram)))
    return Resources.of(cpu=cpu, ram=ram)


def synthetic_workload(tasks: int, seed: int) -> list[Work]:
    """About `tasks` tasks (the last job is cut to the count), in jobs of identical tasks."""
    rng = random.Random(seed)
    out: list[Work] = []
    j = 0
    while len(out) < tasks:
        prod = rng.random() < PROD_JOB_SHARE
        if prod:
            priority, band = PROD_PRIORITY, "prod"
        elif rng.random() < BEST_EFFORT_SHARE:
            priority, band = BEST_EFFORT_PRIORITY, "free"
        else:
            priority, band = BATCH_PRIORITY, "batch"
        shape = job_shape(prod, rng)
        name = f"{band}/job{j:05d}"
        for i in range(min(job_size(rng), tasks - len(out))):
            task = PendingTask(TaskId(name, i), band, priority, shape)
            out.append(Work(task, usage_for(shape, prod, rng)))
        j += 1
    return out


def machines_for(work: Sequence[Work], seed: int, headroom: float = 3.0) -> list[Machine]:
    """A synthetic pool big enough to hold `work` at its requests `headroom` times over."""
    mean_cpu = sum(s[0] * s[2] for s in MACHINE_SHAPES) * 1000 / sum(s[2] for s in MACHINE_SHAPES)
    mean_ram = sum(s[1] * s[2] for s in MACHINE_SHAPES) * GiB / sum(s[2] for s in MACHINE_SHAPES)
    need = max(sum(w.task.request.get(CPU) for w in work) / mean_cpu, sum(w.task.request.get(RAM) for w in work) / mean_ram)
    return synthetic_machines(max(4, math.ceil(need * headroom)), seed)


def openb_workload(pods: int, seed: int, folder: Path = OPENB_FOLDER) -> tuple[list[Machine], list[Work]]:
    """The trace's machines, and a seeded sample of `pods` of its pods with modelled usage."""
    machines, trace = read_trace(folder)
    rng = random.Random(seed)
    picked = sorted(rng.sample(range(len(trace)), min(pods, len(trace))))
    out = []
    for i in picked:
        task = trace[i].task
        out.append(Work(task, usage_for(task.request, is_prod(task.priority), rng)))
    return machines, out


def jobs_of(work: Sequence[Work]) -> list[Job]:
    """The workload as the cell's jobs (one per job id, its tasks' shape and priority), to submit
    it to a Fauxmaster (`reference.fauxmaster.pack`); tasks of one job share their shape."""
    groups: dict[str, list[Work]] = {}
    for w in work:
        groups.setdefault(w.task.id.job, []).append(w)
    out = []
    for key, ws in groups.items():
        user, name = key.split("/", 1)
        first = ws[0].task
        if any(w.task.request != first.request or w.task.priority != first.priority for w in ws):
            raise ValueError(f"job {key}: its tasks differ in shape or priority; a job's tasks share them")
        out.append(Job(user, name, first.priority, len(ws), first.request, constraints=first.constraints))
    return out
