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

Minborg's own policies run on these terms too (`engine_rows`, variants "on" and "off"): the same
arrivals and metric, each task placed by Minborg's scheduler in one pass (default config, its
techniques on or off, no preemption), so a policy of ours can be set beside the paper's figures.

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
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from reference.scheduler import QueueOrder, SchedulerConfig, Snapshot, plan_pass
from reference.scheduler.fragmentation import usable
from spec.model import CPU, GPU, RAM, Machine, TaskId

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

def arrival_order(pods: Sequence[Pod], capacity: int, seed: int, ratio: float = INFLATION) -> list[int]:
    """The arrivals as indices into `pods`: every pod, plus pods drawn uniformly with
    replacement and appended until a draw would pass `ratio` x `capacity` (that draw ends the
    inflation; as in the simulator, the test adds the draw's milli per GPU, the total adds all
    its GPUs), then the whole list shuffled."""
    rng = random.Random(seed)
    out = list(range(len(pods)))
    asked = sum(p.gpu for p in pods)
    if pods and any(p.gpu for p in pods):
        while True:
            i = rng.randrange(len(pods))  # what rng.choice(pods) draws
            if asked + pods[i].milli > ratio * capacity:  # the simulator tests the per-GPU milli, adds the total
                break
            out.append(i)
            asked += pods[i].gpu
    rng.shuffle(out)
    return out


def arrivals(pods: Sequence[Pod], capacity: int, seed: int, ratio: float = INFLATION) -> list[Pod]:
    """The pods in arrival order (see `arrival_order`)."""
    return [pods[i] for i in arrival_order(pods, capacity, seed, ratio)]


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


def unallocated_pct(policy: str, machines: Sequence[Machine], pods: Sequence[TracePod], seed: int, variant: str = "simulator") -> float:
    """The figure of one seed: 100 - alloc% at 100% arrived. `variant`: "simulator" (the paper's
    baseline as its simulator runs it), "on" or "off" (Minborg's scheduler, techniques on or off)."""
    capacity = sum(m.capacity.get(GPU) for m in machines)
    if variant != "simulator":
        return 100.0 - alloc_at(engine_rows(policy, machines, pods, seed, variant == "on"), capacity)
    base = [pod_of(p) for p in pods]
    tasks = arrivals(base, capacity, seed)
    mix = FragMix(base) if policy == "fgd" else None
    return 100.0 - alloc_at(simulate(policy, machines, tasks, mix, seed), capacity)


# -- Minborg's scheduler on these terms -----------------------------------------------------------

def engine_rows(
    policy: str, machines: Sequence[Machine], pods: Sequence[TracePod], seed: int, techniques: bool = True,
    stop_pct: float = 101.5,
) -> list[tuple[int, int]]:
    """`simulate`'s rows for one of Minborg's policies run by Minborg's own scheduler (one pass,
    the arrivals in order, no preemption; techniques on or off) on the same arrivals: the
    policy's score, its own GPU choice (fgd's, else the fullest GPU that fits a share), its
    ties (the first machine of the pass's random walk). Each drawn copy is a job of its own."""
    base = [pod_of(p) for p in pods]
    capacity = sum(m.capacity.get(GPU) for m in machines)
    tasks, gpus, seen, arrived = [], [], {}, 0
    for i in arrival_order(base, capacity, seed):
        t = pods[i].task
        n = seen[i] = seen.get(i, 0) + 1
        tasks.append(t if n == 1 else replace(t, id=TaskId(f"{t.id.job}.{n}", t.id.index)))
        gpus.append(base[i].gpu)
        arrived += base[i].gpu
        if capacity and 100.0 * arrived / capacity > stop_pct:
            break
    cfg = replace(SchedulerConfig(policy=policy), queue_order=QueueOrder.GIVEN, preemption=False)
    plan = plan_pass(Snapshot(tuple(machines), pending=tuple(tasks)), cfg if techniques else cfg.without_techniques(), seed)
    placed = {p.task for p in plan.placements}
    rows, arrived, allocated = [], 0, 0
    for t, g in zip(tasks, gpus, strict=True):
        arrived += g
        allocated += g if t.id in placed else 0
        rows.append((arrived, allocated))
    return rows


# -- the command ----------------------------------------------------------------------------------

FIRST_SEED = 42  # the simulator's run scripts use seeds 42..51
PAPER_SEEDS = range(FIRST_SEED, FIRST_SEED + 10)
# Who runs a policy on these terms: the paper's simulator (as reproduced above), or Minborg's own
# scheduler with its techniques on (the default config) or off.
VARIANTS = ("simulator", "on", "off")


def one_pass(pods_path: str, nodes_path: str, policy: str, variant: str, seed: int) -> dict:
    machines, pods = read_machines(Path(nodes_path)), read_pods(Path(pods_path))
    start = time.perf_counter()
    x = unallocated_pct(policy, machines, pods, seed, variant)
    return {"pods": Path(pods_path).name, "policy": policy, "variant": variant, "seed": seed,
            "unallocated_pct": round(x, 4), "seconds": round(time.perf_counter() - start, 1)}


def key(r: dict) -> tuple:
    return (r["pods"], r["policy"], r.get("variant", "simulator"), r["seed"])


def load(store: Path) -> dict[tuple, dict]:
    """The passes kept in `store`; a pass stored without a variant is the simulator's."""
    if not store.exists():
        return {}
    return {key(r): {**r, "variant": r.get("variant", "simulator")} for r in json.loads(store.read_text())}


def run(
    pods_paths: Sequence[str], nodes_path: str, policies: Sequence[str], variants: Sequence[str], seeds: Sequence[int],
    store: Path, resume: bool, run_missing: bool = True, jobs: int = 1,
) -> list[dict]:
    """Every (pod list, policy, variant, seed) pass, kept in `store` (JSON) as each ends;
    returns the summary rows of `seeds` (see `summary`)."""
    done = load(store) if resume else {}
    store.parent.mkdir(parents=True, exist_ok=True)
    todo = [(path, nodes_path, policy, variant, seed)
            for path in pods_paths for variant in variants for policy in policies for seed in seeds
            if run_missing and (Path(path).name, policy, variant, seed) not in done]
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for r in pool.map(one_pass, *zip(*todo, strict=True)) if todo else ():
            done[key(r)] = r
            print(f"fgd semantics: {r['pods']} {r['policy']} {r['variant']} seed {r['seed']}: {r['unallocated_pct']:.2f}% "
                  f"({r['seconds']} s)", flush=True)
            store.write_text(json.dumps(sorted(done.values(), key=key), indent=1))
    return summary(done.values(), [Path(p).name for p in pods_paths], seeds)


def summary(results: Iterable[dict], pods: Sequence[str], seeds: Iterable[int]) -> list[dict]:
    """Per (pod list, variant, policy) with passes among `seeds`: mean, population deviation,
    how many, which seeds, and the paper's figure (the simulator's baselines on the default list)."""
    want = set(seeds)
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        if r["seed"] in want:
            groups.setdefault((r["pods"], r.get("variant", "simulator"), r["policy"]), []).append(r)
    order = {v: i for i, v in enumerate(VARIANTS)}
    rank = {n: i for i, n in enumerate(POLICIES)}
    out = []
    for (name, variant, policy), rs in sorted(groups.items(), key=lambda kv: (
            pods.index(kv[0][0]) if kv[0][0] in pods else len(pods), order.get(kv[0][1], 9), rank.get(kv[0][2], 99), kv[0][2])):
        xs = [r["unallocated_pct"] for r in rs]
        paper = PUBLISHED.get(policy) if name == DEFAULT_PODS and variant == "simulator" else None
        out.append({"pods": name, "policy": policy, "variant": variant, "mean": statistics.mean(xs), "std": statistics.pstdev(xs),
                    "n": len(xs), "seeds": sorted(r["seed"] for r in rs), "published": paper})
    return out


WHO = {"simulator": "the paper's simulator", "on": "Minborg, techniques on", "off": "Minborg, techniques off"}


def seed_span(seeds: Sequence[int]) -> str:
    if seeds and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"{seeds[0]}"
    return ", ".join(map(str, seeds))


def table(rows: Sequence[dict]) -> str:
    lines = ["| pod list | policy | run by | unallocated GPU % at 100% arrived | seeds | paper | minus paper |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        pub = "" if r["published"] is None else f"{r['published']}"
        diff = "" if r["published"] is None else f"{r['mean'] - r['published']:+.2f}"
        lines.append(f"| {r['pods']} | {r['policy']} | {WHO.get(r['variant'], r['variant'])} | {r['mean']:.2f} ± {r['std']:.2f} "
                     f"(n={r['n']}) | {seed_span(r['seeds'])} | {pub} | {diff} |")
    return "\n".join(lines)


def chart(rows: Sequence[dict], out: Path, title: str) -> None:
    """Bars: each policy's mean ± deviation, the paper's figure beside it, 4.8% (FGD's) as a line."""
    import matplotlib  # only the report needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    labels = [r["policy"] if r["variant"] == "simulator" else f"{r['policy']}\n({WHO[r['variant']]})" for r in rows]
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["mean"] for r in rows], 0.4, yerr=[r["std"] for r in rows], capsize=3,
           label=f"reproduced here (mean ± sd, n = {max((r['n'] for r in rows), default=0)} seeds)")
    ax.bar([x + 0.2 for x in xs], [r["published"] if r["published"] is not None else float("nan") for r in rows], 0.4,
           label="paper (Weng et al., ATC '23, Fig. 9a)")
    for x, r in zip(xs, rows, strict=True):
        ax.annotate(f"{r['mean']:.2f}", (x - 0.2, r["mean"] + r["std"]), ha="center", va="bottom", fontsize=8)
        if r["published"] is not None:
            ax.annotate(f"{r['published']}", (x + 0.2, r["published"]), ha="center", va="bottom", fontsize=8)
    ax.axhline(PUBLISHED["fgd"], color="grey", linestyle="--", linewidth=1, label=f"{PUBLISHED['fgd']}% (FGD in the paper)")
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_ylabel("unallocated GPU % at 100% arrived (lower is better)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
