"""The cell autoscaler's decisions as pure functions: how many machines to add for pending work, which idle ones to remove."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spec.model import Constraint, Machine, Resources


@dataclass(frozen=True)
class CellPolicy:
    min: int
    max: int
    pending_grace_s: float = 1.0  # a task pending this long is waiting for room, not for a pass
    add_cooldown_s: float = 8.0  # let new machines register and be scheduled onto first
    idle_cooldown_s: float = 30.0  # a machine without tasks this long is removed


@dataclass(frozen=True)
class Need:
    """One pending task as the cell autoscaler sees it."""

    request: Resources
    constraints: tuple[Constraint, ...] = ()
    pending_since: float = 0.0


def fits_new_machine(need: Need, machine: Machine) -> bool:
    """Would the task fit on an empty machine like `machine`? If not, adding one is no use."""
    return need.request.fits_in(machine.capacity) and all(c.holds(machine) for c in need.constraints)


def machines_to_add(
    needs: Sequence[Need], template: Machine, current: int, now: float, last_add_at: float | None, policy: CellPolicy
) -> int:
    """New machines for the tasks that waited past the grace and would fit one: first-fit
    decreasing into empty machines, within max and not during the add cooldown."""
    if current >= policy.max:
        return 0
    if last_add_at is not None and now - last_add_at < policy.add_cooldown_s:
        return 0
    waiting = [n for n in needs if now - n.pending_since >= policy.pending_grace_s and fits_new_machine(n, template)]
    if not waiting:
        return 0
    bins: list[Resources] = []
    for n in sorted(waiting, key=lambda n: (n.request.get("cpu"), n.request.get("ram")), reverse=True):
        for i, free in enumerate(bins):
            if n.request.fits_in(free):
                bins[i] = free - n.request
                break
        else:
            bins.append(template.capacity - n.request)
    return min(len(bins), policy.max - current)


def machines_to_remove(
    idle_since: Mapping[str, float | None], now: float, current: int, waiting: int, policy: CellPolicy
) -> list[str]:
    """Machines idle past the cooldown, the most recently named first, keeping at least min.

    `idle_since` maps each machine the provider manages to when it last became empty (None:
    it runs tasks). Nothing is removed while tasks wait for room: they may be placed there.
    """
    if waiting or current <= policy.min:
        return []
    idle = [name for name, since in idle_since.items() if since is not None and now - since >= policy.idle_cooldown_s]
    idle.sort(key=_name_order, reverse=True)
    return idle[: current - policy.min]


def _name_order(name: str) -> tuple[str, int]:
    """'machine10' after 'machine9'."""
    head = name.rstrip("0123456789")
    tail = name[len(head) :]
    return head, int(tail) if tail else -1
