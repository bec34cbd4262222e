"""The series templates of the GPU cluster workload: which metrics, which labels, which value ranges.

Label names follow the real exporters: dcgm-exporter (gpu, UUID, device, modelName, Hostname,
DCGM_FI_DRIVER_VERSION, plus container/namespace/pod from the kubelet pod-resources API),
node-exporter, an iptables exporter (chain, table, rule, comment) and kube-apiserver 1.2x.
Per GPU node: 160 DCGM + 98 node + 100 iptables = 358 series; each control-plane node has
5,406 (node basics + apiserver/etcd, mostly histogram buckets), so 1,000 nodes = 374,218 series.
"""

from __future__ import annotations

import math

from testkit.series_builder import SeriesBuilder

GPUS_PER_NODE = 8
PODS_PER_NODE = 4  # each pod holds 2 GPUs
CPUS = 8  # real GPU nodes have 100+ cores; 8 keeps node-exporter near its share of the mix
FB_TOTAL_MIB = 81559.0  # H100 80GB
MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "535.129.03"
NAMESPACES = ("ml-training", "ml-inference", "research", "batch-jobs")
# A pod replaced by a new one (pod churn) keeps its slot and its name's length: generation g of the pod whose first
# name has hash h is named with (h + g * POD_GENERATION_STEP) mod 2^20, an odd step, so a slot's names never repeat
# within 2^20 generations.
POD_HASH_BITS = 20
POD_GENERATION_STEP = 0x9E3B5

# kube-apiserver >= 1.27 buckets for apiserver_request_duration_seconds and etcd_request_duration_seconds
K8S_LATENCY_BUCKETS = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10,
                       15, 20, 30, 45, 60)

# (group, version, resource, subresource, namespaced)
API_RESOURCES = (
    ("", "v1", "pods", "", True), ("", "v1", "pods", "status", True), ("", "v1", "pods", "log", True),
    ("", "v1", "nodes", "", False), ("", "v1", "nodes", "status", False), ("", "v1", "services", "", True),
    ("", "v1", "endpoints", "", True), ("", "v1", "configmaps", "", True), ("", "v1", "secrets", "", True),
    ("", "v1", "events", "", True), ("", "v1", "namespaces", "", False),
    ("apps", "v1", "deployments", "", True), ("apps", "v1", "replicasets", "", True),
    ("batch", "v1", "jobs", "", True), ("coordination.k8s.io", "v1", "leases", "", True),
)
API_VERBS = ("GET", "LIST", "WATCH", "CREATE", "UPDATE", "PATCH", "DELETE")
VERB_MEDIAN_S = {"GET": 0.004, "LIST": 0.08, "WATCH": 8.0, "CREATE": 0.015, "UPDATE": 0.012,
                 "PATCH": 0.012, "DELETE": 0.02}
ETCD_OPERATIONS = ("get", "list", "listWithCount", "create", "update", "delete", "count")

# (metric, type, help, gauge params or counter rate for a busy GPU, same for an idle GPU)
DCGM_FIELDS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", dict(base=1980, amp=0, noise=15, lo=210, hi=1980, integer=True), dict(base=345, noise=0, integer=True)),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", dict(base=68, amp=6, noise=2, integer=True), dict(base=32, amp=1, noise=1, integer=True)),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", dict(base=62, amp=5, noise=2, integer=True), dict(base=30, amp=1, noise=1, integer=True)),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", dict(base=560, amp=110, noise=40, lo=60, hi=700), dict(base=72, amp=2, noise=3, lo=60)),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", dict(base=88, amp=10, noise=8, lo=0, hi=100, integer=True), dict(base=0, noise=0.6, lo=0, hi=100, integer=True)),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", dict(base=45, amp=20, noise=10, lo=0, hi=100, integer=True), dict(base=0, lo=0, integer=True)),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", dict(base=71000, amp=6000, noise=500, lo=0, hi=FB_TOTAL_MIB, integer=True), dict(base=4, integer=True)),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", dict(base=0, ev_p=0.0005, ev_v=79), dict(base=0, ev_p=0.0002, ev_v=48)),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", dict(base=0.9, amp=0.08, noise=0.03, lo=0, hi=1), dict(base=0, lo=0)),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", dict(base=0.82, amp=0.1, noise=0.04, lo=0, hi=1), dict(base=0, lo=0)),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", dict(base=0.45, amp=0.2, noise=0.05, lo=0, hi=1), dict(base=0, lo=0)),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active sending or receiving data.", dict(base=0.5, amp=0.2, noise=0.05, lo=0, hi=1), dict(base=0, lo=0)),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", 560_000.0, 72_000.0),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", 0.001, 0.0),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors.", 0.0005, 0.0),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.", 0.00001, 0.0),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes.", 2.4e8, 10.0),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "counter", "Total number of bytes transmitted through PCIe TX (in KB) via NVML.", 9.0e5, 50.0),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "counter", "Total number of bytes received through PCIe RX (in KB) via NVML.", 1.6e6, 50.0),
)
FB_FREE = ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).")  # mirror of FB_USED

CPU_MODES = {"idle": 0.55, "user": 0.35, "system": 0.06, "iowait": 0.01, "irq": 0.004, "softirq": 0.015,
             "nice": 0.0005, "steal": 0.0}
NET_DEVICES = {"eth0": 4e7, "eth1": 1e7, "ib0": 3e9, "ib1": 3e9, "lo": 2e5}


def _ip(node: int) -> str:
    return f"10.{20 + node // 65024}.{(node // 254) % 256}.{node % 254 + 1}"


def _control_plane_ip(c: int) -> str:
    return f"10.19.0.{c + 10}"


def node_ip(node: int, gpu_nodes: int) -> str:
    """The address in every `instance` label of node `node` (GPU nodes first, then the control plane)."""
    return _ip(node) if node < gpu_nodes else _control_plane_ip(node - gpu_nodes)


def pod_name(namespace: str, name_hash: int, node: int, slot: int, generation: int = 0) -> str:
    """The name of a pod slot's pod of that generation (0: the workload's own pods)."""
    h = (name_hash + generation * POD_GENERATION_STEP) & ((1 << POD_HASH_BITS) - 1)
    return f"{namespace.split('-')[0]}-{h:05x}-{node}-{slot}"


def _uuid(rng) -> str:
    h = rng.bytes(16).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _lognormal_cdf(le: float, median: float, sigma: float) -> float:
    return 0.5 * (1.0 + math.erf((math.log(le) - math.log(median)) / (sigma * math.sqrt(2.0))))


def build(b: SeriesBuilder, gpu_nodes: int, control_plane: int) -> list[str]:
    """Fill the builder; returns hostnames by node index (GPU nodes, then control plane)."""
    hosts = []
    for n in range(gpu_nodes):
        b.current_node = n
        host = f"gpu-node-{n:05d}"
        hosts.append(host)
        pods = _pods(b, n)
        _dcgm(b, host, _ip(n), pods)
        _node_exporter(b, host, _ip(n), ("node-exporter", "dcgm-exporter", "iptables-exporter"))
        _iptables(b, _ip(n), pods)
    for c in range(control_plane):
        n = gpu_nodes + c
        b.current_node = n
        host = f"control-plane-{c + 1}"
        hosts.append(host)
        ip = _control_plane_ip(c)
        _node_exporter(b, host, ip, ("node-exporter", "apiserver"))
        _apiserver(b, ip)
    return hosts


def _pods(b: SeriesBuilder, n: int) -> list[tuple[str, str, str, bool, int]]:
    """(namespace, pod, container, busy, pod id) per pod slot; a slot's pod holds GPUs 2k and 2k+1."""
    out = []
    for k in range(PODS_PER_NODE):
        ns_i = int(b.rng.integers(len(NAMESPACES)))
        h = int(b.rng.integers(1 << POD_HASH_BITS))
        b.pods.append((ns_i, h, n, k))
        out.append((NAMESPACES[ns_i], pod_name(NAMESPACES[ns_i], h, n, k), "main", bool(b.rng.random() < 0.85),
                    len(b.pods) - 1))
    return out


def _dcgm(b: SeriesBuilder, host: str, ip: str, pods) -> None:
    group = b.reset_group(mean_uptime_h=24 * 10)
    instance = ("instance", f"{ip}:9400")
    for gpu in range(GPUS_PER_NODE):
        ns, pod, container, busy, b.current_pod = pods[gpu // 2]
        common = (("gpu", str(gpu)), ("UUID", _uuid(b.rng)), ("device", f"nvidia{gpu}"),
                  ("modelName", MODEL), ("Hostname", host), ("DCGM_FI_DRIVER_VERSION", DRIVER),
                  ("container", container), ("namespace", ns), ("pod", pod),
                  ("job", "dcgm-exporter"), instance)
        scale = float(b.rng.uniform(0.9, 1.1))
        fb_used = -1
        for name, type_, help_, busy_p, idle_p in DCGM_FIELDS:
            b.describe(name, type_, help_)
            pairs = (("__name__", name),) + common
            p = busy_p if busy else idle_p
            if type_ == "counter":
                b.counter(pairs, rate=p * scale, group=group, integer=True)
            else:
                params = dict(p)
                params["base"] = params.get("base", 0.0) * scale
                idx = b.gauge(pairs, period=float(b.rng.uniform(600, 7200)), **params)
                if name == "DCGM_FI_DEV_FB_USED":
                    fb_used = idx
        b.describe(*FB_FREE)
        b.mirror((("__name__", FB_FREE[0]),) + common, of=fb_used, total=FB_TOTAL_MIB)
    b.current_pod = -1


def _node_exporter(b: SeriesBuilder, host: str, ip: str, up_jobs) -> None:
    group = b.reset_group(mean_uptime_h=24 * 30)
    base = (("job", "node-exporter"), ("instance", f"{ip}:9100"))
    b.describe("node_cpu_seconds_total", "counter", "Seconds the CPUs spent in each mode.")
    for cpu in range(CPUS):
        for mode, share in CPU_MODES.items():
            b.counter((("__name__", "node_cpu_seconds_total"), ("cpu", str(cpu)), ("mode", mode)) + base,
                      rate=share * float(b.rng.uniform(0.7, 1.3)), group=group, integer=False)
    mem_total = 2.0 * 1024**4
    for name, frac, amp in (("MemAvailable", 0.6, 0.1), ("MemFree", 0.3, 0.1), ("Cached", 0.25, 0.05),
                            ("Buffers", 0.01, 0.002), ("MemTotal", 1.0, 0.0)):
        metric = f"node_memory_{name}_bytes"
        b.describe(metric, "gauge", f"Memory information field {name}_bytes.")
        b.gauge((("__name__", metric),) + base, base=mem_total * frac, amp=mem_total * amp,
                period=float(b.rng.uniform(900, 7200)), noise=mem_total * amp * 0.05, lo=0, hi=mem_total,
                integer=True)
    for device, bps in NET_DEVICES.items():
        for direction in ("receive", "transmit"):
            for unit, per in (("bytes", 1.0), ("packets", 1 / 1400.0)):
                metric = f"node_network_{direction}_{unit}_total"
                b.describe(metric, "counter", f"Network device statistic {direction}_{unit}.")
                b.counter((("__name__", metric), ("device", device)) + base,
                          rate=bps * per * float(b.rng.uniform(0.5, 1.5)), group=group, integer=True)
    for name, load in (("node_load1", 5.0), ("node_load5", 5.0), ("node_load15", 5.0)):
        b.describe(name, "gauge", f"{name[5:]}m load average.")
        b.gauge((("__name__", name),) + base, base=load, amp=2.0, period=float(b.rng.uniform(600, 3600)),
                noise=0.5, lo=0)
    b.describe("node_filesystem_avail_bytes", "gauge", "Filesystem space available to non-root users in bytes.")
    for mount, dev in (("/", "/dev/nvme0n1p2"), ("/raid", "/dev/md0")):
        b.gauge((("__name__", "node_filesystem_avail_bytes"), ("mountpoint", mount), ("device", dev),
                 ("fstype", "ext4")) + base, base=4e12, amp=1e12, period=86400.0, noise=1e9, lo=0, integer=True)
    b.describe("node_boot_time_seconds", "gauge", "Node boot time, in unixtime.")
    b.gauge((("__name__", "node_boot_time_seconds"),) + base, base=1.7e9 + float(b.rng.integers(0, 10**7)))
    b.describe("up", "gauge", "1 if the target was scraped successfully.")
    ports = {"node-exporter": 9100, "dcgm-exporter": 9400, "iptables-exporter": 9455, "apiserver": 6443}
    for job in up_jobs:
        b.gauge((("__name__", "up"), ("job", job), ("instance", f"{ip}:{ports[job]}")), base=1.0)


IPTABLES_BASE_RULES = (  # (table, chain, rule spec, comment, bytes/s)
    ("filter", "INPUT", "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", "established", 2e6),
    ("filter", "INPUT", "-i lo -j ACCEPT", "loopback", 2e5), ("filter", "INPUT", "-p tcp --dport 22 -j ACCEPT", "ssh", 1e3),
    ("filter", "INPUT", "-p tcp --dport 10250 -j ACCEPT", "kubelet", 5e4), ("filter", "INPUT", "-j DROP", "default drop", 50.0),
    ("filter", "FORWARD", "-j KUBE-FORWARD", "kubernetes forwarding rules", 8e6),
    ("filter", "FORWARD", "-j KUBE-POD-EGRESS", "pod egress accounting", 8e6),
    ("filter", "FORWARD", "-j KUBE-POD-INGRESS", "pod ingress accounting", 8e6),
    ("filter", "KUBE-FORWARD", "-m conntrack --ctstate INVALID -j DROP", "invalid", 10.0),
    ("filter", "KUBE-FORWARD", "-m mark --mark 0x4000/0x4000 -j ACCEPT", "kubernetes forwarding rules", 6e6),
    ("filter", "OUTPUT", "-j KUBE-SERVICES", "kubernetes service portals", 3e6),
    ("filter", "OUTPUT", "-j ACCEPT", "default accept", 3e6),
    ("nat", "PREROUTING", "-j KUBE-SERVICES", "kubernetes service portals", 1e5),
    ("nat", "POSTROUTING", "-j KUBE-POSTROUTING", "kubernetes postrouting rules", 1e5),
    ("nat", "POSTROUTING", "! -d 10.0.0.0/8 -j MASQUERADE", "masquerade internet egress", 5e5),
    ("nat", "KUBE-SERVICES", "-d 10.96.0.10/32 -p udp --dport 53 -j KUBE-SVC-DNS", "kube-system/kube-dns:dns", 2e4),
    ("mangle", "PREROUTING", "-j CNI-MARK", "cni mark", 8e6), ("raw", "PREROUTING", "-j CT", "conntrack", 8e6),
)


def _iptables(b: SeriesBuilder, ip: str, pods) -> None:
    group = b.reset_group(mean_uptime_h=24 * 7)
    base = (("job", "iptables-exporter"), ("instance", f"{ip}:9455"))
    b.describe("iptables_rule_bytes_total", "counter", "Total bytes matching a rule.")
    b.describe("iptables_rule_packets_total", "counter", "Total packets matching a rule.")

    def rule(table, chain, spec, comment, bps, extra=()):
        for metric, per in (("iptables_rule_bytes_total", 1.0), ("iptables_rule_packets_total", 1 / 900.0)):
            b.counter((("__name__", metric), ("table", table), ("chain", chain), ("rule", spec),
                       ("comment", comment)) + extra + base,
                      rate=bps * per * float(b.rng.uniform(0.3, 1.7)), group=group, integer=True)

    for table, chain, spec, comment, bps in IPTABLES_BASE_RULES:
        rule(table, chain, spec, comment, bps)
    for k, (ns, pod, _container, busy, b.current_pod) in enumerate(pods):
        pod_ip = f"10.244.{int(b.rng.integers(256))}.{k + 2}"
        scale = 1.0 if busy else 0.01
        for direction, chain, flag in (("egress", "KUBE-POD-EGRESS", "-s"), ("ingress", "KUBE-POD-INGRESS", "-d")):
            for dest, cidr, bps in (("internal", "10.0.0.0/8", 5e7), ("internet", "! 10.0.0.0/8", 2e5)):
                for proto in ("tcp", "udp"):
                    other = "-d" if flag == "-s" else "-s"
                    spec = f"{flag} {pod_ip}/32 {other} {cidr} -p {proto} -j RETURN"
                    rule("filter", chain, spec, f"{ns}/{pod} {direction} {dest}",
                         bps * scale * (1.0 if proto == "tcp" else 0.02),
                         extra=(("namespace", ns), ("pod", pod), ("traffic", dest), ("direction", direction)))
    b.current_pod = -1


def _apiserver(b: SeriesBuilder, ip: str) -> None:
    group = b.reset_group(mean_uptime_h=24 * 14)
    base = (("job", "apiserver"), ("instance", f"{ip}:6443"))
    les = [f"{x:g}" for x in K8S_LATENCY_BUCKETS] + ["+Inf"]
    b.describe("apiserver_request_total", "counter", "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.")
    b.describe("apiserver_request_duration_seconds", "histogram", "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.")
    b.describe("etcd_request_duration_seconds", "histogram", "Etcd request latency in seconds for each operation and object type.")
    b.describe("apiserver_watch_events_total", "counter", "Number of events sent in watch clients")
    b.describe("apiserver_current_inflight_requests", "gauge", "Maximal number of currently used inflight request limit of this apiserver per request kind in last second.")
    b.describe("apiserver_flowcontrol_rejected_requests_total", "counter", "Number of requests rejected by API Priority and Fairness subsystem")

    def histogram(metric, pairs, rate, median, sigma=1.2):
        fam = b.family(rate, group, integer=True)
        for le, bound in zip(les, list(K8S_LATENCY_BUCKETS) + [math.inf]):
            frac = 1.0 if bound == math.inf else _lognormal_cdf(bound, median, sigma)
            b.derived((("__name__", f"{metric}_bucket"), ("le", le)) + pairs + base, fam, mult=frac, floor=True)
        b.derived((("__name__", f"{metric}_sum"),) + pairs + base, fam, mult=median * math.exp(sigma**2 / 2))
        b.derived((("__name__", f"{metric}_count"),) + pairs + base, fam)

    for grp, version, resource, sub, namespaced in API_RESOURCES:
        for verb in API_VERBS:
            scope = ("namespace" if namespaced else "cluster") if verb in ("LIST", "WATCH") else "resource"
            pairs = (("verb", verb), ("group", grp), ("version", version), ("resource", resource),
                     ("subresource", sub), ("scope", scope), ("component", "apiserver"), ("dry_run", ""))
            rate = float(b.rng.lognormal(0.0, 1.5)) * (0.1 if verb in ("WATCH", "DELETE") else 1.0)
            codes = {"GET": ("200", "404"), "CREATE": ("201", "409"), "UPDATE": ("200", "409"),
                     "DELETE": ("200", "404")}.get(verb, ("200",)) + ("429", "500")
            shares = (0.95, 0.04, 0.008, 0.002) if len(codes) == 4 else (0.99, 0.008, 0.002)
            for code, share in zip(codes, shares):
                b.counter((("__name__", "apiserver_request_total"), ("code", code)) + pairs + base,
                          rate=rate * share, group=group)
            histogram("apiserver_request_duration_seconds", pairs, rate, VERB_MEDIAN_S[verb])
    seen_types = sorted({f"*core.{r.title()}" if g == "" else f"*{g.split('.')[0]}.{r.title()}"
                         for g, _v, r, _s, _n in API_RESOURCES})
    for op in ETCD_OPERATIONS:
        for typ in seen_types:
            histogram("etcd_request_duration_seconds", (("operation", op), ("type", typ)),
                      float(b.rng.lognormal(0.0, 1.2)), 0.003 if op in ("get", "count") else 0.02, sigma=1.0)
    for grp, version, resource, _sub, _n in API_RESOURCES:
        if _sub == "":
            b.counter((("__name__", "apiserver_watch_events_total"), ("group", grp), ("version", version),
                       ("kind", resource.rstrip("s").title())) + base, rate=float(b.rng.lognormal(1.0, 1.0)), group=group)
    for kind, lvl in (("readOnly", 40.0), ("mutating", 12.0)):
        b.gauge((("__name__", "apiserver_current_inflight_requests"), ("request_kind", kind)) + base,
                base=lvl, amp=lvl * 0.5, period=900.0, noise=lvl * 0.3, lo=0, integer=True)
    for fs, pl in (("workload-low", "workload-low"), ("global-default", "global-default"),
                   ("service-accounts", "workload-low")):
        for reason in ("queue-full", "time-out"):
            b.counter((("__name__", "apiserver_flowcontrol_rejected_requests_total"), ("flow_schema", fs),
                       ("priority_level", pl), ("reason", reason)) + base, rate=0.02, group=group)
