"""Measure put and fenced-transaction throughput and latency through StoreClient against etcd, and a watch's delay.

    python -m bench.store --members 3 --seconds 5 [--clients 4] [--plain] [--endpoints URL,...]
    python -m bench.store --compare-tls [--rounds 10] [--unsafe-no-fsync]

Without --endpoints it starts a throwaway local cluster of --members members, with TLS and
client certificates as a cell's (--plain: http, to measure what TLS costs). The txn case
is the shape of every master write: compare the leader key's create_revision and value, then
put one JSON document; so it is the ceiling for the master's write throughput. The watch
case puts one key at a time and times its event's arrival at a watch of the prefix.
--compare-tls starts a TLS and a plain 1-member cluster side by side and alternates rounds of
sequential fenced txns and watched puts between them, so the host's other load weighs on both
alike; it prints each side's median latencies and CPU (client and etcd) per operation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.stats import percentile
from reference.store import ops
from reference.store.client import StoreClient, dumps
from reference.store.etcd_cluster import EtcdCluster
from reference.store.tls import StoreTLS

LEADER_KEY = "/bench/leader"
# About the size of a task record in the cell state.
DOCUMENT = {"job": "web", "index": 0, "state": "RUNNING", "machine": "m-017", "padding": "x" * 160}


@dataclass(frozen=True)
class Result:
    name: str
    operations: int
    seconds: float
    latencies_s: list[float]

    @property
    def per_second(self) -> float:
        return self.operations / self.seconds

    def percentile_ms(self, q: float) -> float:
        """The q-th percentile (q in [0, 1]) of the operations' latencies, in ms."""
        value = percentile(self.latencies_s, q)
        if value is None:
            raise ValueError(f"the {self.name} case completed no operation")
        return 1000 * value

    def line(self) -> str:
        return (
            f"{self.name:<6} {self.per_second:9.1f} ops/s  "
            f"p50 {self.percentile_ms(0.5):6.2f} ms  p99 {self.percentile_ms(0.99):7.2f} ms  "
            f"mean {1000 * statistics.fmean(self.latencies_s):6.2f} ms  ({self.operations} ops)"
        )


def run_for(
    name: str, seconds: float, clients: list[StoreClient], operation: Callable[[StoreClient, int, int], None]
) -> Result:
    """Call `operation(client, worker, i)` in a loop from one thread per client for `seconds`."""
    latencies: list[list[float]] = [[] for _ in clients]
    start = time.perf_counter()
    deadline = start + seconds

    def worker(w: int) -> None:
        i = 0
        while (now := time.perf_counter()) < deadline:
            operation(clients[w], w, i)
            latencies[w].append(time.perf_counter() - now)
            i += 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    elapsed = time.perf_counter() - start
    merged = [x for per_worker in latencies for x in per_worker]
    return Result(name, len(merged), elapsed, merged)


def bench(endpoints: list[str], seconds: float, n_clients: int, tls: StoreTLS | None = None) -> list[Result]:
    clients = [StoreClient(endpoints, tls=tls) for _ in range(n_clients)]
    try:
        setup = clients[0]
        setup.delete_prefix("/bench/")
        succeeded, token = setup.txn(
            [ops.create_revision(LEADER_KEY, "==", 0)], [ops.put(LEADER_KEY, "bench")]
        )
        assert succeeded, "could not create the bench leader key"
        value = dumps(DOCUMENT)

        def put(client: StoreClient, w: int, i: int) -> None:
            client.put(f"/bench/put/{w}/{i % 1000}", value)

        fence = [ops.create_revision(LEADER_KEY, "==", token), ops.value(LEADER_KEY, "==", "bench")]

        def txn(client: StoreClient, w: int, i: int) -> None:
            ok, _ = client.txn(fence, [ops.put(f"/bench/txn/{w}/{i % 1000}", value)])
            assert ok, "fence failed"

        results = [run_for("put", seconds, clients, put), run_for("txn", seconds, clients, txn)]
        setup.delete_prefix("/bench/")
        return results
    finally:
        for c in clients:
            c.close()


def watch_delay(endpoints: list[str], seconds: float, tls: StoreTLS | None = None) -> Result:
    """Put one key at a time for `seconds`; each put's latency here is from just before the
    put to its event's arrival at a watch on the prefix (the path of every cache update)."""
    arrived: dict[int, float] = {}
    cond = threading.Condition()

    def record(events: list[ops.WatchEvent], _revision: int) -> None:
        now = time.perf_counter()
        with cond:
            for e in events:
                arrived[e.mod_revision] = now
            cond.notify_all()

    latencies: list[float] = []
    with StoreClient(endpoints, tls=tls) as client:
        client.delete_prefix("/bench/watch/")
        watch = client.watch_prefix("/bench/watch/", client.revision() + 1, record)
        try:
            value, start = dumps(DOCUMENT), time.perf_counter()
            i = 0
            while time.perf_counter() - start < seconds:
                sent = time.perf_counter()
                revision = client.put(f"/bench/watch/{i % 1000}", value)
                with cond:
                    if not cond.wait_for(lambda r=revision: r in arrived, timeout=5.0):
                        raise RuntimeError(f"the watch did not deliver revision {revision} within 5 s")
                    latencies.append(arrived.pop(revision) - sent)
                i += 1
            elapsed = time.perf_counter() - start
        finally:
            watch.stop()
        client.delete_prefix("/bench/watch/")
    return Result("watch", len(latencies), elapsed, latencies)


def compare_tls(rounds: int, ops_per_round: int, unsafe_no_fsync: bool) -> dict[str, dict[str, float]]:
    """TLS against plain http on two 1-member clusters, round by round (see the docstring)."""
    import psutil

    samples: dict[str, dict[str, list[float]]] = {
        side: {"txn_p50_ms": [], "txn_p99_ms": [], "watch_p50_ms": [], "client_cpu_us": [], "etcd_cpu_us": []}
        for side in ("tls", "plain")
    }
    with tempfile.TemporaryDirectory(prefix="minborg-bench-tls-") as state_dir:
        clusters = {
            side: EtcdCluster(f"{state_dir}/{side}", members=1, unsafe_no_fsync=unsafe_no_fsync, tls=side == "tls")
            for side in ("tls", "plain")
        }
        try:
            for cluster in clusters.values():
                cluster.start()
            members = {side: psutil.Process(c.pids()[0]) for side, c in clusters.items()}  # type: ignore[arg-type]
            for r in range(rounds):
                for side in ("tls", "plain") if r % 2 == 0 else ("plain", "tls"):
                    cluster, member = clusters[side], members[side]
                    with StoreClient(cluster.client_urls, tls=cluster.client_tls) as client:
                        client.delete_prefix("/bench/")
                        _, token = client.txn([ops.create_revision(LEADER_KEY, "==", 0)], [ops.put(LEADER_KEY, "bench")])
                        fence = [ops.create_revision(LEADER_KEY, "==", token), ops.value(LEADER_KEY, "==", "bench")]
                        value, latencies = dumps(DOCUMENT), []
                        cpu0, etcd0 = time.process_time(), sum(member.cpu_times()[:2])
                        for i in range(ops_per_round):
                            t = time.perf_counter()
                            client.txn(fence, [ops.put(f"/bench/txn/{i}", value)])
                            latencies.append(time.perf_counter() - t)
                        cpu1, etcd1 = time.process_time(), sum(member.cpu_times()[:2])
                    result = Result("txn", len(latencies), 1.0, latencies)
                    watched = watch_delay(cluster.client_urls, 1.0, cluster.client_tls)
                    got = samples[side]
                    got["txn_p50_ms"].append(result.percentile_ms(0.5))
                    got["txn_p99_ms"].append(result.percentile_ms(0.99))
                    got["watch_p50_ms"].append(watched.percentile_ms(0.5))
                    got["client_cpu_us"].append(1e6 * (cpu1 - cpu0) / ops_per_round)
                    got["etcd_cpu_us"].append(1e6 * (etcd1 - etcd0) / ops_per_round)
        finally:
            for cluster in clusters.values():
                cluster.stop()
    return {side: {k: round(statistics.median(v), 3) for k, v in got.items()} for side, got in samples.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=1, choices=(1, 3, 5))
    parser.add_argument("--seconds", type=float, default=5.0, help="per case")
    parser.add_argument("--clients", type=int, default=1, help="concurrent clients (threads)")
    parser.add_argument("--endpoints", help="comma-separated client URLs of a running etcd")
    parser.add_argument("--unsafe-no-fsync", action="store_true", help="start etcd without fsync")
    parser.add_argument("--plain", action="store_true", help="start etcd on plain http, without TLS")
    parser.add_argument("--compare-tls", action="store_true", help="TLS and plain side by side, interleaved")
    parser.add_argument("--rounds", type=int, default=10, help="with --compare-tls: rounds per side")
    parser.add_argument("--ops", type=int, default=200, help="with --compare-tls: sequential txns per round")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)

    def report(results: list[Result], where: str) -> None:
        if args.json:
            print(json.dumps({
                "where": where, "clients": args.clients, "seconds": args.seconds,
                **{r.name: {"ops_per_s": round(r.per_second, 1), "p50_ms": round(r.percentile_ms(0.5), 3),
                            "p99_ms": round(r.percentile_ms(0.99), 3), "ops": r.operations} for r in results},
            }))  # fmt: skip
            return
        print(f"etcd: {where}; clients: {args.clients}; {args.seconds:g} s per case")
        for r in results:
            print(r.line())

    if args.compare_tls:
        medians = compare_tls(args.rounds, args.ops, args.unsafe_no_fsync)
        if args.json:
            print(json.dumps(medians))
            return
        print(f"TLS against plain http, 1-member etcd, {args.rounds} rounds of {args.ops} sequential txns each"
              + (", no fsync" if args.unsafe_no_fsync else "") + "; medians of the rounds")  # fmt: skip
        for side, m in medians.items():
            print(f"{side:<5} txn p50 {m['txn_p50_ms']:6.2f} ms  p99 {m['txn_p99_ms']:6.2f} ms  "
                  f"watch p50 {m['watch_p50_ms']:5.2f} ms  CPU per txn: client {m['client_cpu_us']:5.0f} us, "
                  f"etcd {m['etcd_cpu_us']:5.0f} us")  # fmt: skip
        return
    if args.endpoints:
        report(bench(args.endpoints.split(","), args.seconds, args.clients), args.endpoints)
        return
    with tempfile.TemporaryDirectory(prefix="minborg-bench-") as state_dir:
        cluster = EtcdCluster(
            state_dir, members=args.members, unsafe_no_fsync=args.unsafe_no_fsync, tls=not args.plain
        )
        with cluster.start():
            where = f"local cluster of {args.members} member(s), " + ("plain http" if args.plain else "TLS")
            where += ", no fsync" if args.unsafe_no_fsync else ""
            tls = cluster.client_tls
            results = bench(cluster.client_urls, args.seconds, args.clients, tls)
            report([*results, watch_delay(cluster.client_urls, args.seconds, tls)], where)


if __name__ == "__main__":
    main()
