"""Remote-Write 2.0's written counts, as response headers.

The spec defines "written" as accepted rather than refused with an error, and forbids a 2xx unless
everything sent was written; Prometheus's sender also treats a 2xx that reports 0 written as a failure.
So samples dropped by configured rules count as written (accepted, then discarded on purpose); refused ones
do not. The shard's handler sets them, the front sums its shards' (procs/distributor.py).
"""

from __future__ import annotations

H_SAMPLES = "X-Prometheus-Remote-Write-Samples-Written"
H_HISTOGRAMS = "X-Prometheus-Remote-Write-Histograms-Written"
H_EXEMPLARS = "X-Prometheus-Remote-Write-Exemplars-Written"


def written_headers(version: int, samples: int, histograms: int = 0, exemplars: int = 0) -> dict[str, str]:
    """Remote-Write 2.0 'written' headers (each: stored + dropped by configured rules)."""
    if version != 2:
        return {}
    return {H_SAMPLES: str(samples), H_HISTOGRAMS: str(histograms), H_EXEMPLARS: str(exemplars)}
