"""The native KEDA load client of the benches (bench/native/keda_client.cc, glue in bench/_native.py): its output
read as bench/keda.py and bench/fleet_scale.py read it, and — where g++ and Debian's grpc headers are installed
(scripts/install-system-deps.sh puts them there) — built and run for about a second against a real kvpilot KEDA
server (bench/keda.py's own server process: scaler.keda's servicer and grpc's Health servicer)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import _native
from tests.helpers.bench import load_bench

LINES = (
    "round 1 method GetMetrics p50_ms 0.4120 p99_ms 1.2500 saturated_calls_s 9000.0 calls 4000 errors 0 "
    "paced_cpu_s 0.2000\n"
    "round 1 method Health.Check p50_ms 0.3000 p99_ms 0.9000 saturated_calls_s 12000.5 calls 3990 errors 2 "
    "paced_cpu_s 0.1500\n"
    "round 2 method GetMetrics p50_ms 0.4000 p99_ms 1.7500 saturated_calls_s 8000.0 calls 4000 errors 0 "
    "paced_cpu_s 0.2500\n"
)


def test_rounds_are_read_per_method_label_and_round() -> None:
    rounds = _native.parse_rounds(LINES)
    assert rounds.p99_ms == {"kvpilot GetMetrics": [1.25, 1.75], "grpc Health.Check": [0.9]}
    assert rounds.p50_ms["kvpilot GetMetrics"] == [0.412, 0.4]
    assert rounds.calls_s["grpc Health.Check"] == [12000.5]
    assert rounds.errors == {"kvpilot GetMetrics": 0, "grpc Health.Check": 2}
    assert rounds.paced_cpu_s == pytest.approx(0.6)
    assert rounds.paced_calls == 11990


@pytest.mark.parametrize(
    "text",
    [
        "",
        "round 1 method IsActive p50_ms 0.4 p99_ms 1.2 saturated_calls_s 9 calls 4 errors 0 paced_cpu_s 0.2",
        "round 1 method GetMetrics p50_ms 0.4 p99_ms 1.2 saturated_calls_s 9 calls 4 errors 0",  # a field short
        "keda_client: no connection to 127.0.0.1:1 within 60 s",
    ],
)
def test_anything_else_on_its_output_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="native KEDA client"):
        _native.parse_rounds(text)


def test_a_missing_toolchain_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "missing", lambda: ["grpc++ (pkg-config)"])
    with pytest.raises(_native.NativeUnavailable, match=r"grpc\+\+ \(pkg-config\).*libgrpc\+\+-dev.*--client python"):
        _native.build()


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    """bench/keda.py's server (20 ScaledObjects with decisions, grpc's Health beside them): its port."""
    if lacks := _native.missing():
        pytest.skip(
            f"no toolchain for the native client here: missing {', '.join(lacks)} (scripts/install-system-deps.sh)"
        )
    _native.build()
    keda = Path(_native.ROOT) / "bench" / "keda.py"
    proc = subprocess.Popen(
        [sys.executable, str(keda), "--serve", "--objects", "20"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


@pytest.mark.e2e
def test_rounds_against_a_real_kvpilot_keda_server(server: int) -> None:
    rounds = _native.run_rounds(server, objects=20, interval=0.1, seconds=1.0, rounds=1)
    assert rounds.errors == {"kvpilot GetMetrics": 0, "grpc Health.Check": 0}
    # 20 pollers at 10 calls/s each for 1 s: about 200 calls a method, each answered
    assert 100 <= rounds.paced_calls / 2 <= 200
    for label in ("kvpilot GetMetrics", "grpc Health.Check"):
        (p50,), (p99,), (rate,) = rounds.p50_ms[label], rounds.p99_ms[label], rounds.calls_s[label]
        assert 0 < p50 <= p99 < 1000
        assert rate > 50


@pytest.mark.e2e
def test_the_fleet_probe_schedule_is_read_by_fleet_scale(server: int, tmp_path: Path) -> None:
    fleet_scale = load_bench("fleet_scale")
    out = tmp_path / "grpc.txt"
    # team-0/model-0 is one of the server's ScaledObjects (fleet_scale asks for prod/llm-0 of its own fleet)
    argv = _native.schedule_argv(server, fleet_scale.GRPC_PERIOD_S, "team-0", "model-0", out)
    client = subprocess.Popen(argv, stdin=subprocess.PIPE)
    time.sleep(1.0)
    assert client.stdin is not None
    client.stdin.close()
    assert client.wait(timeout=30) == 0
    run = fleet_scale.Run(20, "aggregates", measured_from=0.0, windows=[(0.0, 1.0)])  # no call overlaps 0-1 s
    fleet_scale._split_grpc(run, out, until=time.monotonic())  # the monotonic clock: the native client's is the same
    assert run.grpc_errors == {}
    metrics, health = run.grpc_outside["GetMetrics"], run.grpc_outside["Health.Check"]
    assert run.grpc_during == {"GetMetrics": [], "Health.Check": []}
    # one GetMetrics a 25 ms period and one Health.Check every other: ~40 and ~20 in the second
    assert 5 <= len(metrics) <= 45
    assert abs(len(metrics) - 2 * len(health)) <= 2
    assert all(0 < ms < 1000 for ms in metrics + health)
