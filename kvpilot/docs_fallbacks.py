"""What the configuration reference says about settings and checks whose source carries no description yet.

Kept apart from the generator because it is prose, not code. The unit test fails when a key names nothing, or names
a field or validator that has since been documented in ``kvpilot/settings.py`` (then delete the entry here).
"""

from __future__ import annotations

# Descriptions for fields whose source carries none yet, keyed by YAML path. The unit test fails when a key names no
# field, or a field that has since gained its own description (then delete the entry here): they cannot go stale.
FALLBACK_DESCRIPTIONS: dict[str, str] = {
    "environment": "`production` refuses to start without admin tokens and with well-known or short tokens.",
    "data_dir": "Folder for the default SQLite store (`kvpilot.db`): `$XDG_DATA_HOME/kvpilot`, else "
    "`~/.local/share/kvpilot`.",
    "log_level": "Log level of every kvpilot logger.",
    "collector.interval_s": "Control-loop tick: every target is scraped, and findings and decisions are computed, "
    "once per interval.",
    "collector.timeout_s": "Per-scrape timeout; a target slower than this counts as a failed scrape.",
    "collector.concurrency": "Most scrapes in flight at once.",
    "collector.rate_window_s": "Window over which counters become rates (arrivals, tokens, prefix-cache hit ratio).",
    "collector.history_s": "History kept in memory per replica (and restored from the store's roll-ups at start).",
    "collector.stale_after_s": "A replica not scraped successfully for this long no longer counts as ready.",
    "collector.discovery.kind": "`static` (listed targets), `kubernetes` (labelled pods), `promql` (targets from "
    "a Prometheus-compatible API) or `simulator` (the built-in fleet).",
    "collector.discovery.static_targets": "Targets listed inline (also added to any discovered ones).",
    "collector.discovery.kubernetes_label_selector": "Pods carrying these labels are scraped.",
    "collector.discovery.promql_url": "Base URL of Prometheus, Thanos or Mimir for `kind: promql`.",
    "collector.discovery.simulator_replicas": "Replicas of the built-in simulator (`kind: simulator`).",
    "collector.discovery.static_targets[].url": "The target's /metrics URL.",
    "collector.discovery.static_targets[].kind": "`engine` (an inference server) or `gpu` (dcgm-exporter).",
    "collector.discovery.static_targets[].engine": "Engine name (see docs/engines.md); unset: detected from the page.",
    "collector.discovery.static_targets[].namespace": "Namespace the replica is reported under.",
    "collector.discovery.static_targets[].deployment": "Deployment the replica belongs to (the scaling unit).",
    "collector.discovery.static_targets[].pod": "Replica name; unset: the URL.",
    "collector.discovery.static_targets[].node": "Node the replica or GPUs run on (joins replicas to GPUs).",
    "detectors.only": "Run only these detectors (by kind); unset: all.",
    "detectors.kv": "Overrides of the KV-exhaustion thresholds (table below).",
    "detectors.prefix": "Overrides of the prefix-cache-miss thresholds (table below).",
    "detectors.gpu": "Overrides of the stuck-GPU thresholds (table below).",
    "detectors.ttft": "Overrides of the TTFT SLO (table below).",
    "detectors.target": "Overrides of the target-down threshold (table below).",
    "scaler.mode": "`advisory` (decide and publish only), `keda` (publish to KEDA's external scaler) or `direct` "
    "(patch deployments/scale).",
    "scaler.cold_start_s": "Time from a replica's creation until it serves: the forecast looks this far ahead.",
    "scaler.default.min_replicas": "Fewest replicas kvpilot will ask for.",
    "scaler.default.max_replicas": "Most replicas kvpilot will ask for (100: KEDA's default `maxReplicaCount`).",
    "scaler.deployments{}.min_replicas": "Fewest replicas for this deployment.",
    "scaler.deployments{}.max_replicas": "Most replicas for this deployment.",
    "store.retention_days": "Findings, decisions and roll-ups older than this are deleted.",
    "api.host": "Address the HTTP and gRPC servers bind.",
    "api.http_port": "HTTP API and /metrics port (0: any free port).",
    "api.grpc_port": "KEDA external-scaler gRPC port (0: any free port).",
    "api.read_tokens": "Bearer tokens allowed to read; comma-separated in the environment.",
    "api.admin_tokens": "Bearer tokens allowed to read and to act (approve drains); comma-separated in the "
    "environment.",
    "api.max_body_bytes": "Largest request body the API accepts.",
    "drains.dry_run": "Record drain actions without cordoning or evicting anything.",
    "drains.max_concurrent": "Most nodes drained (approved or executing) at once.",
    "drains.require_approval": "A drain waits for an admin's approval through the API before it runs.",
    "ha.enabled": "Run several replicas; only the holder of the Lease actuates.",
    "ha.lease_name": "Name of the coordination.k8s.io Lease.",
    "ha.lease_namespace": "Namespace of the Lease.",
    "ha.lease_duration_s": "A leader that has not renewed for this long loses the Lease.",
    "ha.renew_every_s": "How often the leader renews (and followers try to take) the Lease.",
    "ha.identity": "This replica's name in the Lease (the pod name in Kubernetes).",
}

# Cross-field checks, keyed by "Model.validator" for validators without a docstring (test-guarded like the above).
FALLBACK_CHECKS: dict[str, str] = {
    "DiscoverySettings._source_configured": "`kind: promql` needs `promql_url`",
    "CollectorSettings._timeout_fits_tick": "`timeout_s` < `interval_s`",
    "DetectorSettings._applies": "every override names a known threshold and passes its range check",
    "DeploymentScaling._ordered": "`min_replicas` ≤ `max_replicas`",
    "ScalerSettings._keys_are_namespaced": "every `deployments` key is `namespace/name`",
    "ApiSettings._split_read": "tokens given as one comma-separated string are split",
    "KedaSettings._split_bearer": "bearer tokens given as one comma-separated string are split",
    "HaSettings._renew_within_lease": "`renew_every_s` < `lease_duration_s`",
    "Settings._secrets_not_at_defaults": "outside development, admin tokens are set and none is weak",
    "Settings._read_is_not_admin": "no token is both a read and an admin token",
}
