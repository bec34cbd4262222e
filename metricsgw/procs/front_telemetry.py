"""The front's own figures in its /metrics (exposition.py adds every child's): apart from front.py so the
supervisor has them before the front's web part is imported (serve.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from ..telemetry import QUERY_LOG_DROPPED_HELP


class FrontTelemetry:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.child_up = Gauge("metricsgw_front_child_up", "1 while the child process runs.", ["child"], registry=r)
        self.child_restarts = Counter("metricsgw_front_child_restarts", "Child processes restarted after they "
                                      "ended on their own (crash, kill).", ["child"], registry=r)
        self.write_requests = Counter("metricsgw_front_write_requests", "Remote-write requests answered by the "
                                      "front, by status code.", ["code"], registry=r)
        self.shard_forwards = Counter("metricsgw_front_shard_writes", "Parts of remote-write requests sent to an "
                                      "ingest shard, by its answer.", ["child", "code"], registry=r)
        self.proxied = Counter("metricsgw_front_proxied_requests", "Requests passed to a query process, by "
                               "status code.", ["child", "code"], registry=r)
        self.query_log_dropped = Counter("metricsgw_query_log_dropped_lines", QUERY_LOG_DROPPED_HELP, ["reason"],
                                         registry=r)  # the children's figure has the same name and help
        self.handed_off = Counter("metricsgw_front_handed_off_connections", "Client connections passed to a query "
                                  "process at a query, or to the one ingest shard at a remote write (it serves them "
                                  "from then on: handoff.py).", ["child"], registry=r)
