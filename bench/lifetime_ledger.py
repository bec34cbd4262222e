"""bench.lifetime's pod churn, its record of what the gateway acknowledged, and the read-back of all of it.

- ``PodChurn`` replaces the pods of one namespace (every pod slot of it gets a pod of the next generation,
  testkit.workload_catalog.pod_name) by rewriting the pod names in bench.scale's request template in place:
  a new name has the old one's length, so only its 5 hex characters change, in the `pod` label and in an
  iptables rule's `comment`. The series of the old pods end, new ones begin. ``epoch`` counts the churns.
- ``Ledger``: per (scrape, request) the churn epoch the request was filled with and how it ended (2xx, or
  failed for good): two small arrays, not a Python object per sample, at 2.7M series.
- ``LifetimeSender``: bench.scale's sender, keeping the ledger.
- ``verify``: every series' samples counted by the gateway (``count_over_time`` over the whole run through
  /api/v1/query, one metric and a group of nodes per query, at most ``budget`` samples a query) against what
  the ledger says was acknowledged. A request that never got a 2xx (a 4xx, or given up on at the end) may or
  may not be stored: its samples are allowed, not expected. Retried requests carry the same samples, so a
  sample stored twice counts as extra.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np

from bench.queries import KeptAlive
from bench.scale_send import Sender, Sent
from bench.scale_wire import Template
from metricsgw.model import canonical
from testkit.wire import encode_labels
from testkit.workload import Workload

HEX = 5  # hex characters of a pod name that change with its generation


class PodChurn:
    """Replaces one namespace's pods at a time in the template (round robin over the namespaces)."""

    def __init__(self, workload: Workload, template: Template) -> None:
        self.workload, self.template = workload, template
        self.generations = [0] * len(workload.namespaces)
        self.epoch = 0  # churns so far
        self.history: list[dict] = []
        names = [workload.pod_name(p).encode() for p in range(len(workload.pod_namespace))]
        ns, req, at, pod = [], [], [], []
        for i in np.flatnonzero(workload.pod_of >= 0).tolist():
            p = int(workload.pod_of[i])
            j, start, stop = template.label_span(i)
            labels, name = template.buffers[j][start:stop].tobytes(), names[p]
            skip = name.index(b"-") + 1  # the hex part follows the namespace's prefix
            pos = labels.find(name)
            while pos >= 0:
                ns.append(workload.pod_namespace[p])
                req.append(j)
                at.append(start + pos + skip)
                pod.append(p)
                pos = labels.find(name, pos + 1)
        order = np.lexsort((np.asarray(req, np.int64), np.asarray(ns, np.int64)))
        self._ns = np.asarray(ns, np.int8)[order]
        self._req = np.asarray(req, np.int32)[order]
        self._at = np.asarray(at, np.int64)[order]
        self._pod = np.asarray(pod, np.int32)[order]
        self.places = len(order)  # pod names in the template's labels

    def generations_at(self, epoch: int) -> list[int]:
        """Each namespace's pod generation after `epoch` churns (churn c, from 1, replaces namespace (c-1) % N)."""
        n = len(self.generations)
        return [(epoch + n - 1 - i) // n for i in range(n)]

    def advance(self, now: float | None = None) -> int:
        """The next churn: the next namespace's pods are replaced. Returns that namespace's index."""
        ns = self.epoch % len(self.generations)
        g = self.generations[ns] + 1
        lo, hi = np.searchsorted(self._ns, [ns, ns + 1])
        reqs, at, pods = self._req[lo:hi], self._at[lo:hi], self._pod[lo:hi]
        hexes = {}
        for p in np.unique(pods).tolist():
            name = self.workload.pod_name(p, g)
            start = name.index("-") + 1
            hexes[p] = name[start:start + HEX].encode()
        chunks = np.frombuffer(b"".join(hexes[p] for p in pods.tolist()), np.uint8).reshape(-1, HEX)
        bounds = np.flatnonzero(np.diff(reqs)) + 1
        for a, b in zip(np.r_[0, bounds], np.r_[bounds, len(reqs)]):
            self.template.overwrite(int(reqs[a]), at[a:b], chunks[a:b])
        self.generations[ns] = g
        self.epoch += 1
        self.history.append({"t": now if now is not None else time.time(), "namespace": self.workload.namespaces[ns],
                             "generation": g, "pods": len(hexes), "places": int(hi - lo)})
        return ns


class Ledger:
    """Per (scrape, request): the churn epoch it was filled with (-1: never filled) and how it ended."""

    PENDING, ACKED, FAILED = 0, 1, 2
    _GROW = 64  # scrapes at a time

    def __init__(self, num_requests: int) -> None:
        self.state = np.zeros((0, num_requests), np.int8)
        self.epoch = np.full((0, num_requests), -1, np.int16)

    def _room(self, k: int) -> None:
        if k >= len(self.state):
            more = max(self._GROW, k + 1 - len(self.state))
            self.state = np.vstack([self.state, np.zeros((more, self.state.shape[1]), np.int8)])
            self.epoch = np.vstack([self.epoch, np.full((more, self.epoch.shape[1]), -1, np.int16)])

    def filled(self, k: int, j: int, epoch: int) -> None:
        self._room(k)
        self.epoch[k, j] = epoch

    def finished(self, k: int, j: int, ok: bool) -> None:
        self._room(k)
        self.state[k, j] = self.ACKED if ok else self.FAILED

    def counts(self, epochs: int) -> tuple[np.ndarray, np.ndarray]:
        """(acked, maybe): per request and epoch, how many scrapes of it were acknowledged, and how many were sent
        (filled) without a 2xx (failed for good, or still out when the run gave up on them)."""
        j = self.state.shape[1]
        acked, maybe = np.zeros((j, epochs), np.int64), np.zeros((j, epochs), np.int64)
        sent = self.epoch >= 0
        for e in range(epochs):
            at_e = sent & (self.epoch == e)
            acked[:, e] = (at_e & (self.state == self.ACKED)).sum(axis=0)
            maybe[:, e] = (at_e & (self.state != self.ACKED)).sum(axis=0)
        return acked, maybe

    def scrapes(self) -> int:
        """Scrapes of which some request was filled."""
        rows = np.flatnonzero((self.epoch >= 0).any(axis=1))
        return int(rows[-1]) + 1 if len(rows) else 0


class LifetimeSender(Sender):
    """bench.scale's sender, noting in a ledger which labels (churn epoch) each request went out with and
    whether it was acknowledged."""

    def __init__(self, url: str, workload: Workload, template: Template, interval_s: float, connections: int,
                 churn: PodChurn) -> None:
        super().__init__(url, workload, template, interval_s, connections)
        self.churn = churn
        self.ledger = Ledger(template.num_requests)

    def fill(self, k: int, j: int, ts_ms: int) -> bytes:
        body = super().fill(k, j, ts_ms)  # the event loop's thread, as churn.advance(): no change in between
        self.ledger.filled(k, j, self.churn.epoch)
        return body

    def finished(self, k: int, j: int, sent: Sent) -> None:
        super().finished(k, j, sent)
        self.ledger.finished(k, j, sent.ok)


def _metric_name(labels: bytes) -> str:
    """The __name__ value in a series' encoded labels (testkit.wire.encode_labels)."""
    at = labels.index(b"\x0a\x08__name__\x12") + 11
    n, shift = 0, 0
    while True:
        b = labels[at]
        at += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return labels[at:at + n].decode()


def _masked(name: str) -> str:
    """A pod name with its generation's hex part hidden: the same for every generation of a pod slot."""
    start = name.index("-") + 1
    return name[:start] + "*" * HEX + name[start + HEX:]


def _result_key(metric: str, labels: dict[str, str]) -> tuple[bytes, str | None]:
    pod = labels.get("pod")
    pairs = [("__name__", metric)] + [(n, v) for n, v in labels.items() if n != "__name__"]
    if pod:
        masked = _masked(pod)
        pairs = [(n, v.replace(pod, masked)) for n, v in pairs]
    return encode_labels(canonical(pairs)), pod


def _batches(workload: Workload, metric_of: np.ndarray, per_series: np.ndarray, budget: int,
             max_nodes: int) -> list[tuple[int, list[int], np.ndarray]]:
    """(metric id, nodes, series) per query: a metric's series, node after node, until about `budget` samples."""
    out = []
    for m in np.unique(metric_of).tolist():
        idx = np.flatnonzero(metric_of == m)
        idx = idx[np.argsort(workload.node_of[idx], kind="stable")]
        nodes = workload.node_of[idx]
        cuts = np.flatnonzero(np.diff(nodes)) + 1
        group, nodes_in, samples = [], [], 0
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(idx)]):
            n_samples = int(per_series[idx[a:b]].sum())
            if group and (samples + n_samples > budget or len(nodes_in) >= max_nodes):
                out.append((m, nodes_in, np.concatenate(group)))
                group, nodes_in, samples = [], [], 0
            group.append(idx[a:b])
            nodes_in.append(int(nodes[a]))
            samples += n_samples
        if group:
            out.append((m, nodes_in, np.concatenate(group)))
    return out


def verify(base_url: str, workload: Workload, template: Template, churn: PodChurn, ledger: Ledger,
           start_s: float, interval_s: float, budget: int = 2_000_000, max_nodes: int = 500,
           timeout_s: float = 300.0, log=print) -> dict:
    """Count every series' samples in the gateway and compare them with what was acknowledged (module docstring)."""
    t0 = time.perf_counter()
    epochs = churn.epoch + 1
    acked, maybe = ledger.counts(epochs)
    gens = np.asarray([churn.generations_at(e) for e in range(epochs)], np.int64)  # (epoch, namespace)
    top = int(gens.max()) + 1
    # expected[ns][j, g]: samples of a series of request j whose pod is in namespace ns, at generation g
    # (ns = N: series with no pod, all at generation 0)
    n_ns = len(churn.generations)
    exp = np.zeros((n_ns + 1, template.num_requests, top), np.int64)
    may = np.zeros_like(exp)
    for ns in range(n_ns + 1):
        g_of_e = gens[:, ns] if ns < n_ns else np.zeros(epochs, np.int64)
        for g in range(top):
            sel = g_of_e == g
            exp[ns, :, g] = acked[:, sel].sum(axis=1)
            may[ns, :, g] = maybe[:, sel].sum(axis=1)
    series = np.arange(template.num_series)
    req_of = series // template.per_request
    pod_of = workload.pod_of
    ns_of = np.where(pod_of >= 0, workload.pod_namespace[np.maximum(pod_of, 0)], n_ns).astype(np.int64)
    per_series = (exp + may).sum(axis=2)[ns_of, req_of]  # samples a query about the series may count
    names: dict[str, int] = {}
    metric_of = np.asarray([names.setdefault(_metric_name(template.labels_of(i)), len(names))
                            for i in range(template.num_series)], np.int32)
    metrics = list(names)
    batches = _batches(workload, metric_of, per_series, budget, max_nodes)
    last_scrape = ledger.scrapes()
    end_s = start_s + last_scrape * interval_s  # after every sample's time
    range_s = int(np.ceil(end_s - start_s)) + 60
    conn = KeptAlive(base_url, timeout_s=timeout_s)
    out = {"acknowledged": int(exp.sum(axis=2)[ns_of, req_of].sum()),
           "maybe": int(may.sum(axis=2)[ns_of, req_of].sum()),
           "found": 0, "maybe_found": 0, "lost": 0, "extra": 0, "unknown_series": 0, "unverified": 0,
           "series_expected": 0, "series_found": 0, "series_found_after_churn": 0, "series_missing": 0,
           "queries": len(batches), "queries_failed": 0, "first_error": "", "lost_examples": [],
           "extra_examples": []}
    for b, (m, nodes, idx) in enumerate(batches):
        metric = metrics[m]
        expected: dict[bytes, int] = {}  # masked labels -> row in idx
        for row, i in enumerate(idx.tolist()):
            labels = template.labels_of(i)
            p = int(pod_of[i])
            if p >= 0:
                current = workload.pod_name(p, churn.generations[workload.pod_namespace[p]])
                labels = labels.replace(current.encode(), _masked(current).encode())
            expected[labels] = row
        regex = "(" + "|".join(re.escape(workload.address(n)) for n in nodes) + "):.*"
        query = f"count_over_time({metric}{{instance=~{json.dumps(regex)}}}[{range_s}s])"
        result = None
        for attempt in range(4):
            try:
                status, body, _ = conn.post("/api/v1/query", {"query": query, "time": f"{end_s:.3f}"})
            except OSError as e:
                status, body = 0, {"error": f"{type(e).__name__}: {e}"}
            if status == 200:
                result = body["data"]["result"]
                break
            out["first_error"] = out["first_error"] or f"{status}: {str(body.get('error', ''))[:300]}"
            time.sleep(2.0 * (attempt + 1))
        want = exp[ns_of[idx], req_of[idx]]  # (series, generation)
        allowed = may[ns_of[idx], req_of[idx]]
        if result is None:
            out["queries_failed"] += 1
            out["unverified"] += int(want.sum())
            continue
        got = np.zeros_like(want)
        for r in result:
            key, pod = _result_key(metric, r["metric"])
            count = int(float(r["value"][1]))
            row = expected.get(key)
            g = None if row is None else 0 if pod is None else workload.pod_generation(int(pod_of[idx[row]]), pod)
            if g is None or g >= top:
                out["unknown_series"] += 1
                out["extra"] += count
                if len(out["extra_examples"]) < 5:
                    out["extra_examples"].append({"metric": metric, "labels": r["metric"], "count": count})
                continue
            got[row, g] += count
        found = np.minimum(got, want)
        over = got - want
        out["found"] += int(found.sum())
        out["maybe_found"] += int(np.clip(over, 0, allowed).sum())
        out["extra"] += int(np.maximum(over - allowed, 0).sum())
        short = want - found
        out["lost"] += int(short.sum())
        out["series_expected"] += int((want > 0).sum())
        out["series_found"] += int((got > 0).sum())
        out["series_found_after_churn"] += int((got[:, 1:] > 0).sum())
        out["series_missing"] += int(((want > 0) & (got == 0)).sum())
        for r, g in zip(*np.nonzero(short)):
            if len(out["lost_examples"]) >= 5:
                break
            out["lost_examples"].append({"metric": metric, "series": int(idx[r]), "generation": int(g),
                                         "expected": int(want[r, g]), "found": int(got[r, g])})
        if b % 50 == 49:
            log(f"  read back {b + 1}/{len(batches)} queries: {out['found']:,} of {out['acknowledged']:,} "
                f"acknowledged samples found, {out['lost']:,} lost so far", flush=True)
    conn.close()
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["range_s"], out["at"] = range_s, end_s
    return out
