"""The `minborg` entry point: the commands people type most (`--help`, `job list`, `task list`) answered with the standard library alone; everything else by the full command line.

Importing the full command line (typer, rich, httpx, pydantic, the launcher) costs most of a
second on a busy machine; these three commands need none of it. The fast path understands only
the options listed in FAST_OPTIONS; any other argument (a subcommand's --help, -w, a typo)
goes to the full command line, which owns every message and error. Its output is the full
command line's: the same rows (cli_plain.py), the same error words (cellfile.py), and a unit
test holds the top-level help to the full one's command list.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.parse
from typing import Any

from reference import cellfile, cli_plain

HELP = "Minborg: a reference implementation of Google's Borg cluster manager."
# (name, short help) of every top-level command, as the full command line lists them.
COMMANDS = (
    ("demo", "Run hello_world on a 3-replica cell, call it through BNS, kill the leader, carry on."),
    ("events", "The cell's events: tasks scheduled, started, exited, OOM-killed, evicted, lost...; jobs "
               "submitted and removed; machines down and up."),
    ("master", "Run one master replica (arguments as `python -m reference.master`; try --help)."),
    ("scheduler", "Run a scheduler process: plans on its own cached copy of the cell, proposes to the leader "
                  "(try --help)."),
    ("borglet", "Run the borglet of one machine (arguments as `python -m reference.borglet`; try --help)."),
    ("conformance", "Run the conformance suite against a cell, or a local one it starts (try --help)."),
    ("fauxmaster", "A checkpoint in a Fauxmaster: submit jobs, fail machines or racks, schedule, advance the "
                   "clock; print placed, pending, preempted."),
    ("cell", "Start, inspect and stop a local cell on this machine."),
    ("job", "Submit, inspect, resize and kill jobs."),
    ("task", "Inspect tasks, their events and logs; kill them."),
    ("machine", "Inspect the cell's machines."),
    ("bns", "Borg Name Service: <index>.<job>.<user>.<cell>.minborg."),
    ("user", "Add, list and revoke the cell's users and their tokens (admin)."),
    ("quota", "Set, list and delete the users' quotas per priority band (admin)."),
    ("alloc", "Submit, list, show and kill alloc sets: resources reserved on several machines that jobs run in."),
    ("bench", "Benchmarks of the scheduler, of a live cell and of this command's start-up."),
    ("report", "Regenerate measured reports."),
    ("spec", "The executable specification."),
    ("campaign", "Load, chaos and elasticity campaigns that write reports."),
    ("image", "Container images for cells of the docker runtime."),
)  # fmt: skip
FAST_OPTIONS = {"--master", "--state-dir", "--user", "--output", "-o"}
FLAGS = {"--json"}
RETRY_S = 12.0  # as the full client: 503s (no leader yet) are retried this long


class Fallback(Exception):
    """An argument the fast path does not handle: the full command line takes over."""


def top_help() -> str:
    width = max(len(name) for name, _ in COMMANDS)
    lines = [
        "Usage: minborg [OPTIONS] COMMAND [ARGS]...",
        "",
        f"  {HELP}",
        "",
        "Options:",
        "  --help  Show this message and exit.",
        "",
        "Commands:",
    ]
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMANDS]
    lines += ["", "Every command takes --help."]
    return "\n".join(lines)


def parse(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Positional arguments and the fast options; Fallback on anything else."""
    positional: list[str] = []
    options: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if arg in FLAGS:
            options[arg] = "1"
        elif name in FAST_OPTIONS:
            if not eq:
                if i + 1 >= len(args):
                    raise Fallback
                value = args[i + 1]
                i += 1
            options["--output" if name == "-o" else name] = value
        elif arg.startswith("-"):
            raise Fallback
        else:
            positional.append(arg)
        i += 1
    return positional, options


def get(urls: list[str], path: str, params: dict[str, str] | None = None, token: str | None = None) -> dict[str, Any]:
    """GET from the first replica that answers; 503 moves on and is retried for RETRY_S."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    deadline = time.monotonic() + RETRY_S
    while True:
        failures: list[str] = []
        for url in urls:
            try:
                status, body = http_get(url, path + query, token=token)
            except (OSError, ValueError) as err:
                failures.append(f"{url}: {err}")
                continue
            if status == 503:
                failures.append(f"{url}: 503 {cellfile.format_detail(_detail(body))}")
                continue
            if status >= 400:
                raise cellfile.ClientError(status, _detail(body), url)
            return json.loads(body or b"{}")
        if time.monotonic() + 0.5 > deadline:
            status = 503 if any(": 503" in f for f in failures) else cellfile.NO_ANSWER
            raise cellfile.ClientError(status, "no master replica could serve the request: " + "; ".join(failures))
        time.sleep(0.5)


def http_get(url: str, target: str, timeout: float = 5.0, token: str | None = None) -> tuple[int, bytes]:
    """One HTTP/1.1 GET on a fresh connection: (status, body). A few lines of socket code
    instead of urllib.request or http.client, whose imports cost more than the request."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"the fast path speaks plain http only, not {url}")
    host, port = parts.hostname, parts.port or 80
    with socket.create_connection((host, port), timeout=timeout) as sock:
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        sock.sendall(
            f"GET {target} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\n{auth}"
            f"Connection: close\r\n\r\n".encode()
        )
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    raw = b"".join(chunks)
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("an incomplete HTTP answer")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _unchunk(body)
    elif "content-length" in headers:
        body = body[: int(headers["content-length"])]
    return status, body


def _unchunk(body: bytes) -> bytes:
    out, pos = [], 0
    while True:
        end = body.index(b"\r\n", pos)
        size = int(body[pos:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[end + 2 : end + 2 + size])
        pos = end + 2 + size + 2


def _detail(body: bytes) -> Any:
    try:
        doc = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()
    return doc.get("detail", doc) if isinstance(doc, dict) else doc


def output_of(options: dict[str, str]) -> str:
    output = "json" if "--json" in options else options.get("--output", "table")
    if output not in cli_plain.OUTPUTS:
        raise Fallback  # the full command line words the error
    return output


def run(args: list[str]) -> int:
    """Answer `args` on the fast path; returns the exit code. Fallback when it cannot."""
    if args in ([], ["--help"]):
        print(top_help())
        return 0
    positional, options = parse(args)
    if positional[:2] == ["job", "list"] and len(positional) == 2:
        output = output_of(options)
        urls = cellfile.master_urls(options.get("--master"), options.get("--state-dir"))
        params = {"user": options["--user"]} if options.get("--user") else None
        token = cellfile.find_token(None, options.get("--state-dir"))
        jobs = get(urls, "/v1/jobs", params, token)["jobs"]
        if output in ("json", "yaml"):
            print(cli_plain.dump(jobs, output))
        elif not jobs:
            print("no jobs")
        else:
            print(cli_plain.render(*cli_plain.job_rows(jobs, wide=output == "wide")))
        return 0
    if positional[:2] == ["task", "list"] and len(positional) == 3 and "--user" not in options:
        output = output_of(options)
        user, sep, name = positional[2].partition("/")
        if not (user and sep and name) or "/" in name:
            raise Fallback
        urls = cellfile.master_urls(options.get("--master"), options.get("--state-dir"))
        token = cellfile.find_token(None, options.get("--state-dir"))
        tasks = get(urls, f"/v1/jobs/{user}/{name}/tasks", token=token)["tasks"]
        if output in ("json", "yaml"):
            print(cli_plain.dump(tasks, output))
        else:
            color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
            columns, rows = cli_plain.task_rows(tasks, wide=output == "wide", color=color)
            print(cli_plain.render(columns, rows, color=color, title=f"tasks of {user}/{name}"))
        return 0
    raise Fallback


def main() -> None:
    """Entry point of the `minborg` console script."""
    try:
        code = run(sys.argv[1:])
    except Fallback:
        from reference.cli import main as full

        full()
        return
    except cellfile.ClientError as err:
        print(f"error: {cellfile.client_error_message(err)}", file=sys.stderr)
        code = 2 if err.status == 422 else 1
    except BrokenPipeError:
        code = 0
    sys.exit(code)
