"""Reading a fleet through the Prometheus HTTP API at scale: the expressions (one source for the recording rules
kvpilot ships and the ad-hoc queries run without them) and the decoding of their answers."""
