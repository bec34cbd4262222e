"""ruler/shape.py on a vmalert 1.79 answer recorded from the real binary (the live comparison with
Prometheus is in test_rules_api.py): the JSON text itself is what Prometheus 2.42 would write."""

from __future__ import annotations

import json

import pytest

from metricsgw.ruler.shape import RulerAnswerError, go_float, groups_of

VMALERT_ANSWER = {"status": "success", "data": {"groups": [{
    "name": "e2e", "rules": [
        {"state": "", "name": "job:up:sum", "query": "sum by (job) (up)", "duration": 0, "lastError": "",
         "evaluationTime": 0.002795156, "lastEvaluation": "2026-12-01T15:22:26.785550212Z", "health": "ok",
         "type": "recording", "datasourceType": "prometheus", "lastSamples": 0, "id": "1", "group_id": "9"},
        {"state": "firing", "name": "AlwaysFiring", "query": "vector(1) > 0", "duration": 0,
         "labels": {"severity": "page"}, "annotations": {"summary": "always {{ $value }}"}, "lastError": "",
         "evaluationTime": 0.001174958, "lastEvaluation": "2026-12-01T15:22:26.788349464Z",
         "alerts": [{"state": "firing", "name": "AlwaysFiring", "value": "1",
                     "labels": {"severity": "page", "alertname": "AlwaysFiring"},
                     "annotations": {"summary": "always 1"}, "activeAt": "2026-12-01T15:22:22.785550212Z",
                     "id": "2", "rule_id": "3", "group_id": "9", "expression": "vector(1) > 0",
                     "source": "http://vm:18880/vmalert/api/v1/alert?group_id=9&alert_id=2", "restored": False}],
         "health": "ok", "type": "alerting", "datasourceType": "prometheus", "lastSamples": 1, "id": "3",
         "group_id": "9"}],
    "interval": 1, "lastEvaluation": "2026-12-01T15:22:26.786528906Z", "type": "prometheus", "id": "9",
    "file": "/tmp/eco/rules.yml", "concurrency": 1}]}}

PROMETHEUS_TEXT = (
    '[{"name":"e2e","file":"/tmp/eco/rules.yml","rules":['
    '{"name":"job:up:sum","query":"sum by (job) (up)","health":"ok","evaluationTime":0.002795156,'
    '"lastEvaluation":"2026-12-01T15:22:26.785550212Z","type":"recording"},'
    '{"state":"firing","name":"AlwaysFiring","query":"vector(1) > 0","duration":0,"keepFiringFor":0,'
    '"labels":{"severity":"page"},"annotations":{"summary":"always {{ $value }}"},'
    '"alerts":[{"labels":{"alertname":"AlwaysFiring","severity":"page"},"annotations":{"summary":"always 1"},'
    '"state":"firing","activeAt":"2026-12-01T15:22:22.785550212Z","value":"1e+00"}],'
    '"health":"ok","evaluationTime":0.001174958,"lastEvaluation":"2026-12-01T15:22:26.788349464Z",'
    '"type":"alerting"}],'
    '"interval":1,"limit":0,"evaluationTime":0.003970114,"lastEvaluation":"2026-12-01T15:22:26.786528906Z"}]')


def test_vmalert_answer_becomes_prometheus_json_text():
    assert json.dumps(groups_of(VMALERT_ANSWER), separators=(",", ":")) == PROMETHEUS_TEXT


def test_groups_sorted_by_file_then_name_and_inactive_alerts_left_out():
    answer = {"status": "success", "data": {"groups": [
        {"name": "b", "file": "x.yml", "rules": [{"type": "alerting", "name": "A", "state": "",
                                                   "alerts": [{"state": "inactive", "value": "0"}]}]},
        {"name": "a", "file": "y.yml", "rules": []}, {"name": "a", "file": "x.yml", "rules": []}]}}
    groups = groups_of(answer)
    assert [(g["file"], g["name"]) for g in groups] == [("x.yml", "a"), ("x.yml", "b"), ("y.yml", "a")]
    assert groups[1]["rules"][0]["alerts"] == [] and groups[1]["rules"][0]["state"] == "inactive"
    assert groups[1]["lastEvaluation"] == "0001-01-01T00:00:00Z"  # never evaluated, as Go's zero time


@pytest.mark.parametrize("answer", [
    {"status": "error", "error": "x"}, {"status": "success", "data": {}}, [],
    {"status": "success", "data": {"groups": [{"name": "g", "rules": [{"type": "weird"}]}]}},
])
def test_answers_that_are_not_rule_groups_are_refused(answer):
    with pytest.raises(RulerAnswerError):
        groups_of(answer)


@pytest.mark.parametrize("value, text", [(1, "1e+00"), ("0.5", "5e-01"), (1234.5, "1.2345e+03"), (-0.0, "-0e+00"),
                                         (1e21, "1e+21"), (2.5e-7, "2.5e-07"), ("NaN", "NaN"), ("+Inf", "+Inf")])
def test_alert_values_are_written_as_go_does(value, text):
    assert go_float(value) == text
