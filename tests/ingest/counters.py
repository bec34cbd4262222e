"""Reading metricsgw's own counters in the ingest tests."""

from metricsgw.telemetry import Telemetry


def discarded(tel: Telemetry, reason: str) -> float:
    return tel.registry.get_sample_value("metricsgw_discarded_samples_total", {"reason": reason}) or 0.0
