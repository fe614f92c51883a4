"""What `kvpilot run` executes: the control loop (``loop``) and its stages, the long-running ``service`` around it,
``wiring`` from settings, the ``runner`` that serves and shuts it down, target discovery, HA leases and shards."""
