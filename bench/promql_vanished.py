"""Cost and size of the vanished-GPU selection (PromQL ``aggregates`` mode) against the fleet's size, on a real
Prometheus (Debian's ``prometheus``, as tests/services/prometheus.py runs it).

N GPUs on N/8 dcgm-exporter pages (8 GPUs, 14 DCGM families each), scraped every second for ``--history`` seconds
(240 samples per series: an hour's history at the usual 15 s scrape interval), then GPU 7 of the first 2 pages
stops being listed while both exporters keep answering. The query is the one PromQLSource sends for vanished GPUs
(``collector.promql.expressions.vanished_dcgm``, ``vanished_amd``, ``vanished_smi``, tagged, in one union) with the
lookback given. One JSON line per N: the answer's series, GPUs and bytes, and the query's wall time (7 runs). The
answer should hold the 2 dropped GPUs whatever N.

    .venv/bin/python bench/promql_vanished.py 40 400
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collector.adapt import WANTED_FAMILIES  # noqa: E402
from collector.gpus import amd  # noqa: E402
from collector.promql import expressions as ex  # noqa: E402
from collector.promql.series import names_regex  # noqa: E402
from tests.services.pages import serve_pages  # noqa: E402
from tests.services.prometheus import run_prometheus  # noqa: E402

FIELDS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
)
PER_PAGE = 8
DROPPED_PAGES = 2
RUNS = 7
LOCK = "/tmp/s18/measure.lock"


def dcgm_page(page: int, gpus: int = PER_PAGE) -> bytes:
    lines = []
    for name in FIELDS:
        lines.append(f"# TYPE {name} gauge")
        for gpu in range(gpus):
            labels = (
                f'gpu="{gpu}",UUID="GPU-{page:04d}-{gpu}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
                f'Hostname="node-{page}",DCGM_FI_DRIVER_VERSION="570.124.06"'
            )
            lines.append(f"{name}{{{labels}}} {0 if 'XID' in name or 'ECC' in name else 40 + gpu}")
    return ("\n".join(lines) + "\n").encode()


def query(lookback: str) -> str:
    dcgm = names_regex(frozenset(n for n in WANTED_FAMILIES if n.startswith("DCGM_")))
    parts = (
        ex.vanished_dcgm(dcgm, lookback),
        ex.vanished_amd(names_regex(amd.DME_FAMILIES), lookback),
        ex.vanished_smi(lookback),
    )
    return ex.union(*(ex.tagged(p, ex.VANISHED_PART) for p in parts))


def timed(prom_url: str, q: str) -> tuple[list[float], bytes, str]:
    """RUNS timings of ``q`` under the measuring lock (a subprocess holds it: flock), with uptime before and after."""
    code = (
        "import sys, time, httpx\n"
        "c = httpx.Client(timeout=60)\n"
        "url, q, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
        "out = []\n"
        "for _ in range(runs):\n"
        "    t0 = time.perf_counter()\n"
        "    r = c.post(url + '/api/v1/query', data={'query': q})\n"
        "    out.append(time.perf_counter() - t0)\n"
        "sys.stdout.buffer.write((' '.join(map(repr, out)) + '\\n').encode() + r.content)\n"
    )
    load_before = os.getloadavg()[0]
    done = subprocess.run(
        ["flock", LOCK, sys.executable, "-c", code, prom_url, q, str(RUNS)], capture_output=True, check=True
    )
    load = f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    first, _, body = done.stdout.partition(b"\n")
    return [float(t) for t in first.split()], body, load


def run(n: int, history_s: int, lookbacks: list[str]) -> list[dict[str, object]]:
    n_pages = n // PER_PAGE
    pages: dict[str, Path | bytes] = {f"/dcgm-{i}": dcgm_page(i) for i in range(n_pages)}
    out = []
    with serve_pages(pages) as (host, port), tempfile.TemporaryDirectory() as tmp:
        where = f"{host}:{port}"
        jobs: list[dict[str, object]] = [
            {"job_name": f"dcgm-{i}", "metrics_path": f"/dcgm-{i}", "static_configs": [{"targets": [where]}]}
            for i in range(n_pages)
        ]
        with run_prometheus(Path(tmp), scrape_configs=jobs, scrape_interval="1s") as prom:
            prom.wait_for(f"count(DCGM_FI_DEV_GPU_UTIL) == {n}", timeout_s=120)
            time.sleep(history_s)
            for i in range(DROPPED_PAGES):
                pages[f"/dcgm-{i}"] = dcgm_page(i, PER_PAGE - 1)
            prom.wait_for(f"count(DCGM_FI_DEV_GPU_UTIL) == {n - DROPPED_PAGES}", timeout_s=60)
            last = f"dcgm-{n_pages - 1}"  # a page still whole: its GPUs' history
            samples = prom.query(f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{job="{last}",gpu="0"}}[1h])')
            for lookback in lookbacks:
                times, body, load = timed(prom.url, query(lookback))
                series = json.loads(body)["data"]["result"]
                out.append(
                    {
                        "gpus_in_fleet": n,
                        "dcgm_series_in_fleet": n * len(FIELDS),
                        "samples_per_series": samples[0]["value"][1] if samples else None,
                        "lookback": lookback,
                        "answer_series": len(series),
                        "answer_gpus": sorted({f"{s['metric']['Hostname']}/{s['metric']['gpu']}" for s in series}),
                        "answer_bytes": len(body),
                        "query_ms_median": round(statistics.median(times) * 1000, 2),
                        "query_ms": [round(t * 1000, 2) for t in times],
                        "load_1m": load,
                    }
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gpus", nargs="*", type=int, default=[40, 400])
    parser.add_argument("--history", type=int, default=240, help="seconds of 1 s scrapes before the GPUs drop")
    parser.add_argument("--lookback", action="append", help="lookbacks to time (default: 1h, 15m)")
    args = parser.parse_args()
    for n in args.gpus:
        for line in run(n, args.history, args.lookback or ["1h", "15m"]):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
