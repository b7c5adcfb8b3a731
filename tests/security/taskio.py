"""What the attack suites share: the cell's secrets a task must not read, the probes a task runs to
try them and another user's task (REACH, SIGNALS), and what they read back from a task (its
record once it ended, its one JSON line of findings)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reference.cellfile import ClientError
from reference.client import CellClient
from tests.integration.cellkit import LocalCell, wait_for


def ended(api: CellClient, key: str) -> dict[str, Any]:
    """The task's record once it is DEAD."""
    return wait_for(lambda: (t := api.task(key, 0))["state"] == "DEAD" and t, 60, f"{key} to end")


def borglets_said(cell: LocalCell) -> str:
    """Whether each borglet of the cell still runs, and the end of its log."""
    said = []
    for b in cell.borglets:
        tail = b.log.read_text(errors="replace")[-3000:] if b.log.exists() else "(no log)"
        said.append(f"borglet {b.name} (pid {b.pid}) alive: {b.alive}; its log ends:\n{tail}")
    return "\n".join(said)


def output(cell: LocalCell, api: CellClient, spec: dict[str, Any]) -> dict[str, Any]:
    """Submit a job whose one task (process or container) prints one JSON line, wait for it to
    end, return the line. When the task does not end or its log cannot be read, the failure
    says whether the borglets still run and what they last logged."""
    assert cell.submit(spec).status_code == 201
    key = f"{spec['user']}/{spec['name']}"
    try:
        task = ended(api, key)
        out = api.logs(key, 0).decode()
    except (TimeoutError, ClientError) as err:
        raise AssertionError(f"{err}\n{borglets_said(cell)}") from err
    assert out.strip(), (task, api.logs(key, 0, stream="stderr"))
    return json.loads(out.strip().splitlines()[-1])


# A task's probe: which of the paths in argv it can open, the log directory of its container (when
# it runs in one) and the root of every mount (a bind mount of a host directory names it).
REACH = """
import json, os, sys
out = {"paths": {}}
for path in sys.argv[1:]:
    try:
        open(path, "rb").read(1)
        out["paths"][path] = "read"
    except OSError as err:
        out["paths"][path] = type(err).__name__
out["logs"] = sorted(os.listdir("/minborg/logs")) if os.path.isdir("/minborg/logs") else None
out["mount_roots"] = [line.split()[3] for line in open("/proc/self/mountinfo")]
print(json.dumps(out))
"""


def cell_secrets(cell: LocalCell, api: CellClient, python_job: Callable[..., dict[str, Any]]) -> list[Path]:
    """Run bob's diary job (`python_job` builds a process or a container job), then list what no
    other user's task may read: the channel key, the admin token, bob's log, the borglet's task
    table and every TLS key of the cell's store (CA, members, clients)."""
    assert cell.submit(python_job("diary", "bob", "print('bob writes his diary')")).status_code == 201
    ended(api, "bob/diary")
    state = cell.workdir / "machines" / "b0"  # the borglet's state dir
    bobs = list((state / "tasks").glob("bob_diary*/stdout"))
    assert bobs and b"diary" in bobs[0].read_bytes()
    secrets = [cell.channel_key_file, cell.admin_token_file, bobs[0], state / "tasks.json"]
    secrets += sorted(cell.workdir.glob("**/pki/*.key"))
    assert len(secrets) > 5, "the cell's store has no TLS keys to try"
    return secrets


# A task's attempt to signal the processes whose pids are in argv: another user's task ("victim")
# and its borglet; one JSON line of what each attempt did.
SIGNALS = """
import json, os, signal, sys
out = {}
for name, pid in zip(("victim", "borglet"), map(int, sys.argv[1:])):
    try:
        os.kill(pid, signal.SIGTERM)
        out[name] = "signalled"
    except OSError as err:
        out[name] = type(err).__name__
print(json.dumps(out))
"""
