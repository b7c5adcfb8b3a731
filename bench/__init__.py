"""Measurement of the system: benchmarks of the scheduler, a live cell and the store, and the reports they write.

- `scheduler`: the scheduler benchmark, trace experiments and the FGD packing experiment,
  and the report that regenerates reports/scheduler.md.
- `cell`: task start latency, failover, lost writes, API latency and master RSS of a local cell.
- `stepdown`: how often the master leader steps down when the etcd Raft leader is killed.
- `store`: put and fenced-transaction throughput through StoreClient against etcd.
- `stats`: the one percentile convention (nearest-rank) of every bench, load and chaos report.

Plots need matplotlib, the `bench` extra: `pip install -e '.[bench]'`.
"""
