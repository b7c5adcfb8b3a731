"""The cell's Paxos store and Chubby-style lock: a local etcd cluster, a client, an election.

- `etcd_cluster.EtcdCluster` starts, stops and breaks 1, 3 or 5 etcd members on loopback.
- `client.StoreClient` reads, writes, leases and watches keys, failing over across members.
- `ops` builds transaction compares and ops and parses what the gateway answers.
- `watch.PrefixWatch` follows a prefix from a revision across member failures.
- `election.Election` elects one leader with a leased key and fences its writes.
"""
