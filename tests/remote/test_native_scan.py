"""The compiled check of native histograms (native_scan.py): it takes a histogram only where the protobuf parser
and ``histogram_problem`` would take it too, with the same timestamp, and it takes the usual integer histograms
(else it would be useless). Checked on valid histograms of every shape, on each way of being wrong, and on
random byte damage."""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError

from metricsgw.errors import BadData
from metricsgw.remote import native, native_scan
from metricsgw.remote.proto import remote_v1_pb2 as v1pb


@pytest.fixture(scope="module", autouse=True)
def kernel():
    assert native_scan.load(), "the compiled check must load where the tests run"


def _hist(**kw) -> v1pb.Histogram:
    h = v1pb.Histogram(schema=kw.pop("schema", 3), zero_threshold=1e-128, timestamp=kw.pop("t", 1_760_000_000_123),
                       sum=kw.pop("sum", 1.5))
    for side in ("positive", "negative"):
        for off, n in kw.pop(f"{side}_spans", ()):
            getattr(h, f"{side}_spans").add(offset=off, length=n)
        getattr(h, f"{side}_deltas").extend(kw.pop(f"{side}_deltas", ()))
        getattr(h, f"{side}_counts").extend(kw.pop(f"{side}_counts", ()))
    h.custom_values.extend(kw.pop("custom_values", ()))
    for k, v in kw.items():
        setattr(h, k, v)
    return h


VALID = [
    _hist(count_int=0),
    _hist(count_int=10, zero_count_int=4, positive_spans=[(-5, 2), (3, 1)], positive_deltas=[1, 1, -1]),
    _hist(count_int=12, positive_spans=[(0, 2)], positive_deltas=[2, 1], negative_spans=[(1, 1)],
          negative_deltas=[7], reset_hint=2),
    _hist(schema=-53, count_int=6, positive_spans=[(0, 3)], positive_deltas=[1, 1, 0], custom_values=[1.0, 5.0]),
    _hist(schema=-4, count_int=1, positive_spans=[(0, 1)], positive_deltas=[1], t=-5),
    _hist(schema=8, count_int=2**40, positive_spans=[(0, 1)], positive_deltas=[2**40]),
]
REFUSED = [
    _hist(count_int=1, positive_spans=[(0, 2)], positive_deltas=[1]),  # spans need 2 buckets
    _hist(count_int=5, positive_spans=[(0, 1), (-1, 1)], positive_deltas=[1, 1]),  # negative offset
    _hist(count_int=5, positive_spans=[(0, 2)], positive_deltas=[2, -3]),  # a negative count
    _hist(count_int=2, positive_spans=[(0, 2)], positive_deltas=[2, 1]),  # more in buckets than count
    _hist(schema=9, count_int=0),
    _hist(schema=-53, count_int=3, zero_count_int=3),
    _hist(schema=-53, count_int=1, negative_spans=[(0, 1)], negative_deltas=[1]),
]
FLOAT = [_hist(count_float=3.0, positive_spans=[(0, 1)], positive_counts=[3.0]),
         _hist(count_float=1.0, positive_spans=[(0, 1)], positive_counts=[-1.0])]


def _parsed(raw: bytes):
    """What the parser and histogram_problem say: (taken, timestamp), or None when it is no message."""
    try:
        h = v1pb.Histogram.FromString(raw)
    except DecodeError:
        return None
    return native.histogram_problem(h) is None, h.timestamp


def _check_agrees(raws: list[bytes]) -> list[bool]:
    taken, t = native_scan.check(raws)
    for raw, ok, stamp in zip(raws, taken.tolist(), t.tolist()):
        if ok:
            assert _parsed(raw) == (True, stamp), raw
    return taken.tolist()


def test_the_usual_integer_histograms_are_taken_with_their_timestamps():
    assert _check_agrees([h.SerializeToString() for h in VALID]) == [True] * len(VALID)


def test_a_histogram_prometheus_refuses_is_left_to_the_parser_which_words_why():
    assert _check_agrees([h.SerializeToString() for h in REFUSED + FLOAT]) == [False] * (len(REFUSED) + len(FLOAT))
    assert all(native.histogram_problem(h) is not None for h in REFUSED)


def test_damaged_bytes_are_never_taken_where_the_parser_would_not_take_them():
    rng = random.Random(7)
    raws = []
    for _ in range(3000):
        b = bytearray(rng.choice(VALID + REFUSED).SerializeToString())
        for _ in range(rng.randint(1, 3)):
            op = rng.random()
            if op < 0.5 and b:
                b[rng.randrange(len(b))] = rng.randrange(256)
            elif op < 0.75 and b:
                at = rng.randrange(len(b))
                del b[at:at + rng.randint(1, 4)]
            else:
                b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
        raws.append(bytes(b))
    taken = _check_agrees(raws)
    assert 0 < sum(taken) < len(raws)  # the damage sometimes leaves a valid histogram, mostly not


def test_a_request_mixing_taken_parsed_and_refused_histograms_keeps_each_series_order():
    per_series = [[VALID[1].SerializeToString(), FLOAT[0].SerializeToString()],
                  [REFUSED[0].SerializeToString(), VALID[2].SerializeToString()], []]
    parts = native.collect(per_series, [[], [], []], native.v1_exemplar)
    assert parts.hist_counts.tolist() == [2, 1, 0]
    assert parts.hist_blobs == [per_series[0][0], per_series[0][1], per_series[1][1]]
    assert parts.hist_t.tolist() == [VALID[1].timestamp, FLOAT[0].timestamp, VALID[2].timestamp]
    assert parts.invalid[1][0] == 1 and "spans need 2 buckets" in parts.invalid[1][1]
    with pytest.raises(BadData, match="series #1: cannot decode"):
        native.collect([[], [b"\xff\xff"]], [[], []], native.v1_exemplar)
