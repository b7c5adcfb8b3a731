"""The GPU packing experiment on the FGD paper's own terms (`minborg bench packing --semantics fgd`).

The paper (Weng et al., USENIX ATC '23) measures its baselines with its public simulator; this
module reproduces that simulator's semantics, pure and self-contained, beside Minborg's own
experiment (`packing.py`, `--semantics minborg`). Where the two differ:

- Each policy scores machines with its own integer score (0..100, truncated as the simulator
  truncates); `best_fit` is min-max normalised per task first (which keeps the set of best
  machines). Among the machines of the highest score the simulator takes the one of the
  smallest name, and it names machines by a random permutation per seed: here, the first in
  a machine order shuffled per seed. So ties are not drawn per task: tasks that every machine
  scores alike (tasks without GPUs under `gpu_packing` and `gpu_clustering`) fill machines in
  that one order, first fit. `random_fit` draws one feasible machine uniformly per task.
- The GPU inside the machine is chosen as the paper's run scripts configure it: `random_fit`
  any GPU with room, uniformly; `fgd` the GPU whose use raises the machine's fragmentation
  least (the first GPU among equal integer scores); the others (`dot_prod` runs with
  `-gpusel best`, the rest with that default) the GPU with the least free milli that has room.
  A task of whole GPUs takes untouched GPUs, lowest index first.
- Arrivals: the pod list in trace order, inflated by pods drawn uniformly with replacement
  (appended) while the next draw keeps GPU requests at or below 130% of capacity, then the
  whole list shuffled. Tasks never depart; one that fits nowhere is skipped.
- Machines are feasible when CPU, memory, GPU model and GPUs fit.
- The metric is `merge_alloc_discrete.py`'s: after each arrival the row (arrived GPU milli,
  allocated GPU milli); arrive% = round(arrived / capacity * 100), alloc% = allocated /
  capacity * 100; alloc(100) is the mean alloc% over rows with arrive% = 100 (the rows within
  +-1 when there are none), and the figure is 100 - alloc(100), in % of GPU capacity.

Details of the simulator not confirmed against its source: `dot_prod`'s vectors under its
`merge` dimension extension (taken here as (free CPU / 128 cores, free GPU milli / 8000) against
the task's), and whether the shuffle precedes or follows the inflation (here: follows).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reference.scheduler.fragmentation import usable
from spec.model import CPU, GPU, RAM, Machine

from .trace import DEFAULT_PODS, TracePod, read_machines, read_pods

INFLATION = 1.3
MILLI = 1000
MAX_SCORE = 100
MAX_SPEC_CPU = 128_000  # the simulator's normalisers: CPU milli, GPU milli of an 8-GPU machine
MAX_SPEC_GPU = 8_000
POLICIES = ("random_fit", "best_fit", "gpu_packing", "dot_prod", "gpu_clustering", "fgd")
# Fig. 9a of the paper: unallocated GPU % at 100% arrived, default openb pod list.
PUBLISHED = {"random_fit": 13.7, "best_fit": 7.1, "gpu_packing": 8.2, "dot_prod": 9.4, "gpu_clustering": 8.3, "fgd": 4.8}


@dataclass(frozen=True, slots=True)
class Pod:
    cpu: int
    mem: int
    num: int  # GPUs
    milli: int  # milli per GPU (1000 for whole GPUs, 0 without GPU)
    models: tuple[str, ...] = ()  # GPU models allowed; () any

    @property
    def gpu(self) -> int:
        return self.num * self.milli

    @property
    def tag(self) -> str:
        """The simulator's GPU affinity tag, used by gpu_clustering."""
        if not self.num:
            return ""
        return "share" if self.milli < MILLI else f"{self.num}-gpu"


class Node:
    __slots__ = ("cpu", "mem", "gfree", "model", "tags", "name")

    def __init__(self, cpu: int, mem: int, gpus: int, model: str = "", name: str = "") -> None:
        self.cpu, self.mem, self.model, self.name = cpu, mem, model, name
        self.gfree = [MILLI] * gpus
        self.tags: dict[str, int] = {}


def pod_of(p: TracePod) -> Pod:
    t = p.task
    gpu = t.request.get(GPU)
    num, milli = (1, gpu) if 0 < gpu < MILLI else (gpu // MILLI, MILLI if gpu else 0)
    models: tuple[str, ...] = ()
    for c in t.constraints:
        if c.attr == "gpu_model":
            models = tuple(c.values)
    return Pod(t.request.get(CPU), t.request.get(RAM), num, milli, models)


def node_of(m: Machine) -> Node:
    return Node(m.capacity.get(CPU), m.capacity.get(RAM), m.capacity.get(GPU) // MILLI, dict(m.attrs).get("gpu_model", ""), m.name)


# -- arrivals ---------------------------------------------------------------------------------

def arrivals(pods: Sequence[Pod], capacity: int, seed: int, ratio: float = INFLATION) -> list[Pod]:
    """The pods, plus pods drawn uniformly with replacement and appended until a draw would pass
    `ratio` x `capacity` (that draw ends the inflation; as in the simulator, the test adds the
    draw's milli per GPU, the total adds all its GPUs), then the whole list shuffled."""
    rng = random.Random(seed)
    out = list(pods)
    asked = sum(p.gpu for p in out)
    if pods and any(p.gpu for p in pods):
        while True:
            p = rng.choice(pods)
            if asked + p.milli > ratio * capacity:  # the simulator tests the per-GPU milli, adds the total
                break
            out.append(p)
            asked += p.gpu
    rng.shuffle(out)
    return out


# -- GPU selection inside a machine -----------------------------------------------------------

def exclusive(gfree: Sequence[int], num: int) -> list[int]:
    """Whole GPUs: the first `num` untouched GPUs by index, [] when there are too few."""
    ids = [i for i, f in enumerate(gfree) if f == MILLI][:num]
    return ids if len(ids) == num else []


def best_gpu(gfree: Sequence[int], milli: int) -> int:
    """The GPU with the least free milli that has room (lowest index among equals); -1 if none."""
    best = -1
    for i, f in enumerate(gfree):
        if f >= milli and (best < 0 or f < gfree[best]):
            best = i
    return best


def random_gpu(gfree: Sequence[int], milli: int, rng: random.Random) -> int:
    """A GPU with room, uniformly (one pass, reservoir sampling); -1 if none."""
    pick, seen = -1, 0
    for i, f in enumerate(gfree):
        if f >= milli:
            seen += 1
            if rng.randrange(seen) == 0:
                pick = i
    return pick


# -- feasibility and scores --------------------------------------------------------------------

def fits(n: Node, p: Pod) -> bool:
    if p.cpu > n.cpu or p.mem > n.mem:
        return False
    if not p.num:
        return True
    if p.models and n.model not in p.models:
        return False
    if p.milli < MILLI:
        return any(f >= p.milli for f in n.gfree)
    return sum(1 for f in n.gfree if f == MILLI) >= p.num


def best_fit_score(n: Node, p: Pod) -> int:
    """int(100 * (1 - (0.5 (cpu free - ask) / 128000 + 0.5 (gpu free - ask) / 8000)))."""
    left = 0.5 * (n.cpu - p.cpu) / MAX_SPEC_CPU + 0.5 * (sum(n.gfree) - p.gpu) / MAX_SPEC_GPU
    return int((1.0 - left) * MAX_SCORE)


def gpu_packing_score(n: Node, p: Pod) -> int:
    """Shared GPUs first (100 - free % of the GPUs used / 10, at least 50), then untouched GPUs
    of a used machine (50 - their number, at least 33), then an idle machine (33 - its GPUs,
    at least its GPUs); 0 for a task without GPUs."""
    if not p.num:
        return 0
    untouched = sum(1 for f in n.gfree if f == MILLI)
    if untouched == len(n.gfree):
        return max(MAX_SCORE // 3 - untouched, untouched)
    need, whole_used, used = p.num, 0, []
    for i in sorted(range(len(n.gfree)), key=lambda i: n.gfree[i]):  # least free first, stable
        if not need:
            break
        if n.gfree[i] >= p.milli:
            need -= 1
            used.append(i)
            whole_used += n.gfree[i] == MILLI
    if whole_used:
        return max(MAX_SCORE // 2 - whole_used, MAX_SCORE // 3)
    free_pct = sum(n.gfree[i] * 100 // MILLI for i in used)
    return max(MAX_SCORE - free_pct // 10, MAX_SCORE // 2)


def gpu_clustering_score(n: Node, p: Pod) -> int:
    """Machines holding only tasks of the pod's kind (75..100), of its kind and others (50..75),
    idle (25..50), of other kinds only (0..25); within a band 25 * (8000 - free GPU) // 8000."""
    if not p.num:
        return 0
    base = MAX_SCORE // 4 * (MAX_SPEC_GPU - sum(n.gfree)) // MAX_SPEC_GPU
    kinds = [k for k, c in n.tags.items() if c > 0]
    if n.tags.get(p.tag, 0) > 0:
        return base + (MAX_SCORE * 3 // 4 if len(kinds) == 1 else MAX_SCORE * 2 // 4)
    return base + (MAX_SCORE // 4 if not kinds else 0)


def dot_prod_score(n: Node, p: Pod) -> int:
    """Tetris under the `merge` dimension extension (a machine's GPUs merged into one dimension)
    and `max` normalisation: int(100 * (1 - mean over CPU and GPU of (free / max spec) x
    (ask / max spec))); the GPU inside the machine is chosen best-fit."""
    cpu = (n.cpu / MAX_SPEC_CPU) * (p.cpu / MAX_SPEC_CPU)
    gpu = (sum(n.gfree) / MAX_SPEC_GPU) * (p.gpu / MAX_SPEC_GPU)
    return int(MAX_SCORE * (1.0 - (cpu + gpu) / 2))


class FragMix:
    """The workload's task shapes, as FGD's typical pods: per (GPUs, milli, models) the sorted
    CPU asks, and the count of every task (those without GPUs included)."""

    def __init__(self, pods: Sequence[Pod]) -> None:
        groups: dict[tuple[int, int, tuple[str, ...]], list[int]] = {}
        for p in pods:
            if p.num:
                groups.setdefault((p.num, p.milli, p.models), []).append(p.cpu)
        self.groups = [(k, sorted(v)) for k, v in groups.items()]
        self.total = len(pods)
        self._frag: dict[tuple, float] = {}
        self._place: dict[tuple, tuple[int, frozenset[int]]] = {}

    def fragmentation(self, model: str, cpu: int, gfree: tuple[int, ...]) -> float:
        """F in milli: free GPU minus the expected GPU milli a typical task could use here."""
        key = (model, cpu, gfree)
        f = self._frag.get(key)
        if f is None:
            free = sum(gfree)
            expected = 0
            if free and self.total:
                for (num, milli, models), cpus in self.groups:
                    if models and model not in models:
                        continue
                    k = bisect_right(cpus, cpu)
                    if k:
                        expected += k * (usable(gfree, 0, milli) if milli < MILLI else usable(gfree, num, 0))
            f = self._frag[key] = free - expected / self.total if self.total else float(free)
        return f

    def place(self, n: Node, p: Pod) -> tuple[int, list[int]]:
        """int(100 * sigmoid((F before - F after) / 1000)) and the GPUs: for a share the first GPU
        (by index) of the highest integer score; whole GPUs the first untouched ones."""
        key = (n.model, n.cpu, tuple(sorted(n.gfree)), p.cpu, p.num, p.milli)
        hit = self._place.get(key)
        if hit is None:
            before = self.fragmentation(n.model, n.cpu, key[2])
            cpu = n.cpu - p.cpu
            if p.num and p.milli < MILLI:
                scores: dict[int, int] = {}
                for f in set(n.gfree):
                    if f >= p.milli:
                        after = list(key[2])
                        after[after.index(f)] = f - p.milli
                        scores[f] = fgd_int(before, self.fragmentation(n.model, cpu, tuple(sorted(after))))
                top = max(scores.values())
                hit = (top, frozenset(f for f, s in scores.items() if s == top))
            else:
                after = list(n.gfree)
                for i in exclusive(n.gfree, p.num) if p.num else []:
                    after[i] = 0
                hit = (fgd_int(before, self.fragmentation(n.model, cpu, tuple(sorted(after)))), frozenset())
            self._place[key] = hit
        score, values = hit
        if p.num and p.milli < MILLI:
            return score, [next(i for i, f in enumerate(n.gfree) if f in values)]
        return score, exclusive(n.gfree, p.num) if p.num else []


def fgd_int(before: float, after: float) -> int:
    return int(MAX_SCORE / (1.0 + math.exp(-(before - after) / MILLI)))


# -- one pass -----------------------------------------------------------------------------------

def gpus_for(policy: str, n: Node, p: Pod, rng: random.Random) -> list[int]:
    """The GPUs a policy without its own choice takes on the chosen machine."""
    if not p.num:
        return []
    if p.milli >= MILLI:
        return exclusive(n.gfree, p.num)
    return [random_gpu(n.gfree, p.milli, rng) if policy == "random_fit" else best_gpu(n.gfree, p.milli)]


SCORES = {"best_fit": best_fit_score, "dot_prod": dot_prod_score, "gpu_packing": gpu_packing_score, "gpu_clustering": gpu_clustering_score}


def simulate(
    policy: str, machines: Sequence[Machine], tasks: Sequence[Pod], mix: FragMix | None, seed: int, stop_pct: float = 101.5,
    where: list[str] | None = None,
) -> list[tuple[int, int]]:
    """Schedules `tasks` in order; the rows (arrived GPU milli, allocated GPU milli) after each
    arrival, until the arrived requests pass `stop_pct` % of capacity. `where`, if given,
    collects each task's machine name ("" when skipped)."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r} is not one of {', '.join(POLICIES)}")
    rng = random.Random(seed)
    nodes = [node_of(m) for m in machines]
    rng.shuffle(nodes)  # the simulator names machines by a random permutation per seed, ties go to the first name
    capacity = sum(len(n.gfree) for n in nodes) * MILLI
    arrived = allocated = 0
    rows: list[tuple[int, int]] = []
    for p in tasks:
        arrived += p.gpu
        feasible = [n for n in nodes if fits(n, p)]
        chosen: Node | None = None
        gpus: list[int] = []
        if feasible:
            if policy == "random_fit":
                chosen = rng.choice(feasible)
                gpus = gpus_for(policy, chosen, p, rng)
            else:
                best = -1
                for n in feasible:  # in the seed's machine order: the first of the best wins
                    if policy == "fgd":
                        assert mix is not None
                        s, g = mix.place(n, p)
                    else:
                        s, g = SCORES[policy](n, p), []
                    if s > best:
                        best, chosen, gpus = s, n, g
                assert chosen is not None
                if policy != "fgd":
                    gpus = gpus_for(policy, chosen, p, rng)
        if chosen is not None:
            chosen.cpu -= p.cpu
            chosen.mem -= p.mem
            for i in gpus:
                chosen.gfree[i] -= p.milli
            if p.num:
                chosen.tags[p.tag] = chosen.tags.get(p.tag, 0) + 1
            allocated += p.gpu
        rows.append((arrived, allocated))
        if where is not None:
            where.append(chosen.name if chosen is not None else "")
        if capacity and 100.0 * arrived / capacity > stop_pct:
            break
    return rows


def alloc_at(rows: Sequence[tuple[int, int]], capacity: int, arrive_pct: int = 100) -> float:
    """merge_alloc_discrete's alloc% at an integer arrive%: the mean of allocated / capacity *
    100 over the rows whose arrived / capacity * 100 rounds to it (within +-1 when none)."""
    def pct(x: int) -> float:
        return 100.0 * x / capacity

    for width in (0, 1):
        vals = [pct(a) for r, a in rows if abs(round(pct(r)) - arrive_pct) <= width]
        if vals:
            return sum(vals) / len(vals)
    raise ValueError(f"no arrival reached {arrive_pct}% of capacity (+-1)")


def unallocated_pct(policy: str, machines: Sequence[Machine], pods: Sequence[TracePod], seed: int) -> float:
    """The figure of one seed: 100 - alloc% at 100% arrived."""
    base = [pod_of(p) for p in pods]
    capacity = sum(m.capacity.get(GPU) for m in machines)
    tasks = arrivals(base, capacity, seed)
    mix = FragMix(base) if policy == "fgd" else None
    return 100.0 - alloc_at(simulate(policy, machines, tasks, mix, seed), capacity)


# -- the command ----------------------------------------------------------------------------------

FIRST_SEED = 42  # the simulator's run scripts use seeds 42..51


def run(
    pods_paths: Sequence[str], nodes_path: str, policies: Sequence[str], seeds: int, store: Path, resume: bool, run_missing: bool = True
) -> list[dict]:
    """Every (pod list, policy, seed) pass, kept in `store` (JSON) as each ends; returns the
    summary rows (pods, policy, mean, std, n, published)."""
    machines = read_machines(Path(nodes_path))
    done: dict[tuple, dict] = {}
    if resume and store.exists():
        done = {(r["pods"], r["policy"], r["seed"]): r for r in json.loads(store.read_text())}
    store.parent.mkdir(parents=True, exist_ok=True)
    for path in pods_paths:
        pods, name = read_pods(Path(path)), Path(path).name
        for policy in policies:
            for seed in range(FIRST_SEED, FIRST_SEED + seeds):
                if (name, policy, seed) in done or not run_missing:
                    continue
                start = time.perf_counter()
                x = unallocated_pct(policy, machines, pods, seed)
                r = {"pods": name, "policy": policy, "seed": seed, "unallocated_pct": round(x, 4),
                     "seconds": round(time.perf_counter() - start, 1)}
                done[(name, policy, seed)] = r
                print(f"fgd semantics: {name} {policy} seed {seed}: {x:.2f}% ({r['seconds']} s)", flush=True)
                store.write_text(json.dumps(sorted(done.values(), key=lambda r: (r["pods"], r["policy"], r["seed"])), indent=1))
    out = []
    for path in pods_paths:
        name = Path(path).name
        for policy in policies:
            xs = [r["unallocated_pct"] for r in done.values() if r["pods"] == name and r["policy"] == policy]
            if xs:
                out.append({"pods": name, "policy": policy, "mean": statistics.mean(xs), "std": statistics.pstdev(xs), "n": len(xs),
                            "published": PUBLISHED.get(policy) if name == DEFAULT_PODS else None})
    return out


def table(rows: Sequence[dict]) -> str:
    lines = ["| pod list | policy | unallocated GPU % at 100% arrived | paper |", "|---|---|---|---|"]
    for r in rows:
        pub = "" if r["published"] is None else f"{r['published']}"
        lines.append(f"| {r['pods']} | {r['policy']} | {r['mean']:.2f} ± {r['std']:.2f} (n={r['n']}) | {pub} |")
    return "\n".join(lines)
