"""What starting kvpilot costs: the Kubernetes client (~33 MB resident) is imported only where Kubernetes is used
(discovery, scale, drains, leases), so a process reading static targets or Prometheus never loads it."""

from __future__ import annotations

import subprocess
import sys


def test_the_runtime_and_the_cli_do_not_import_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "import kvpilot.cli, kvpilot.runtime.wiring, kvpilot.runtime.service\n"
        "import kvpilot.actuation.drain, kvpilot.runtime.lease\n"
        "print(sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]"
