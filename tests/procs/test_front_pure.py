"""The front's pure parts: the combined remote-write answer, the merged /metrics, the children's settings, the
words of a child that cannot answer."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from metricsgw.config import SHARD_SOCKETS
from metricsgw.config import load
from metricsgw.procs.clients import ChildClient
from metricsgw.procs.distributor import PartAnswer, combine
from metricsgw.procs.exposition import merge
from metricsgw.procs.layout import Child, Layout, child_config, resolve
from metricsgw.procs.unavailable import refusal, why
from metricsgw.remote.written import H_SAMPLES


def _a(shard: str, status: int, text: str = "", **headers) -> PartAnswer:
    return PartAnswer(status, f"{shard}: {text}", {k.replace("_", "-"): v for k, v in headers.items()})


def test_204_only_when_every_part_is_stored():
    assert combine([_a("shard-0", 204), _a("shard-1", 204)], 1) == (204, "", {})


@pytest.mark.parametrize("statuses, want", [
    ([204, 503], 503),  # one shard could not store: the sender must retry
    ([400, 503], 503),  # a retry beats a refusal: the refused series are refused again, the rest is stored
    ([204, 429], 429),
    ([429, 500], 500),
    ([500, 503], 503),  # mixed server errors: 503
    ([204, 400], 400),  # refused on purpose (invalid data, limits): no retry, the rest was stored
    ([413, 400], 400),
])
def test_the_status_keeps_prometheus_retry_semantics(statuses, want):
    status, message, _ = combine([_a(f"shard-{i}", s, f"why {i}") for i, s in enumerate(statuses)], 1)
    assert status == want
    for i, s in enumerate(statuses):
        assert (f"shard-{i}: why {i}" in message) == (s != 204)


def test_retry_after_is_the_longest_asked_for():
    _, _, headers = combine([_a("shard-0", 503, Retry_After="1"), _a("shard-1", 503, Retry_After="5")], 1)
    assert headers["Retry-After"] == "5"


def test_remote_write_2_written_counts_are_summed_over_the_parts():
    answers = [_a("shard-0", 204, **{H_SAMPLES.replace("-", "_"): "120"}),
               _a("shard-1", 400, "bad labels", **{H_SAMPLES.replace("-", "_"): "30"})]
    status, _, headers = combine(answers, 2)
    assert status == 400 and headers[H_SAMPLES] == "150"
    assert H_SAMPLES not in combine(answers, 1)[2]


CHILD = """# HELP metricsgw_ingested_samples_total Samples stored.
# TYPE metricsgw_ingested_samples_total counter
metricsgw_ingested_samples_total 100.0
# HELP metricsgw_discarded_samples_total Samples not stored, by reason.
# TYPE metricsgw_discarded_samples_total counter
metricsgw_discarded_samples_total{reason="too_old"} 3.0
# HELP metricsgw_query_duration_seconds Query durations.
# TYPE metricsgw_query_duration_seconds histogram
metricsgw_query_duration_seconds_bucket{le="0.1"} 1.0
metricsgw_query_duration_seconds_bucket{le="+Inf"} 2.0
metricsgw_query_duration_seconds_count 2.0
metricsgw_query_duration_seconds_sum 0.5
"""


def test_metrics_of_every_process_in_one_valid_exposition_labelled_by_process():
    text = merge([("front", "# HELP metricsgw_front_child_up Up.\n# TYPE metricsgw_front_child_up gauge\n"
                            'metricsgw_front_child_up{child="shard-0"} 1.0\n'),
                  ("shard-0", CHILD), ("shard-1", CHILD.replace("100.0", "50.0"))])
    families = {f.name: f for f in text_string_to_metric_families(text)}  # the official parser accepts it
    ingested = {s.labels["process"]: s.value for s in families["metricsgw_ingested_samples"].samples}
    assert ingested == {"shard-0": 100.0, "shard-1": 50.0}
    assert {(s.labels["process"], s.labels["reason"]) for s in families["metricsgw_discarded_samples"].samples} == {
        ("shard-0", "too_old"), ("shard-1", "too_old")}
    hist = families["metricsgw_query_duration_seconds"]
    assert hist.type == "histogram" and len(hist.samples) == 8
    assert text.count("# TYPE metricsgw_ingested_samples_total") == 1
    up = families["metricsgw_front_child_up"].samples
    assert [s.labels for s in up] == [{"process": "front", "child": "shard-0"}]


def test_budgets_per_gateway_are_split_and_the_front_keeps_authentication():
    cfg = load({"ingest.max-series": "1000", "ingest.max-series-per-metric": "99", "query.max-memory": "1GiB",
                "query.max-concurrency": "5", "query.max-queue": "20", "web.enable-lifecycle": "false"})
    layout = Layout(shards=3, queriers=2, run_dir="/run/x")
    shard = child_config(cfg, Child("shard", 1, "/run/x/shard-1.sock"), layout)
    assert (shard.ingest_max_series, shard.ingest_max_series_per_metric) == (334, 33)
    assert shard.storage_path == cfg.storage_path and shard.storage_writer_id == "gw0-s1"  # one table, own writer
    assert shard.query_max_memory == cfg.query_max_memory
    alone = child_config(cfg, Child("shard", 0, "s"), Layout(shards=1, queriers=1, run_dir="/run/x"))
    assert alone.storage_writer_id == "gw0"  # one shard is the one-process gateway's writer: same WAL, same series
    querier = child_config(cfg, Child("querier", 0, "/run/x/querier-0.sock"), layout)
    assert (querier.query_max_memory, querier.query_max_concurrency, querier.query_max_queue) == (
        512 * 1024**2, 2, 10)
    assert querier.ingest_max_series == 1000
    for child in (shard, querier):  # the socket is private; the front authenticates and gates /-/reload
        assert child.web_config_file == "" and child.web_enable_lifecycle and child.server_single_process
    assert child_config(load({}), Child("shard", 0, "s"), layout).ingest_max_series == 0  # no limit stays none


def test_the_default_is_a_shard_per_2_cores_and_a_query_process_per_4_at_least_one_of_each(tmp_path):
    for cpus, counts in ((1, (1, 1)), (2, (1, 1)), (3, (1, 1)), (4, (2, 1)), (8, (4, 2)), (16, (8, 4))):
        layout = resolve(load({"storage.path": str(tmp_path)}), cpus=cpus)
        assert (layout.shards, layout.queriers) == counts, cpus
        assert [c.name for c in layout.query_targets] == [f"querier-{j}" for j in range(counts[1])]  # never a shard
    asked = resolve(load({"storage.path": str(tmp_path), "ingest.shards": "3", "query.processes": "2"}), cpus=2)
    assert (asked.shards, asked.queriers) == (3, 2)
    assert asked.run_dir == str(tmp_path / "run" / "gw0")  # its writer id's: gateways may share the path
    assert {oct((tmp_path / d).stat().st_mode & 0o777) for d in ("run", "run/gw0")} == {"0o700"}


def test_a_querier_follows_every_writer_and_reads_its_shards_and_the_other_gateways():
    cfg = load({"cluster.peers": ["http://gw2:9201"], "storage.writer-id": "gwA"})
    layout = Layout(shards=2, queriers=2, run_dir="/run/x")
    querier = child_config(cfg, Child("querier", 1, "/run/x/querier-1.sock"), layout)
    assert querier.query_processes_niceness == 10  # the child lowers its own priority by it (procs/child.py)
    assert querier.storage_writer_id == "gwA-q1"
    assert querier.cluster_peers == ["http://gw2:9201"]  # other gateways: partial answers may leave them out
    assert querier.values[SHARD_SOCKETS] == ["/run/x/shard-0.sock", "/run/x/shard-1.sock"]  # never left out
    assert querier.storage_follow_others
    shard = child_config(cfg, Child("shard", 0, "/run/x/shard-0.sock"), layout)
    assert shard.cluster_peers == [] and not shard.storage_follow_others  # its own series only
    assert load({}).storage_follow_others  # a one-process gateway reads every writer


class _Proc:
    """The supervisor's state of a child, as unavailable.why reads it."""

    def __init__(self, started: bool, running: bool = True, restarts: int = 0, last_exit: str = "") -> None:
        self.started = asyncio.Event()
        if started:
            self.started.set()
        self.running, self.restarts, self.last_exit = running, restarts, last_exit


def _client(role: str, proc: _Proc | None) -> ChildClient:
    return ChildClient(Child(role, 1, f"/srv/metricsgw/run/gw0/{role}-1.sock"), proc)


@pytest.mark.parametrize("client, err, said, want", [
    (_client("shard", _Proc(False)), None, "", "ingest shard 1 is starting"),
    (_client("querier", _Proc(False)), ConnectionRefusedError(111, "Connection refused"), "replaying the WAL",
     "query process 1 is starting (replaying the WAL)"),
    (_client("shard", _Proc(False, running=False, restarts=1, last_exit="killed by SIGKILL")), None, "",
     "ingest shard 1 is restarting (killed by SIGKILL)"),
    (_client("shard", _Proc(True)), ConnectionRefusedError(111, "refused: /srv/metricsgw/run/gw0/shard-1.sock"), "",
     "ingest shard 1 does not accept connections"),
    (_client("querier", _Proc(True)), asyncio.TimeoutError(), "", "query process 1 does not answer in time"),
    (_client("querier", _Proc(True)), aiohttp.ServerDisconnectedError(), "", "query process 1 closed the connection"),
    (_client("shard", _Proc(True)), ValueError("Expecting value: line 1"), "",
     "ingest shard 1 gave an answer that could not be read"),
    (_client("shard", _Proc(True)), None, "the WAL cannot be written (disk full)",
     "ingest shard 1 is not ready: the WAL cannot be written (disk full)"),
    (ChildClient(Child("front", 0, "/srv/metricsgw/run/gw0/front.sock")), FileNotFoundError(2, "No such file"), "",
     "the gateway's front process does not accept connections"),
])
def test_a_child_that_cannot_answer_is_named_in_plain_words_never_by_its_socket_or_an_exception(client, err, said,
                                                                                                 want):
    assert why(client, err, said) == want


def test_a_refusal_is_prometheus_retryable_unavailable():
    err = refusal(["ingest shard 0 is starting", "query process 0 is starting"])
    assert (err.status, err.error_type, err.headers) == (503, "unavailable", {"Retry-After": "1"})
    assert str(err) == "ingest shard 0 is starting; query process 0 is starting; retry in a few seconds"
