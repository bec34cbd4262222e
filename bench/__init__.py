"""Benchmarks: side-by-side runs against Prometheus and VictoriaMetrics, on the test harness (testkit/)."""
