"""Size of the AMD GPU selection's answer (PromQL ``aggregates`` mode) against the fleet's size, on a real
Prometheus (Debian's ``prometheus``, as tests/services/prometheus.py runs it).

N device-metrics-exporter pages (2 GPUs each; GPU 0 labelled with replica ``vllm-i``'s pod) and N vLLM pages, of
which the first 2 are stuck (3 requests running, counters still). The query is the one PromQLSource sends
(``collector.promql.expressions.amd_gpu_series``). One JSON line per N: the series, GPUs and bytes of the answer,
and the query's wall time (5 runs). The answer should hold the 2 stuck replicas' GPUs whatever N.

    .venv/bin/python bench/promql_amd_selection.py 20 200
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collector.gpus import amd  # noqa: E402
from collector.promql import expressions as ex  # noqa: E402
from collector.promql.series import names_regex  # noqa: E402
from tests.services.pages import serve_pages  # noqa: E402
from tests.services.prometheus import run_prometheus  # noqa: E402

VLLM = (ROOT / "tests/fixtures/metrics/vllm__DataDog__integrations-core__vllm_metrics.txt").read_bytes()
IDLE = b'vllm:num_requests_running{model_name="facebook/opt-125m"} 0.0'
STUCK = IDLE.replace(b"} 0.0", b"} 3.0")
STUCK_REPLICAS = 2
FIELDS = (
    "gpu_gfx_activity",
    "gpu_ecc_uncorrect_total",
    "gpu_health",
    "gpu_used_vram",
    "gpu_free_vram",
    "gpu_junction_temperature",
    "gpu_power_usage",
    "gpu_total_vram",
)


def dme_page(i: int) -> bytes:
    lines = []
    for name in FIELDS:
        lines.append(f"# TYPE {name} gauge")
        for gpu in (0, 1):
            pod = f'namespace="llm",pod="vllm-{i}",' if gpu == 0 else ""
            value = 1 if name == "gpu_health" else 0 if "ecc" in name else 97 if gpu == 0 else 50
            labels = f'{pod}gpu_id="{gpu}",gpu_partition_id="0",hostname="node-{i}",card_series="MI300X"'
            lines.append(f"{name}{{{labels}}} {value}")
    return ("\n".join(lines) + "\n").encode()


def run(n: int) -> dict[str, object]:
    pages: dict[str, Path | bytes] = {}
    for i in range(n):
        pages[f"/vllm-{i}"] = VLLM.replace(IDLE, STUCK) if i < STUCK_REPLICAS else VLLM
        pages[f"/amd-{i}"] = dme_page(i)
    with serve_pages(pages) as (host, port), tempfile.TemporaryDirectory() as tmp:
        where = f"{host}:{port}"
        engine = {"namespace": "llm", "deployment": "llama"}
        jobs: list[dict[str, object]] = [
            {
                "job_name": f"vllm-{i}",
                "metrics_path": f"/vllm-{i}",
                "static_configs": [{"targets": [where], "labels": {**engine, "pod": f"vllm-{i}"}}],
            }
            for i in range(n)
        ]
        jobs += [
            {
                "job_name": f"amd-{i}",
                "metrics_path": f"/amd-{i}",
                "honor_labels": True,
                "static_configs": [{"targets": [where]}],
            }
            for i in range(n)
        ]
        with run_prometheus(Path(tmp), scrape_configs=jobs, scrape_interval="2s") as prom:
            prom.wait_for(f"count(gpu_health) == {2 * n}", timeout_s=120)
            prom.wait_for(f"count(vllm:num_requests_running) == {n}", timeout_s=120)
            query = ex.amd_gpu_series(names_regex(amd.DME_FAMILIES), "60s", "", limit=500)
            times, body = [], b""
            for _ in range(5):
                t0 = time.perf_counter()
                answer = prom.http.post(f"{prom.url}/api/v1/query", data={"query": query})
                times.append(time.perf_counter() - t0)
                body = answer.content
            series = json.loads(body)["data"]["result"]
            fleet = prom.query('count({__name__=~"gpu_.+"})')[0]["value"][1]
    return {
        "targets": n,
        "gpus_in_fleet": 2 * n,
        "dme_series_in_fleet": int(float(fleet)),
        "answer_series": len(series),
        "answer_gpus": sorted({f"{s['metric']['hostname']}/{s['metric']['gpu_id']}" for s in series}),
        "answer_bytes": len(body),
        "query_ms_median": round(statistics.median(times) * 1000, 2),
        "query_ms": [round(t * 1000, 2) for t in times],
    }


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["20", "200"]:
        print(json.dumps(run(int(arg))), flush=True)
