"""The dashboard panels' queries, on the workload's metrics (testkit/workload.py): what the query benches time
and what the cluster tests compare between layouts."""

# (panel, PromQL) -- the GPU health, network, apiserver and node panels of the shipped dashboards
DASHBOARD_QUERIES = (
    ("gpu util by node", "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)"),
    ("hottest gpus", "topk(10, max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP))"),
    ("cluster power", "sum(DCGM_FI_DEV_POWER_USAGE)"),
    ("fb used ratio", "topk(10, DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE))"),
    ("gpus with xid", "count(DCGM_FI_DEV_XID_ERRORS > 0) or vector(0)"),
    ("dbe errors", "sum by (Hostname) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[1h])) > 0"),
    ("tensor active by ns", "avg by (namespace) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)"),
    ("nvlink by ns", "sum by (namespace) (rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[5m]))"),
    ("internet egress by ns",
     'sum by (namespace) (rate(iptables_rule_bytes_total{traffic="internet", direction="egress"}[5m]))'),
    ("top talkers", "topk(10, sum by (namespace, pod) (rate(iptables_rule_bytes_total[5m])))"),
    ("node rx by device", "sum by (device) (rate(node_network_receive_bytes_total[5m]))"),
    ("cpu busy", '1 - avg by (instance) (rate(node_cpu_seconds_total{mode="idle"}[5m]))'),
    ("mem available", "node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes"),
    ("targets down", "count(up == 0) or vector(0)"),
    ("apiserver p99 by verb",
     "histogram_quantile(0.99, sum by (le, verb) (rate(apiserver_request_duration_seconds_bucket[5m])))"),
    ("apiserver codes", "sum by (code) (rate(apiserver_request_total[5m]))"),
    ("apiserver 429s", 'sum(rate(apiserver_request_total{code="429"}[5m])) or vector(0)'),
    ("etcd p99", "histogram_quantile(0.99, sum by (le, operation) (rate(etcd_request_duration_seconds_bucket[5m])))"),
    ("inflight", "sum by (request_kind) (apiserver_current_inflight_requests)"),
)
