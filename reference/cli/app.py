"""The `minborg` command line: the local cell, jobs, tasks, machines, BNS, and the tools around them."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape

from reference.cli import cellnet
from reference.cli import certs as cli_certs
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
    examples,
    fail,
    handles_errors,
    output_of,
)
from reference.cli.config import config_app
from reference.cli.demo import demo
from reference.cli.help import GROUPS, SHELLS
from reference.cli.jobs import bns_app, job_app, machine_app, task_app
from reference.cli.lifecycle import cell_app, image_app
from reference.cli.output import EVENTS_TAIL
from reference.cli.quotas import quota_app
from reference.cli.users import user_app
from reference.client import TOKEN_ENV

app = typer.Typer(
    name="minborg",
    help="Minborg: a reference implementation of Google's Borg cluster manager.",
    no_args_is_help=True,
    add_completion=False,  # `minborg completion SHELL` instead (cli_complete.py)
    rich_markup_mode=None,  # click's help: paragraphs rewrapped whole, one style everywhere
)
# The help's groups, as the fast path's `minborg --help` shows them (cli_fast.GROUPS).
EVERYDAY, LIFECYCLE, ADMIN, DAEMONS, MEASUREMENT = (f"{group} commands" for group, _ in GROUPS)
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
app.add_typer(image_app, name="image", rich_help_panel=LIFECYCLE)
app.command("demo", rich_help_panel=LIFECYCLE, epilog=examples("minborg demo", "minborg demo --replicas 5"))(demo)
cell_app.command("checkpoint", epilog=examples("minborg cell checkpoint --out cell.json"))(cli_faux.checkpoint)
cell_app.command("whatif", epilog=examples("minborg cell whatif --remove-machine machine1"))(cli_faux.whatif)
cellnet.register(cell_app)  # partition, heal, pause, unpause, kill, hosts: faults on netns hosts
cli_certs.register(cell_app)  # certs, certs list, certs renew: expiry and renewal of the cell's certificates


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

@app.command("help", rich_help_panel=EVERYDAY, epilog=examples(
    "minborg help                 the commands and the topics",
    "minborg help job-file        the fields of a job file",
    "minborg help job run         the same as minborg job run --help",
))  # fmt: skip
def help_command(
    words: Annotated[list[str] | None, typer.Argument(metavar="[COMMAND [SUBCOMMAND] | TOPIC]")] = None,
) -> None:
    """Help on a command, or on a topic: the job file, output formats, contexts, TLS, hosts."""
    from reference.cli import topics
    from reference.cli.help import COMMANDS

    words = words or []
    if not words:
        print(topics.listing(COMMANDS))
    elif len(words) == 1 and words[0] in topics.TOPICS:
        print(topics.TOPICS[words[0]][1], end="")
    elif words[0] in {name for name, _ in COMMANDS}:
        typer.main.get_command(app).main([*words, "--help"], prog_name="minborg")
    else:
        raise typer.BadParameter(topics.unknown(" ".join(words), COMMANDS).removeprefix("error: "))


# Commands that hand their arguments, --help included, to another program's own parser.
PASS_THROUGH: dict[str, Any] = {
    "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True},
    "add_help_option": False,
}


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
    tail: Annotated[int, typer.Option("--tail", min=0, help="Of the events held, only the newest this many (0: all).")] = EVENTS_TAIL,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The cell's events: tasks scheduled, started, exited, OOM-killed, evicted, lost...; jobs
    submitted and removed; machines down and up. The newest 200 of those the replica holds
    (--tail), then with -f each new one.

    With -o json (or yaml), one JSON object a line."""
    from reference.cli.watch import event_lines, follow

    line = event_lines(output_of(output, as_json))
    with client(master, state_dir) as cell:
        follow(cell, "/v1/events", since=0 if since is None else since, for_s=follow_for, line=line,
               say=lambda text: print(text, flush=True), follow=follow_, job=job, tail=tail)  # fmt: skip


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


@campaign_app.command("nemesis", **PASS_THROUGH)
def campaign_nemesis(ctx: typer.Context) -> None:
    """Random faults of a real network on a netns cell under load, then the history and /proc judged (try --help)."""
    _run_main("loadtests.nemesis", "the nemesis campaign", ctx.args, extra="campaigns")


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
