"""The differential query set: PromQL that metricsgw must answer exactly as Prometheus does.

Data (see test_differential.py): the bench workload for 2 GPU nodes + 1 control-plane node,
40 minutes at 15 s ending at END, plus hand-made series for edge cases:
  stale_test{case="stops"}     samples until END-10m, then nothing (gone 5m later)
  stale_test{case="marker"}    until END-20m, a staleness marker at END-20m+15s, back from END-10m
  stale_test{case="nan"}       a gauge with ordinary NaN samples in the middle
  reset_test_total{case=...}   counters with resets at known times
  irregular_total{case=...}    a counter with jittered, not 15 s aligned, timestamps

``<END>`` / ``<START>`` in a query stand for the data's last / first timestamp (seconds);
the test replaces them. Queries whose instant result order matters start with ``sort``.
"""

from __future__ import annotations

SELECTORS = [
    "DCGM_FI_DEV_GPU_TEMP",
    'DCGM_FI_DEV_GPU_TEMP{gpu="3", Hostname!="gpu-node-00001"}',
    '{__name__=~"DCGM_FI_DEV_(GPU|MEMORY)_TEMP", gpu!~"[0-5]"}',
    'node_cpu_seconds_total{mode=~"idle|user", cpu="0"}',
    'up{job!~"node.*", instance=~"10\\\\..*"}',
    '{__name__="up", job=""}',  # empty-value matcher: no series lacks job
    'DCGM_FI_DEV_POWER_USAGE{gpu="1"} offset 5m',
    'DCGM_FI_DEV_POWER_USAGE{gpu="1"} offset -2m',
    'DCGM_FI_DEV_POWER_USAGE{gpu="1"} @ <END>',
    'DCGM_FI_DEV_POWER_USAGE{gpu="2"} @ end()',
    'DCGM_FI_DEV_POWER_USAGE{gpu="2"} @ start()',
    'DCGM_FI_DEV_POWER_USAGE{gpu="4"}[2m]',  # instant only: a matrix
    "nonexistent_metric",
]

STALENESS = [
    "stale_test",
    "stale_test offset 10m",
    "count_over_time(stale_test[20m])",
    "last_over_time(stale_test[10m])",
    "present_over_time(stale_test[3m])",
    "timestamp(stale_test)",
    "stale_test[16m]",  # instant only: the marker is not a sample of the matrix
    "rate(irregular_total[1m])",
    "increase(irregular_total[47s])",
    "resets(reset_test_total[30m])",
    "rate(reset_test_total[5m])",
    "increase(reset_test_total[90s])",
]

RATE_FUNCTIONS = [
    "rate(DCGM_FI_DEV_PCIE_TX_THROUGHPUT[1m])",
    'irate(node_network_transmit_bytes_total{device=~"ib.*"}[2m])',
    'increase(apiserver_request_total{verb="GET", code="200"}[5m])',
    'rate(node_network_receive_bytes_total{device="ib0"}[5m] offset 2m)',
    "delta(DCGM_FI_DEV_GPU_TEMP[3m])",
    "idelta(DCGM_FI_DEV_POWER_USAGE[1m])",
    "deriv(DCGM_FI_DEV_FB_USED[5m])",
    "predict_linear(node_filesystem_avail_bytes[10m], 3600)",
    "changes(DCGM_FI_DEV_XID_ERRORS[30m])",
    'resets(node_cpu_seconds_total{cpu="1"}[30m])',
]

OVER_TIME = [
    "avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m])",
    "min_over_time(DCGM_FI_DEV_GPU_TEMP[7m])",
    "max_over_time(DCGM_FI_DEV_GPU_TEMP[7m])",
    "sum_over_time(DCGM_FI_DEV_POWER_USAGE[2m])",
    "count_over_time(DCGM_FI_DEV_POWER_USAGE[2m])",
    "stddev_over_time(DCGM_FI_DEV_POWER_USAGE[10m])",
    "stdvar_over_time(DCGM_FI_DEV_POWER_USAGE[10m])",
    "quantile_over_time(0.9, DCGM_FI_DEV_POWER_USAGE[10m])",
    "last_over_time(DCGM_FI_DEV_SM_CLOCK[1m])",
    "present_over_time(DCGM_FI_DEV_SM_CLOCK[1m])",
    "absent_over_time(nonexistent_metric[5m])",
    "absent(nonexistent_metric{job=\"x\", instance=~\"y\"})",
    "absent(up)",
]

HISTOGRAMS = [
    "histogram_quantile(0.99, sum by (le, verb) (rate(apiserver_request_duration_seconds_bucket[5m])))",
    'histogram_quantile(0.5, rate(etcd_request_duration_seconds_bucket{operation="get"}[2m]))',
    'histogram_quantile(0.9, sum by (le) (rate(apiserver_request_duration_seconds_bucket{verb="LIST"}[1m])))',
]

MATH_AND_LABELS = [
    "abs(-DCGM_FI_DEV_GPU_TEMP)",
    "ceil(DCGM_FI_PROF_SM_ACTIVE * 10) + floor(DCGM_FI_PROF_SM_ACTIVE * 10)",
    "round(DCGM_FI_DEV_POWER_USAGE, 5)",
    "round(DCGM_FI_DEV_POWER_USAGE)",
    "sqrt(DCGM_FI_DEV_POWER_USAGE) + exp(DCGM_FI_PROF_SM_ACTIVE) + ln(DCGM_FI_DEV_GPU_TEMP)",
    "log2(DCGM_FI_DEV_FB_USED) - log10(DCGM_FI_DEV_FB_FREE)",
    "sgn(delta(DCGM_FI_DEV_GPU_TEMP[2m]))",
    "clamp(DCGM_FI_DEV_GPU_TEMP, 40, 60)",
    "clamp_min(DCGM_FI_DEV_GPU_UTIL, 50)",
    "clamp_max(DCGM_FI_DEV_GPU_UTIL, 50)",
    'label_replace(up, "host", "$1", "instance", "([^:]+):.*")',
    'label_replace(up, "job", "renamed-$1", "job", "(node|dcgm).*")',
    'label_join(up, "target", "/", "job", "instance")',
    "time()",
    "vector(1)",
    "scalar(sum(up))",
    "timestamp(DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"})",
    "minute(vector(<END>)) + hour(vector(<END>))",
    "sort(DCGM_FI_DEV_GPU_TEMP{gpu=~\"[0-3]\"})",
    "sort_desc(sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE))",
]

AGGREGATIONS = [
    "sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)",
    "avg without (gpu, UUID, device, pod, namespace, container) (DCGM_FI_DEV_GPU_TEMP)",
    "max by (mode) (rate(node_cpu_seconds_total[5m]))",
    "min by (instance) (node_memory_MemAvailable_bytes)",
    "count by (namespace) (DCGM_FI_DEV_GPU_UTIL)",
    "stddev by (Hostname) (DCGM_FI_DEV_GPU_TEMP)",
    "stdvar by (Hostname) (DCGM_FI_DEV_GPU_TEMP)",
    "group by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL)",
    "topk(3, DCGM_FI_DEV_GPU_TEMP)",  # integer temperatures: ties
    "topk(3, DCGM_FI_DEV_POWER_USAGE)",
    "topk by (Hostname) (2, DCGM_FI_DEV_POWER_USAGE)",
    "bottomk(2, sum by (instance) (rate(node_network_receive_bytes_total[5m])))",
    "quantile(0.75, DCGM_FI_DEV_POWER_USAGE)",
    "quantile by (Hostname) (0.5, DCGM_FI_DEV_GPU_TEMP)",
    'count_values("temp", DCGM_FI_DEV_GPU_TEMP)',
    "sum(DCGM_FI_DEV_FB_USED) by (Hostname)",
]

BINARY = [
    "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)",
    "DCGM_FI_DEV_GPU_TEMP > 65",
    "DCGM_FI_DEV_GPU_TEMP > bool 65",
    "DCGM_FI_DEV_GPU_UTIL == 0 or DCGM_FI_DEV_GPU_TEMP < 35",
    "DCGM_FI_DEV_GPU_TEMP and DCGM_FI_DEV_GPU_UTIL > 50",
    "DCGM_FI_DEV_GPU_TEMP unless DCGM_FI_DEV_GPU_UTIL > 50",
    "sum by (Hostname, gpu) (DCGM_FI_DEV_POWER_USAGE)"
    " / on (Hostname) group_left sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)",
    'rate(apiserver_request_total{code="500"}[5m]) / ignoring (code) rate(apiserver_request_total{code="200"}[5m])',
    'sum by (instance) (rate(node_cpu_seconds_total{mode="idle"}[5m]))'
    ' / on (instance) count by (instance) (node_cpu_seconds_total{mode="idle"})',
    "DCGM_FI_DEV_GPU_TEMP * on (Hostname) group_left (instance_ip)"
    ' label_replace(max by (Hostname) (DCGM_FI_DEV_GPU_TEMP), "instance_ip", "x", "", "")',
    "2 * DCGM_FI_DEV_GPU_TEMP - 1",
    "1 - DCGM_FI_PROF_SM_ACTIVE",
    "2 ^ 3 % 5 + 1 / 0 - -1",
    "DCGM_FI_DEV_GPU_TEMP % 7",
    "scalar(max(DCGM_FI_DEV_GPU_TEMP)) - DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_GPU_TEMP >= bool DCGM_FI_DEV_MEMORY_TEMP",
    "-DCGM_FI_DEV_GPU_TEMP != -60",
    "stale_test{case=\"nan\"} == stale_test{case=\"nan\"}",
    # atan2 keeps the left-hand metric name in 2.42 (not in shouldDropMetricName)
    "DCGM_FI_DEV_GPU_TEMP atan2 DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP atan2 on (Hostname, gpu) group_left DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE atan2 10",
    "10 atan2 DCGM_FI_DEV_POWER_USAGE",
    "1 atan2 -0 + (-1 atan2 -0)",
    "stale_test atan2 stale_test",
    "sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE) atan2 on (Hostname) group_right DCGM_FI_DEV_POWER_USAGE",
    "2 * DCGM_FI_DEV_GPU_TEMP atan2 3 ^ 2",  # precedence: atan2 binds like * and /
]

SUBQUERIES = [
    "max_over_time(rate(DCGM_FI_DEV_PCIE_RX_THROUGHPUT[1m])[10m:30s])",
    "avg_over_time(sum(DCGM_FI_DEV_POWER_USAGE)[15m:])",
    "deriv(sum(DCGM_FI_DEV_FB_USED)[10m:1m])",
    "min_over_time(stale_test[20m:1m])",
]

# Harder corners: NaN in aggregations, scalar/vector edges, odd durations, group_right, __name__ grouping.
CORNERS = [
    'max(stale_test{case="nan"}) + min(stale_test{case="nan"})',
    'avg(stale_test{case="nan"})',
    "sort_desc(stale_test)",
    "sort(stale_test)",  # NaN sorts last both ways
    "topk(2, stale_test)",
    "changes(stale_test[30m])",
    'absent(stale_test{case="stops"})',
    'absent(nonexistent{job="a", job=~"b", case="x"})',
    "count by (case) (stale_test)",
    "irate(reset_test_total[1m]) + deriv(reset_test_total[3m])",
    "sum_over_time(reset_test_total[1m:7s])",
    'max_over_time(DCGM_FI_DEV_GPU_TEMP{gpu="0"}[5m] @ <START>)',
    "last_over_time(stale_test[10m] @ end())",
    "increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[2m30s])",
    "DCGM_FI_DEV_POWER_USAGE offset 1h",
    "histogram_quantile(1.5, sum by (le) (rate(etcd_request_duration_seconds_bucket[5m])))",
    "histogram_quantile(-1, sum by (le) (rate(etcd_request_duration_seconds_bucket[5m])))",
    "quantile(1.2, DCGM_FI_DEV_POWER_USAGE)",
    "sum(nonexistent_metric) or vector(0)",
    "scalar(up)",
    '"a string"',
    "year(vector(<END>)) * 100 + month(vector(<END>)) + day_of_month(vector(<END>)) / 100",
    "exp(vector(1000)) - exp(vector(-1000))",
    "cos(DCGM_FI_PROF_SM_ACTIVE) + sin(DCGM_FI_PROF_SM_ACTIVE)",
    "sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE) / on (Hostname) group_right DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP > on (Hostname, gpu) group_left (namespace) DCGM_FI_DEV_MEMORY_TEMP",
    'DCGM_FI_DEV_GPU_UTIL unless on (Hostname) DCGM_FI_DEV_GPU_UTIL{Hostname="gpu-node-00000"}',
    "1 > bool 2",
    'sum by (__name__) ({__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_MEMORY_TEMP"})',
    'rate({__name__=~"DCGM_FI_DEV_PCIE_(TX|RX)_THROUGHPUT"}[1m])',  # same labels after dropping __name__
    'label_replace(up, "nomatch", "$1", "job", "zzz(.*)")',
    'label_replace(up, "port", "${1}0", "instance", ".*:(.*)")',
    "count_over_time(stale_test[1m:15s])",
    "timestamp(stale_test offset 5m)",
    'stddev(stale_test{case="nan"}) + stdvar(stale_test{case="nan"})',
    "sum(node_memory_MemTotal_bytes) * 1e300",
    "absent(sum(nonexistent_metric))",
    "sort_desc(topk(4, DCGM_FI_DEV_POWER_USAGE))",
    "topk(scalar(count(up)) - 5, DCGM_FI_DEV_POWER_USAGE)",
    "topk(0, DCGM_FI_DEV_POWER_USAGE)",
    "quantile_over_time(0, DCGM_FI_DEV_POWER_USAGE[5m]) - quantile_over_time(1, DCGM_FI_DEV_POWER_USAGE[5m])",
    "rate(DCGM_FI_DEV_PCIE_TX_THROUGHPUT[15s])",
    "increase(DCGM_FI_DEV_PCIE_TX_THROUGHPUT[1m] offset 30s)",
    'DCGM_FI_DEV_POWER_USAGE{gpu="1"} @ <END> offset 10m',
    "vector(time()) - on () group_right timestamp(up)",
    "sum by (job) (up) > bool 2",
    "day_of_week() + days_in_month()",
    'count(count by (namespace) (DCGM_FI_DEV_GPU_UTIL))',
    "sum without () (up)",
    "up and on (instance) (up == 1)",
    'up unless ignoring (job) up{job="node-exporter"}',
    'count_values("gpu", DCGM_FI_DEV_GPU_TEMP)',
]

# Both sides must refuse these the same way (status code and errorType).
ERRORS = [
    "rate(up)",
    "sum(",
    '{job=""}',
    'label_replace(up, "x", "$1", "instance", "(")',
    'label_replace(up, "instance", "same", "instance", ".*")',  # duplicate label sets -> execution error
    "histogram_quantile(0.5)",
    "up +",
    "1 > 2",
    "DCGM_FI_DEV_GPU_TEMP / on (Hostname) DCGM_FI_DEV_MEMORY_TEMP",  # many-to-many -> execution error
    "sum by (Hostname) (DCGM_FI_DEV_GPU_TEMP) * on (Hostname) DCGM_FI_DEV_MEMORY_TEMP",  # needs group_right
    'quantile("x", up)',
    "rate(up[5m:1m:1m])",
    "up atan2 bool up",  # bool only goes with comparisons
    # two bucket metrics with the same labels: one group each, equal labels once the name goes
    "histogram_quantile(0.9, etcd_request_duration_seconds_bucket"
    ' or on (__name__) label_replace(etcd_request_duration_seconds_bucket, "__name__", "x_bucket", "", ""))',
]


QUERIES = SELECTORS + STALENESS + RATE_FUNCTIONS + OVER_TIME + HISTOGRAMS + MATH_AND_LABELS + AGGREGATIONS \
    + BINARY + SUBQUERIES + CORNERS + ERRORS


def tie_sensitive(query: str) -> bool:
    """topk/bottomk choose among equal values by storage order, which two servers need not share."""
    return "topk" in query or "bottomk" in query


def ordered(query: str) -> bool:
    """sort / sort_desc fix the order of an instant vector; elsewhere order is not part of the answer."""
    return query.startswith("sort")
