"""/-/ready's reason while a storage opens, apart from store.py: the front of a multi-process gateway waits for a
child past it (procs/readiness.py) and starts before it imports the storage."""

REPLAYING = "replaying the WAL"
