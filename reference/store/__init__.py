"""The cell's Paxos store and Chubby-style lock: a local etcd cluster, a client, an election.

- `etcd_cluster.EtcdCluster` starts and stops 1, 3 or 5 etcd members on loopback.
- `client.StoreClient` reads, writes, watches and leases through etcd's JSON gateway.
- `election.Election` elects one leader with a leased key and fences its writes.
"""
