"""The Borgmaster replica: election, watch cache, single fenced writer, scheduler loop, borglet poller, HTTP API v1.

Modules, each with one job:

- `codec`: the etcd key layout and the JSON records of machines, jobs and tasks (schema 1).
- `cell`: the cell as the master sees it (spec CellState plus runtime facts) and `Draft`, which
  applies spec actions and records task history.
- `cache`: the watch cache every replica keeps of the whole cell.
- `writer`: the leader's one writer: diffs a Draft and commits it in fenced, batched txns.
- `reports`: pure mapping of a borglet's sync reply to spec steps and runtime facts.
- `poller`: sends each borglet its desired set and feeds replies to `reports`.
- `leader`: election, the scheduler loop, restarts and rolling updates.
- `views`: the API's JSON for jobs, tasks and machines; BNS names.
- `api`: the FastAPI app of docs/api.md; `forward`: writes sent on to the leader.
- `metrics`: the Prometheus registry; `replica`: wires one replica together; `cli`: `main(argv)`.
"""
