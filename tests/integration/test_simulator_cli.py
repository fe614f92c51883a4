"""`kvpilot simulate --serve` as a real process: it announces its port, serves discovery, stops on SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.services.ports import free_port, wait_http

pytestmark = pytest.mark.integration


def test_serve_runs_until_sigterm(traces_dir: Path) -> None:
    port = free_port()
    kvpilot = Path(sys.executable).with_name("kvpilot")
    proc = subprocess.Popen(
        [str(kvpilot), "simulate", "--trace", str(traces_dir / "azure2023_conv.csv"), "--replicas", "3",
         "--engine", "sglang", "--serve", str(port), "--speed", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/targets", proc=proc)
        targets = httpx.get(f"http://127.0.0.1:{port}/targets").json()
        assert sum(t["kind"] == "engine" and t["engine"] == "sglang" for t in targets) == 3
        page = httpx.get(targets[0]["url"]).text
        assert "sglang:num_running_reqs{" in page
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert re.search(rf"serving on http://127.0.0.1:{port}", out)
