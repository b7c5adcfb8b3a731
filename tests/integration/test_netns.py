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
from reference.launcher import netns
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
