"""Runs the stateful test against one cell: sets up the shared context, Hypothesis settings, seeds and replay."""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.stateful import run_state_machine_as_test

from harness import context, machine
from harness.api import Api
from harness.history import check
from harness.localcell import LocalCell
from harness.report import RunResult

#: Machines of a started cell: one no fault touches, and four for faults to take down.
MACHINES = 5


@dataclass
class Plan:
    target: str | None
    replicas: int | None  # set: start a local cell with this many replicas
    examples: int
    steps: int
    seed: int | None
    shrink: bool
    replay: str | None  # a Hypothesis failure blob, printed by an earlier failing run
    history_path: str | None = None
    runtime: str = "process"  # the started cell's borglets' --runtime
    drains: bool = True  # the admin's drain rules run


def run(plan: Plan) -> RunResult:
    started = time.monotonic()
    cell = LocalCell(replicas=plan.replicas, machines=MACHINES, runtime=plan.runtime) if plan.replicas else None
    failure: str | None = None
    try:
        if cell is not None:
            cell.up()
            urls = cell.master_urls
        else:
            assert plan.target, "give --target URL or --start-cell"
            urls = plan.target.split(",")
        api = Api(
            urls, borglet_auth=cell.borglet_auth if cell is not None else None,
            token=cell.admin_token() if cell is not None else None,
        )
        ctx = context.Context(api=api, cell=cell, history=api.history,
                              image=context.DOCKER_IMAGE if plan.runtime == "docker" else None,
                              drains=plan.drains)  # fmt: skip
        context.CTX = ctx
        failure = _run_hypothesis(plan)
        if failure is not None and ctx.failures:
            failure += "\nfirst violation seen: " + ctx.failures[0]
        ctx.coverage.history_ops = len(ctx.history.ops)
        verdict = check(ctx.history, ctx.samples, ctx.lost_windows)
        from harness.history import double_running

        ctx.coverage.task_intervals = double_running(ctx.samples, ctx.lost_windows)[1]
        ctx.coverage.lost_windows = len(ctx.lost_windows)
        if plan.history_path:
            ctx.history.to_jsonl(plan.history_path)
        api.close()
    finally:
        context.CTX = None
        if cell is not None:
            left = cell.down()
            if left:
                failure = (failure or "") + f"\nprocesses left running after teardown: {left}"
    return RunResult(
        target=plan.target or ",".join(cell.master_urls if cell else []),
        replicas=plan.replicas,
        examples=plan.examples,
        seed=plan.seed,
        seconds=time.monotonic() - started,
        coverage=ctx.coverage,
        failure=failure,
        history_details=verdict.details,
        history_ok=verdict.ok,
    )


def _run_hypothesis(plan: Plan) -> str | None:
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if plan.shrink else [])
    s = settings(
        max_examples=plan.examples,
        stateful_step_count=plan.steps,
        deadline=None,
        phases=phases,
        database=None,
        print_blob=True,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.normal,
    )
    factory = machine.CellMachine
    # run_state_machine_as_test reads these from the machine class: a fixed seed makes the
    # run's programs repeatable, and a blob replays one failing program exactly.
    factory._hypothesis_internal_use_seed = plan.seed  # type: ignore[attr-defined]
    factory._hypothesis_internal_use_reproduce_failure = (  # type: ignore[attr-defined]
        _blob(plan.replay) if plan.replay else None
    )
    try:
        run_state_machine_as_test(factory, settings=s)
    except Exception as err:  # noqa: BLE001 - any failure is reported, with its program
        # A live cell is not deterministic, so a replay may pass (FlakyFailure): the failures it
        # wraps are the finding, and the program printed with it replays it. The findings come
        # first, so a log cut short still holds them.
        first = "".join("cause: " + "".join(traceback.format_exception_only(type(e), e)) for e in causes(err))
        return first + "".join(traceback.format_exception_only(type(err), err)) + _notes(err)
    return None


def causes(err: BaseException) -> list[BaseException]:
    """The failures an exception group wraps, nested groups opened, in order (none: [])."""
    found: list[BaseException] = []
    for e in getattr(err, "exceptions", ()):
        if isinstance(e, BaseException):
            found += causes(e) if getattr(e, "exceptions", None) else [e]
    return found


def _blob(text: str) -> tuple[str, bytes]:
    import hypothesis

    return (hypothesis.__version__, text.encode())


def _notes(err: BaseException) -> str:
    return "\n".join(getattr(err, "__notes__", []))
