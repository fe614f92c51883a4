#!/usr/bin/env bash
# Installs the Debian packages the integration tests start for real: Prometheus (+ promtool),
# Alertmanager and PostgreSQL, kubectl (for `kubectl kustomize`) and openssl (test certificates); and g++ with
# Debian's grpc (headers, protoc, grpc_cpp_plugin) for the benches' native KEDA client (bench/native, built in ~16 s
# on first use).
# Idempotent; does nothing when they are already there.
set -euo pipefail
need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null || need+=(prometheus-alertmanager)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v kubectl >/dev/null || need+=(kubernetes-client)  # `kubectl kustomize` renders deploy/ in the tests
command -v g++ >/dev/null || need+=(g++)  # bench/native/keda_client.cc (bench/keda.py --client native)
command -v grpc_cpp_plugin >/dev/null || need+=(protobuf-compiler-grpc)
# libgrpc++-dev does not pull in protobuf's headers and protobuf.pc (Debian 12): name libprotobuf-dev too, or the
# native client's tests skip on a clean machine and this line reinstalls on every run.
{ command -v pkg-config >/dev/null && pkg-config --exists grpc++ protobuf; } || need+=(libgrpc++-dev libprotobuf-dev pkg-config)
command -v openssl >/dev/null || need+=(openssl)  # a throwaway CA and certificate for the Lease transport's TLS test
((${#need[@]})) || exit 0
bash "$(dirname "$0")/apt-install.sh" "missing Debian packages" "${need[@]}"
# Debian starts the packaged services on install; the tests start their own on loopback.
for svc in prometheus prometheus-alertmanager postgresql; do
  (service "$svc" stop || true) >/dev/null 2>&1
done
