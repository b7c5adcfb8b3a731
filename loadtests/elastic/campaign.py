"""The elastic campaign: hello_world with autoscaling on a fresh local cell, under a Locust load that rises in steps, holds, then falls.

    python -m loadtests.elastic.campaign --out reports/elastic/<name>

It starts a cell of one small machine with the cell autoscaler, submits hello_world with
`autoscale` (requests per task), runs the load, samples the job and the machines every
second, stops everything, and writes the report (timeline.png, report.md, summary.json,
the raw requests and samples). Bounded: the load lasts `--stages`' last time, the whole run
a few minutes; traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadtests.elastic.analysis import Sample, parse_stages, read_requests
from loadtests.elastic.report import write_report
from reference import launcher
from reference.client import CellClient, ClientError
from reference.elastic import cellscaler
from reference.waiting import wait_until

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
REPO = Path(__file__).resolve().parents[2]
JOB = "demo/hello_world"


def job_file(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "name": "hello_world",
        "user": "demo",
        "priority": "production",
        "task_count": args.min_tasks,
        "request": {"cpu": args.task_cpu, "ram": "64MiB"},
        "command": ["python3", "-m", "examples.hello_world.server"],
        "restart_policy": "always",
        "appclass": "latency_sensitive",
        "health_check": {"path": "/healthz", "interval_s": 1.0},
        "autoscale": {
            "min": args.min_tasks,
            "max": args.max_tasks,
            "metric": args.metric,
            "target": args.target_rps if args.metric == "requests_per_task" else args.target_cpu,
            "scale_up_cooldown": args.up_cooldown,
            "scale_down_cooldown": args.down_cooldown,
            "stabilization_s": args.stabilization,
            "drain_s": args.drain,
        },
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minborg campaign elastic", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="report directory")
    p.add_argument("--stages", default="0:2,25:6,50:10,100:1,160:0",
                   help="at_s:users,...; the last stage (0 users) ends the load")  # fmt: skip
    p.add_argument("--rate", type=float, default=4.0, help="requests/s of one user")
    p.add_argument("--cost-ms", type=float, default=10.0, help="CPU per request in the task")
    p.add_argument("--metric", choices=["requests_per_task", "cpu"], default="requests_per_task")
    p.add_argument("--target-rps", type=float, default=8.0, help="autoscale target: requests/s per task")
    p.add_argument("--target-cpu", type=float, default=60.0, help="autoscale target: CPU %% of the request")
    p.add_argument("--min-tasks", type=int, default=1)
    p.add_argument("--max-tasks", type=int, default=6)
    p.add_argument("--task-cpu", default="250m")
    p.add_argument("--up-cooldown", type=float, default=5.0)
    p.add_argument("--down-cooldown", type=float, default=20.0)
    p.add_argument("--stabilization", type=float, default=10.0)
    p.add_argument("--drain", type=float, default=5.0, help="longer than the users' endpoint refresh")
    p.add_argument("--refresh", type=float, default=2.0, help="users refetch endpoints this often")
    p.add_argument("--machines", default="1:3", help="MIN:MAX machines of the cell autoscaler")
    p.add_argument("--machine-capacity", default="cpu=1000m,ram=2GiB")
    p.add_argument("--idle-cooldown", type=float, default=20.0, help="idle seconds before a machine goes")
    p.add_argument("--slo-p95-ms", type=float, default=250.0)
    p.add_argument("--tail", type=float, default=15.0, help="seconds sampled after the load ends")
    return p


class Sampler:
    """Once a second: the job's desired count, its serving and draining tasks, the machines."""

    def __init__(self, client: CellClient) -> None:
        self.client = client
        self.samples: list[Sample] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                job = self.client.job(JOB)["job"]
                tasks = self.client.tasks(JOB)
                machines = self.client.machines()
            except ClientError:
                continue
            running = [t for t in tasks if t["state"] == "RUNNING"]
            self.samples.append(
                Sample(
                    at=time.time(),
                    task_count=int(job["task_count"]),
                    serving=sum(1 for t in running if t.get("healthy") and not t.get("draining")),
                    draining=sum(1 for t in running if t.get("draining")),
                    machines=sum(1 for m in machines if m.get("state") == "up"),
                )
            )


def check_own_cell(info: launcher.CellInfo, client: CellClient) -> None:
    """Refuse to go on when the masters' URLs answer for another cell: on a busy host a port
    picked free can be taken before this cell's master binds it."""
    masters = info.of_role(launcher.Role.MASTER)
    leader = client.cell().get("leader")
    if not all(launcher.is_alive(m) for m in masters) or leader not in {m.name for m in masters}:
        raise RuntimeError(
            f"the cell at {', '.join(info.master_urls)} is not this campaign's (leader {leader!r}; "
            f"a master port was taken by another process?); see {info.state_dir}/logs"
        )


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for name in ("requests.csv", "samples.jsonl"):
        (out / name).unlink(missing_ok=True)
    stages = parse_stages(args.stages)
    bounds = cellscaler.parse_bounds(args.machines)
    state_dir = Path(tempfile.mkdtemp(prefix="minborg-elastic-"))
    load1_before = os.getloadavg()
    # The campaign's clients all send the admin token: no per-user rate limit in the way.
    info = launcher.up(state_dir, machines=bounds[0], machine_capacity=args.machine_capacity,
                       master_args=("--rate-limit", "0"), progress=lambda m: print(f"  {m}", flush=True))  # fmt: skip
    scaler = cellscaler.spawn(info, bounds, args.machine_capacity, ["--idle-cooldown", f"{args.idle_cooldown:g}"])
    cell = launcher.CellInfo.load(state_dir)
    replace(cell, processes=cell.processes + (scaler,)).save()  # so `cell down` stops it first
    client = CellClient(list(info.master_urls), timeout=5.0, token=launcher.read_admin_token(state_dir))
    sampler = Sampler(client)
    result: dict[str, Any] = {}
    try:
        check_own_cell(info, client)
        client.submit(job_file(args))
        wait_until(lambda: client.endpoints(JOB), 60, f"hello_world to serve (cell logs in {state_dir})", every=0.5)
        sampler.thread.start()
        time.sleep(3.0)
        env = dict(os.environ)
        env.update(
            ELASTIC_MASTER=info.master_urls[0], ELASTIC_JOB=JOB, ELASTIC_STAGES=args.stages,
            ELASTIC_RATE=f"{args.rate:g}", ELASTIC_COST_MS=f"{args.cost_ms:g}",
            ELASTIC_REFRESH_S=f"{args.refresh:g}", ELASTIC_LOG=str(out / "requests.csv"),
            MINBORG_TOKEN=launcher.read_admin_token(state_dir) or "",
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])),
        )  # fmt: skip
        command = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
                   "--loglevel", "WARNING", "--csv", str(out / "locust")]  # fmt: skip
        load_start = time.time()
        print(f"  load: {args.stages} users at {args.rate:g} req/s each", flush=True)
        with open(out / "locust.log", "w") as log:
            proc = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=stages[-1][0] + 60, check=False)  # fmt: skip
        load_end = time.time()
        time.sleep(args.tail)
        result = {"locust_rc": proc.returncode, "load_start": load_start, "load_end": load_end}
    finally:
        sampler.stop.set()
        if sampler.thread.is_alive():
            sampler.thread.join(5)
        client.close()
        launcher.down(state_dir)
    with open(out / "samples.jsonl", "w") as f:
        for s in sampler.samples:
            f.write(json.dumps(s.__dict__) + "\n")
    result.update(
        stages=stages,
        loadavg_before=load1_before,
        loadavg_after=os.getloadavg(),
        cpus=os.cpu_count(),
        args={k: str(v) for k, v in vars(args).items()},
        cellscaler_log=_tail(state_dir / "logs" / "cellscaler.log"),
        autoscaler_log=_grep(state_dir / "logs" / "master0.log", "autoscaler"),
    )
    return write_report(out, result, read_requests(out / "requests.csv"), sampler.samples, args.slo_p95_ms, args.min_tasks)


def _tail(path: Path, n: int = 30) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def _grep(path: Path, word: str) -> list[str]:
    try:
        return [line for line in path.read_text(errors="replace").splitlines() if word in line][-40:]
    except OSError:
        return []


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.command = " ".join(["python -m loadtests.elastic.campaign", *argv])
    summary = run(args)
    print(json.dumps(summary.get("headline", {}), indent=2))
    print(f"report: {args.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
