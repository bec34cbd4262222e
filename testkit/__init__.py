"""The test harness the tests and the benches share: start and stop the servers under test on free loopback
ports (procs), the deterministic GPU-cluster workload (workload), its remote-write requests pre-encoded (wire)
and sent (load) to a server or to a fake receiver (receiver), the dashboards' queries (panels). The tests
import it and never bench/, so a bench can change without touching a test; bench/ imports it too, and adds
the command lines and the reports."""
