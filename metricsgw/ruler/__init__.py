"""The configured ruler (vmalert or Prometheus): its rule groups and alerts, in Prometheus's shape."""
