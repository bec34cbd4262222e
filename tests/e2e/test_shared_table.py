"""Three gateways on ONE shared table (issue 10, item 5; docs/cluster.md "Three gateways").

Three gateways share one --storage.path (writer ids gw0..gw2, each with --cluster.peers of the other
two); a real Prometheus 2.42 scrapes an exporter and shards its remote_write over them with the
docs/cluster.md's hashmod entries, and writes everything to a reference gateway of its own.

The data a query meets is in both places at once, by construction rather than by timing: heads are
only flushed when a gateway stops (flush interval 24h, no size limit), and every gateway is restarted
with SIGTERM halfway through the scrapes, so what came before is in the shared table and what came
after is in the heads. Every query of tests/e2e/queries.py on any gateway then equals the reference,
without warnings.

Then gateway 2 is restarted to die by SIGKILL in its first flush, after writing its files and before
committing them (crash point flush.files), while acknowledged loads write to all three and a second
Prometheus shards over them again. Meanwhile the other two answer 503 naming it, or asked for a partial
answer, with a warning naming it, and
everything it had flushed is still answered; restarted, every acknowledged sample is there exactly
once (per series and timestamp, with its value), Prometheus's data equals the reference's series by
series, and no (sid, t) is in the table twice.
"""

from __future__ import annotations

import time

import duckdb
import pytest
from deltalake import DeltaTable

from metricsgw.storage import crashpoints
from metricsgw.storage.files.table import file_writer
from testkit.procs import Server, free_port, start_metricsgw
from tests.e2e import queries
from tests.e2e.acked import AckedLoad, assert_exactly_once
from tests.e2e.client import api
from tests.e2e.compare import compare_servers
from tests.e2e.prometheus import Exporter, start_prometheus_sender
from tests.e2e.test_cluster_prometheus import _own_series, _value, _wait, documented_remote_write

GATEWAYS = 3
# Each gateway is one process here (the processes of one gateway are tests/e2e/test_processes.py's): the crash
# point must kill the gateway, not a child its front would restart.
HEAD_ONLY = ["--server.single-process", "--storage.flush-interval=24h", "--storage.flush-max-samples=1000000000"]
SCRAPES = 4  # before the restarts, and again after them
DEAD = 2
# What Prometheus wrote (everything but the acknowledged loads of the kill test).
SCRAPED = '{__name__=~".+", __name__!="acked_test"}'
TOTAL = f"sum(count_over_time({SCRAPED}[1h]))"
# Queries reading no sample after their evaluation time (a negative offset reads ahead).
LOOKING_BACK = [q for q in queries.QUERIES if "offset -" not in q]


class SharedCluster:
    def __init__(self, work) -> None:
        self.work = work
        self.shared = work / "shared"
        self.ports = [free_port() for _ in range(GATEWAYS)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.gateways: list[Server] = [self.start(i) for i in range(GATEWAYS)]
        self.reference = start_metricsgw(work / "reference", extra=HEAD_ONLY)
        self.exporter = Exporter(nodes=2)
        self.proms: list[Server] = []

    def start(self, i: int, env=None, extra=()) -> Server:
        peers = [f"--cluster.peers={u}" for u in self.urls if u != self.urls[i]]
        return start_metricsgw(self.work / f"gw{i}", port=self.ports[i], env=env,
                               extra=[f"--storage.path={self.shared}", f"--storage.writer-id=gw{i}",
                                      *HEAD_ONLY, *peers, *extra])

    def restart(self, i: int, env=None, extra=()) -> None:
        self.gateways[i].stop()  # SIGTERM: its head is flushed to the table before it exits
        self.gateways[i] = self.start(i, env, extra)
        self.gateways[i].wait_ready(120)

    def prometheus(self) -> Server:
        """A Prometheus scraping the exporter, sharding over the gateways (docs/cluster.md) and whole to the reference."""
        shards = [{**entry, "url": gw.write_url} for entry, gw in zip(documented_remote_write(), self.gateways)]
        jobs = [{"job_name": "exporter", "static_configs": [{"targets": [self.exporter.address]}]}]
        prom = start_prometheus_sender(self.work / f"prom{len(self.proms)}", jobs, self.reference.write_url,
                                       more_remote_write=shards)
        self.proms.append(prom)
        prom.wait_ready()
        return prom

    def scrapes(self) -> float:
        return _value(self.reference.base_url, "max(count_over_time(up[1h]))") or 0

    def settle(self, prom: Server) -> None:
        """Stop ``prom`` (its queues are sent first) and wait until every gateway answers for all it sent."""
        prom.stop()
        want = _value(self.reference.base_url, TOTAL)
        for u in self.urls:
            _wait(f"{u} to answer for every sample", lambda u=u: _value(u, TOTAL) == want)

    def stop(self) -> None:
        self.exporter.close()
        for s in self.proms + self.gateways + [self.reference]:
            s.stop()


def _writers_in_table(shared) -> set[str]:
    return {file_writer(u) for u in DeltaTable(str(shared / "table" / "samples")).file_uris()}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SharedCluster(tmp_path_factory.mktemp("shared"))
    try:
        for s in c.gateways + [c.reference]:
            s.wait_ready()
        prom = c.prometheus()
        _wait(f"{SCRAPES} scrapes at the reference", lambda: c.scrapes() >= SCRAPES)
        for i in range(GATEWAYS):
            c.restart(i)  # Prometheus retries what it could not send meanwhile
        after = c.scrapes()
        _wait(f"{SCRAPES} more scrapes", lambda: c.scrapes() >= after + SCRAPES)
        c.settle(prom)
        yield c
    finally:
        c.stop()


def test_data_is_partly_in_the_table_and_partly_in_every_head(cluster):
    assert _writers_in_table(cluster.shared) == {f"gw{i}" for i in range(GATEWAYS)}
    own = [_own_series(u) for u in cluster.urls]
    assert all(own), [len(s) for s in own]  # every gateway holds recent samples in memory, too
    assert sum(len(s) for s in own) == len(set().union(*own))  # and no series is held by two


def _end(reference: str) -> float:
    _, body = api(reference, "/api/v1/query", {"query": "max(timestamp(up))", "time": time.time()})
    return float(body["data"]["result"][0]["value"][1])


def _compare(url: str, reference: str, query: str, end: float, name: str, warn: str | None = None,
             after_s: float = 30) -> list[str]:
    """``query`` at two instants and over a range covering all the data up to ``end`` (and ``after_s`` past it):
    as the reference answers it; with a warning naming ``warn`` when given (a partial answer asked for: ``warn``
    is down), without one otherwise."""
    query = query.replace("<END>", f"{end:.3f}").replace("<START>", f"{end - SCRAPES:.3f}")
    partial = {"partial_response": "true"} if warn else {}
    calls = [("/api/v1/query", {"query": query, "time": f"{end:.3f}", **partial}),
             ("/api/v1/query", {"query": query, "time": f"{end - 2.5:.3f}", **partial}),
             ("/api/v1/query_range", {"query": query, "start": f"{end - 90:.3f}", "end": f"{end + after_s:.3f}",
                                      "step": "1.3", **partial})]
    problems = []
    for path, params in calls:
        problems += compare_servers(url, reference, path, params, path.endswith("query") and queries.ordered(query),
                                    want_name="the reference", got_name=name)
    status, body = api(url, *calls[0], method="POST")
    _, ref_body = api(reference, *calls[0], method="POST")
    warnings = [w for w in body.get("warnings", []) if w not in ref_body.get("warnings", [])]  # PromQL's own are equal
    if status == 200 and warn is None and warnings:
        problems.append(f"{query}: warnings with every peer up: {warnings}")
    if status == 200 and warn is not None and not (len(warnings) == 1 and warn in warnings[0]):
        problems.append(f"{query}: want one warning naming {warn}, got {warnings}")
    return problems


@pytest.mark.parametrize("k", range(len(queries.QUERIES)), ids=queries.QUERIES)
def test_query_on_any_gateway_equals_the_reference(cluster, k):
    g = k % GATEWAYS
    problems = _compare(cluster.urls[g], cluster.reference.base_url, queries.QUERIES[k],
                        _end(cluster.reference.base_url), f"gateway {g}")
    assert not problems, "\n".join(problems[:6])


def _acked_of(url: str, load: AckedLoad, partial: bool = False) -> int:
    """How many of the load's first and last series the gateway answers for (``partial``: without a dead peer)."""
    lo, hi = load.first_series, load.first_series + load.series - 1
    status, body = api(url, "/api/v1/query", {"query": f'last_over_time(acked_test{{s=~"{lo}|{hi}"}}[1h])',
                                              "time": time.time(), **({"partial_response": "true"} if partial else {})})
    assert status == 200, body
    return len(body["data"]["result"])


def test_kill_9_mid_flush_answers_partially_meanwhile_and_every_acked_sample_once_after(cluster):
    c = cluster
    end = _end(c.reference.base_url)
    # Gateway 2 flushes once its head holds 3000 samples, and its first flush dies before its commit.
    c.restart(DEAD, env={crashpoints.ENV: "flush.files:1"}, extra=["--storage.flush-max-samples=3000"])
    now_ms = int(time.time()) * 1000
    loads = [AckedLoad(u, now_ms - 1800_000, writers=2, series=30, first_series=100 * i).start()
             for i, u in enumerate(c.urls)]
    prom = None
    try:
        prom = c.prometheus()
        assert c.gateways[DEAD].proc.wait(timeout=180) == -9, c.gateways[DEAD].log_tail()
        killed_at = len(loads[DEAD].acked)
        assert killed_at, "gateway 2 acknowledged nothing before its flush"
        # Meanwhile: a warning naming it; what it flushed at its restart above is still answered (from the table)
        # and the samples it acknowledged since are in its WAL only: not answered.
        for live in range(GATEWAYS - 1):
            for query in [f"count_over_time({SCRAPED}[1h])", TOTAL] + LOOKING_BACK[:12]:
                # up to ``end`` only: samples the second Prometheus is sending come after it
                problems = _compare(c.urls[live], c.reference.base_url, query, end, f"gateway {live}",
                                    warn=c.urls[DEAD], after_s=0)
                assert not problems, "\n".join(problems[:6])
            assert _acked_of(c.urls[live], loads[DEAD], partial=True) == 0
            assert _acked_of(c.urls[live], loads[1 - live], partial=True) == 2  # the other live one's are answered
            status, body = api(c.urls[live], "/api/v1/query", {"query": TOTAL, "time": f"{end:.3f}"})
            assert (status, body.get("errorType")) == (503, "unavailable") and c.urls[DEAD] in body["error"], body
        c.gateways[DEAD] = c.start(DEAD, extra=["--storage.flush-max-samples=3000"])  # no crash point now
        c.gateways[DEAD].wait_ready(120)  # its WAL replayed: the samples of the flush that died are back
        loads[DEAD].wait(lambda: len(loads[DEAD].acked) > killed_at + 30 * 100, "gateway 2 acknowledging again",
                         timeout_s=120)
        c.settle(prom)  # Prometheus resent what gateway 2 did not acknowledge
    finally:
        for load in loads:
            load.stop()
    assert [set(x.statuses) - {204} <= ({"conn", 503} if i == DEAD else set()) for i, x in enumerate(loads)] \
        == [True] * GATEWAYS, [dict(x.statuses) for x in loads]
    for i, load in enumerate(loads):
        for g in (i, (i + 1) % GATEWAYS):  # the gateway that acknowledged them, and one that asks it
            assert assert_exactly_once(c.urls[g], load) == len(load.acked)
    end = _end(c.reference.base_url)
    for g in range(GATEWAYS):
        problems = _compare(c.urls[g], c.reference.base_url, f"count_over_time({SCRAPED}[1h])", end, f"gateway {g}")
        problems += _compare(c.urls[g], c.reference.base_url, f"sum_over_time({SCRAPED}[1h])", end, f"gateway {g}")
        assert not problems, "\n".join(problems[:6])
    samples = DeltaTable(str(c.shared / "table" / "samples"))
    rows, distinct = duckdb.execute("SELECT count(*), count(DISTINCT (sid, t)) FROM read_parquet($f)",
                                    {"f": samples.file_uris()}).fetchone()
    assert rows == distinct, f"{rows - distinct} samples twice in the table"
