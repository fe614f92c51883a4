"""`kvpilot parse --max-body-bytes` raised far past any page (meaning "no cap"): the page is read as under the default,
plain or gzip-compressed. The file was read with one `read(cap + 1)`, which allocates that much first: 10**12 was a
MemoryError traceback, 2**63 - 1 an OverflowError (session 30 helper E)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvpilot.cli import app

PAGE = "vllm__DataDog__integrations-core__vllm_metrics.txt"


@pytest.mark.parametrize("cap", [10**12, 2**63 - 1, 10**20])
@pytest.mark.parametrize("compress", [False, True])
def test_a_cap_past_any_page_reads_the_page(metrics_fixtures: Path, tmp_path: Path, cap: int, compress: bool) -> None:
    plain = (metrics_fixtures / PAGE).read_bytes()
    page = tmp_path / "page"
    page.write_bytes(gzip.compress(plain) if compress else plain)
    os.utime(page, (1.7e9, 1.7e9))
    expected = CliRunner().invoke(app, ["parse", str(page), "--json"])
    read = CliRunner().invoke(app, ["parse", str(page), "--json", "--max-body-bytes", str(cap)])
    assert read.exit_code == 0, read.output
    assert json.loads(read.stdout) == json.loads(expected.stdout)
