"""One gateway as several processes on one machine (issue 10, docs/cluster.md): a front (the `serve` process:
listener, TLS/auth, supervisor, distributor, proxy), ingest shard processes and query processes."""
