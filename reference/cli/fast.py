"""The `minborg` entry point: the everyday commands answered with the standard library alone; everything else by the full command line.

Importing the full command line (typer, rich, httpx, pydantic, the launcher) costs most of a
second on a busy machine; reading a cell needs none of it. The fast path answers `--help`,
`--version`, `completion SHELL`, `cell status`, `job list|show|submit|run|update|kill`, `task
list|show|logs|exec`, `machine list`, `events` and `bns resolve` with the options each declares in
FAST; any other argument (a subcommand's --help, -w, -f, a bad value, a typo) goes to the full
command line, which owns every usage message. What it prints is the full command line's: the
same texts (cli_plain.py, cli_views.py), the same error words, and unit tests hold its help to
the full one's commands and its answers to the full one's.
"""

from __future__ import annotations

import os
import sys
from collections import namedtuple
from collections.abc import Callable

from reference import cellfile, execspec, proctime
from reference.cli import output as cli_output
from reference.cli import plain as cli_plain
from reference.cli import views as cli_views
from reference.cli.help import (  # noqa: F401  (the fast path's names, as before)
    COMMANDS,
    EXAMPLES,
    GROUPS,
    HELP,
    OPTIONS,
    SHELLS,
    VERSION,
    top_help,
    version,
)
from reference.cli.http import PlainCell, cell_urls

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is imported by type checkers only: it costs the fast path's start
    from typing import Any


class Fallback(Exception):
    """An argument the fast path does not handle: the full command line takes over."""


# --- the fast commands' arguments ---------------------------------------------------------------

COMMON = ("--master", "--state-dir")


# A command the fast path answers: how many positional arguments, the function that answers
# it (Args -> exit code), the options that take a value, the flags. A named tuple: importing
# dataclasses (and inspect) costs as much as all the rest of the fast path.
Fast = namedtuple("Fast", ["positional", "answer", "options", "flags"], defaults=((), ()))


class Args:
    """One fast command's arguments as given: positional ones, options by long name, the token."""

    def __init__(self, positional: list[str]) -> None:
        self.positional = positional
        self.options: dict[str, str] = {}
        self.token: str | None = None

    def has(self, name: str) -> bool:
        return name in self.options

    def int_option(self, name: str, default: int | None = None, low: int = 0, high: int | None = None) -> int | None:
        """An integer option within [low, high]; Fallback (the full command line words the error) else."""
        if name not in self.options:
            return default
        text = self.options[name]
        if not text.lstrip("-").isdigit():
            raise Fallback
        value = int(text)
        if value < low or (high is not None and value > high):
            raise Fallback
        return value

    def float_option(self, name: str, default: float, low: float = 1.0) -> float:
        """A number of seconds of at least `low`; Fallback (the full command line words the error) else."""
        if name not in self.options:
            return default
        try:
            value = float(self.options[name])
        except ValueError:
            raise Fallback from None
        if not low <= value < float("inf"):
            raise Fallback
        return value

    def output(self) -> str:
        output = "json" if "--json" in self.options else self.options.get("--output", "table")
        if not cli_output.valid(output):
            raise Fallback  # the full command line words the error
        return output

    def cell(self, timeout: float = 5.0) -> PlainCell:
        urls = cell_urls(self.options.get("--master"), self.options.get("--state-dir"))
        return PlainCell(urls, cellfile.find_token(self.token, self.options.get("--state-dir")), timeout=timeout,
                         state_dir=self.options.get("--state-dir"))  # fmt: skip

    def job(self, cell: PlainCell | None = None) -> str:
        """USER/NAME; with the `cell` (a reading command), NAME alone too (cli_plain.job_by_name)."""
        text = self.positional[0].strip()
        if cell is not None and text and "/" not in text:
            try:
                return cli_plain.job_by_name(text, lambda: cell.request("GET", "/v1/jobs")["jobs"],
                                             lambda: cell.request("GET", "/v1/whoami"))  # fmt: skip
            except ValueError:
                raise Fallback from None  # the full command line words it
        user, sep, name = text.partition("/")
        if not (user and sep and name) or "/" in name:
            raise Fallback
        return f"{user}/{name}"


ALIASES = {"-o": "--output", "-n": "--tail"}


def parse(args: list[str], fast: Fast) -> Args:
    """The positional arguments and options of one fast command; Fallback on anything else."""
    parsed = Args([])
    known = set(fast.options) | set(COMMON)
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        name = ALIASES.get(name, name)
        if arg in fast.flags:
            parsed.options[arg] = "1"
        elif name in known:
            if not eq:
                if i + 1 >= len(args):
                    raise Fallback
                value = args[i + 1]
                i += 1
            parsed.options[name] = value
        elif arg.startswith("-") and arg != "-":
            raise Fallback
        else:
            parsed.positional.append(arg)
        i += 1
    if len(parsed.positional) != fast.positional:
        raise Fallback
    return parsed


def show(data: Any, output: str, table: Callable[[], str]) -> int:
    if not cli_output.is_data(output):
        print(table())
        return 0
    try:
        print(cli_plain.dump(data, output))
    except cli_output.TemplateError:
        raise Fallback from None  # the full command line words it
    return 0


# --- the answers ----------------------------------------------------------------------------------


def job_list(a: Args) -> int:
    output = a.output()
    params = {"user": a.options["--user"]} if a.options.get("--user") else None
    with a.cell() as cell:
        jobs = cell.request("GET", "/v1/jobs", params=params)["jobs"]
        if cli_output.is_data(output):
            return show(jobs, output, str)
        color = cli_plain.color_on()
        counts = cli_plain.job_counts(jobs, lambda key: cell.request("GET", f"/v1/jobs/{key}"))
    rows = cli_plain.job_rows(jobs, wide=output == "wide", counts=counts, color=color)
    print(cli_plain.render(*rows, color=color) if jobs else "no jobs")
    return 0


def job_show(a: Args) -> int:
    output = a.output()
    with a.cell() as cell:
        key = a.job(cell)
        answer = cell.request("GET", f"/v1/jobs/{key}")
    return show(answer, output, lambda: cli_views.job_text(answer, key, color=cli_plain.color_on()))


def job_submit(a: Args) -> int:
    """`job submit FILE`: the file as it is written, validated by the cell (cli/fastjobs.py)."""
    from reference.cli import fastjobs

    try:
        return fastjobs.submit(a)
    except fastjobs.Refused:
        raise Fallback from None


def job_run(a: Args) -> int:
    """`job run FILE`: the whole file PUT, validated by the cell, its rollout followed (cli/fastjobs.py)."""
    from reference.cli import fastjobs

    try:
        return fastjobs.run(a)
    except fastjobs.Refused:
        raise Fallback from None


def job_update(a: Args) -> int:
    key, tasks = a.job(), a.int_option("--tasks")
    if tasks is None:
        raise Fallback  # --cpu, --ram, or nothing to change: the full command line
    with a.cell() as cell:
        answer = cell.request("PATCH", f"/v1/jobs/{key}", json={"task_count": tasks})
    if a.has("--json"):
        return show(answer, "json", str)
    print(cli_views.updated_line(key, answer, color=cli_plain.color_on()))
    return 0


def job_plan(a: Args) -> int:
    """`job plan FILE`: the file PUT as a dry run, validated by the cell (cli/fastjobs.py)."""
    from reference.cli import fastjobs

    try:
        return fastjobs.plan(a)
    except fastjobs.Refused:
        raise Fallback from None


def job_kill(a: Args) -> int:
    key = a.job()
    with a.cell() as cell:
        answer = cell.request("DELETE", f"/v1/jobs/{key}")
    if a.has("--json"):
        return show(answer, "json", str)
    print(cli_views.killed_line(key, answer, color=cli_plain.color_on()))
    return 0


def task_list(a: Args) -> int:
    output = a.output()
    with a.cell() as cell:
        key = a.job(cell)
        tasks = cell.request("GET", f"/v1/jobs/{key}/tasks")["tasks"]
    color = cli_plain.color_on()
    return show(tasks, output, lambda: cli_plain.render(
        *cli_plain.task_rows(tasks, wide=output == "wide", color=color), color=color, title=f"tasks of {key}"))  # fmt: skip


def task_index(a: Args) -> int:
    text = a.positional[1]
    if not text.isdigit():
        raise Fallback
    return int(text)


def task_show(a: Args) -> int:
    index, output = task_index(a), a.output()
    incarnation = a.int_option("--incarnation", low=-(2**63))
    params = {"incarnation": incarnation} if incarnation is not None else None
    with a.cell() as cell:
        key = a.job(cell)
        task = cell.request("GET", f"/v1/jobs/{key}/tasks/{index}", params=params)["task"]
    return show(task, output, lambda: cli_views.task_text(task, color=cli_plain.color_on()))


def task_logs(a: Args) -> int:
    index = task_index(a)
    params: dict[str, Any] = {"stream": "stderr" if a.has("--stderr") else "stdout",
                              "tail": a.int_option("--tail", 100, high=10000)}  # fmt: skip
    incarnation = a.int_option("--incarnation", low=-(2**63))
    if incarnation is not None:
        params["incarnation"] = incarnation
    with a.cell() as cell:
        key = a.job(cell)
        body = cell.raw("GET", f"/v1/jobs/{key}/tasks/{index}/logs", params)
        if not body and incarnation is None:
            why = cli_views.never_started(cell.request("GET", f"/v1/jobs/{key}/tasks/{index}")["task"])
            if why:
                print(f"minborg: {why}", file=sys.stderr)
                return 1
    sys.stdout.buffer.write(body)
    sys.stdout.buffer.flush()
    return 0


INTERACTIVE = ("-it", "-ti", "-i", "-t", "--stdin", "--tty")


def task_exec(a: Args, command: list[str]) -> int:
    """`task exec JOB INDEX [--timeout S] [--json] -- CMD...` (reference/cli/execute.py's);
    with -it, a terminal session (reference/cli/terminal.py)."""
    if any(a.has(flag) for flag in INTERACTIVE):
        if a.has("--json") or a.has("--timeout") or not command:
            raise Fallback  # the full command line words it
        from reference.cli.terminal import interactive

        with a.cell() as cell:
            return interactive(cell, a.job(cell), task_index(a), command)
    index, timeout = task_index(a), a.options.get("--timeout", str(execspec.DEFAULT_TIMEOUT_S))
    try:
        timeout_s = float(timeout)
    except ValueError:
        raise Fallback from None
    if not command or not 1 <= timeout_s <= execspec.MAX_TIMEOUT_S:
        raise Fallback  # the full command line words it
    with a.cell(timeout=timeout_s + 30.0) as cell:
        key = a.job(cell)
        answer = cell.request("POST", f"/v1/jobs/{key}/tasks/{index}/exec", json={"command": command, "timeout_s": timeout_s})
    return cli_views.exec_answer(answer, a.has("--json"), timeout_s)


def machine_list(a: Args) -> int:
    output = a.output()
    with a.cell() as cell:
        machines = cell.request("GET", "/v1/machines")["machines"]
    color = cli_plain.color_on()
    return show(machines, output, lambda: cli_plain.render(*cli_views.machine_rows(machines, color=color), color=color)
                if machines else "no machines")  # fmt: skip


def events(a: Args) -> int:
    from reference.cli.watch import event_lines, follow

    output = a.output()
    since = a.int_option("--since", 0)
    job = a.options.get("--job")
    for_s = a.float_option("--for", 3600.0)
    tail = a.int_option("--tail", cli_output.EVENTS_TAIL)
    if tail < 0:
        raise Fallback  # the full command line words the refusal
    with a.cell() as cell:
        follow(cell, "/v1/events", since=since, for_s=for_s, line=event_lines(output),
               say=lambda text: print(text, flush=True), follow=a.has("--follow") or a.has("-f"), job=job,
               tail=tail)  # fmt: skip
    return 0


def bns_resolve(a: Args) -> int:
    output, name = a.output(), a.positional[0]
    with a.cell() as cell:
        answer = cell.request("GET", f"/v1/bns/{name}")
    return show(answer, output, lambda: cli_views.resolved_line(answer, name))


def cell_status(a: Args) -> int:
    output = a.output()
    if a.has("--master") or os.environ.get(cellfile.MASTER_ENV):
        return remote_status(a, output)
    if cli_output.is_data(output):
        raise Fallback  # the launcher's full record: the full command line
    local = local_status(a.options.get("--state-dir"))
    if not local["running"]:
        raise Fallback  # the full command line says what to do
    cell = PlainCell(local["master_urls"], cellfile.find_token(a.token, a.options.get("--state-dir")), retry_s=3.0,
                     state_dir=a.options.get("--state-dir"))  # fmt: skip
    overview = counts = None
    try:
        overview = cell.request("GET", "/v1/cell")
        machines = cell.request("GET", "/v1/machines")["machines"]
        counts = {"up": sum(m.get("state") == "up" for m in machines)}
        counts["down"] = len(machines) - counts["up"]
    except cellfile.ClientError as err:
        overview, local["api_error"] = None, str(err)
    text, warning = cli_views.cell_text(local, overview, counts, color=cli_plain.color_on())
    if warning:
        print(warning, file=sys.stderr)
    if text:
        print(text)
    return 0


def remote_status(a: Args, output: str) -> int:
    """`cell status` of a cell found by its masters' URLs: what its API says, no processes."""
    with a.cell() as cell:
        cell.retry_s = 3.0
        overview = cell.request("GET", "/v1/cell")
        machines = cell.request("GET", "/v1/machines")["machines"]
    counts = {"up": sum(m.get("state") == "up" for m in machines)}
    counts["down"] = len(machines) - counts["up"]
    data = {"local": None, "cell": overview, "machines": counts}
    return show(data, output, lambda: cli_views.cell_text(None, overview, counts, color=cli_plain.color_on())[0])


def local_status(state_dir: str | None) -> dict[str, Any]:
    """What launcher.status says of a local cell's processes, read from its cell file and
    /proc: whether each recorded process still runs (not a zombie, not a reused pid: its start
    time is the one recorded), its CPU seconds. Without /proc, or for a cell with CPU budgets
    (cgroups), the full command line answers."""
    import json

    path = cellfile.state_dir_path(state_dir) / cellfile.CELL_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        raise Fallback from None  # no cell, or an unreadable one: the full command line words it
    if doc.get("replica_cpu") is not None or not os.path.exists("/proc/stat"):
        raise Fallback
    boot = proctime.boot_second()
    if boot is None:
        raise Fallback
    processes = []
    for p in doc.get("processes") or []:
        fields = proctime.stat_fields(int(p["pid"]))
        alive = fields is not None and fields[0] != b"Z" and same_start(p, int(fields[19]), boot)
        cpu_s = (int(fields[11]) + int(fields[12])) / proctime.CLOCK_TICKS if alive and fields else None
        processes.append({"role": str(p["role"]), "name": p["name"], "pid": p["pid"], "alive": alive,
                          "url": p.get("url"), "log": p.get("log"), "cpu_s": cpu_s})  # fmt: skip
    return {"cell": doc.get("cell"), "state_dir": doc.get("state_dir"), "running": any(p["alive"] for p in processes),
            "master_urls": list(doc.get("master_urls") or []), "processes": processes, "api_error": None,
            "etcd_version": doc.get("etcd_version"), "etcd_tls": bool(doc.get("etcd_tls"))}  # fmt: skip


CREATE_TIME_TOLERANCE_S = 0.05  # as launcher/cellfile.py: two reads of a start time agree this well


def same_start(record: dict[str, Any], ticks: int, boot: int) -> bool:
    """Whether a process that started `ticks` after boot is the one the cell file records:
    by its ticks since boot, as launcher/cellfile.py's live_process, or for a record without
    them by psutil's create_time (btime + ticks) on the wall clock."""
    if record.get("start_ticks") is not None:
        return int(record["start_ticks"]) == ticks
    return abs(boot + ticks / proctime.CLOCK_TICKS - record["create_time"]) <= CREATE_TIME_TOLERANCE_S


OUTPUT = ("--output",)
FAST: dict[tuple[str, ...], Fast] = {
    ("job", "list"): Fast(0, job_list, ("--user", *OUTPUT), ("--json",)),
    ("job", "show"): Fast(1, job_show, OUTPUT, ("--json",)),
    ("job", "submit"): Fast(1, job_submit, ("--wait-timeout",), ("--detach", "--wait", "--json", "--dry-run")),
    ("job", "run"): Fast(1, job_run, ("--timeout",), ("--detach", "-d", "--json")),
    ("job", "plan"): Fast(1, job_plan, (), ("--json",)),
    ("job", "update"): Fast(1, job_update, ("--tasks",), ("--json",)),
    ("job", "kill"): Fast(1, job_kill, (), ("--json",)),
    ("task", "list"): Fast(1, task_list, OUTPUT, ("--json",)),
    ("task", "show"): Fast(2, task_show, ("--incarnation", *OUTPUT), ("--json",)),
    ("task", "logs"): Fast(2, task_logs, ("--tail", "--incarnation"), ("--stderr",)),
    ("machine", "list"): Fast(0, machine_list, OUTPUT, ("--json",)),
    ("events",): Fast(0, events, ("--since", "--job", "--for", "--tail", *OUTPUT), ("--json", "--follow", "-f")),
    ("bns", "resolve"): Fast(1, bns_resolve, OUTPUT, ("--json",)),
    ("cell", "status"): Fast(0, cell_status, OUTPUT, ("--json",)),
}
# `task exec`'s options, before its `--` (what follows is the command, whatever it holds).
EXEC = Fast(2, task_exec, ("--timeout",), ("--json", *INTERACTIVE))


def run(args: list[str]) -> int:
    """Answer `args` on the fast path; returns the exit code. Fallback when it cannot."""
    if args in ([], ["--help"]):
        print(top_help())
        return 0
    if args == ["--version"]:
        print(version())
        return 0
    token = None
    if args[:1] == ["--token"] and len(args) > 1:
        token, args = args[1], args[2:]
    elif args[:1] and args[0].startswith("--token="):
        token, args = args[0].partition("=")[2], args[1:]
    if args[:1] == ["help"]:
        return help_topic(args[1:])
    if len(args) == 2 and args[0] == "completion" and args[1] in SHELLS:
        from reference.cli.complete import script

        print(script(args[1]), end="")
        return 0
    if args[:1] == ["__complete"]:
        return complete(args[1:], token)
    if args[:2] == ["task", "exec"] and "--" in args:
        cut = args.index("--")
        parsed = parse(args[2:cut], EXEC)
        parsed.token = token
        return task_exec(parsed, args[cut + 1 :])
    for words in (tuple(args[:2]), tuple(args[:1])):
        fast = FAST.get(words)
        if fast is not None and not any(w.startswith("-") for w in words):
            parsed = parse(args[len(words):], fast)
            parsed.token = token
            return fast.answer(parsed)
    raise Fallback


def help_topic(words: list[str]) -> int:
    """`minborg help`: the commands and topics; `help TOPIC`: the topic; `help COMMAND [SUB]`:
    that command's --help (the full command line prints it)."""
    from reference.cli import topics

    if not words:
        print(topics.listing(COMMANDS))
        return 0
    if len(words) == 1 and words[0] in topics.TOPICS:
        print(topics.TOPICS[words[0]][1], end="")
        return 0
    if words[0] in {name for name, _ in COMMANDS} and not any(w.startswith("-") for w in words):
        sys.argv[1:] = [*words, "--help"]  # what the full command line reads next
        raise Fallback
    print(topics.unknown(" ".join(words), COMMANDS), file=sys.stderr)
    return 2


def complete(words: list[str], token: str | None) -> int:
    """The candidates a completion script asks for (cli_complete.py), one a line; the jobs
    of the cell found as every command finds it, asked for at most one second."""
    from reference.cli.complete import complete as candidates

    state_dir = next((w.partition("=")[2] or None for w in words if w.startswith("--state-dir=")), None)

    def jobs() -> list[str]:
        cell = PlainCell(cellfile.master_urls(None, state_dir), cellfile.find_token(token, state_dir), retry_s=0.0,
                         timeout=1.0, state_dir=state_dir)  # fmt: skip
        return [j.get("key") or f"{j.get('user')}/{j.get('name')}" for j in cell.request("GET", "/v1/jobs")["jobs"]]

    print("\n".join(candidates(words, jobs)))
    return 0


def main() -> None:
    """Entry point of the `minborg` console script."""
    from reference.cli.contexts import ContextError, apply

    try:
        sys.argv[1:] = apply(sys.argv[1:])  # the context, for both command lines
    except ContextError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    try:
        code = run(sys.argv[1:])
    except Fallback:
        from reference.cli.app import main as full

        full()
        return
    except cellfile.ClientError as err:
        print(cli_plain.error_text(err), file=sys.stderr)
        code = 2 if err.status == 422 else 1
    except BrokenPipeError:
        code = 0
    sys.exit(code)
