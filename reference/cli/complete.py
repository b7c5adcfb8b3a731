"""`minborg completion bash|zsh|fish` and the completions the scripts ask for, without importing typer.

The script a shell sources calls `minborg __complete WORD...` with the words typed before the
one being completed; the fast path answers from TREE, the command line's commands and options
(a unit test holds TREE equal to the typer app's), and the jobs of the cell where a command
names a job, one candidate a line. The shell keeps those that start with what was typed.
Install with, e.g., `minborg completion bash > ~/.local/share/bash-completion/completions/minborg`,
`minborg completion zsh > "${fpath[1]}/_minborg"` or
`minborg completion fish > ~/.config/fish/completions/minborg.fish`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

JOB = "<job>"  # in a command's entry: its first argument is a job (USER/NAME)
TOP_OPTIONS = ("--context", "--help", "--token", "--version")
VALUES = {"--output": ("json", "jsonpath=", "name", "table", "wide", "yaml"),
          "-o": ("json", "jsonpath=", "name", "table", "wide", "yaml"),
          "completion": ("bash", "fish", "zsh"),
          "help": ("contexts", "hosts", "job-file", "output", "tls")}  # fmt: skip
# Every command: a group maps its subcommands, a command lists its long options (and JOB).
TREE: dict[str, Any] = {'alloc': {'kill': ('<job>', '--help', '--json', '--master', '--state-dir'),
           'list': ('--help', '--json', '--master', '--output', '--state-dir', '--user'),
           'show': ('<job>', '--help', '--json', '--master', '--output', '--state-dir'),
           'submit': ('--help', '--json', '--master', '--state-dir')},
 'bench': {'cell': (), 'cli': (), 'overload': (), 'packing': (), 'scheduler': (), 'writes': ()},
 'bns': {'resolve': ('--help', '--json', '--master', '--output', '--state-dir')},
 'borglet': (),
 'campaign': {'chaos': (),
              'elastic': (),
              'load': (),
              'maintenance': (),
              'nemesis': (),
              'scale': (),
              'smoke': (),
              'soak': ()},
 'cell': {'checkpoint': ('--cell', '--etcd', '--help', '--out', '--revision', '--state-dir'),
          'certs': {'list': ('--help', '--json', '--state-dir'),
                    'renew': ('--all', '--help', '--json', '--state-dir')},
          'down': ('--help', '--state-dir'),
          'heal': ('--help', '--json', '--state-dir'),
          'hosts': ('--help', '--json', '--state-dir'),
          'kill': ('--help', '--state-dir'),
          'partition': {'bridge': ('--help', '--json', '--state-dir', '--via'),
                        'isolate': ('--help', '--json', '--keep-this-host', '--loss', '--state-dir'),
                        'split': ('--from', '--help', '--json', '--loss', '--one-way', '--state-dir')},
          'pause': ('--help', '--state-dir'),
          'restart': ('--control-plane', '--help', '--state-dir'),
          'skew': ('--help', '--state-dir'),
          'status': ('--help', '--json', '--master', '--output', '--state-dir'),
          'unpause': ('--help', '--state-dir'),
          'up': ('--autoscale-machines',
                 '--cell',
                 '--etcd-members',
                 '--fresh',
                 '--help',
                 '--hollow',
                 '--hollow-start-delay',
                 '--hosts',
                 '--json',
                 '--machine-capacity',
                 '--machine-cpu-shares',
                 '--machines',
                 '--plain',
                 '--replica-cpu',
                 '--replicas',
                 '--runtime',
                 '--schedulers',
                 '--state-dir',
                 '--tls',
                 '--toxiproxy'),
          'whatif': ('--help', '--json', '--master', '--remove-machine', '--state-dir')},
 'completion': ('--help',),
 'help': ('--help',),
 'config': {'current-context': ('--help',),
            'delete-context': ('--help',),
            'get-contexts': ('--help', '--output'),
            'set-context': ('--ca', '--help', '--master', '--token', '--token-file', '--user'),
            'use-context': ('--help',)},
 'conformance': (),
 'demo': ('--help', '--job-file', '--keep', '--machines', '--plain', '--replicas', '--tls'),
 'events': ('--follow',
            '--for',
            '--help',
            '--job',
            '--json',
            '--master',
            '--output',
            '--since',
            '--state-dir',
            '--tail'),
 'fauxmaster': ('--advance',
                '--apply',
                '--checkpoint',
                '--fail-machine',
                '--fail-rack',
                '--help',
                '--json',
                '--schedule',
                '--seed'),
 'image': {'build': ('--help',)},
 'job': {'history': ('--help', '--json', '--master', '--state-dir'),
         'kill': ('<job>', '--help', '--json', '--master', '--state-dir'),
         'list': ('--for',
                  '--help',
                  '--json',
                  '--master',
                  '--output',
                  '--state-dir',
                  '--user',
                  '--watch'),
         'plan': ('--help', '--json', '--master', '--state-dir'),
         'revert': ('--detach', '--help', '--json', '--master', '--state-dir', '--timeout'),
         'run': ('--detach',
                 '--dry-run',
                 '--help',
                 '--json',
                 '--master',
                 '--state-dir',
                 '--timeout'),
         'schema': ('--help',),
         'show': ('<job>', '--help', '--json', '--master', '--output', '--state-dir'),
         'submit': ('--detach',
                    '--dry-run',
                    '--help',
                    '--json',
                    '--master',
                    '--state-dir',
                    '--wait',
                    '--wait-timeout'),
         'update': ('<job>',
                    '--cpu',
                    '--help',
                    '--json',
                    '--master',
                    '--ram',
                    '--state-dir',
                    '--tasks')},
 'machine': {'drain': ('--deadline', '--detach', '--help', '--json', '--master', '--state-dir'),
             'list': ('--for',
                      '--help',
                      '--json',
                      '--master',
                      '--output',
                      '--state-dir',
                      '--watch'),
             'uncordon': ('--help', '--json', '--master', '--state-dir')},
 'master': (),
 'quota': {'delete': ('--help', '--master', '--state-dir'),
           'list': ('--help', '--json', '--master', '--output', '--state-dir'),
           'set': ('--help', '--json', '--master', '--state-dir')},
 'report': {'scheduler': ()},
 'scheduler': (),
 'spec': {'explore': ()},
 'task': {'exec': ('<job>', '--help', '--json', '--master', '--state-dir', '--stdin', '--timeout', '--tty'),
          'kill': ('<job>', '--help', '--json', '--master', '--state-dir'),
          'list': ('<job>',
                   '--for',
                   '--help',
                   '--json',
                   '--master',
                   '--output',
                   '--state-dir',
                   '--watch'),
          'logs': ('<job>',
                   '--follow',
                   '--for',
                   '--help',
                   '--incarnation',
                   '--master',
                   '--state-dir',
                   '--stderr',
                   '--tail'),
          'show': ('<job>',
                   '--help',
                   '--incarnation',
                   '--json',
                   '--master',
                   '--output',
                   '--state-dir')},
 'ui': ('--help', '--master', '--open', '--state-dir', '--token'),
 'user': {'add': ('--help', '--json', '--master', '--state-dir'),
          'list': ('--help', '--json', '--master', '--output', '--state-dir'),
          'revoke': ('--help', '--master', '--state-dir')}}  # fmt: skip

SCRIPTS = {
    "bash": (
        "_minborg_completion() {\n"
        "    local IFS=$'\\n'\n"
        '    COMPREPLY=( $(compgen -W "$(minborg __complete "${COMP_WORDS[@]:1:COMP_CWORD-1}" 2>/dev/null)" '
        '-- "${COMP_WORDS[COMP_CWORD]}") )\n'
        "}\n"
        "complete -o default -F _minborg_completion minborg\n"
    ),
    "zsh": (
        "#compdef minborg\n"
        "_minborg_completion() {\n"
        "    local -a candidates\n"
        '    candidates=("${(@f)$(minborg __complete "${(@)words[2,CURRENT-1]}" 2>/dev/null)}")\n'
        "    compadd -a candidates\n"
        "}\n"
        "compdef _minborg_completion minborg\n"
    ),
    "fish": "complete --command minborg --no-files --arguments '(minborg __complete (commandline -opc)[2..-1] 2>/dev/null)'\n",
}


def script(shell: str) -> str:
    """The completion script of `shell` (bash, zsh or fish)."""
    return SCRIPTS[shell]


def command_tree(command: Any) -> Any:
    """TREE as the command line defines it: from typer.main.get_command(app)."""
    if hasattr(command, "commands"):
        return {name: command_tree(sub) for name, sub in sorted(command.commands.items())}
    options: list[str] = []
    job = False
    for i, param in enumerate(command.params):
        if param.param_type_name == "option":
            options += [o for o in [*param.opts, *param.secondary_opts] if o.startswith("--")]
        elif param.param_type_name == "argument" and i == 0:
            job = param.metavar in ("USER/NAME", "[USER/]NAME")
    if command.add_help_option:
        options.append("--help")
    return tuple(([JOB] if job else []) + sorted(set(options)))


def complete(words: list[str], jobs: Callable[[], Iterable[str]]) -> list[str]:
    """The candidates after `words` (what was typed after `minborg`, the current word left
    out): subcommands, options, an option's values, or the cell's jobs (`jobs()`)."""
    if words and words[-1] in VALUES:
        return list(VALUES[words[-1]])
    if words[-1:] == ["--context"] or words[-2:] in (["config", "use-context"], ["config", "delete-context"]):
        from reference.cli.contexts import ContextError, load

        try:
            return sorted(load()["contexts"])
        except ContextError:
            return []
    node: Any = TREE
    positional = 0
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in ("--token", "--context") and node is TREE:
            skip = True
        elif isinstance(node, dict) and word in node:
            node = node[word]
        elif not word.startswith("-"):
            positional += 1
    if isinstance(node, dict):
        return sorted(node) + (list(TOP_OPTIONS) if node is TREE else ["--help"])
    options = [o for o in node if o != JOB]
    if JOB in node and positional == 0:
        try:
            return sorted(jobs()) + options
        except Exception:  # noqa: BLE001 - no cell to ask: complete what is known
            return options
    return options
