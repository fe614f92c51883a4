"""Reading a fleet through the Prometheus HTTP API at scale: the expressions (one source for the recording rules
kvpilot ships and the ad-hoc queries run without them), the decoding of their answers, and the series rebuilt into
the pages their targets served (``series``). The source that queries Prometheus is ``collector.discovery.promql``."""
