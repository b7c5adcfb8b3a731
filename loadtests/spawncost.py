"""`python -m loadtests.spawncost`: what one task start costs the borglet's process, by spawn path.

Run as root on a host with writable cgroup v1 hierarchies. A process of `--ballast-mib`
resident memory (a borglet's size; a fork copies the page tables of all of it) starts
`--spawns` short processes as uid 2,000,000,123, each in a task cgroup of its own, by each
path in turn, `--rounds` times, and prints the median per spawn of its own CPU time (all its
threads; the children's not counted), of wall time, and of its children's CPU time (the
helper or setpriv, then /bin/true):

- setpriv: the spawn path before issue 38 (vfork, exec `setpriv --reuid` as root with the
  job's environment, then the new pid written to each group's cgroup.procs);
- fork: the borglet's path where the spawn helper cannot be built (processes.fork_spawn): the
  spawning thread joins the task's groups and takes the user's file ids, the child sets its
  ids in C between fork and exec;
- helper: the borglet's path (processes.spawn through borglet/spawner.py): vfork and exec of
  minborg-spawn with an empty environment, which joins the groups, drops its ids, enters the
  working directory, reads the job's environment from a memfd and execs the task.

    python -m loadtests.spawncost --ballast-mib 60 --spawns 100 --rounds 5

CPU seconds hold on a shared host where wall times do not: the wall figure includes waiting
for a core.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable

from reference.borglet import cgroups, logs, processes, spawner

UID = 2_000_000_123
ENV = {"PATH": processes.TASK_PATH}


def setpriv_spawn(group: dict[str, str], log_dir: str) -> subprocess.Popen:
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "util-linux's setpriv is not installed"
    argv = [setpriv, f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--", "/bin/true"]
    proc = subprocess.Popen(argv, env=ENV, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)  # fmt: skip
    cgroups.join(group, proc.pid)
    return proc


def fork_spawn(group: dict[str, str], log_dir: str) -> subprocess.Popen:
    out, err = logs.open_streams(log_dir)
    try:
        return processes.fork_spawn(["/bin/true"], ENV, "/", out, err, UID, confined(group))
    finally:
        os.close(out)
        os.close(err)


def helper_spawn(group: dict[str, str], log_dir: str) -> subprocess.Popen:
    assert spawner.helper() is not None, "the spawn helper cannot be built here (the borglet's log says why)"
    return processes.spawn(["/bin/true"], ENV, "/", log_dir, UID, confined(group))


def confined(group: dict[str, str]) -> processes.Confinement:
    return processes.Confinement(cgroups=group, pids_max=16)


PATHS: dict[str, Callable[[dict[str, str], str], subprocess.Popen]] = {
    "setpriv": setpriv_spawn, "fork": fork_spawn, "helper": helper_spawn,
}  # fmt: skip


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def round_of(spawn: Callable[[dict[str, str], str], subprocess.Popen], groups: list[dict[str, str]], log_dir: str) -> tuple[float, float, float]:
    """(CPU ms, wall ms, the children's CPU ms) per spawn over one round."""
    procs = []
    before = children_cpu()
    cpu, wall = time.process_time(), time.perf_counter()
    for group in groups:
        procs.append(spawn(group, log_dir))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    for proc in procs:
        proc.wait()
    children = children_cpu() - before
    return cpu * 1000 / len(groups), wall * 1000 / len(groups), children * 1000 / len(groups)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ballast-mib", type=int, default=60)
    p.add_argument("--spawns", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        p.error("run as root: every path changes a child's uid and writes cgroups")
    ballast = bytearray(args.ballast_mib << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1  # resident, as a borglet's heap is
    tree = cgroups.CgroupTree(f"spawncost-{os.getpid()}")
    problem = tree.usable()
    if problem:
        p.error(problem)
    log_dir = f"/tmp/spawncost-{os.getpid()}"
    spawner.helper()  # built (once) before any round is timed
    groups = [tree.create(f"t{i}", 100, 64 << 20) for i in range(args.spawns)]
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in PATHS}
    try:
        for _ in range(args.rounds):
            for name, spawn in PATHS.items():
                results[name].append(round_of(spawn, groups, log_dir))
    finally:
        for group in groups:
            cgroups.remove_group(group)
        tree.remove_bases()
        shutil.rmtree(log_dir, ignore_errors=True)
    print(f"{args.ballast_mib} MiB resident, {args.spawns} spawns x {args.rounds} rounds, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    for name, rows in results.items():
        cpu = statistics.median(r[0] for r in rows)
        wall = statistics.median(r[1] for r in rows)
        children = statistics.median(r[2] for r in rows)
        print(f"  {name:8s} {cpu:6.2f} ms CPU, {wall:6.2f} ms wall per spawn (median of rounds); "
              f"the children's CPU {children:5.2f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
