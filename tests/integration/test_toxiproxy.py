"""`cell up --toxiproxy`: the real Toxiproxy server with a named proxy on every link, recorded in the cell file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reference import launcher
from reference.cellfile import auth_headers

pytestmark = pytest.mark.integration


def toxiproxy_installed() -> bool:
    try:
        launcher.find_toxiproxy_server()
        return True
    except launcher.LauncherError:
        return False


@pytest.fixture
def cell(tmp_path: Path) -> Iterator[launcher.CellInfo]:
    if not toxiproxy_installed():
        pytest.skip("no toxiproxy-server: run `bash chaos/install_toxiproxy.sh`")
    path = tmp_path / "cell"
    info = launcher.up(path, replicas=3, machines=2, etcd_members=3, toxiproxy=True)
    try:
        yield info
    finally:
        launcher.down(path)


def test_every_link_has_a_named_proxy(cell: launcher.CellInfo) -> None:
    names = {p.name for p in cell.proxies}
    assert names == {
        *(f"client-master{i}" for i in range(3)),
        *(f"master{i}-etcd{j}" for i in range(3) for j in range(3)),
        "master-borglet0", "master-borglet1",
    }  # fmt: skip
    served = {p["name"] for p in httpx.get(f"{cell.toxiproxy_url}/proxies").json().values()}
    assert served == names
    reread = launcher.CellInfo.load(cell.state_dir)
    assert reread.toxiproxy_url == cell.toxiproxy_url and reread.proxies == cell.proxies


def test_clients_masters_and_borglets_go_through_the_proxies(cell: launcher.CellInfo) -> None:
    listens = {f"http://{p.listen}": p for p in cell.proxies}
    assert all(url in listens for url in cell.master_urls)
    token = launcher.read_admin_token(cell.state_dir)
    machines = httpx.get(cell.master_urls[0] + "/v1/machines", headers=auth_headers(token)).json()["machines"]
    assert {listens[m["address"]].name for m in machines} == {"master-borglet0", "master-borglet1"}
    master0 = next(p for p in cell.of_role(launcher.Role.MASTER) if p.name == "master0")
    cmdline = Path(f"/proc/{master0.pid}/cmdline").read_bytes().decode().split("\0")
    etcd = cmdline[cmdline.index("--etcd") + 1].split(",")
    assert all(u.startswith("https://") for u in etcd)  # TLS end to end: the proxy passes the bytes
    by_address = {p.listen: p for p in cell.proxies}
    assert [by_address[u.split("://", 1)[1]].name for u in etcd] == ["master0-etcd0", "master0-etcd1", "master0-etcd2"]


def test_down_stops_the_toxiproxy_server(tmp_path: Path) -> None:
    if not toxiproxy_installed():
        pytest.skip("no toxiproxy-server: run `bash chaos/install_toxiproxy.sh`")
    path = tmp_path / "cell"
    info = launcher.up(path, replicas=1, machines=1, toxiproxy=True)
    launcher.down(path)
    assert not any(launcher.is_alive(p) for p in info.processes)
