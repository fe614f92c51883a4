"""`kvpilot parse` on a page saved gzip-compressed (`curl -H 'Accept-Encoding: gzip' URL > page`, a proxy's capture):
read as the scrape loop reads a gzip answer, not "malformed page: line 1: invalid UTF-8" and compressed bytes."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from typer.testing import CliRunner

from kvpilot.cli import app

PAGE = "vllm__DataDog__integrations-core__vllm_metrics.txt"


def test_a_gzipped_page_reads_as_the_page(metrics_fixtures: Path, tmp_path: Path) -> None:
    plain = (metrics_fixtures / PAGE).read_bytes()
    page = tmp_path / "page"  # the same path and time, plain then gzipped: the replica is named by both
    page.write_bytes(plain)
    os.utime(page, (1.7e9, 1.7e9))
    expected = CliRunner().invoke(app, ["parse", str(page), "--json"])
    page.write_bytes(gzip.compress(plain))
    os.utime(page, (1.7e9, 1.7e9))
    read = CliRunner().invoke(app, ["parse", str(page), "--json"])
    assert read.exit_code == 0, read.output
    assert read.stderr == ""
    assert json.loads(read.stdout) == json.loads(expected.stdout)
    assert json.loads(read.stdout)["replicas"][0]["engine"] == "vllm"


def test_the_page_cap_applies_to_the_inflated_page(metrics_fixtures: Path, tmp_path: Path) -> None:
    # 21 KiB inflated, far less compressed: refused under 4096 bytes as the plain page is (a gzip bomb is never inflated
    # past the cap)
    (tmp_path / "page.gz").write_bytes(gzip.compress((metrics_fixtures / PAGE).read_bytes()))
    refused = CliRunner().invoke(app, ["parse", str(tmp_path / "page.gz"), "--max-body-bytes", "4096"])
    assert refused.exit_code == 2
    assert refused.stderr == (
        f"kvpilot parse: {tmp_path / 'page.gz'}: larger than 4096 bytes, the page cap; "
        "raise --max-body-bytes to read it\n"
    )


def test_a_gzipped_page_cut_short_or_not_gzip_says_so(metrics_fixtures: Path, tmp_path: Path) -> None:
    whole = gzip.compress((metrics_fixtures / PAGE).read_bytes())
    (tmp_path / "cut.gz").write_bytes(whole[:300])
    cut = CliRunner().invoke(app, ["parse", str(tmp_path / "cut.gz")])
    assert (cut.exit_code, cut.stdout) == (2, "")
    assert (
        cut.stderr
        == f"kvpilot parse: {tmp_path / 'cut.gz'}: a gzip-compressed page cut short; save it again (or uncompressed)\n"
    )
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b" + b"x" * 40)
    bad = CliRunner().invoke(app, ["parse", str(tmp_path / "bad.gz")])
    assert (bad.exit_code, bad.stdout) == (2, "")
    assert bad.stderr.startswith(f"kvpilot parse: {tmp_path / 'bad.gz'}: starts as gzip but does not inflate (")
    assert bad.stderr.endswith("); save the page uncompressed\n")
