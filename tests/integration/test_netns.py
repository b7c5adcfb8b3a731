"""A cell on hosts of its own (`cell up --hosts netns`): each process in a network namespace with an address of its own.

A 3-replica, 3-machine cell: a job submitted and read from the host through the command line;
every process listens on its own host's address and nowhere else (not 127.0.0.1); `cell down`
leaves no namespace, veth or bridge; `cell up` on the stopped cell makes them again and brings
the job back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from reference import launcher
from reference.launcher import netfaults, netns
from tests.integration.cellkit import REPO, sleeper_job, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(netns.usable() is not None, reason=f"no netns hosts here: {netns.usable()}"),
]

MINBORG = [sys.executable, "-m", "reference.cli"]


def minborg(*args: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MINBORG_MASTER", "MINBORG_TOKEN")}
    ca = state_dir / "pki" / "ca.crt"  # a netns cell serves https with its own CA
    env["SSL_CERT_FILE"] = str(ca)
    return subprocess.run(
        [*MINBORG, *args, "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=60, cwd=REPO, env=env
    )


def where(url: str) -> str:
    """ADDRESS:PORT of a URL, whatever its scheme."""
    return urlsplit(url).netloc


def leftovers(cell: str) -> list[str]:
    """The namespaces and links of `cell` still on this host."""
    spaces = [line.split()[0] for line in subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.splitlines() if line.strip()]  # fmt: skip
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    net = netns.plan_network(cell, ["etcd0"])
    return [s for s in spaces if s.startswith(f"{cell}-")] + ([net.bridge] if net.bridge in links else [])


@pytest.fixture
def netns_cell(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    cell = f"nt{uuid.uuid4().hex[:6]}"
    state = tmp_path / "cell"
    try:
        yield cell, state
    finally:
        if (state / "cell.json").exists():
            launcher.shut_down(state)


def test_a_netns_cell_runs_each_process_on_its_own_address_and_leaves_nothing_behind(
    netns_cell: tuple[str, Path],
) -> None:
    cell, state = netns_cell
    started = time.monotonic()
    info = launcher.up(state, cell=cell, replicas=3, machines=3, hosts="netns")
    print(f"netns cell up in {time.monotonic() - started:.1f} s")
    net = info.network
    assert net is not None and len(net.hosts) == 3 + 3 + 1 + 3
    recorded = json.loads((state / "cell.json").read_text())["network"]
    assert {h["name"]: h["address"] for h in recorded["hosts"]} == {h.name: h.address for h in net.hosts}
    # Every URL the cell hands out is a process's own address.
    assert [where(u) for u in info.master_urls] == [f"{net.address(f'master{i}')}:{netns.MASTER_PORT}" for i in range(3)]
    assert [where(u) for u in info.etcd_urls] == [f"{net.address(f'etcd{i}')}:{netns.ETCD_CLIENT_PORT}" for i in range(3)]
    assert {k: where(u) for k, u in info.borglet_urls.items()} == {
        f"machine{i}": f"{net.address(f'machine{i}')}:{netns.BORGLET_PORT}" for i in range(3)
    }

    job = state.parent / "job.json"
    job.write_text(json.dumps(sleeper_job("steady", count=3)))
    submitted = minborg("job", "submit", str(job), state_dir=state)
    assert submitted.returncode == 0, submitted.stderr
    shown = minborg("job", "show", "bob/steady", "-o", "json", state_dir=state)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["job"]["task_count"] == 3
    machines = minborg("machine", "list", "-o", "json", state_dir=state)
    assert machines.returncode == 0, machines.stderr
    hosts = {m["name"]: m["address"] for m in json.loads(machines.stdout)}
    assert hosts == info.borglet_urls  # what the API answers: each borglet's own address

    # Each process listens on its own host's address only.
    for host in net.hosts:
        sockets = netns.listening(host.netns)
        assert all(s.rsplit(":", 1)[0] == host.address for s in sockets), (host, sockets)
        assert host.name.startswith("scheduler") or sockets, host  # a scheduler serves nothing
    print({h.name: netns.listening(h.netns) for h in net.hosts})

    launcher.down(state)
    assert leftovers(cell) == []

    # `cell up` on the stopped cell makes its hosts again, on the same addresses.
    resumed = launcher.up(state)
    assert resumed.network == net
    wait_for(lambda: _running(state) == 3 or None, 30, "the job's 3 tasks running again")
    launcher.down(state)
    assert leftovers(cell) == []
    print(f"whole test {time.monotonic() - started:.1f} s")


def _running(state: Path) -> int:
    answer = minborg("task", "list", "bob/steady", "-o", "json", state_dir=state)
    if answer.returncode != 0:
        return -1
    return sum(t.get("state") == "RUNNING" for t in json.loads(answer.stdout))


def answers(address: str, port: int, netns_name: str | None = None, timeout: float = 1.5) -> bool:
    """Whether a process answers at address:port within `timeout` (any bytes or a close after a
    request: an HTTPS server closes on a plain request), from this host or from `netns_name`.
    A cut link times the connect out; a paused process accepts (the kernel does) and says nothing."""
    probe = (
        "import socket,sys\n"
        "try:\n"
        f"    s=socket.create_connection(({address!r},{port}),timeout={timeout}); s.sendall(b'GET /healthz HTTP/1.0\\r\\n\\r\\n'); s.recv(1)\n"
        "except OSError:\n"
        "    sys.exit(1)\n"
    )
    command = [sys.executable, "-c", probe]
    if netns_name is not None:
        command = netns.in_netns(netns_name, command)
    return subprocess.run(command, capture_output=True, timeout=30).returncode == 0


def test_partitions_by_packet_filter_pauses_and_kills_and_heal(netns_cell: tuple[str, Path]) -> None:
    cell, state = netns_cell
    started = time.monotonic()
    info = launcher.up(state, cell=cell, replicas=1, machines=2, schedulers=0, hosts="netns")
    net = info.network
    assert net is not None
    m0, m1, master = net.host("machine0"), net.host("machine1"), net.host("master0")
    port = netns.BORGLET_PORT
    assert answers(m0.address, port) and answers(m0.address, port, master.netns)

    isolated = minborg("cell", "partition", "isolate", "machine0", state_dir=state)
    assert isolated.returncode == 0, isolated.stderr
    assert not answers(m0.address, port)  # from this host
    assert not answers(m0.address, port, master.netns)  # from the master's host
    assert answers(m1.address, port, master.netns)  # the other machine is still reached
    shown = json.loads(minborg("cell", "hosts", "--json", state_dir=state).stdout)
    rules = {h["host"]: h["rules"] for h in shown["hosts"]}
    assert {k: v for k, v in rules.items() if v} == netfaults.rules(info)
    assert len(rules["machine0"]) == 2 * (len(net.hosts) - 1 + 1)  # both ways, every host and this one
    assert sorted(rules["master0"]) == [f"-A {netns.CHAIN} -d {m0.address}/32 -j DROP",
                                        f"-A {netns.CHAIN} -s {m0.address}/32 -j DROP"]  # fmt: skip

    healed = minborg("cell", "heal", "--json", state_dir=state)
    assert healed.returncode == 0 and json.loads(healed.stdout)["rules_removed"] > 0, healed.stderr
    assert answers(m0.address, port) and answers(m0.address, port, master.netns)

    # One way: what master0 sends to machine1 is dropped; machine1's own rules hold no cut of its sends.
    one_way = minborg("cell", "partition", "split", "master0", "--from", "machine1", "--one-way", state_dir=state)
    assert one_way.returncode == 0, one_way.stderr
    assert not answers(m1.address, port, master.netns) and answers(m0.address, port, master.netns)
    rules = netfaults.rules(info)
    assert rules["master0"] == [f"-A {netns.CHAIN} -d {m1.address}/32 -j DROP"]
    assert rules["machine1"] == [f"-A {netns.CHAIN} -s {master.address}/32 -j DROP"]
    refused = minborg("cell", "partition", "split", "master0", "--from", "master0", state_dir=state)
    assert refused.returncode != 0 and "both sides" in refused.stderr

    # A pause: the kernel still accepts, the process answers nothing; heal continues it.
    assert minborg("cell", "heal", state_dir=state).returncode == 0
    assert answers(m1.address, port, master.netns)
    paused = minborg("cell", "pause", "machine1", state_dir=state)
    assert paused.returncode == 0, paused.stderr
    assert not answers(m1.address, port)
    procs = {p.name: p for p in info.processes}
    assert netfaults.state_of(procs["machine1"]) == "paused" and netfaults.state_of(procs["machine0"]) == "running"
    assert "machine1" in json.loads(minborg("cell", "heal", "--json", state_dir=state).stdout)["continued"]
    assert answers(m1.address, port)

    killed = minborg("cell", "kill", "machine0", state_dir=state)
    assert killed.returncode == 0, killed.stderr
    assert not answers(m0.address, port)  # nothing listens: refused at once
    launcher.down(state)
    assert leftovers(cell) == []
    print(f"whole test {time.monotonic() - started:.1f} s")
