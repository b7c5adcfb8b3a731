"""Start, inspect and stop a local cell on 127.0.0.1: etcd members, master replicas, borglets.

The package's modules, by job: `cellfile` (what cell.json records), `processes` (spawning,
signalling, stopping and awaiting a process), `roles` (how a master and a borglet are
started), `toxiproxy` (a proxy on every link), `cellapi` (a leader, the machines registered),
`statedir` (what a state dir must hold), `newcell` (`up`), `restarts` (`resume`, `restart`),
`shutdown` (`down`, `shut_down`), `cellstatus` (`status`), `lifecycle` (what those four share)
and `testcell` (`LocalCell`, the one class that starts a local cell for the tests, the benches
and the conformance suite, through `up`).
"""

from reference.cellfile import read_admin_token
from reference.launcher.cellapi import ask_leader, wait_for_leader
from reference.launcher.cellfile import (
    CellInfo,
    LauncherError,
    ProcessRecord,
    ProxyRecord,
    Role,
    is_alive,
    with_records,
)
from reference.launcher.cellstatus import status
from reference.launcher.cpubudget import DEFAULT_MACHINE_SHARES
from reference.launcher.newcell import Names, up
from reference.launcher.processes import (
    READY_TIMEOUT_S,
    child_env,
    descendants,
    kill_process,
    signal_process,
    spawn,
    stop_processes,
    wait_ready,
)
from reference.launcher.restarts import restart, resume
from reference.launcher.roles import (
    DEFAULT_CAPACITY,
    borglet_auth,
    rack_of,
    start_borglet,
    start_master,
)
from reference.launcher.shutdown import Stopped, down, shut_down
from reference.launcher.toxiproxy import TOXIPROXY_ENV, find_toxiproxy_server
from reference.ports import HOST

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_MACHINE_SHARES",
    "HOST",
    "READY_TIMEOUT_S",
    "TOXIPROXY_ENV",
    "CellInfo",
    "LauncherError",
    "Names",
    "ProcessRecord",
    "ProxyRecord",
    "Role",
    "Stopped",
    "ask_leader",
    "borglet_auth",
    "child_env",
    "descendants",
    "down",
    "find_toxiproxy_server",
    "is_alive",
    "kill_process",
    "rack_of",
    "read_admin_token",
    "restart",
    "resume",
    "shut_down",
    "signal_process",
    "spawn",
    "start_borglet",
    "start_master",
    "status",
    "stop_processes",
    "up",
    "wait_for_leader",
    "wait_ready",
    "with_records",
]
