"""`minborg help [TOPIC]`: the topics a command's --help cannot hold (the job file, output formats, contexts, TLS, hosts and partitions), as `git help` and `kubectl explain` give them.

`minborg help COMMAND [SUBCOMMAND]` is that command's --help; `minborg help` lists both.
Standard library only: the fast path answers it.
"""

from __future__ import annotations

TOPICS: dict[str, tuple[str, str]] = {
    "job-file": ("The fields of a job file, their units and defaults.", """\
A job file is YAML or JSON: one job. `minborg job schema` prints its JSON Schema (docs/job.schema.json;
point an editor at it with `# yaml-language-server: $schema=...` or `"$schema"`).

  name, user          the job's key is USER/NAME; user defaults to the token's user
  task_count          how many tasks (an integer); max_unavailable: how many may be down at once
                      during a rolling update or a drain (default 1)
  command, env, cwd   what each task runs: a list of words, a map of variables, a directory
  image               run in that container image (docker runtime cells)
  request             cpu ("250m" or 0.25 cores), ram ("256MiB"), gpu where the cell has them
  priority            0-399 or a band's name (best_effort, batch, production, monitoring): its band
                      sets the quota it draws on and whom it may preempt
  constraints         machine attributes each task needs: [{attr: rack, op: eq, value: r1}]
  restart_policy      never, on_failure (default) or always; restarts back off (BACKOFF in listings)
  health_check        {path, interval_s}: an HTTP probe on the task's $PORT; only healthy tasks
                      are in BNS and count as up in a rollout
  pids_max            the most processes a task may have (default 1024)
  autoscale           task_count kept between min and max by a metric per task
  alloc, package      run inside an alloc set; prefer machines that hold a package
  appclass            latency_sensitive or batch, as Borg records it

`minborg job run FILE` creates or updates the job from its file (the same file is `unchanged`);
`minborg job plan FILE` prints what would change and where replaced tasks would go.
"""),
    "output": ("Output formats: -o json|yaml|name|wide|jsonpath=..., -w to watch.", """\
Listings and `show` commands take -o/--output:
  table (default)     columns for a person
  wide                more columns
  json, yaml          the API's objects: one unit per quantity (cpu in millicores, ram in bytes),
                      times as epoch seconds with an ISO 8601 twin (`*_iso`)
  name                one USER/NAME (or USER/NAME/INDEX) a line, for scripts
  jsonpath=EXPR       a field of each object, e.g. -o jsonpath='{.items[*].state}'
`task list -w` and `machine list -w` print again on every change; `events -f` follows events.
"""),
    "contexts": ("Several cells: named contexts in ~/.config/minborg/config.", """\
  minborg config set-context prod --master https://10.0.0.2:8443 --ca ca.crt --token-file prod.token --user alice
  minborg config use-context prod      # the default from now on
  minborg --context dev job list       # one command against another cell
  minborg config get-contexts
A context names the masters' URLs, the cell's CA, the token and a default user. Without one, the
command line finds the local cell in its state dir, its admin token and its CA there.
"""),
    "tls": ("HTTPS with the cell's CA: which links, and how a client trusts it.", """\
`minborg cell up` and `minborg demo` serve the masters' API, Sigma, the borglets and the scheduler
processes over HTTPS only, with certificates of the cell's own CA (<state dir>/pki/ca.crt); plain
http to them gets no answer. `--plain` opts out on loopback (for --toxiproxy, or to measure what
TLS costs); --hosts netns is always TLS. etcd serves only TLS with client certificates on every
cell. The command line trusts the CA of the local cell's state dir, $MINBORG_CA, or the context's
--ca, with no flag. A browser must be given that CA to open Sigma. `minborg cell certs` lists
each certificate's end (exit 1 within 30 days); `cell certs renew`, resume and `cell restart`
issue those again from the same CA; the CA itself is replaced only by `cell up --fresh`.
See docs/security.md.
"""),
    "hosts": ("A cell on hosts of its own (network namespaces), partitions and heals.", """\
  minborg cell up --hosts netns --replicas 3 --machines 3   # each process on its own address
  minborg cell hosts                                          # who is where
  minborg cell partition isolate master1                      # packet-filter faults ...
  minborg cell partition split master0,etcd0 --from master1,master2,etcd1,etcd2
  minborg cell pause machine2 ; minborg cell kill machine0 ; minborg cell skew machine1 60
  minborg cell heal                                           # every rule removed, paused hosts go on
Running each role on a machine of its own: docs/deploy.md.
"""),
}


def listing(commands: tuple[tuple[str, str], ...]) -> str:
    """What `minborg help` prints: the commands, then the topics."""
    width = max(len(name) for name in (*TOPICS, *(c for c, _ in commands))) + 2
    lines = ["Usage: minborg help [COMMAND [SUBCOMMAND] | TOPIC]", "", "Commands (their --help):"]
    lines += [f"  {name.ljust(width)}{summary.split('. ')[0].rstrip('.')}" for name, summary in commands]
    lines += ["", "Topics:"]
    lines += [f"  {name.ljust(width)}{summary}" for name, (summary, _) in TOPICS.items()]
    return "\n".join(lines)


def unknown(word: str, commands: tuple[tuple[str, str], ...]) -> str:
    names = [c for c, _ in commands]
    return (f"error: no command or help topic {word!r}: choose a command ({', '.join(names)}) "
            f"or a topic ({', '.join(TOPICS)})")  # fmt: skip
