"""The nemesis campaign: random faults of a real network on a netns cell under Locust load, then the history and /proc judged.

    minborg campaign nemesis --minutes 30 [--seed 1] [--run-dir DIR] [--report reports/nemesis.md]

A cell on hosts of its own (`cell up --hosts netns`: 3 etcd members, 3 masters, a scheduler,
3 borglets, TLS on every link) runs a 4-task job; Locust (loadtests/nemesis_locust.py) submits,
updates, kills and reads per-key registers and kills task indices, every operation's invocation
and completion in history.jsonl. Faults are drawn with the seed, one at a time, each held a few
seconds and healed, and each window written to faults.jsonl (start, end, kind, target):

- isolate: one host cut from every other (packet filter, both ways);
- split: a minority (an etcd member and a master) cut from the majority;
- one_way: what one host sends is dropped, what it receives is not;
- pause: a host's process SIGSTOPped, then continued;
- kill: a host's process SIGKILLed, then started again on its data;
- clock_skew: a borglet started again with its clock 60 s ahead (faketime), then on time;
- disk_full: an etcd member restarted on a tmpfs as small as its data and 128 KiB, left to
  die of it under the load (30 s at most), then moved back onto its disk and started again.

/proc is scanned every 0.5 s for the task indices that run twice (two live processes of one
index). An index running twice is allowed only inside a window in which a borglet's host could
truly not be reached (isolated, split off, one way, paused, killed, its clock refused) and 10 s
after it; anywhere else it is a violation. After the faults: the cell healed, the load stopped,
20 s to settle, every key read back from the leader, and chaos/checker.py judges the history
(lost writes, linearizability per key, an undecided key failing). Orphans: task processes /proc
still shows for an index the cell does not run once settled, and any left after `cell down`.
The command exits 1 on any violation or on anything it could not decide, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from chaos import netfaults, probes
from chaos.history import HistoryFile, Outcome, read_ops
from reference import launcher, procscan
from reference.launcher import netfaults as launcher_faults
from reference.launcher import netns
from spec.taskid import parse_task_id, running_twice

KINDS = ("isolate", "split", "one_way", "pause", "kill", "clock_skew", "disk_full")
#: Kinds whose window, when its targets include a borglet's host, is a true partition of that
#: machine from the masters: an index may run twice inside it and GRACE_S after.
PARTITIONS = frozenset({"isolate", "split", "one_way", "pause", "kill", "clock_skew"})
GRACE_S = 10.0
SAMPLE_S = 0.5
SETTLE_S = 20.0
SKEW_S = 60.0
USERS = 5  # 4 register clients, 1 task killer
STEADY_JOB, STEADY_TASKS = "nemesis/steady", 4  # runs throughout: its indices must never run twice
PROJECT = Path(__file__).resolve().parent.parent


# --- the cell ----------------------------------------------------------------------------------


def steady_job() -> dict[str, Any]:
    return {
        "name": "steady", "user": "nemesis", "priority": 100, "task_count": STEADY_TASKS,
        "request": {"cpu": "10m", "ram": "16MiB"},
        "command": [sys.executable, "-c", "import time; time.sleep(36000)"], "restart_policy": "on_failure",
    }  # fmt: skip


def trust(state: Path) -> None:
    """This process and its children (Locust, the probes) verify the cell's HTTPS with its CA."""
    ca = str(state / "pki" / "ca.crt")
    os.environ["SSL_CERT_FILE"] = ca  # httpx
    os.environ["REQUESTS_CA_BUNDLE"] = ca  # requests (Locust's clients)


def submit_steady(state: Path, run: Path) -> None:
    """Submit the running job through the API, recorded in the history (its kill_task ops need it)."""
    import httpx

    info = launcher.CellInfo.load(state)
    history = HistoryFile(run / "history.jsonl")
    headers = {"Authorization": f"Bearer {launcher.read_admin_token(str(state))}"}
    op = history.invoke("submit", STEADY_JOB, {"cpu": 10})
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=10.0, headers=headers) as http:
        while time.monotonic() < deadline:
            for url in info.master_urls:
                try:
                    r = http.post(url + "/v1/jobs", json=steady_job())
                except httpx.HTTPError:
                    continue
                if r.status_code in (200, 201):
                    history.complete(op, Outcome.OK, {"status": r.status_code})
                    return
            time.sleep(1.0)
    history.complete(op, Outcome.UNKNOWN, {"error": "no master took the job"})
    raise RuntimeError("no master took the campaign's job within 60 s")


# --- /proc ---------------------------------------------------------------------------------------


class ProcSampler:
    """Scans /proc every SAMPLE_S for the cell's task processes; writes each sample (time, live
    task ids, indices running twice) to procs.jsonl."""

    def __init__(self, state: Path, run: Path) -> None:
        self.state, self.path = state, run / "procs.jsonl"
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with open(self.path, "a") as out:
            while not self._stop.wait(SAMPLE_S):
                ids = sorted({p.task_id for p in procscan.scan(self.state) if p.task_id})
                twice = sorted(f"{job}/{index}" for job, index in running_twice(ids))
                out.write(json.dumps({"t": time.time(), "ids": ids, "twice": twice}) + "\n")
                out.flush()
                self.samples += 1

    def start(self) -> ProcSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)


# --- the load ------------------------------------------------------------------------------------


def start_load(state: Path, run: Path, seconds: float) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), env.get("PYTHONPATH", "")]))
    env.update(CHAOS_STATE_DIR=str(state), CHAOS_RUN_DIR=str(run), CHAOS_RUN_ID=uuid.uuid4().hex[:6])
    command = [
        sys.executable, "-m", "locust", "-f", str(Path(__file__).with_name("nemesis_locust.py")), "--headless",
        "-u", str(USERS), "-r", str(USERS), "-t", f"{int(seconds)}s", "--stop-timeout", "5",
        "--only-summary", "--csv", str(run / "locust"), "--loglevel", "WARNING",
    ]  # fmt: skip
    with open(run / "locust.log", "ab") as log:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=PROJECT, start_new_session=True)  # fmt: skip


def stop_load(popen: subprocess.Popen[bytes]) -> None:
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(20)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(5)


# --- the faults ----------------------------------------------------------------------------------


class Nemesis:
    """Injects one fault at a time on the cell in `state`, each drawn from `rng`, and heals it."""

    def __init__(self, state: Path, run: Path, rng: random.Random) -> None:
        self.state, self.run, self.rng = state, run, rng
        self.info = launcher.CellInfo.load(state)
        assert self.info.network is not None, "the nemesis needs a netns cell"
        names = self.info.network.names()
        self.etcd = sorted(n for n in names if n.startswith("etcd"))
        self.masters = sorted(n for n in names if n.startswith("master"))
        self.machines = sorted(n for n in names if n.startswith("machine"))
        self.hosts = self.etcd + self.masters + self.machines
        self.windows: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def _window(self, kind: str, targets: list[str], hold: Callable[[], None], heal: Callable[[], None],
                inject: Callable[[], Any], after: Callable[[], dict[str, Any]] | None = None,
                **detail: Any) -> dict[str, Any]:  # fmt: skip
        start = time.time()
        window = {"kind": kind, "targets": targets, "start": start, "end": None, **detail}
        try:
            inject()
            hold()
        except Exception as err:  # reported in the window and as a note; healed below
            window["error"] = repr(err)[:300]
            self.notes.append(f"{kind} {','.join(targets)}: injection failed: {err!r}"[:300])
        finally:
            try:
                heal()
            except Exception as err:
                window["heal_error"] = repr(err)[:300]
                self.notes.append(f"{kind} {','.join(targets)}: heal failed: {err!r}"[:300])
            window["end"] = time.time()
        window |= after() if after else {}
        self.windows.append(window)
        with open(self.run / "faults.jsonl", "a") as out:
            out.write(json.dumps(window) + "\n")
        return window

    def _hold(self, low: float, high: float) -> Callable[[], None]:
        return lambda: time.sleep(self.rng.uniform(low, high))

    def _heal_net(self) -> None:
        netfaults.heal(str(self.state), str(self.run))

    def one(self) -> dict[str, Any]:
        kind = self.rng.choice(KINDS)
        state, run = str(self.state), str(self.run)
        if kind == "isolate":
            host = self.rng.choice(self.hosts)
            return self._window(kind, [host], self._hold(8, 15), self._heal_net,
                                lambda: netfaults.isolate_host(state, run, host))  # fmt: skip
        if kind == "split":
            minority = [self.rng.choice(self.etcd), self.rng.choice(self.masters)]
            if self.rng.random() < 0.5:
                minority.append(self.rng.choice(self.machines))
            return self._window(kind, minority, self._hold(8, 15), self._heal_net,
                                lambda: netfaults.split_hosts(state, run, minority))  # fmt: skip
        if kind == "one_way":
            host = self.rng.choice(self.hosts)
            return self._window(kind, [host], self._hold(8, 15), self._heal_net,
                                lambda: netfaults.split_hosts(state, run, [host], one_way=True))  # fmt: skip
        if kind == "pause":
            host = self.rng.choice(self.masters + self.machines + self.etcd)
            if host.startswith("etcd"):
                cluster = self._etcd()
                i = self.etcd.index(host)
                return self._window(kind, [host], self._hold(5, 10), lambda: cluster.resume_member(i),
                                    lambda: cluster.pause_member(i))  # fmt: skip
            return self._window(kind, [host], self._hold(5, 10), self._heal_net,
                                lambda: netfaults.pause_host(state, run, host))  # fmt: skip
        if kind == "kill":
            host = self.rng.choice(self.masters + self.machines + self.etcd)
            if host.startswith("etcd"):
                cluster = self._etcd()
                i = self.etcd.index(host)
                return self._window(kind, [host], self._hold(4, 8), lambda: cluster.restart_member(i, 30),
                                    lambda: cluster.kill_member(i))  # fmt: skip
            return self._window(kind, [host], self._hold(4, 8), lambda: self._start_again(host),
                                lambda: netfaults.kill_host(state, run, host))  # fmt: skip
        if kind == "clock_skew":
            host = self.rng.choice(self.machines)
            return self._window(kind, [host], self._hold(10, 15),
                                lambda: netfaults.skew_clock(state, run, host, 0),
                                lambda: netfaults.skew_clock(state, run, host, SKEW_S), seconds=SKEW_S)  # fmt: skip
        host = self.rng.choice(self.etcd)
        disk = DiskFull(self._etcd(), self.etcd.index(host), self.state)
        return self._window(kind, [host], disk.hold, disk.heal, disk.fill,
                            after=lambda: {"member_died_after_s": disk.died_after_s})  # fmt: skip

    def _etcd(self) -> netns.NetnsEtcdCluster:
        return netns.NetnsEtcdCluster.on(self.state / "etcd", self.info.network)  # type: ignore[arg-type]

    def _start_again(self, host: str) -> None:
        """A killed master, scheduler or borglet started again on its recorded command."""
        info = launcher.CellInfo.load(self.state)
        launcher_faults.skew(info, host, 0)


class DiskFull:
    """An etcd member's data on a tmpfs as large as the data and MARGIN_KIB: it dies of a full
    disk under the load (or is healed after HOLD_S, its disk nearly full: the window says
    which); healed by moving its data back onto the disk and starting it again."""

    HOLD_S = 30.0
    MARGIN_KIB = 128

    def __init__(self, cluster: netns.NetnsEtcdCluster, i: int, state: Path) -> None:
        self.cluster, self.i = cluster, i
        self.data = cluster.data_dir(i)
        self.moved = state / f"{self.data.name}.disk"
        self.mounted = False
        self.died_after_s: float | None = None

    def fill(self) -> None:
        self.cluster.kill_member(self.i)
        used = int(subprocess.run(["du", "-sk", str(self.data)], capture_output=True, text=True, check=True).stdout.split()[0])
        self.data.rename(self.moved)
        self.data.mkdir(mode=0o700)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={used + self.MARGIN_KIB}k,mode=0700", "tmpfs", str(self.data)], check=True)
        self.mounted = True
        subprocess.run(f"cp -a {self.moved}/. {self.data}/", shell=True, check=True)
        self.cluster.restart_member(self.i, 30)

    def hold(self) -> None:
        began = time.monotonic()
        while time.monotonic() - began < self.HOLD_S:
            if self.cluster._process(self.i) is None:
                self.died_after_s = time.monotonic() - began
                break
            time.sleep(0.5)

    def heal(self) -> None:
        if self.cluster._process(self.i) is not None:
            self.cluster.kill_member(self.i)
        if self.mounted:
            # What it wrote on the tmpfs is its newest data: kept, unless the disk filled mid-write
            # and it cannot start on it (then the copy from before the fault, which it catches up from).
            fresh = self.moved.with_suffix(".tmpfs")
            shutil.rmtree(fresh, ignore_errors=True)
            fresh.mkdir(mode=0o700)
            subprocess.run(f"cp -a {self.data}/. {fresh}/", shell=True, check=False)
            subprocess.run(["umount", "-l", str(self.data)], check=True)
            self.mounted = False
            self.data.rmdir()
            fresh.rename(self.data)
        try:
            self.cluster.restart_member(self.i, 30)
        except Exception:
            if self.cluster._process(self.i) is not None:
                self.cluster.kill_member(self.i)
            shutil.rmtree(self.data)
            self.moved.rename(self.data)
            self.moved = self.data
            self.cluster.restart_member(self.i, 30)
            return
        shutil.rmtree(self.moved, ignore_errors=True)


# --- judging -------------------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def allowed_windows(windows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end + GRACE_S) of each window that truly cut a borglet's host from the masters."""
    return [(w["start"], w["end"] + GRACE_S) for w in windows
            if w["kind"] in PARTITIONS and any(t.startswith("machine") for t in w["targets"])]  # fmt: skip


def judge_doubles(samples: list[dict[str, Any]], windows: list[dict[str, Any]]) -> dict[str, Any]:
    allowed = allowed_windows(windows)
    inside, outside = [], []
    for s in samples:
        if s["twice"]:
            (inside if any(a <= s["t"] <= b for a, b in allowed) else outside).append(s)
    return {
        "samples": len(samples), "samples_twice": len(inside) + len(outside),
        "samples_twice_inside_windows": len(inside), "violations": [
            {"t": s["t"], "twice": s["twice"]} for s in outside
        ][:50], "violating_samples": len(outside),
        "indices_twice": sorted({i for s in samples for i in s["twice"]}),
    }  # fmt: skip


def expected_ids(state: Path) -> set[tuple[str, int]] | None:
    """(job, index) of every task the cell runs now, from the leader; None if none answered."""
    import httpx

    info = launcher.CellInfo.load(state)
    headers = {"Authorization": f"Bearer {launcher.read_admin_token(str(state))}"}
    with httpx.Client(timeout=5.0, headers=headers) as http:
        for url in info.master_urls:
            try:
                jobs = http.get(url + "/v1/jobs").json()["jobs"]
                out = set()
                for job in jobs:
                    key = f"{job['user']}/{job['name']}"
                    out |= {(key, i) for i in range(int(job.get("task_count") or 0))}
                return out
            except (httpx.HTTPError, ValueError, KeyError):
                continue
    return None


def orphans_now(state: Path) -> tuple[list[str], str | None]:
    """Task processes whose index the cell does not run (after the settle)."""
    expected = expected_ids(state)
    if expected is None:
        return [], "no master answered GET /v1/jobs after the settle"
    found = []
    for p in procscan.scan(state):
        if not p.task_id:
            continue
        placed = parse_task_id(p.task_id)
        if (placed.job, placed.index) not in expected:
            found.append(f"{p.task_id} (pid {p.pid})")
    return found, None


# --- the run -------------------------------------------------------------------------------------


def run(minutes: float, seed: int, run_dir: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    run_dir = run_dir.resolve()
    state = Path(tempfile.mkdtemp(prefix="minborg-nemesis-")) / "cell"
    cell = f"nm{uuid.uuid4().hex[:6]}"
    undecided: list[str] = []
    result: dict[str, Any] = {"seed": seed, "minutes": minutes, "cell": cell, "loadavg_before": os.getloadavg()}
    began = time.monotonic()
    launcher.up(state, cell=cell, replicas=3, machines=3, etcd_members=3, hosts="netns",
                master_args=("--rate-limit", "0"))  # fmt: skip
    result["cell_up_s"] = round(time.monotonic() - began, 1)
    trust(state)
    sampler = ProcSampler(state, run_dir)
    load: subprocess.Popen[bytes] | None = None
    nemesis = Nemesis(state, run_dir, rng)
    try:
        submit_steady(state, run_dir)
        sampler.start()
        load = start_load(state, run_dir, minutes * 60 + SETTLE_S + 120)
        t0 = time.time()
        result["t0"] = t0
        end = time.monotonic() + minutes * 60
        time.sleep(5)
        while time.monotonic() + 10 < end:
            window = nemesis.one()
            print(f"nemesis: {window['kind']} {','.join(window['targets'])} "
                  f"{window['end'] - window['start']:.1f} s{' ERROR ' + window['error'] if 'error' in window else ''}",
                  flush=True)  # fmt: skip
            time.sleep(rng.uniform(3, 8))
        netfaults.heal(str(state), str(run_dir))
        if load.poll() is not None:
            undecided.append(f"the load stopped early (exit {load.returncode}): see locust.log")
        stop_load(load)
        time.sleep(SETTLE_S)  # the cell settles without load: then the final reads and /proc judge it
        result["final_clean"] = probes.no_acknowledged_write_lost(str(state), str(run_dir))
        orphans, why = orphans_now(state)
        if why:
            undecided.append(why)
        result["orphans_settled"] = orphans
    finally:
        if load is not None:
            stop_load(load)
        sampler.stop()
        for log in (state / "logs").glob("*.log"):
            (run_dir / f"cell-{log.name}").write_text("\n".join(log.read_text(errors="replace").splitlines()[-300:]) + "\n")
        try:
            launcher.down(state)
        except launcher.LauncherError as err:
            undecided.append(f"cell down: {err}")
        left = [f"{p.task_id} (pid {p.pid})" for p in procscan.scan(state)]
        result["orphans_after_down"] = left
        for p in procscan.scan(state):  # leave nothing behind on a shared host
            try:
                psutil.Process(p.pid).kill()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(state.parent, ignore_errors=True)
    result["windows"] = nemesis.windows
    result["notes"] = nemesis.notes
    check_path = run_dir / "check.json"
    result["check"] = json.loads(check_path.read_text()) if check_path.exists() else None
    if result["check"] is None:
        undecided.append("no history check was written")
    result["doubles"] = judge_doubles(read_jsonl(run_dir / "procs.jsonl"), nemesis.windows)
    if result["doubles"]["samples"] < minutes * 60 / SAMPLE_S * 0.5:
        undecided.append(f"/proc sampled only {result['doubles']['samples']} times")
    ops = read_ops(run_dir / "history.jsonl")
    result["ops"] = {str(o): sum(1 for op in ops if op.outcome == o) for o in Outcome}
    result["ops_by_kind"] = {k: sum(1 for op in ops if op.op == k) for k in sorted({op.op for op in ops})}
    if not any(op.op in ("update", "kill") and op.outcome == Outcome.OK for op in ops):
        undecided.append("no update or kill was acknowledged: the load did not run")
    failed_windows = [w for w in nemesis.windows if "error" in w or "heal_error" in w]
    if failed_windows:
        undecided.append(f"{len(failed_windows)} fault(s) failed to inject or heal (see the notes)")
    result["undecided"] = undecided
    result["loadavg_after"] = os.getloadavg()
    check = result["check"] or {}
    result["verdicts"] = {
        "lost writes": len(check.get("lost_writes") or []) + len(((check.get("details") or {}).get("final_reads_check") or {}).get("lost_writes") or []),
        "non-linearizable keys": len(check.get("nonlinearizable_keys") or []),
        "undecided keys": len(check.get("undecided_keys") or []),
        "samples with an index twice outside a partition window + 10 s": result["doubles"]["violating_samples"],
        "orphans once settled": len(result.get("orphans_settled") or []),
        "orphans after cell down": len(result["orphans_after_down"]),
    }  # fmt: skip
    result["passed"] = bool(check.get("ok")) and not undecided and not any(result["verdicts"].values())
    (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="minborg campaign nemesis", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long faults are drawn (default 30)")
    p.add_argument("--seed", type=int, default=1, help="the seed of the faults drawn (default 1)")
    p.add_argument("--run-dir", type=Path, default=Path("reports/nemesis-run"),
                   help="the run's files: history, faults, /proc samples, logs (default reports/nemesis-run)")  # fmt: skip
    p.add_argument("--report", type=Path, default=Path("reports/nemesis.md"),
                   help="the report; its timeline plot is written beside it (default reports/nemesis.md)")  # fmt: skip
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.minutes > 600:
        p.error(f"--minutes must be above 0 and at most 600, not {args.minutes}")
    problem = netns.usable()
    if problem:
        print(f"minborg campaign nemesis: no netns hosts here: {problem}", file=sys.stderr)
        return 2
    from loadtests import nemesis_report

    command = "minborg campaign nemesis " + " ".join(sys.argv[1:] if argv is None else argv)
    result = run(args.minutes, args.seed, args.run_dir)
    nemesis_report.write(result, args.run_dir, args.report, command)
    print(f"nemesis: {'PASS' if result['passed'] else 'FAIL'}; report {args.report}", flush=True)
    for reason in result["undecided"]:
        print(f"nemesis: could not decide: {reason}", flush=True)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
