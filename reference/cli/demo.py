"""`minborg demo`: a 3-replica cell serves hello_world through BNS and survives losing its leader."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from reference import jobspec, launcher
from reference.cellfile import auth_headers, read_admin_token
from reference.cli.render import console, errors, table, tasks_table
from reference.client import CellClient, ClientError, Endpoint, RoundRobin
from reference.launcher import tls as cell_tls
from reference.waiting import wait_until

# Every wait is bounded so the demo can never hang; each bound is several times what the step
# takes on a loaded two-core host.
TASKS_TIMEOUT_S = 60.0
FAILOVER_TIMEOUT_S = 30.0
REQUESTS = 6


class DemoFailed(RuntimeError):
    """A demo step did not do what it should, within its time bound."""


@dataclass
class Step:
    title: str
    ok: bool = False
    seconds: float = 0.0
    note: str = ""


def default_job_file() -> Path:
    """examples/hello_world.yaml from the current directory, else next to the examples package."""
    local = Path("examples/hello_world.yaml")
    if local.is_file():
        return local
    import examples

    return Path(examples.__file__).resolve().parent / "hello_world.yaml"


class Demo:
    """The demo's steps, in order; each records whether it worked and how long it took."""

    def __init__(self, state_dir: Path, job_file: Path, replicas: int, machines: int, tls: bool = True) -> None:
        self.state_dir, self.job_file = state_dir, job_file
        self.replicas, self.machines, self.tls = replicas, machines, tls
        self.steps: list[Step] = []
        self.info: launcher.CellInfo | None = None
        self.client: CellClient | None = None
        self.spec: jobspec.JobSpec | None = None
        self.known: list[Endpoint] = []  # the job's endpoints, as last balanced over

    def run(self, title: str, action: Callable[[], str]) -> None:
        step = Step(title)
        self.steps.append(step)
        console.print(f"\n[bold cyan]{len(self.steps)}.[/bold cyan] [bold]{title}[/bold]")
        started = time.monotonic()
        try:
            step.note = action()
            step.ok = True
        except Exception as err:
            known = (DemoFailed, TimeoutError, ClientError, launcher.LauncherError, jobspec.JobFileError)
            step.note = str(err) if isinstance(err, known) else f"{type(err).__name__}: {err}"
            raise
        finally:
            step.seconds = time.monotonic() - started
            mark = "[green]ok[/green]" if step.ok else "[red]FAILED[/red]"
            console.print(
                f"   {mark} in {step.seconds:.1f}s" + (f": {step.note}" if step.note else "")
            )

    # --- the steps ---------------------------------------------------------------------------

    def start_cell(self) -> str:
        self.info = launcher.up(
            self.state_dir,
            replicas=self.replicas,
            machines=self.machines,
            progress=lambda msg: console.print(f"   [dim]{msg}[/dim]"),
            tls=self.tls,
        )
        self.client = CellClient(
            list(self.info.master_urls), token=read_admin_token(self.state_dir), ca=str(cell_tls.ca_file(self.state_dir))
        )
        return f"leader {self.leader()}, state in {self.state_dir}"

    def leader(self) -> str:
        """The leader a master of the cell names (launcher.ask_leader), asked until one does."""
        assert self.info is not None
        info = self.info
        headers = auth_headers(read_admin_token(self.state_dir))
        with httpx.Client(timeout=2.0, headers=headers, verify=cell_tls.client_verify(self.state_dir)) as http:
            return wait_until(
                lambda: launcher.ask_leader(http, info.master_urls), FAILOVER_TIMEOUT_S, "a master to name the leader", 0.2
            )

    def submit(self) -> str:
        assert self.client is not None
        self.spec = jobspec.load_job_file(self.job_file)
        answer = self.client.submit(self.spec.canonical())
        return f"{self.spec.key}: {self.spec.task_count} task(s), revision {answer.get('revision')}"

    def wait_running(self, count: int) -> str:
        assert self.client is not None and self.spec is not None
        key = self.spec.key

        def ready() -> list[dict[str, Any]] | None:
            assert self.client is not None
            tasks = [t for t in self.client.tasks(key) if t.get("state") == "RUNNING"]
            # RUNNING is the master's word from the moment it places a task; the task serves
            # once its borglet reports a port and, with a health check, a passing probe.
            serving = [t for t in tasks if t.get("port") and (checked is False or t.get("healthy"))]
            return tasks if len(serving) >= count else None

        checked = self.spec.health_check is not None

        tasks = wait_until(
            ready, TASKS_TIMEOUT_S, f"{count} healthy RUNNING tasks of {key}", 0.25,
            ignore=(ClientError, httpx.HTTPError),
        )  # fmt: skip
        console.print(tasks_table(tasks, title=f"tasks of {key}"))
        machines = sorted({t.get("machine") for t in tasks if t.get("machine")})
        return f"{len(tasks)} running on {', '.join(machines)}"

    def call_through_bns(self) -> str:
        assert self.client is not None and self.info is not None and self.spec is not None
        name = f"0.{self.spec.name}.{self.spec.user}.{self.info.cell}.minborg"
        target = self.client.resolve(name)
        url = f"http://{target['host']}:{target['port']}/"
        answer = httpx.get(url, timeout=3.0)
        answer.raise_for_status()
        first_line = answer.text.splitlines()[0] if answer.text else ""
        console.print(f"   {name} -> {target['host']}:{target['port']}")
        return f"GET {url} answered {first_line!r}"

    def balance(self, requests: int) -> str:
        assert self.client is not None and self.spec is not None
        balancer = RoundRobin(self.client, self.spec.key)
        answered: Counter[str] = Counter()
        try:
            for _ in range(requests):
                endpoint, response = balancer.get("/")
                if response.status_code != 200:
                    raise DemoFailed(f"{endpoint.bns} answered HTTP {response.status_code}")
                answered[endpoint.bns] += 1
        finally:
            balancer.close()
        self.known = list(balancer.endpoints())
        spread = ", ".join(f"{bns.split('.')[0]}: {n}" for bns, n in sorted(answered.items()))
        return f"{requests} requests over {len(answered)} task(s), by index {spread}"

    def kill_leader(self) -> tuple[str, float]:
        assert self.client is not None and self.info is not None
        leader = self.leader()
        records = [m for m in self.info.of_role(launcher.Role.MASTER) if m.name == leader]
        if not records:
            raise DemoFailed(f"the leader {leader!r} is not one of this cell's masters")
        launcher.kill_process(records[0])
        return str(leader), time.monotonic()

    def serve_without_leader(self) -> str:
        """Call every known task directly: tasks do not need a master to keep serving."""
        answered = 0
        with httpx.Client(timeout=2.0) as http:
            for endpoint in self.known:
                try:
                    answered += http.get(endpoint.url + "/").status_code == 200
                except httpx.TransportError:
                    pass
        if answered < len(self.known):
            raise DemoFailed(f"only {answered} of {len(self.known)} tasks answered")
        return f"{answered} of {len(self.known)} tasks answered right after the leader died"

    def failover(self, old: str, killed_at: float) -> str:
        assert self.info is not None
        new = launcher.wait_for_leader(self.info, FAILOVER_TIMEOUT_S, not_named=old)
        return f"{new} leads, {time.monotonic() - killed_at:.1f}s after {old} was killed"

    def resize(self, count: int) -> str:
        assert self.client is not None and self.spec is not None
        started = time.monotonic()
        answer = self.client.update(self.spec.key, {"task_count": count})
        took = time.monotonic() - started
        return f"task_count={count} accepted at revision {answer.get('revision')} ({took:.1f}s)"


def demo(
    replicas: Annotated[int, typer.Option("--replicas", help="Master replicas: 3 or 5.")] = 3,
    machines: Annotated[int, typer.Option("--machines", min=1, help="Machines (borglets).")] = 4,
    job_file: Annotated[
        Path | None, typer.Option("--job-file", help="Default: examples/hello_world.yaml.")
    ] = None,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the temporary state dir and its logs.")
    ] = False,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls/--plain",
            help="--tls, the default: the cell serves HTTPS only (as `cell up`), the demo trusts its CA. "
            "--plain: plain http, as `cell up --plain`.",
        ),
    ] = True,
) -> None:
    """Run hello_world on a 3-replica cell, call it through BNS, kill the leader, carry on.

    Everything runs in a temporary state dir and is stopped at the end, whatever happens.
    """
    if replicas < 3:
        errors.print(
            "[bold red]error:[/bold red] the demo kills the leader, so it needs --replicas 3 or 5"
        )
        raise typer.Exit(2)
    state_dir = Path(tempfile.mkdtemp(prefix="minborg-demo-"))
    run = Demo(state_dir, job_file or default_job_file(), replicas, machines, tls)
    failed = False
    try:
        run.run(
            f"start a cell: {replicas} master replicas, {replicas} etcd members, {machines} machines, "
            + ("HTTPS with the cell's CA" if tls else "plain http"),
            run.start_cell,
        )
        run.run(f"submit {run.job_file}", run.submit)
        assert run.spec is not None
        count = run.spec.task_count
        run.run(
            f"wait for {count} tasks to run and pass their health checks",
            lambda: run.wait_running(count),
        )
        run.run("resolve task 0 through BNS and call it", run.call_through_bns)
        run.run(
            "balance requests over the job's endpoints, client side", lambda: run.balance(REQUESTS)
        )
        killed: list[tuple[str, float]] = []
        run.run("kill the leader with SIGKILL", lambda: _note_kill(run.kill_leader(), killed))
        run.run("call the tasks before a new leader is elected", run.serve_without_leader)
        run.run("elect a new leader", lambda: run.failover(*killed[0]))
        run.run(
            f"write through the new leader: resize to {count + 1} tasks",
            lambda: run.resize(count + 1),
        )
        run.run(f"wait for {count + 1} tasks to run", lambda: run.wait_running(count + 1))
        run.run("tasks still answering through the balancer", lambda: run.balance(2 * (count + 1)))
    except Exception:
        failed = True  # the failed step has printed why
    except KeyboardInterrupt:
        failed = True
        errors.print("[yellow]interrupted[/yellow]")
    finally:
        if run.client is not None:
            run.client.close()
        failed = not _bring_down(run) or failed
    _summary(run.steps)
    if failed or keep:
        console.print(f"state and logs kept in {state_dir}")
    else:
        shutil.rmtree(state_dir, ignore_errors=True)
    if failed:
        raise typer.Exit(1)


def _note_kill(result: tuple[str, float], into: list[tuple[str, float]]) -> str:
    into.append(result)
    return f"{result[0]} killed"


def _bring_down(run: Demo) -> bool:
    if not (run.state_dir / "cell.json").exists():
        return True  # nothing was started
    try:
        run.run("bring the cell down", lambda: _down(run.state_dir))
        return True
    except launcher.LauncherError:
        return False


def _down(state_dir: Path) -> str:
    info = launcher.down(state_dir)
    return f"{len(info.processes)} processes stopped, none left running"


def _summary(steps: list[Step]) -> None:
    rows = [
        ("[green]ok[/green]" if s.ok else "[red]FAILED[/red]", s.title, f"{s.seconds:.1f}s", s.note)
        for s in steps
    ]
    console.print()
    console.print(table("demo summary", ("", "step", "time", "result"), rows))
