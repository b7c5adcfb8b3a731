"""Where an arriving task's start latency goes in a hollow cell: its submit answered, its tasks
scheduled (the leader's records), its tasks started (the hollow borglets), per arriving job.

    python -m loadtests.arrival_latency --machines 10000 --tasks-per-machine 10

A cell as `minborg campaign scale` starts one (`--replicas`, each replica and the scheduler held
to `--replica-cpu` cores, poll every `--poll-interval` s), filled with `--tasks-per-machine`
tasks a machine, then jobs of 100 tasks arriving at `--arrival-per-min` for `--window-s`
seconds from `--writers` clients, with no readers. It prints a row per job and the medians.
The campaign measures the same arrivals beside its readers; this tells the stages apart."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from loadtests import scale
from loadtests.scale_results import sustained_per_min

JOB_TASKS = 100


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--machines", type=int, default=10000)
    p.add_argument("--tasks-per-machine", type=int, default=10)
    p.add_argument("--replicas", type=int, default=5)
    p.add_argument("--replica-cpu", type=float, default=0.3)
    p.add_argument("--poll-interval", type=float, default=5.0)
    p.add_argument("--arrival-per-min", type=int, default=10000)
    p.add_argument("--window-s", type=float, default=60.0)
    p.add_argument("--writers", type=int, default=4)
    args = p.parse_args(argv)
    cfg = scale.Config(replica_cpu=args.replica_cpu, tasks_per_machine=args.tasks_per_machine, poll_interval=args.poll_interval)
    with tempfile.TemporaryDirectory(prefix="minborg-arrivals-") as tmp:
        root = Path(tmp) / "cell"
        began = time.time()
        info = scale.start_cell(cfg, args.machines, args.replicas, root)
        print(f"up in {time.time() - began:.1f} s", flush=True)
        try:
            run(args, info, root)
        finally:
            scale.stop_cell(root)


def run(args: argparse.Namespace, info: Any, root: Path) -> None:
    headers = scale.admin_headers(root)
    http = httpx.Client(timeout=60.0, headers=headers)
    urls = info.master_urls
    served = scale.hollow_url(info)
    leader = http.get(f"{urls[0]}/v1/cell").json()["leader_url"]
    if args.tasks_per_machine:
        confirmed, took = scale.fill(http, urls[0], served, args.tasks_per_machine * args.machines, 1800.0)
        print(f"fill: {confirmed} confirmed in {took} s", flush=True)
    submitted: dict[str, tuple[float, float, int]] = {}  # job -> (sent, answered, status), wall clock
    lock = threading.Lock()
    every = 60.0 * JOB_TASKS * args.writers / args.arrival_per_min
    began = time.monotonic()

    def arrive(w: int) -> None:
        with httpx.Client(timeout=60.0, headers=headers) as client:
            k = 0
            while time.monotonic() - began < args.window_s:
                name = f"arrive{w}-{k}"
                sent = time.time()
                try:
                    status = client.post(f"{urls[(w + k) % len(urls)]}/v1/jobs", json=scale.sleeper_job(name, JOB_TASKS)).status_code
                except httpx.HTTPError:
                    status = 0
                with lock:
                    submitted[f"scale/{name}"] = (sent, time.time(), status)
                k += 1
                time.sleep(max(0.0, began + w * every / args.writers + k * every - time.monotonic()))

    writers = [threading.Thread(target=arrive, args=(w,)) for w in range(args.writers)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    accepted = {k: v for k, v in submitted.items() if v[2] == 201}
    seen = scale.confirm_arrivals(http, served, {k: v[0] for k, v in accepted.items()}, JOB_TASKS, 120.0)
    rows = []
    for key, (sent, answered, _) in sorted(accepted.items(), key=lambda i: i[1][0]):
        user, name = key.split("/")
        tasks = http.get(f"{leader}/v1/jobs/{user}/{name}/tasks").json()["tasks"]
        scheduled = [h["at"] for t in tasks for h in t.get("history", []) if h.get("state") == "RUNNING"]
        job = seen["jobs"].get(key) or {}
        rows.append({
            "sent": sent, "answered_s": answered - sent, "scheduled_s": max(scheduled) - sent if scheduled else None,
            "first_start": job.get("first_started_at"), "started_s": job["last_started_at"] - sent if job.get("running", 0) >= JOB_TASKS else None,
            "last_start": job.get("last_started_at"), "running": job.get("running", 0),
        })  # fmt: skip
    print("job sent (s into the window) / answered / last task scheduled / last task started (s after sending) / running")
    t0 = min((r["sent"] for r in rows), default=0.0)
    for r in rows:
        print(" ".join(f"{x:.2f}" if isinstance(x, float) else str(x) for x in
                       (r["sent"] - t0, r["answered_s"], r["scheduled_s"], r["started_s"], r["running"])))  # fmt: skip
    done = [r for r in rows if r["started_s"] is not None]
    per_min = sustained_per_min(len(done) * JOB_TASKS, [(r["first_start"], r["last_start"]) for r in done], [r["sent"] for r in rows])
    print(f"submitted {len(submitted)}, accepted {len(accepted)}, all started {len(done)}; started a minute {per_min:,.0f}")
    for field in ("answered_s", "scheduled_s", "started_s"):
        values = [r[field] for r in rows if r[field] is not None]
        if values:
            print(f"{field}: p50 {statistics.median(values):.2f}, max {max(values):.2f}")


if __name__ == "__main__":
    main()
