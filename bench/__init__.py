"""Benchmark kit: workload generator, remote-write load driver, side-by-side runs against Prometheus."""
