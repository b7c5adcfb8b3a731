"""The `minborg` command line: the local cell, jobs, tasks, machines, BNS, and the tools around them."""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape

from reference import launcher
from reference.cli import drain as cli_drain
from reference.cli import execute as cli_execute
from reference.cli import faux as cli_faux
from reference.cli import rollout as _rollout  # noqa: F401  (job run, plan, history, revert on job_app)
from reference.cli import ui as cli_ui
from reference.cli.allocs import alloc_app
from reference.cli.common import (
    EXIT_USAGE,
    Credentials,
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
from reference.cli.config import config_app
from reference.cli.demo import demo
from reference.cli.help import GROUPS, SHELLS
from reference.cli.jobs import bns_app, job_app, machine_app, task_app
from reference.cli.plain import color_on
from reference.cli.quotas import quota_app
from reference.cli.render import console, errors, print_json
from reference.cli.users import user_app
from reference.cli.views import cell_text, key_values
from reference.client import CELL_FILE, MASTER_ENV, TOKEN_ENV, ClientError, state_dir_path

app = typer.Typer(
    name="minborg",
    help="Minborg: a reference implementation of Google's Borg cluster manager.",
    no_args_is_help=True,
    add_completion=False,  # `minborg completion SHELL` instead (cli_complete.py)
    rich_markup_mode=None,  # click's help: paragraphs rewrapped whole, one style everywhere
)
# The help's groups, as the fast path's `minborg --help` shows them (cli_fast.GROUPS).
EVERYDAY, LIFECYCLE, ADMIN, DAEMONS, MEASUREMENT = (f"{group} commands" for group, _ in GROUPS)
cell_app = typer.Typer(
    help="Start, inspect and stop a local cell on this machine.", no_args_is_help=True
)
bench_app = typer.Typer(
    help="Benchmarks of the scheduler, of a live cell and of this command's start-up.", no_args_is_help=True
)
report_app = typer.Typer(help="Regenerate measured reports.", no_args_is_help=True)
spec_app = typer.Typer(help="The executable specification.", no_args_is_help=True)

app.add_typer(cell_app, name="cell", rich_help_panel=LIFECYCLE)
app.add_typer(job_app, name="job", rich_help_panel=EVERYDAY)
app.add_typer(task_app, name="task", rich_help_panel=EVERYDAY)
cli_execute.register(task_app)  # task exec
app.add_typer(machine_app, name="machine", rich_help_panel=EVERYDAY)
cli_drain.register(machine_app)  # machine drain, machine uncordon
app.add_typer(bns_app, name="bns", rich_help_panel=EVERYDAY)
app.command("ui", rich_help_panel=EVERYDAY, epilog=cli_ui.EXAMPLES)(cli_ui.ui)
app.add_typer(user_app, name="user", rich_help_panel=ADMIN)
app.add_typer(quota_app, name="quota", rich_help_panel=ADMIN)
app.add_typer(alloc_app, name="alloc", rich_help_panel=ADMIN)
app.add_typer(config_app, name="config", rich_help_panel=ADMIN)
app.add_typer(bench_app, name="bench", rich_help_panel=MEASUREMENT)
app.add_typer(report_app, name="report", rich_help_panel=MEASUREMENT)
app.add_typer(spec_app, name="spec", rich_help_panel=MEASUREMENT)
campaign_app = typer.Typer(help="Load, chaos and elasticity campaigns that write reports.", no_args_is_help=True)
app.add_typer(campaign_app, name="campaign", rich_help_panel=MEASUREMENT)
image_app = typer.Typer(help="Container images for cells of the docker runtime.", no_args_is_help=True)
app.add_typer(image_app, name="image", rich_help_panel=LIFECYCLE)
app.command("demo", rich_help_panel=LIFECYCLE, epilog=examples("minborg demo", "minborg demo --replicas 5"))(demo)
cell_app.command("checkpoint", epilog=examples("minborg cell checkpoint --out cell.json"))(cli_faux.checkpoint)
cell_app.command("whatif", epilog=examples("minborg cell whatif --remove-machine machine1"))(cli_faux.whatif)


def _print_version(asked: bool) -> None:
    if asked:
        from reference.cli.help import version

        print(version())
        raise typer.Exit(0)


@app.callback()
def _credentials(
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help=f"Bearer token for the cell's API. Default: ${TOKEN_ENV}, else the local cell's admin token.",
        ),
    ] = None,
    show_version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_print_version, help="Print the version and exit.")
    ] = False,
) -> None:
    Credentials.token = token


@app.command("completion", rich_help_panel=ADMIN, epilog=examples(
    "minborg completion bash > ~/.local/share/bash-completion/completions/minborg",
    'minborg completion zsh > "${fpath[1]}/_minborg"',
    "minborg completion fish > ~/.config/fish/completions/minborg.fish",
))  # fmt: skip
def completion(shell: Annotated[str, typer.Argument(metavar="SHELL", help="bash, zsh or fish.")]) -> None:
    """Print the shell completion script for bash, zsh or fish."""
    from reference.cli.complete import script

    if shell not in SHELLS:
        raise typer.BadParameter(f"{shell!r}: choose one of {', '.join(SHELLS)}", param_hint="SHELL")
    print(script(shell), end="")

# Commands that hand their arguments, --help included, to another program's own parser.
PASS_THROUGH: dict[str, Any] = {
    "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True},
    "add_help_option": False,
}


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
    bounds = None
    if autoscale_machines is not None:
        from reference.elastic.cellscaler import parse_bounds

        try:
            bounds = parse_bounds(autoscale_machines)
        except ValueError as err:
            raise fail(f"--autoscale-machines: {err}") from None

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


# --- the cell's events -------------------------------------------------------------------------


@app.command("events", rich_help_panel=EVERYDAY, epilog=examples(
    "minborg events", "minborg events -f --job demo/hello_world", "minborg events --since 120 -o json"))
@handles_errors
def events(
    follow_: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
    since: Annotated[
        int | None, typer.Option("--since", help="From this etcd revision (default: all the replica still holds).")
    ] = None,
    job: Annotated[str | None, typer.Option("--job", help="Only this job's events (USER/NAME).")] = None,
    follow_for: Annotated[float, typer.Option("--for", min=1, help="With -f: stop after this many seconds.")] = 3600,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The cell's events: tasks scheduled, started, exited, OOM-killed, evicted, lost...; jobs
    submitted and removed; machines down and up.

    With -o json (or yaml), one JSON object a line."""
    from reference.cli.watch import event_lines, follow

    line = event_lines(output_of(output, as_json))
    with client(master, state_dir) as cell:
        follow(cell, "/v1/events", since=0 if since is None else since, for_s=follow_for, line=line,
               say=lambda text: print(text, flush=True), follow=follow_, job=job)  # fmt: skip


# --- commands that run another program's main ------------------------------------------------


# What each extra of pyproject.toml brings, checked before a measurement command starts: a
# missing module is a one-line message naming the extra, not a traceback half-way through a run.
EXTRA_MODULES = {
    "bench": ("matplotlib",),
    "campaigns": ("matplotlib", "locust", "chaostoolkit", "toxiproxy"),
}


def _needs_extra(what: str, missing: list[str], extra: str | None) -> typer.Exit:
    return fail(escape(f"{what} needs {', '.join(missing)}: pip install -e '.[{extra}]'"), EXIT_USAGE)


def _run_main(module: str, what: str, args: list[str], attr: str = "main", extra: str | None = None) -> None:
    """Import `module` only now (heavy or optional), run its main(args), exit with its code.
    With `extra`, first check that the modules that extra installs are there."""
    missing = [m for m in EXTRA_MODULES.get(extra or "", ()) if importlib.util.find_spec(m) is None]
    if missing and not {"--help", "-h"} & set(args):  # the help needs no extra, unless the import does
        raise _needs_extra(what, missing, extra)
    try:
        entry: Callable[[list[str]], Any] = getattr(importlib.import_module(module), attr)
    except ImportError as err:
        if (err.name or "").partition(".")[0] in missing:
            raise _needs_extra(what, missing, extra) from None
        raise fail(f"{what} is not available: cannot import {module} ({err})") from None
    result = entry(list(args))
    raise typer.Exit(result if isinstance(result, int) else 0)


@app.command("master", rich_help_panel=DAEMONS, **PASS_THROUGH)
def master(ctx: typer.Context) -> None:
    """Run one master replica (arguments as `python -m reference.master`; try --help)."""
    _run_main("reference.master.cli", "the master", ctx.args)


@app.command("scheduler", rich_help_panel=DAEMONS, **PASS_THROUGH)
def scheduler(ctx: typer.Context) -> None:
    """Run a scheduler process: plans on its own cached copy of the cell, proposes to the leader (try --help)."""
    _run_main("reference.schedulerd.main", "the scheduler", ctx.args)


@app.command("borglet", rich_help_panel=DAEMONS, **PASS_THROUGH)
def borglet(ctx: typer.Context) -> None:
    """Run the borglet of one machine (arguments as `python -m reference.borglet`; try --help)."""
    _run_main("reference.borglet.cli", "the borglet", ctx.args)


@bench_app.command("scheduler", **PASS_THROUGH)
def bench_scheduler(ctx: typer.Context) -> None:
    """Benchmark the scheduler on a synthetic workload or a trace (try --help)."""
    _run_main("bench.scheduler.bench", "the scheduler benchmark", ctx.args)


@bench_app.command("packing", **PASS_THROUGH)
def bench_packing(ctx: typer.Context) -> None:
    """The FGD paper's GPU packing experiment over every policy; writes reports/packing.md (try --help)."""
    _run_main("bench.scheduler.packing_bench", "the packing benchmark", ctx.args, extra="bench")


@bench_app.command("cell", **PASS_THROUGH)
def bench_cell(ctx: typer.Context) -> None:
    """Benchmark a live cell through its API (try --help)."""
    _run_main("bench.cell", "the cell benchmark", ctx.args)


@bench_app.command("overload", **PASS_THROUGH)
def bench_overload(ctx: typer.Context) -> None:
    """Jobs of thousands of tiny tasks on fresh local cells: start, kill, doubles, orphans (try --help)."""
    _run_main("loadtests.overload", "the overload benchmark", ctx.args, extra="bench")


@bench_app.command("cli", **PASS_THROUGH)
def bench_cli(ctx: typer.Context) -> None:
    """Wall time of every everyday command in fresh processes, beside `python -c pass` (try --help)."""
    _run_main("loadtests.cli_startup", "the command-line start-up benchmark", ctx.args)


@bench_app.command("writes", **PASS_THROUGH)
def bench_writes(ctx: typer.Context) -> None:
    """The master's writes against direct etcd, on fresh 1-replica cells (try --help)."""
    _run_main("loadtests.writes", "the write-path benchmark", ctx.args, extra="campaigns")


@app.command("conformance", rich_help_panel=MEASUREMENT, **PASS_THROUGH)
def conformance(ctx: typer.Context) -> None:
    """Run the conformance suite against a cell, or a local one it starts (try --help)."""
    _run_main("harness", "the conformance suite", ctx.args)


@campaign_app.command("load", **PASS_THROUGH)
def campaign_load(ctx: typer.Context) -> None:
    """Locust load campaign over 1, 3 and 5 replicas (try --help)."""
    _run_main("loadtests.campaign", "the load campaign", ["load", *ctx.args], extra="campaigns")


@campaign_app.command("scale", **PASS_THROUGH)
def campaign_scale(ctx: typer.Context) -> None:
    """Hollow cells of 100 to 10,000 machines with 1, 3 and 5 replicas against Borg's SLOs; writes reports/scale.md (try --help)."""
    _run_main("loadtests.scale", "the scale campaign", ctx.args, extra="campaigns")


@campaign_app.command("smoke", **PASS_THROUGH)
def campaign_smoke(ctx: typer.Context) -> None:
    """The 60-second load smoke campaign (try --help)."""
    _run_main("loadtests.campaign", "the load campaign", ["smoke", *ctx.args], extra="campaigns")


@campaign_app.command("chaos", **PASS_THROUGH)
def campaign_chaos(ctx: typer.Context) -> None:
    """Chaos Toolkit experiments behind Toxiproxy, judged from their journals (try --help)."""
    _run_main("chaos.campaign", "the chaos campaign", ["chaos", *ctx.args], extra="campaigns")


@campaign_app.command("soak", **PASS_THROUGH)
def campaign_soak(ctx: typer.Context) -> None:
    """Random faults under load, then the history checker (try --help)."""
    _run_main("chaos.campaign", "the soak campaign", ["soak", *ctx.args], extra="campaigns")


@campaign_app.command("elastic", **PASS_THROUGH)
def campaign_elastic(ctx: typer.Context) -> None:
    """Autoscaling under a rising and falling load (try --help)."""
    _run_main("loadtests.elastic.campaign", "the elastic campaign", ctx.args, extra="campaigns")


@campaign_app.command("maintenance", **PASS_THROUGH)
def campaign_maintenance(ctx: typer.Context) -> None:
    """A rolling OS upgrade (drain, restart, uncordon) of a local cell's machines within every job's budget; writes reports/maintenance.md (try --help)."""
    _run_main("loadtests.maintenance", "the maintenance campaign", ctx.args, extra="campaigns")


@report_app.command("scheduler", **PASS_THROUGH)
def report_scheduler(ctx: typer.Context) -> None:
    """Regenerate the scheduler report under reports/ (try --help)."""
    _run_main("bench.scheduler.report", "the scheduler report", ctx.args, extra="bench")


@spec_app.command("explore", **PASS_THROUGH)
def spec_explore(ctx: typer.Context) -> None:
    """Explore the spec's reachable states and check every invariant (try --help)."""
    _run_main("spec.explore", "the spec explorer", ctx.args)


app.command("fauxmaster", rich_help_panel=DAEMONS, epilog=examples(
    "minborg fauxmaster --checkpoint cell.json --apply examples/batch.yaml --schedule",
    "minborg fauxmaster --checkpoint cell.json --fail-rack r1 --schedule --json",
))(cli_faux.fauxmaster)


def main() -> None:
    """The full command line (`python -m reference.cli`; the `minborg` script is cli/fast.py's)."""
    import sys

    from reference.cli.contexts import ContextError, apply

    try:
        sys.argv[1:] = apply(sys.argv[1:])
    except ContextError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    app(prog_name="minborg")


if __name__ == "__main__":
    main()
