"""What `minborg --help` and `--version` say: the commands by group, the options, the examples.

Both command lines read these: the fast path prints them, the full one takes its help panels
from GROUPS; neither imports the other for them.
"""

from __future__ import annotations

HELP = "Minborg: a reference implementation of Google's Borg cluster manager."
VERSION = "0.1.0"  # pyproject.toml's
# The top-level commands by group, with their short help, as the full command line lists them
# (each command's rich_help_panel there is its group here; a unit test holds the two equal).
GROUPS = (
    ("Everyday", (
        ("job", "Submit, inspect, resize and kill jobs."),
        ("task", "Inspect tasks, their events and logs; run a command in one; kill them."),
        ("machine", "Inspect the cell's machines."),
        ("events", "The cell's events: tasks scheduled, started, exited, OOM-killed, evicted, lost...; jobs "
                   "submitted and removed; machines down and up."),
        ("bns", "Borg Name Service: <index>.<job>.<user>.<cell>.minborg."),
        ("ui", "Print the URL of Sigma, the cell's dashboard; --open opens it in a browser, signed in."),
        ("help", "Help on a command, or on a topic: the job file, output formats, contexts, TLS, hosts."),
    )),
    ("Cell lifecycle", (
        ("cell", "Start, inspect and stop a local cell on this machine."),
        ("demo", "Run hello_world on a 3-replica cell, call it through BNS, kill the leader, carry on."),
        ("image", "Container images for cells of the docker runtime."),
    )),
    ("Administration", (
        ("user", "Add, list and revoke the cell's users and their tokens (admin)."),
        ("quota", "Set, list and delete the users' quotas per priority band (admin)."),
        ("alloc", "Submit, list, show and kill alloc sets: resources reserved on several machines that jobs run in."),
        ("config", "Contexts: several cells' masters, CA, token and default user, in ~/.config/minborg/config."),
        ("completion", "Print the shell completion script for bash, zsh or fish."),
    )),
    ("Daemons", (
        ("master", "Run one master replica (arguments as `python -m reference.master`; try --help)."),
        ("scheduler", "Run a scheduler process: plans on its own cached copy of the cell, proposes to the leader "
                      "(try --help)."),
        ("borglet", "Run the borglet of one machine (arguments as `python -m reference.borglet`; try --help)."),
        ("fauxmaster", "A checkpoint in a Fauxmaster: submit jobs, fail machines or racks, schedule, advance the "
                       "clock; print placed, pending, preempted."),
    )),
    ("Measurement", (
        ("bench", "Benchmarks of the scheduler, of a live cell and of this command's start-up."),
        ("conformance", "Run the conformance suite against a cell, or a local one it starts (try --help)."),
        ("campaign", "Load, chaos and elasticity campaigns that write reports."),
        ("report", "Regenerate measured reports."),
        ("spec", "The executable specification."),
    )),
)  # fmt: skip
COMMANDS = tuple(command for _, commands in GROUPS for command in commands)
EXAMPLES = (
    ("minborg cell up --machines 3", "start a local cell (etcd, a master, 3 borglets)"),
    ("minborg job submit examples/hello_world.yaml", "submit a job and wait until its tasks run"),
    ("minborg job list", "every job with its status and ready tasks"),
    ("minborg task logs demo/hello_world 0 -f", "follow a task's stdout"),
    ("minborg cell down", "stop the cell, leaving no process behind"),
)
OPTIONS = (
    ("--token TEXT", "Bearer token for the cell's API. Default: $MINBORG_TOKEN, else the local cell's admin token."),
    ("--context NAME", "Talk to this context's cell (minborg config get-contexts). Default: $MINBORG_CONTEXT, "
                       "else the current context, else the local cell."),
    ("--version", "Print the version and exit."),
    ("--help", "Show this message and exit."),
)
SHELLS = ("bash", "zsh", "fish")


def top_help() -> str:
    """`minborg --help`: the commands by group, the options, examples. No line is wrapped."""
    width = max(len(name) for name, _ in COMMANDS)
    lines = ["Usage: minborg [OPTIONS] COMMAND [ARGS]...", "", f"  {HELP}"]
    for group, commands in GROUPS:
        lines += ["", f"{group} commands:"]
        lines += [f"  {name:<{width}}  {text}" for name, text in commands]
    option_width = max(len(name) for name, _ in OPTIONS)
    lines += ["", "Options:"] + [f"  {name:<{option_width}}  {text}" for name, text in OPTIONS]
    lines += ["", "Examples:"] + [f"  {line:<46}  # {what}" for line, what in EXAMPLES]
    lines += ["", "Every command takes --help, with examples: minborg job submit --help."]
    return "\n".join(lines)


def version() -> str:
    """`minborg --version`. A constant (a test holds it to the installed package's): reading the
    package's metadata costs 30 to 40 ms of CPU, more than the rest of the fast path."""
    return f"minborg {VERSION}"
