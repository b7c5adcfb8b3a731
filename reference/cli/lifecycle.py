"""`minborg cell up|down|restart|status` and `minborg image build`: a local cell's life on this machine."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape

from reference import launcher
from reference.cli.common import (
    EXIT_USAGE,
    JsonOpt,
    MasterOpt,
    OutputOpt,
    StateDirOpt,
    client,
    emitted,
    examples,
    fail,
    handles_errors,
    output_of,
)
from reference.cli.plain import color_on
from reference.cli.render import console, errors, print_json
from reference.cli.views import cell_text, key_values
from reference.client import CELL_FILE, MASTER_ENV, ClientError, state_dir_path
from reference.launcher import tls as cell_tls

cell_app = typer.Typer(
    help="Start, inspect and stop a local cell on this machine.", no_args_is_help=True
)
image_app = typer.Typer(help="Container images for cells of the docker runtime.", no_args_is_help=True)

# --- image -----------------------------------------------------------------------------------


@image_app.command("build", epilog=examples(
    'minborg image build',
    'minborg cell up --runtime docker',
))
@handles_errors
def image_build() -> None:
    """Build the base image (Debian with python3, by debootstrap; skipped when present) and the
    examples' images (images/*/Dockerfile) on this machine's Docker engine."""
    from reference import images

    try:
        built = images.build_all(say=lambda msg: console.print(f"[dim]{escape(msg)}[/dim]"))
    except RuntimeError as err:
        raise fail(str(err)) from None
    console.print(f"built {', '.join(built)}")


# --- cell ------------------------------------------------------------------------------------


@cell_app.command("up", epilog=examples(
    'minborg cell up --machines 3',
    'minborg cell up --replicas 3 --machines 4 --state-dir /tmp/cell2',
    'minborg cell up --fresh',
    'minborg cell up --plain --toxiproxy',
))
@handles_errors
def cell_up(
    replicas: Annotated[int, typer.Option("--replicas", help="Master replicas: 1, 3 or 5.")] = 1,
    machines: Annotated[int, typer.Option("--machines", min=0, help="Machines (borglets).")] = 3,
    machine_capacity: Annotated[
        str, typer.Option("--machine-capacity", help="Capacity of each machine.")
    ] = launcher.DEFAULT_CAPACITY,
    cell: Annotated[
        str, typer.Option("--cell", help="Cell name, the last part of BNS names.")
    ] = "local",
    etcd_members: Annotated[
        int | None,
        typer.Option(
            "--etcd-members", help="etcd members: 1, 3 or 5. Default: as many as replicas."
        ),
    ] = None,
    state_dir: StateDirOpt = None,
    toxiproxy: Annotated[
        bool, typer.Option("--toxiproxy", help="Put Toxiproxy on every link (client-master, master-etcd, master-borglet); see chaos/README.md.")
    ] = False,
    autoscale_machines: Annotated[
        str | None,
        typer.Option(
            "--autoscale-machines",
            help="MIN:MAX: add machines while tasks wait for room, remove idle ones.",
        ),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option("--fresh", help="Delete the cell already in the state dir (its etcd data, task tables, logs) and start a new one."),
    ] = False,
    hollow: Annotated[
        int,
        typer.Option(
            "--hollow",
            min=0,
            help="Scale tests only: add N hollow machines (simulated tasks, no processes) served by one "
            "process, beside the --machines real ones (--machines 0 for hollow machines alone).",
        ),
    ] = 0,
    replica_cpu: Annotated[
        float | None,
        typer.Option(
            "--replica-cpu",
            help="Hold each master replica and scheduler process to this many cores (e.g. 0.5) in a cgroup of its own, "
            "so 1, 3 and 5 replicas compare as if each had a host of its own (needs root and cgroup v1 cpu).",
        ),
    ] = None,
    machine_shares: Annotated[
        int,
        typer.Option(
            "--machine-cpu-shares", min=0,
            help="Put the cell's real machines (their borglets and tasks) in one cgroup of this CPU weight "
            "(each other process weighs 1024, e.g. 2048), so that on one host borglets starting thousands "
            "of tasks do not starve the masters; tasks then start more slowly. 0 (default): no group. "
            "Needs root and cgroup v1 cpu.",
        ),
    ] = launcher.DEFAULT_MACHINE_SHARES,
    schedulers: Annotated[
        int,
        typer.Option(
            "--schedulers", min=0, max=3,
            help="Scheduler processes beside the masters, one active at a time (0: the leader schedules).",
        ),
    ] = 1,
    hollow_start_delay: Annotated[
        float | None,
        typer.Option("--hollow-start-delay", min=0, help="Seconds from a hollow task's sync to its RUNNING (default 0.1)."),
    ] = None,
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            help="process, or docker: a job that names an image runs its tasks as containers of it "
            "(needs a Docker engine; `minborg image build` first).",
        ),
    ] = "process",
    hosts: Annotated[
        str,
        typer.Option(
            "--hosts",
            help="loopback (every process on 127.0.0.1), or netns: each etcd member, master, scheduler and "
            "borglet on a host of its own (a network namespace with its own address on a bridge; needs root).",
        ),
    ] = "loopback",
    tls: Annotated[
        bool,
        typer.Option(
            "--tls/--plain",
            help="--tls, the default: the masters' API, Sigma and the borglets serve HTTPS only, with certificates "
            "of the cell's CA (every command finds the CA in the state dir; plain http is refused). --plain: plain "
            "http on loopback, for --toxiproxy or to measure what TLS costs; never on --hosts netns. "
            "A stopped cell resumes as it was started.",
        ),
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Start a cell: etcd, the master replicas and the borglets. A state dir that holds a stopped
    cell is resumed on its data (jobs kept, running tasks re-adopted); --fresh starts anew."""
    out = errors if as_json else console
    resuming = not fresh and (state_dir_path(state_dir) / CELL_FILE).exists()
    if replica_cpu is not None and not resuming:
        from reference.launcher import cpubudget

        problem = cpubudget.budget_problem(replica_cpu) or cpubudget.unusable()
        if problem:
            raise fail(f"--replica-cpu: {problem}", EXIT_USAGE)
    if machine_shares and not resuming:
        from reference.launcher import cpubudget

        problem = cpubudget.shares_problem(machine_shares) or cpubudget.unusable()
        if problem:
            raise fail(f"--machine-cpu-shares: {problem}", EXIT_USAGE)
    if hosts not in ("loopback", "netns"):
        raise fail(f"--hosts must be loopback or netns, not {hosts!r}", EXIT_USAGE)
    if not resuming:
        if tls and toxiproxy:
            raise fail("--toxiproxy puts plain-http proxies on every link, and a cell serves TLS unless told "
                       "otherwise: add --plain (`minborg cell up --toxiproxy --plain`)", EXIT_USAGE)  # fmt: skip
        if not tls and hosts != "loopback":
            raise fail("--plain: a cell on hosts of its own (--hosts netns) always serves TLS; leave --plain out",
                       EXIT_USAGE)  # fmt: skip
    bounds = None
    if autoscale_machines is not None:
        from reference.elastic.cellscaler import parse_bounds

        try:
            bounds = parse_bounds(autoscale_machines)
        except ValueError as err:
            raise fail(f"--autoscale-machines: {err}") from None
        if hosts != "loopback":  # its machines are borglets on 127.0.0.1 (elastic/provider.py)
            raise fail("--autoscale-machines adds machines on loopback: it cannot be combined with --hosts netns", EXIT_USAGE)

    def say(msg: str) -> None:
        out.print(msg if msg.startswith("--fresh") else f"[dim]{msg}[/dim]")

    info = launcher.up(
        state_dir,
        cell=cell,
        replicas=replicas,
        machines=machines,
        machine_capacity=machine_capacity,
        etcd_members=etcd_members,
        toxiproxy=toxiproxy,
        fresh=fresh,
        progress=say,
        hollow=hollow,
        hollow_start_delay_s=hollow_start_delay,
        replica_cpu=replica_cpu,
        schedulers=schedulers,
        runtime=runtime,
        machine_shares=machine_shares or None,
        hosts=hosts,
        tls=tls,
    )
    if bounds is not None and not resuming:  # a resumed cell brings back the autoscaler it had
        info = _start_autoscaler(info, bounds, machine_capacity, say)
    if as_json:
        print_json(info.to_json())
        return
    print(
        key_values(
            f"cell {info.cell} is up" + (" again on its data" if resuming else ""),
            [
                ("state dir", info.state_dir),
                ("masters", ", ".join(info.master_urls)),
                ("sigma", f"{info.master_urls[0].rstrip('/')}/ui  (the dashboard: minborg ui --open)"),
                ("tls", tls_line(info)),
                ("etcd", ", ".join(info.etcd_urls)),
                ("machines", machine_names_line(list(info.borglet_urls))),
                *([("cpu per replica", f"{info.replica_cpu:g} cores")] if info.replica_cpu is not None else []),
                *([("machines' cpu weight", f"{info.machine_shares} (cpu.shares; 1024 per other process)")]
                  if info.machine_shares is not None else []),  # fmt: skip
                ("logs", os.path.join(info.state_dir, "logs")),
            ],
            color=color_on(),
        )
    )
    if state_dir_path(None) != state_dir_path(state_dir):
        console.print(f"\nuse it with:  export MINBORG_STATE_DIR={info.state_dir}")
    console.print("next:  minborg job submit examples/hello_world.yaml")


def tls_line(info: launcher.CellInfo) -> str:
    """How the cell's API, Sigma and borglets are reached: HTTPS with the CA named, or plain."""
    if all(url.startswith("https://") for url in info.master_urls):
        return f"HTTPS only, certificates of the cell's CA {cell_tls.ca_file(info.state_dir)} (a browser needs it for Sigma)"
    return "off: plain http (started with --plain, or before TLS was the default; `cell up --fresh` starts anew with TLS)"


def machine_names_line(names: list[str], shown: int = 8) -> str:
    """'machine0, machine1' or, for many, 'machine0, ..., hollow0199 (203 machines)'."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[: shown - 1])}, ..., {names[-1]} ({len(names)} machines)"


def _start_autoscaler(
    info: launcher.CellInfo, bounds: tuple[int, int], capacity: str, say: Callable[[str], None]
) -> launcher.CellInfo:
    """Start the cell autoscaler beside a cell just started, recorded in its cell file so
    `cell down` stops it first; the cell is stopped again if it cannot start."""
    from reference.elastic import cellscaler

    say(f"cell autoscaler: {bounds[0]} to {bounds[1]} machines")
    try:
        scaler = cellscaler.spawn(info, bounds, capacity)
        return launcher.with_records(info, launcher.Role.AUTOSCALER, [scaler])
    except BaseException:
        launcher.shut_down(info.state_dir)
        raise


@cell_app.command("down", epilog=examples('minborg cell down', 'minborg cell down --state-dir /tmp/cell2'))
@handles_errors
def cell_down(state_dir: StateDirOpt = None) -> None:
    """Stop every process of the local cell (tasks, borglets, masters, etcd); keep its files.

    After the borglets stop, task processes still running under the state dir (found by the
    borglet dir in their environment) are killed; the counts found and left are printed."""
    result = launcher.shut_down(state_dir, progress=lambda msg: console.print(f"[dim]{msg}[/dim]"))
    info, left = result.info, len(result.survivors) + len(result.tasks_left)
    stray = f"{result.tasks_found} stray task process(es) found and killed, {len(result.tasks_left)} left"
    if left:
        listing = ", ".join(
            [f"{r.role} {r.name} (pid {r.pid})" for r in result.survivors]
            + [f"task {t.task_id or '?'} (pid {t.pid})" for t in result.tasks_left]
        )
        raise fail(f"cell {info.cell}: {left} process(es) still running after cell down: {listing}")
    if result.processes == 0:
        console.print(f"cell {info.cell} was not running ({stray}); its files are in {info.state_dir}")
        return
    console.print(
        f"cell {info.cell} is down: {result.processes} process(es) stopped, {stray}; "
        f"none left running (files kept in {info.state_dir})"
    )


@cell_app.command("restart", epilog=examples('minborg cell restart', 'minborg cell restart --control-plane'))
@handles_errors
def cell_restart(
    control_plane: Annotated[
        bool, typer.Option("--control-plane", help="Restart etcd and the masters only; the borglets keep running.")
    ] = False,
    state_dir: StateDirOpt = None,
) -> None:
    """Restart the cell on its data: etcd and the masters, and the borglets unless
    --control-plane. Tasks keep running throughout and are re-adopted; whatever had died
    (a SIGKILLed control plane) is started again."""
    info = launcher.restart(
        state_dir, control_plane=control_plane, progress=lambda msg: console.print(f"[dim]{msg}[/dim]")
    )
    what = "control plane" if control_plane else "cell"
    console.print(f"cell {info.cell}: {what} restarted on its data (state dir {info.state_dir})")


@cell_app.command("status", epilog=examples('minborg cell status', 'minborg cell status -o json'))
@handles_errors
def cell_status(
    master: MasterOpt = None, state_dir: StateDirOpt = None, output: OutputOpt = None, as_json: JsonOpt = False
) -> None:
    """Leader, replicas, etcd revision, machines up/down and tasks by state."""
    fmt = output_of(output, as_json)
    local = None
    if not (master or os.environ.get(MASTER_ENV)):
        local = launcher.status(state_dir)
        if not local["running"]:
            if emitted({"local": local, "cell": None, "machines": None}, fmt):
                return
            raise fail(
                f"cell {local['cell']} in {local['state_dir']} is not running; start it with `minborg cell up`"
            )
    with client(master, state_dir, retry_s=3.0) as cell:
        try:
            overview = cell.cell()
            machines = cell.machines()
        except ClientError as err:
            if local is None:
                raise
            overview, machines = None, None
            local["api_error"] = str(err)
    counts = None
    if machines is not None:
        counts = {"up": sum(m.get("state") == "up" for m in machines)}
        counts["down"] = len(machines) - counts["up"]
    if emitted({"local": local, "cell": overview, "machines": counts}, fmt):
        return
    _print_status(local, overview, counts)


def _print_status(
    local: dict[str, Any] | None, overview: dict[str, Any] | None, counts: dict[str, int] | None
) -> None:
    text, warning = cell_text(local, overview, counts, color=color_on())
    if warning:
        errors.print(warning, markup=False, soft_wrap=True)
    if text:
        print(text)
