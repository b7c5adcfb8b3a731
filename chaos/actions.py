"""Chaos Toolkit actions (python providers): start the load, inject each fault, heal the cell.

A fault's action and its undo are named as in the fault catalogue (harness/faults.py)."""

from __future__ import annotations

import json
import time
from typing import Any

from chaos import cellfile, events, fence, load, procs, toxi
from chaos.events import run_dir
from reference.launcher import Role, is_alive

HELLO_JOB = "demo/hello_world"


def start_load(state_dir: str, run: str, duration_s: float = 120.0) -> dict[str, Any]:
    """Start the bounded Locust load (history, hello_world calls, cell watcher)."""
    return load.start(state_dir, run, duration_s)


def stop_load(run: str) -> bool:
    return load.stop(run)


def mark(run: str, fault: str, phase: str) -> dict[str, Any]:
    """Record the start or end of a fault injected by another provider (e.g. chaostoxi)."""
    return events.record(f"fault-{phase}", run, fault=fault)


def kill_leader(state_dir: str, run: str) -> str:
    """SIGKILL the elected master."""
    info = cellfile.load(state_dir)
    leader = cellfile.leader(info)
    if leader is None:
        raise RuntimeError("no leader to kill")
    events.record("fault-start", run, fault="kill_leader", master=leader.name)
    procs.kill_master(info, leader.record, run)
    return leader.name


def restart_master(state_dir: str, run: str) -> list[str]:
    """Start the killed master again (every master found dead)."""
    started = procs.restart_masters(state_dir, run)
    events.record("fault-end", run, fault="kill_leader", restarted=started)
    return started


def cut_leader_from_etcd(state_dir: str, run: str) -> dict[str, Any]:
    """Disable the leader's master<i>-etcd* proxies: it keeps its clients but loses the store."""
    info = cellfile.load(state_dir)
    leader = cellfile.leader(info)
    held = fence.leader_key(info)
    if leader is None or held is None:
        raise RuntimeError("no leader to cut")
    names = [p.name for p in info.proxies if p.name.startswith(f"{leader.name}-etcd")]
    toxi.set_enabled(info, names, False)
    cut = {
        "master": leader.name, "url": leader.record.url, "proxies": names, "at": time.time(),
        "leader_value": held[0], "token": held[1],
        "committed_at_cut": fence.committed_txns(leader.record.url),
    }  # fmt: skip
    (run_dir(run) / "cut.json").write_text(json.dumps(cut))
    events.record("fault-start", run, fault="cut_leader_from_etcd", master=leader.name, token=held[1])
    return cut


def heal_leader_etcd(state_dir: str, run: str) -> None:
    info = cellfile.load(state_dir)
    cut = json.loads((run_dir(run) / "cut.json").read_text())
    toxi.set_enabled(info, cut["proxies"], True)
    events.record("fault-end", run, fault="cut_leader_from_etcd")


def delay_borglets(
    state_dir: str, run: str, latency_ms: int = 200, jitter_ms: int = 50
) -> None:
    info = cellfile.load(state_dir)
    names = [p.name for p in info.proxies if p.name.startswith("master-borglet")]
    toxi.add_latency(info, names, latency_ms, jitter_ms)
    events.record("fault-start", run, fault="delay_borglets", latency_ms=latency_ms)


def cut_borglet(state_dir: str, run: str) -> str:
    """Disable the master-borglet<k> proxy of the machine running most hello_world tasks."""
    info = cellfile.load(state_dir)
    counts = {name: 0 for name in info.borglet_urls}
    for machine, _proc in procs.task_processes(info, HELLO_JOB):
        counts[machine] += 1
    machine = max(counts, key=lambda m: counts[m])
    name = f"master-borglet{cellfile.borglet_index(info, machine)}"
    toxi.set_enabled(info, [name], False)
    (run_dir(run) / "borglet_cut.json").write_text(json.dumps({"machine": machine, "proxy": name}))
    events.record("fault-start", run, fault="cut_borglet", machine=machine)
    return machine


def heal_borglet(state_dir: str, run: str) -> None:
    info = cellfile.load(state_dir)
    cut = json.loads((run_dir(run) / "borglet_cut.json").read_text())
    toxi.set_enabled(info, [cut["proxy"]], True)
    events.record("fault-end", run, fault="cut_borglet")


def kill_etcd_members(state_dir: str, run: str, count: int) -> list[int]:
    """SIGKILL `count` etcd members: 2 of 3 is a majority (events.ETCD_MAJORITY)."""
    victims = procs.kill_etcd(state_dir, count)
    events.record("fault-start", run, fault="kill_etcd_members", members=victims, majority=count >= 2)
    return victims


def restart_etcd_members(state_dir: str, run: str) -> list[int]:
    back = procs.restart_etcd(state_dir)
    events.record("fault-end", run, fault="kill_etcd_members", members=back)
    return back


def kill_task_process(
    state_dir: str, run: str, job: str = HELLO_JOB, count: int = 3
) -> list[int]:
    """SIGKILL `count` of the job's task processes (the borglet should restart them)."""
    info = cellfile.load(state_dir)
    pids = procs.kill_tasks(info, job, count)
    (run_dir(run) / "tasks_killed.json").write_text(json.dumps(pids))
    events.record("fault-start", run, fault="kill_task_process", pids=pids)
    return pids


def heal(state_dir: str, run: str) -> dict[str, Any]:
    """Rollback: every proxy enabled and clean, every killed master and etcd member back."""
    info = cellfile.load(state_dir)
    done: dict[str, Any] = {}
    if info.toxiproxy_url:
        toxi.reset(info)
        done["toxiproxy"] = "reset"
    done["masters"] = procs.restart_masters(state_dir, run)
    done["etcd"] = procs.restart_etcd(state_dir)
    for kind in events.open_faults(events.read(run_dir(run))):
        events.record("fault-end", run, fault=kind, by="rollback")
    done["dead_borglets"] = [r.name for r in info.of_role(Role.BORGLET) if not is_alive(r)]
    return done
