"""Seeded synthetic cells for the benchmark: heterogeneous machines, Borg-like jobs, some best-effort load."""

from __future__ import annotations

import random

from reference.scheduler import PendingTask, RunningTask, Snapshot
from spec.model import Constraint, ConstraintOp, Machine, Resources, TaskId

GiB = 2**30

# (cpu milli, RAM GiB, GPUs, share of the fleet): a few platforms, as in a real cell.
PLATFORMS = [
    (32000, 128, 0, 0.30),
    (48000, 192, 0, 0.25),
    (64000, 256, 0, 0.20),
    (96000, 384, 0, 0.15),
    (64000, 512, 8, 0.10),
]
GPU_MODELS = ("A100", "V100")
CPU_MENU = ([500, 1000, 2000, 4000, 8000, 16000], [0.15, 0.25, 0.25, 0.2, 0.1, 0.05])
RAM_PER_CORE_GIB = ([1, 2, 4, 8], [0.3, 0.35, 0.25, 0.1])
JOB_SIZES = ([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000], [10, 10, 10, 10, 10, 8, 6, 4, 2, 1])
PRIORITIES = ([0, 10, 20, 100, 110, 120, 200, 210, 300], [10, 10, 10, 15, 15, 15, 12, 10, 3])


def synthetic_machines(n: int, rng: random.Random) -> list[Machine]:
    shapes, weights = [p[:3] for p in PLATFORMS], [p[3] for p in PLATFORMS]
    out = []
    for i in range(n):
        cpu, ram, gpus = rng.choices(shapes, weights)[0]
        attrs = [("arch", "arm" if rng.random() < 0.1 else "x86"), ("kernel", rng.choice(["5.4", "5.10", "6.1"]))]
        cap = {"cpu": cpu, "ram": ram * GiB, "disk": 2000 * GiB, "ports": 1000}
        if gpus:
            cap["gpu"] = gpus * 1000
            attrs.append(("gpu_model", rng.choice(GPU_MODELS)))
        out.append(Machine(f"m{i:05d}", Resources.of(cap), tuple(sorted(attrs)), f"rack{i // 40:04d}"))
    return out


def _request(rng: random.Random, gpu: bool) -> Resources:
    cpu = rng.choices(*CPU_MENU)[0]
    ram = cpu * rng.choices(*RAM_PER_CORE_GIB)[0] * GiB // 1000
    r = {"cpu": cpu, "ram": ram, "disk": rng.choice([1, 5, 10]) * GiB, "ports": rng.choice([0, 1, 2])}
    if gpu:
        r["gpu"] = rng.choice([250, 500, 1000, 1000, 2000, 4000])
    return Resources.of(r)


def synthetic_cell(machines: int, tasks: int, seed: int) -> Snapshot:
    """`machines` machines, some best-effort tasks already running, and `tasks` pending tasks in jobs."""
    rng = random.Random(seed)
    ms = synthetic_machines(machines, rng)
    running: list[RunningTask] = []
    for m in ms:
        if rng.random() < 0.3:  # leftover best-effort work that prod and batch may preempt
            for j in range(rng.randint(1, 3)):
                req = Resources.of(cpu=rng.choice([1000, 2000, 4000]), ram=rng.choice([2, 4, 8]) * GiB)
                running.append(RunningTask(TaskId(f"be{j}/filler-{m.name}", 0), m.name, rng.choice([0, 5]), req))
    pending: list[PendingTask] = []
    users = [f"user{u:02d}" for u in range(50)]
    j = 0
    while len(pending) < tasks:
        size = min(rng.choices(*JOB_SIZES)[0], tasks - len(pending))
        gpu = rng.random() < 0.03
        req = _request(rng, gpu)
        cons: list[Constraint] = []
        if gpu:
            cons.append(Constraint("gpu_model", ConstraintOp.IN, (rng.choice(GPU_MODELS),)))
        if rng.random() < 0.1:
            cons.append(Constraint("arch", ConstraintOp.EQ, ("x86",)))
        if rng.random() < 0.05:
            cons.append(Constraint("kernel", ConstraintOp.NE, ("5.4",)))
        user = rng.choice(users)
        prio = rng.choices(*PRIORITIES)[0]
        package = f"pkg{rng.randrange(300)}"
        name = f"{user}/job{j:05d}"
        for i in range(size):
            pending.append(PendingTask(TaskId(name, i), user, prio, req, tuple(cons), package))
        j += 1
    packages: dict[str, frozenset[str]] = {}
    for m in ms:
        if rng.random() < 0.5:
            packages[m.name] = frozenset(f"pkg{rng.randrange(300)}" for _ in range(rng.randint(1, 5)))
    return Snapshot(tuple(ms), tuple(running), tuple(pending), (), packages)
