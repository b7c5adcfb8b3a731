"""Properties of feasibility: one verdict with its reason, and reasons counted as machines are rejected.

`Feasibility.check` returns, for every machine, the reason a recount from scratch gives (or
the victims), and agrees with the spec's `task_fits`; the numpy prefilter rejects a machine
only where `check` does, for the same reason, and its run sums to what `check`'s rejections
one by one sum to; and the reasons a pass counts while it rejects machines are those a
recount over the cell after the pass gives, whenever no other class changed a machine in
between (one class; or, without preemption, a bound: machines only fill up, so a machine
counted as having room when rejected may have none at the end, never the reverse).
"""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference.scheduler import SchedulerConfig
from reference.scheduler.adapter import snapshot_from_state
from reference.scheduler.cellview import CellView, gpu_take
from reference.scheduler.classes import TaskClass, class_key, make_class
from reference.scheduler.engine import Pass
from reference.scheduler.feasibility import DOWN, HELD_BACK, Rejection, Tally, constraints_hold
from reference.scheduler.plan import Reason
from reference.scheduler.reasons import amount
from spec.actions import reserve, schedule, submit, task_fits
from spec.model import (
    GPU,
    CellState,
    Constraint,
    ConstraintOp,
    Job,
    Machine,
    Resources,
    TaskId,
    TaskState,
    is_prod,
    may_preempt,
)

GiB = 2**30
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PRIORITIES = [0, 0, 5, 100, 150, 200, 300]  # of what runs: mostly preemptible
NEW = st.sampled_from([0, 100, 150, 200, 300, 300])  # the new job's: mostly above what runs
CONSTRAINTS = [
    (),
    (Constraint("zone", ConstraintOp.EQ, ("x",)),),
    (Constraint("zone", ConstraintOp.NE, ("x",)), Constraint("rack", ConstraintOp.IN, ("r1", "r2"))),
    (Constraint("rack", ConstraintOp.NOT_IN, ("r1",)),),
]


def requests(gpu: bool = True) -> st.SearchStrategy[Resources]:
    return st.builds(
        lambda cpu, ram, g, ports: Resources.of(cpu=cpu, ram=ram * GiB // 2, gpu=g, ports=ports),
        st.sampled_from([250, 1000, 2000, 3000]),
        st.integers(0, 4),
        st.sampled_from([0, 0, 0, 0, 300, 700, 1000, 2000] if gpu else [0]),
        st.integers(0, 2),
    )


@st.composite
def cells(draw: st.DrawFn) -> CellState:
    """Machines (some down), running tasks placed where the spec lets them, some reserving less."""
    s = CellState()
    for i in range(draw(st.integers(1, 6))):
        attrs = [("zone", draw(st.sampled_from(["x", "y"])))]
        if draw(st.booleans()):
            attrs.append(("rack", draw(st.sampled_from(["r1", "r2", "r3"]))))
        cap = Resources.of(
            cpu=draw(st.sampled_from([2000, 4000])),
            ram=draw(st.sampled_from([2, 4])) * GiB,
            gpu=draw(st.integers(0, 2)) * 1000,
            ports=4,
        )
        m = Machine(f"m{i}", cap, tuple(sorted(attrs)), up=draw(st.integers(0, 9)) > 0)
        s = s.with_(machines=s.machines.set(m.name, m))
    names = sorted(s.machines)
    for j in range(draw(st.integers(0, 8))):
        job = Job("bo", f"r{j}", draw(st.sampled_from(PRIORITIES)), draw(st.integers(1, 4)), draw(requests()))
        s = submit(s, job) or s
        for i in range(job.task_count):
            tid = TaskId(job.key, i)
            s = schedule(s, tid, draw(st.sampled_from(names))) or s
            if s.tasks.get(tid) and s.tasks[tid].state is TaskState.RUNNING and draw(st.integers(0, 3)) == 0:
                s = reserve(s, tid, Resources.of(cpu=job.request.get("cpu") // 2, ram=job.request.get("ram"))) or s
    return s


def a_pass(s: CellState, job: Job, limit: int | None) -> tuple[CellState, Pass, TaskClass]:
    """The cell with `job` submitted, a pass over it, and the class of the job's first task."""
    s = submit(s, job) or s
    snap = snapshot_from_state(s)
    p = Pass(snap, SchedulerConfig(max_disruptions_per_job=limit), 0, None)
    (task,) = [t for t in snap.pending if t.id == TaskId(job.key, 0)]
    return s, p, make_class(task, p.cell, class_key(task))


def oracle(cls: TaskClass, cell: CellView, mi: int, preempt: bool) -> Rejection | None:
    """Why the machine cannot take the class, from scratch: the first filter that fails, with
    every check of it that fails; resources count what preemptible tasks hold when `preempt`.
    None: it fits (as it is, or by preempting every task it may)."""
    if not cell.up[mi]:
        return DOWN
    unmet = tuple(j for j, (attr, positive, values) in enumerate(cls.compiled)
                  if (cell.attrs[mi].get(attr) in values) is not positive)  # fmt: skip
    if unmet:
        return Rejection(unmet=unmet)
    free, gfree = list(cell.free_for(mi, is_prod(cls.priority))), list(cell.gfree[mi])
    for v in cell.victims[mi] if preempt else ():
        if may_preempt(cls.priority, v.priority):
            free = [f + a for f, a in zip(free, v.req, strict=True)]
            for g, a in v.gpu_shares:
                gfree[g] += a
    short = tuple(d for d, a in cls.nz if free[d] < a and d != cell.gpu_dim)
    gpus = cls.gpu and gpu_take(gfree, cell.gcap[mi], cls.gpu_whole, cls.gpu_share) is None
    return Rejection(short=short, gpus=gpus) if short or gpus else None


@SETTINGS
@given(
    cells(),
    NEW,
    requests(),
    st.sampled_from(CONSTRAINTS),
    st.sampled_from([None, 0, 1]),
)
def test_the_check_says_why_and_agrees_with_the_spec(s, prio, request, constraints, limit):
    job = Job("ann", "new", prio, 1, request, constraints)
    state, p, cls = a_pass(s, job, limit)
    cell = p.cell
    task = state.tasks[TaskId(job.key, 0)]
    for mi, name in enumerate(cell.names):
        for preempt in (False, True):
            got = p.feasible.check(cls, mi, preempt)
            why = oracle(cls, cell, mi, preempt)
            if isinstance(got, list):
                assert why is None, (name, preempt, why)
                assert preempt or got == []  # victims only when preempting
            elif why is None:
                # Fits by preempting, but the victims it needs are held back by a disruption limit.
                assert got is HELD_BACK and preempt and limit is not None, (name, got)
            else:
                assert got == why, (name, preempt)
            scored = p.scorer.evaluate(cls, mi, preempt)  # the score stage: a score exactly where check passes
            assert (scored == got) if isinstance(got, Rejection) else isinstance(scored, float), (name, preempt)
        as_is = p.feasible.check(cls, mi, False) == []
        machine = state.machines[name]
        spec_fits = machine.up and task_fits(state, task, job, machine)
        if request.get(GPU):
            assert spec_fits or not as_is  # the scheduler also fits GPU shares on one GPU each
        else:
            assert as_is == spec_fits, name


@SETTINGS
@given(cells(), NEW, requests(), st.sampled_from(CONSTRAINTS), st.booleans(), st.integers(0, 5))
def test_the_prefilter_and_the_check_agree_on_verdict_and_reason(s, prio, request, constraints, preempt, lo):
    _, p, cls = a_pass(s, Job("ann", "new", prio, 1, request, constraints), None)
    n = len(p.cell.names)
    lo %= n
    check = p.pre.check(cls, lo, lo + n, preempt)
    passing = set(check.passing().tolist())
    by_run = Tally(len(cls.compiled), len(p.cell.dims))
    by_run.add_run(check, n)
    one_by_one = Tally(len(cls.compiled), len(p.cell.dims))
    for h in range(n):
        mi = int(p.pre.ids[lo + h])
        scalar = p.feasible.check(cls, mi, preempt)
        vector = check.rejection(h)
        assert (vector is None) == (h in passing)
        if vector is not None:
            assert scalar == vector, (mi, scalar, vector)  # rejected by both, for one reason
            one_by_one.add(scalar)
        elif isinstance(scalar, Rejection):
            # Passed as a maybe: what the prefilter does not judge, single GPUs and victims.
            assert (cls.gpu and scalar.gpus) or (preempt and p.cell.vmin[mi] < cls.priority), (mi, scalar)
    by_run.settle()
    for field in Tally.__slots__:
        assert getattr(by_run, field) == getattr(one_by_one, field), field


def recount(cls: TaskClass, cell: CellView, preemption: bool) -> tuple[Reason, ...]:
    """The reasons recounted over the cell as it is, machine by machine: what the scheduler
    used to compute after the fact (the oracle of the counts made while rejecting)."""
    n = len(cell.names)
    reasons: list[Reason] = []
    up = [mi for mi in range(n) if cell.up[mi]]
    if len(up) < n:
        reasons.append(Reason("machines", f"{n - len(up)} of {n} machines are down", len(up)))
    eligible = up
    for c, (attr, positive, values) in zip(cls.constraints, cls.compiled, strict=True):
        ok = [mi for mi in up if (cell.attrs[mi].get(attr) in values) is positive]
        if len(ok) < len(up):
            reasons.append(Reason(f"constraint {c}", f"{len(ok)} of {len(up)} machines match", len(ok)))
        eligible = [mi for mi in eligible if mi in set(ok)]
    if cls.constraints and not eligible:
        if all(r.machines for r in reasons if r.subject.startswith("constraint")):
            reasons.append(Reason("constraints", "no machine meets all of them together", 0))
        return tuple(reasons)
    avail = {}
    for mi in eligible:
        free, gfree = list(cell.free_for(mi, is_prod(cls.priority))), list(cell.gfree[mi])
        for v in cell.victims[mi] if preemption else ():
            if may_preempt(cls.priority, v.priority):
                free = [f + a for f, a in zip(free, v.req, strict=True)]
                for g, a in v.gpu_shares:
                    gfree[g] += a
        avail[mi] = (free, gfree)
    note = " (counting preemptible tasks)" if preemption and cls.priority > 0 else ""
    e = len(eligible)
    short_somewhere = False
    for d, a in cls.nz:
        dim = cell.dims[d]
        if dim == GPU:
            continue
        k = sum(1 for mi in eligible if avail[mi][0][d] >= a)
        if k < e:
            short_somewhere = short_somewhere or k == 0
            reasons.append(Reason(dim, f"{k} of {e} machines have {amount(dim, a)} free{note}", k))
    if cls.gpu:
        k = sum(1 for mi in eligible if gpu_take(avail[mi][1], cell.gcap[mi], cls.gpu_whole, cls.gpu_share) is not None)
        if k < e:
            short_somewhere = short_somewhere or k == 0
            what = [f"{cls.gpu_whole} whole free GPU(s)"] if cls.gpu_whole else []
            what += [f"a GPU with {cls.gpu_share} milli free"] if cls.gpu_share else []
            reasons.append(Reason(GPU, f"{k} of {e} machines have {' and '.join(what)}{note}", k))
    if not short_somewhere:
        need = ",".join(f"{cell.dims[d]}={amount(cell.dims[d], a)}" for d, a in cls.nz)
        reasons.append(Reason("resources together", f"0 of {e} machines have {need or 'it'} free at once{note}", 0))
    return tuple(reasons)


configs = st.builds(
    lambda policy, preemption, ec, sc, rr, limit: SchedulerConfig(
        policy=policy, preemption=preemption, equivalence_classes=ec, score_cache=sc,
        relaxed_randomization=rr, relaxed_min_feasible=2, max_disruptions_per_job=limit,
    ),
    st.sampled_from(["best_fit", "worst_fit", "gpu_packing", "fgd"]),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, 1]),
)


@SETTINGS
@given(cells(), NEW, requests(), st.sampled_from(CONSTRAINTS), st.integers(1, 6), configs)
def test_one_class_the_counted_reasons_are_a_recount_after_the_pass(s, prio, request, constraints, count, cfg):
    s = submit(s, Job("ann", "new", prio, count, request, constraints)) or s
    snap = snapshot_from_state(s)
    p = Pass(snap, cfg, 3, None)
    pending = [t for t in snap.pending if t.id.job == "ann/new"]
    plan = p.run(pending, None)
    for u in plan.unschedulable:
        task = next(t for t in pending if t.id == u.task)
        assert u.reasons == recount(make_class(task, p.cell, class_key(task)), p.cell, cfg.preemption)


def resource_counts(reasons: tuple[Reason, ...]) -> dict[str, int]:
    """Machines with enough of each resource named, the constraints' and the summary aside."""
    return {
        r.subject: r.machines
        for r in reasons
        if r.subject not in ("machines", "constraints", "resources together") and not r.subject.startswith("constraint ")
    }


@SETTINGS
@given(
    cells(),
    st.lists(st.tuples(st.sampled_from(PRIORITIES), requests(), st.sampled_from(CONSTRAINTS)), min_size=2, max_size=5),
    configs,
)
def test_without_preemption_the_counted_reasons_bound_a_recount(s, jobs, cfg):
    for i, (prio, request, constraints) in enumerate(jobs):
        s = submit(s, Job("ann", f"j{i}", prio, 2, request, constraints)) or s
    snap = snapshot_from_state(s)
    p = Pass(snap, replace(cfg, preemption=False), 3, None)
    plan = p.run(list(snap.pending), None)
    for u in plan.unschedulable:
        task = next(t for t in snap.pending if t.id == u.task)
        cls = make_class(task, p.cell, class_key(task))
        after = recount(cls, p.cell, False)
        # Machines down and constraints do not change within a pass.
        fixed = [r for r in after if r.subject == "machines" or r.subject.startswith("constraint")]
        assert [r for r in u.reasons if r.subject == "machines" or r.subject.startswith("constraint")] == fixed
        # A machine with room when it was rejected may be full at the end, never the reverse.
        # A resource not named is one every machine that meets the constraints had.
        e = sum(1 for mi in range(len(p.cell.names)) if p.cell.up[mi] and constraints_hold(cls, p.cell.attrs[mi]))
        counted, recounted = resource_counts(u.reasons), resource_counts(after)
        for subject in counted.keys() | recounted.keys():
            assert counted.get(subject, e) >= recounted.get(subject, e), subject
