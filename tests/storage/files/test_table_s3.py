"""The table on an object store (moto in server mode, testkit/s3.py): two storages with separate directories, as
gateways on separate hosts, share one table; a store that ignores conditional writes is refused; removing files
while the other writes and both read loses no read; a store that fails leaves writes in the WAL and reads of the
head and of the files already here working, and everything catches up when it returns."""

from __future__ import annotations

import itertools
import threading

import pytest

from metricsgw.limits.context import QueryContext
from metricsgw.model import Matcher
from metricsgw.storage.files import object_store, table as table_module
from metricsgw.storage.files.object_store import ObjectStore, S3Settings, StoreRefused, StoreUnavailable
from metricsgw.storage.store import Storage
from metricsgw.storage.upkeep.compact import compact_partitions
from testkit.s3 import ACCESS_KEY, SECRET_KEY, MotoServer, StoreProxy
from tests.storage.test_storage import NOW, batch, read_all, run

_buckets = itertools.count()


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    server = MotoServer(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)  # the AWS credential chain's environment variables
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)


def _bucket(moto) -> str:
    return moto.bucket(f"table-{next(_buckets)}")


def _storage(path, endpoint: str, bucket: str, writer: str, cache_bytes: int = 0, **kw) -> Storage:
    store = ObjectStore(S3Settings(f"s3://{bucket}/metrics", endpoint, "us-east-1", True, cache_bytes=cache_bytes))
    st = Storage(str(path), writer_id=writer, table_store=store, **kw)
    st.open()
    return st


def _keys(moto, bucket: str, under: str = "metrics/table/samples/hour=") -> list[str]:
    pages = moto.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=under)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", ()))


def test_two_storages_on_separate_directories_share_one_table(moto, keys, tmp_path):
    bucket = _bucket(moto)
    a = _storage(tmp_path / "a", moto.endpoint, bucket, "gwa")
    b = _storage(tmp_path / "b", moto.endpoint, bucket, "gwb")
    run(a.append(batch([0, 1], [NOW, NOW], [1.0, 2.0])))
    run(b.append(batch([2], [NOW + 1000], [3.0])))
    a.flush()
    b.flush()
    a.follow()
    b.follow()  # gwa's series join gwb's catalog (its samples joined at gwb's commit, which came after gwa's)
    want = [("0", 0, 1.0), ("1", 0, 2.0), ("2", 1000, 3.0)]
    assert sorted(read_all(a)) == sorted(read_all(b)) == want
    assert len(list((tmp_path / "a" / "table").rglob("part-gwb-*.parquet"))) == 1  # a copy of b's file, read here
    # only flushed Parquet and the Delta logs are in the store; the WAL stays on each directory
    assert not any("/wal/" in k for k in _keys(moto, bucket, "metrics/"))
    assert [k.rsplit("/", 1)[1][:8] for k in _keys(moto, bucket)] == ["part-gwa", "part-gwb"]

    # a merge by one, while the other reads: the other follows it, and the merged files leave the store
    run(a.append(batch([0], [NOW + 2000], [5.0])))
    a.flush()
    assert compact_partitions(a) == 1
    b.follow()
    assert sorted(read_all(b)) == sorted(read_all(a)) == sorted(want + [("0", 2000, 5.0)])
    assert a.table.collect() == 2  # its two merged files, from the store and from its directory
    assert b.table.collect() == 1  # its copy of gwa's first file (the second was merged before gwb fetched it)
    assert len(_keys(moto, bucket)) == 2  # a's merged file and b's
    for st in (a, b):
        st.close()

    # a third directory, empty (a new host), reads everything from the store; a restarted writer carries on
    c = _storage(tmp_path / "c", moto.endpoint, bucket, "gwc")
    a = _storage(tmp_path / "a", moto.endpoint, bucket, "gwa")
    assert sorted(read_all(c)) == sorted(read_all(a)) == sorted(want + [("0", 2000, 5.0)])
    for st in (a, c):
        st.close()


def test_a_store_that_ignores_conditional_writes_is_refused(moto, keys, tmp_path):
    bucket = _bucket(moto)
    proxy = StoreProxy(moto.endpoint, drop_conditional=True)
    try:
        store = ObjectStore(S3Settings(f"s3://{bucket}/metrics", proxy.endpoint, "us-east-1", True))
        with pytest.raises(StoreRefused, match="ignores conditional writes") as err:
            store.check_conditional_writes()
        assert SECRET_KEY not in str(err.value) and ACCESS_KEY not in str(err.value)
        st = Storage(str(tmp_path), writer_id="gw0", table_store=store)
        with pytest.raises(StoreRefused):
            st.table.open()  # the table proves it as it opens, whoever built it
        assert _keys(moto, bucket, "metrics/table/") == []  # nothing was written to the table
        # the same store without the proxy's meddling passes
        ObjectStore(S3Settings(f"s3://{bucket}/metrics", moto.endpoint, "us-east-1", True)).check_conditional_writes()
    finally:
        proxy.close()


def test_removing_files_while_the_other_writes_and_both_read_fails_no_read(moto, keys, tmp_path):
    """gwb merges and deletes its removed files at once (no vacuum delay) while gwa appends and flushes and a
    reader on each side queries without pause: every read answers, never fewer samples than before it."""
    bucket = _bucket(moto)
    a = _storage(tmp_path / "a", moto.endpoint, bucket, "gwa")
    b = _storage(tmp_path / "b", moto.endpoint, bucket, "gwb", vacuum_delay_s=0.0)
    rounds = 12
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader(st: Storage) -> None:
        seen = 0
        while not stop.is_set():
            try:
                n = len(read_all(st))
                assert n >= seen, (n, seen)
                seen = n
            except BaseException as err:  # noqa: BLE001 - reported by the test below
                errors.append(err)
                return

    def writer_a() -> None:
        for r in range(rounds):
            run(a.append(batch([100 + r], [NOW + r * 1000], [float(r)])))
            a.flush()
            a.follow()  # a file gwb deletes as gwa fetches it: gwa reads the newer log, which drops it

    readers = [threading.Thread(target=reader, args=(st,)) for st in (a, b)]
    wa = threading.Thread(target=writer_a)
    for t in (*readers, wa):
        t.start()
    for r in range(rounds):
        run(b.append(batch([200 + r], [NOW + r * 1000], [float(r)])))
        b.flush()
        compact_partitions(b)
        b.follow()
        b.table.collect()
    wa.join()
    stop.set()
    for t in readers:
        t.join()
    assert not errors, errors
    a.follow()
    b.follow()
    assert len(read_all(a)) == len(read_all(b)) == 2 * rounds
    b.table.collect()
    # every file the store holds is listed by the table: nothing gwa reads was deleted, nothing removed was kept
    listed = {f.path.split("/table/", 1)[1] for f in a.table.current.samples}
    assert {k.split("/", 1)[1].split("table/", 1)[1] for k in _keys(moto, bucket)} == listed
    for st in (a, b):
        st.close()


def test_a_failing_store_keeps_writes_in_the_wal_and_catches_up(moto, keys, tmp_path):
    bucket = _bucket(moto)
    proxy = StoreProxy(moto.endpoint)
    try:
        a = _storage(tmp_path / "a", proxy.endpoint, bucket, "gwa")
        b = _storage(tmp_path / "b", moto.endpoint, bucket, "gwb")
        run(a.append(batch([0], [NOW], [1.0])))
        a.flush()
        b.follow()
        for fault in ("5xx", "unreachable"):
            if fault == "5xx":
                proxy.fail(503)
            else:
                proxy.fail(None)
                proxy.down()
            run(a.append(batch([1], [NOW + 1000], [2.0])))  # the WAL takes it
            with pytest.raises(StoreUnavailable) as err:
                a.flush()
            assert err.value.status == 503
            msg = str(err.value)
            assert "object store at s3://" in msg and SECRET_KEY not in msg and "Error" not in msg, msg
            with pytest.raises(StoreUnavailable):
                a.follow()
            # the head and the files already here still answer
            assert sorted(read_all(a)) == [("0", 0, 1.0), ("1", 1000, 2.0)]
            if fault == "unreachable":
                proxy.up()
            else:
                proxy.fail(None)
            a.flush()
            b.follow()
            assert sorted(read_all(b)) == [("0", 0, 1.0), ("1", 1000, 2.0)]
        a.close()
        # restarted (its WAL replayed): nothing lost, nothing doubled
        a = _storage(tmp_path / "a", proxy.endpoint, bucket, "gwa")
        assert sorted(read_all(a)) == [("0", 0, 1.0), ("1", 1000, 2.0)]
        for st in (a, b):
            st.close()
    finally:
        proxy.close()


def test_retention_deletes_from_the_store_and_every_copy(moto, keys, tmp_path):
    bucket = _bucket(moto)
    now = [NOW / 1000]
    a = _storage(tmp_path / "a", moto.endpoint, bucket, "gwa", retention_ms=3600_000, clock=lambda: now[0])
    b = _storage(tmp_path / "b", moto.endpoint, bucket, "gwb")
    run(a.append(batch([0], [NOW], [1.0])))
    a.flush()
    b.follow()
    assert read_all(b) == [("0", 0, 1.0)]
    assert len(_keys(moto, bucket)) == 1 and list((tmp_path / "b" / "table").rglob("part-gwa-*.parquet"))
    now[0] += 3 * 3600  # past the retention and the partition's end
    a.maintenance.apply_retention()
    a.table.collect()  # the partition's file (and the side files the series' purge rewrote)
    assert _keys(moto, bucket) == []
    b.follow()
    b.table.collect()  # its copies of them
    assert not list((tmp_path / "b" / "table").rglob("part-gwa-*.parquet"))
    assert read_all(b) == []
    for st in (a, b):
        st.close()


def test_with_a_budget_other_writers_files_are_fetched_when_read_pruned_by_time_and_dropped(moto, keys, tmp_path):
    bucket = _bucket(moto)
    a = _storage(tmp_path / "a", moto.endpoint, bucket, "gwa")
    hours = [0, 5 * 3600_000]  # two partitions: two files far apart in time
    for h in hours:
        run(a.append(batch([0], [NOW + h], [float(h)])))
        a.flush()
    b = _storage(tmp_path / "b", moto.endpoint, bucket, "gwb", cache_bytes=1)  # room for nothing between reads
    copies = b.table.copies
    assert copies.fetched == 0 and not list((tmp_path / "b" / "table").rglob("part-gwa-*"))  # none at open
    ids = b.select_series([Matcher("i", "=", "0")], None, None, QueryContext()).ids
    got = b.read_samples(ids, NOW - 1000, NOW + 1000, QueryContext())  # the first hour only
    assert got.t.tolist() == [NOW] and copies.fetched == 1  # the other file's min/max of t kept it in the store
    assert copies.bytes == 0 and not list((tmp_path / "b").rglob("part-gwa-*"))  # over the budget once read
    assert sorted(read_all(b)) == [("0", 0, 0.0), ("0", hours[1], float(hours[1]))]
    assert copies.fetched == 2  # the later hour's file; the first hour's samples are in the sample cache now

    b.close()
    b = _storage(tmp_path / "b", moto.endpoint, bucket, "gwb", cache_bytes=1 << 30)  # room for all
    assert sorted(read_all(b)) == sorted(read_all(b)) == [("0", 0, 0.0), ("0", hours[1], float(hours[1]))]
    assert b.table.copies.fetched == 2 and b.table.copies.bytes > 0  # kept: the second read fetched nothing
    # gwa merges its files into one: b's copies of them go once b follows and no read pins them
    run(a.append(batch([1], [NOW + 1000], [9.0])))
    a.flush()
    assert compact_partitions(a) == 1
    b.follow()
    assert b.table.collect() == 1 and b.table.copies.bytes > 0  # the first hour's old file; the other is still listed
    assert sorted(read_all(b)) == [("0", 0, 0.0), ("0", hours[1], float(hours[1])), ("1", 1000, 9.0)]
    assert len(list((tmp_path / "b" / "cache").rglob("part-gwa-*.parquet"))) == 2  # the merged file and hour 5's
    for st in (a, b):
        st.close()


def test_with_a_budget_a_file_the_store_cannot_give_fails_the_read_with_a_plain_503(moto, keys, tmp_path):
    bucket = _bucket(moto)
    proxy = StoreProxy(moto.endpoint)
    try:
        a = _storage(tmp_path / "a", moto.endpoint, bucket, "gwa")
        run(a.append(batch([0], [NOW], [1.0])))
        a.flush()
        b = _storage(tmp_path / "b", proxy.endpoint, bucket, "gwb", cache_bytes=1)
        proxy.down()
        with pytest.raises(StoreUnavailable) as err:
            read_all(b)
        assert err.value.status == 503 and "could not read the object store at s3://" in str(err.value)
        proxy.up()
        assert read_all(b) == [("0", 0, 1.0)]
        for st in (a, b):
            st.close()
    finally:
        proxy.close()


def test_one_writer_id_is_one_gateway(moto, keys, tmp_path, monkeypatch):
    bucket = _bucket(moto)
    a = _storage(tmp_path / "a", moto.endpoint, bucket, "gw0")
    with pytest.raises(StoreRefused, match="writer-id=gw0 is in use by another gateway"):
        _storage(tmp_path / "b", moto.endpoint, bucket, "gw0")  # another host (directory), the same writer id
    a.close()
    b = _storage(tmp_path / "b2", moto.endpoint, bucket, "gw0")  # a clean stop released it
    # a gateway cut off from the store past the claim's life loses it to one started meanwhile, and commits no more
    monkeypatch.setattr(object_store, "CLAIM_STALE_S", 0)
    monkeypatch.setattr(table_module, "CLAIM_STALE_S", 0)
    c = _storage(tmp_path / "c", moto.endpoint, bucket, "gw0")
    run(b.append(batch([0], [NOW], [1.0])))
    b.table.collect()  # the flusher's loop: renewing finds the claim taken
    with pytest.raises(OSError, match="taken by another gateway"):
        b.flush()
    b.close(flush=False)
    c.close()


def test_keys_from_a_credentials_file_and_never_in_a_message(moto, tmp_path, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))  # not the machine's ~/.aws
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    bucket = _bucket(moto)
    settings = S3Settings(f"s3://{bucket}/metrics", moto.endpoint, "us-east-1", True, str(creds))
    store = ObjectStore(settings)
    store.check_conditional_writes()
    st = Storage(str(tmp_path / "a"), writer_id="gw0", table_store=store)
    st.open()  # delta-rs got the file's keys too
    run(st.append(batch([0], [NOW], [1.0])))
    st.flush()
    assert len(_keys(moto, bucket)) == 1
    assert SECRET_KEY not in repr(store) and SECRET_KEY not in repr(settings)
    assert "<secret>" in store.plain("read", OSError(f"denied for {SECRET_KEY}")).args[0]
    st.close()
