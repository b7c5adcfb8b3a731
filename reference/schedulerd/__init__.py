"""The scheduler as a process of its own (`minborg scheduler`, `python -m reference.schedulerd`).

Borg (Verma et al. 2015, section 3.4) runs its scheduler apart from the Borgmaster: it works
on a cached copy of the cell state, and the master accepts its assignments unless they are
inappropriate (based on out-of-date state), in which case the tasks go back to the queue for
the scheduler's next pass. Here:

- `process.SchedulerProcess` runs while it holds the cell's scheduler lease (`Keys.scheduler`):
  one process schedules at a time, the others wait on standby. It reaches the cell only
  through two small interfaces: a `CellSource` (a `View` of the cell, a wait for a revision)
  and a `Leader` (a plan proposed, the answer back).
- Each pass chooses the pending tasks to plan exactly as the leader's own pass does (one
  function, `SetAside.next`: PENDING tasks whose job record has arrived, less those found
  unschedulable while nothing freed capacity, `scheduler.setaside`), plans them with the
  scheduler library (`plan_for`, the same config), and proposes the plan, with the revision
  it was computed at, to the leader (`scheduler.wire.PLANS_PATH`). It then waits for its view
  to reach the revision the leader committed at, so it never plans twice on the same state.
- The leader (`Term.accept_plan`) commits the plan through the one commit path its own pass
  uses (`leader.commit`): each placement, with its preemptions, only if every one of its spec
  steps is still allowed in the cell as it is now (the task still pending, the machine up and
  with room, each victim still running there): optimistic concurrency. A placement that fails
  that check is a conflict; its task stays PENDING and is planned again.
- While the leader hears from a scheduler process (a plan, or an empty one as a heartbeat,
  every `HEARTBEAT_S`, idle or in the middle of a long pass), or commits a plan of its, it
  leaves scheduling to it and keeps restarts, rolling updates and polling; when it has heard
  nothing for `Term.SCHEDULER_GRACE_S`, it schedules again itself, unless the process's lease
  still stands in etcd (a busy leader can be slow to read a heartbeat), in which case it waits
  up to `Term.SCHEDULER_LEASED_GRACE_S` of silence.
- A pass plans at most `SetAside.pass_max` (100,000) pending tasks, the first in the queue's
  order, and the next pass, once the plan is committed, takes the rest; the process waits up to
  `cached.PLAN_ANSWER_S` (300 s) for the answer to a plan, which the leader commits in parts.
  The leader's own pass plans at most `leader.OWN_PASS_MAX` (5,000): it plans inside the writer.

`cached.CachedCell` is the `CellSource` of a real cell (a watch cache of etcd, the class every
master replica keeps) and `cached.HttpLeader` the `Leader` (a signed POST); `main` wires them.
So the leader's event loop and writer no longer share a GIL with scheduling passes.
"""
