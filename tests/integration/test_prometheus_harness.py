import pytest

from tests.services.pages import serve_pages
from tests.services.prometheus import run_prometheus

pytestmark = pytest.mark.integration


def test_real_prometheus_scrapes_a_loopback_target(tmp_path):
    # Proves the harness: a real Prometheus on loopback scrapes a page and its query API returns the value.
    with serve_pages({"/metrics": b"# TYPE harness_value gauge\nharness_value 42\n"}) as (host, port):
        target = f"{host}:{port}"
        cfg = [{"job_name": "harness", "static_configs": [{"targets": [target]}]}]
        with run_prometheus(tmp_path, scrape_configs=cfg) as prom:
            result = prom.wait_for("harness_value", timeout_s=30)
            assert float(result[0]["value"][1]) == 42.0
            assert result[0]["metric"]["instance"] == target
