"""`kvpilot run` reads what it was configured with (the targets file) before its HTTP port listens, and a port in use
says which setting to change (the real command, in a subprocess)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

KVPILOT = str(Path(sys.executable).with_name("kvpilot"))


@contextmanager
def _taken_port() -> Iterator[int]:
    with socket.socket() as taken:  # another process (another kvpilot run) holds the port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path), "KVPILOT_GRPC_PORT": "0"}
    env.pop("KVPILOT_HTTP_PORT", None)
    return subprocess.run([KVPILOT, "run", *args], env=env, capture_output=True, text=True, timeout=60)


def test_a_bad_targets_file_is_told_before_the_port_is_bound(tmp_path: Path) -> None:
    targets = tmp_path / "targets.yaml"
    targets.write_text("- url: http://10.0.0.1:8000/metrics\n  kind: bogus\n")
    config = tmp_path / "kvpilot.yaml"
    config.write_text(f"collector:\n  discovery:\n    kind: static\n    static_file: {targets}\n")
    # Before: the port was bound first, so a port in use hid the file's mistake ("cannot listen", exit 1), and with a
    # free port the API listened while the file was read.
    with _taken_port() as port:
        out = _run(tmp_path, "-c", str(config), "--port", str(port))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: collector.discovery (static): {targets}:2:")
    assert "cannot listen" not in out.stderr


def test_a_port_in_use_names_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "kvpilot.yaml"
    config.write_text(
        f"store:\n  database_url: sqlite:///{tmp_path}/k.db\ncollector:\n  discovery:\n    kind: static\n"
    )
    with _taken_port() as port:
        out = _run(tmp_path, "-c", str(config), "--port", str(port))
    assert out.returncode == 1
    assert (
        f"cannot listen on 127.0.0.1:{port} (api.http_port: --port or KVPILOT_HTTP_PORT): Address already in use"
        in out.stderr
    )
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "k.db").exists()  # nothing was prepared for a process that cannot serve
