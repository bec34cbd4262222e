"""ingest/validate.py: each remote-write 1.0 label problem, with a message naming the series."""

from __future__ import annotations

import pytest

from metricsgw.ingest.validate import LabelProblem, render, validate_labels


def test_valid_labels_are_canonicalised():
    raw = [(b"job", b"api"), (b"__name__", b"http_requests_total"), (b"code", b"200"), (b"empty", b"")]
    assert validate_labels(raw) == (("__name__", "http_requests_total"), ("code", "200"), ("job", "api"))


def test_colons_and_unicode_values_are_fine():
    assert validate_labels([("__name__", "job:rate5m:sum"), ("v", "ü 🚀 \"q\"")]) == (
        ("__name__", "job:rate5m:sum"), ("v", "ü 🚀 \"q\""))


@pytest.mark.parametrize("raw, reason, message", [
    ([], "empty_labels", "series has no labels"),
    ([(b"__name__", b"x"), (b"", b"v")], "invalid_labels", 'series {="v", __name__="x"}: empty label name'),
    ([(b"__name__", b"x"), (b"1bad", b"v")], "invalid_labels",
     'series {1bad="v", __name__="x"}: invalid label name \'1bad\''),
    ([(b"__name__", b"x"), (b"a-b", b"v")], "invalid_labels", "invalid label name 'a-b'"),
    ([(b"__name__", b"x"), (b"a:b", b"v")], "invalid_labels", "invalid label name 'a:b'"),
    ([(b"__name__", b"1x"), (b"a", b"b")], "invalid_metric_name",
     'series {__name__="1x", a="b"}: invalid metric name \'1x\''),
    ([(b"__name__", b"a-b")], "invalid_metric_name", "invalid metric name 'a-b'"),
    ([(b"job", b"api")], "missing_metric_name", 'series {job="api"}: missing metric name'),
    ([(b"__name__", b""), (b"job", b"api")], "missing_metric_name", "missing metric name"),
    ([(b"__name__", b"x"), (b"a", b"1"), (b"a", b"2")], "duplicate_label_names",
     'series {__name__="x", a="1", a="2"}: duplicate label name \'a\''),
    ([(b"__name__", b"x"), (b"a", b"\xff")], "invalid_utf8", 'label {a="\ufffd"} is not valid UTF-8'),
    ([(b"__name__", b"x"), (b"\xc3", b"v")], "invalid_utf8", "is not valid UTF-8"),
])
def test_each_problem_has_a_reason_and_a_message(raw, reason, message):
    with pytest.raises(LabelProblem) as info:
        validate_labels(raw)
    assert info.value.reason == reason
    assert message in info.value.message


def test_render_escapes_like_prometheus():
    assert render([("__name__", "x"), ("a", 'say "hi"\\\n')]) == '{__name__="x", a="say \\"hi\\"\\\\\\n"}'
