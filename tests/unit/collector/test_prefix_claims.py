"""What a prefix or a compatible server's namespace claims, at its edges: `AdaptedPage.prefix` names only text that was
removed, and a server's renamed series never stands in for a family the engine itself wrote on the same page.

Both wrong on 369349f: a configured prefix the page did not carry was reported as read behind (`kvpilot parse --prefix
ray_` on a plain vLLM page said "its names are vllm's behind the prefix `ray_`"), and LMDeploy's API-server queue
replaced a `vllm:num_requests_waiting` of the page's own.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from collector.adapt import adapt_page
from collector.samples import TargetInfo

_VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 1
"""


def test_a_configured_prefix_the_page_does_not_carry_is_not_reported() -> None:
    page = adapt_page(_VLLM, TargetInfo(url="http://plain-vllm/metrics", prefix="ray_"), 0.0)
    assert (page.engine, page.prefix) == ("vllm", None)
    carried = _VLLM.replace("vllm:", "ray_vllm:")
    page = adapt_page(carried, TargetInfo(url="http://ray-vllm/metrics", prefix="ray_"), 0.0)
    assert (page.engine, page.prefix) == ("vllm", "ray_")


def test_kvpilot_parse_does_not_claim_a_prefix_it_did_not_remove(tmp_path: Path) -> None:
    from kvpilot.cli import app

    file = tmp_path / "vllm.txt"
    file.write_text(_VLLM)
    result = CliRunner().invoke(app, ["parse", str(file), "--prefix", "ray_", "--json"])
    assert result.exit_code == 0, result.stderr
    assert "behind the prefix" not in result.stderr


def test_the_engines_own_family_wins_over_a_renamed_one() -> None:
    # a page that carries vLLM's own waiting and LMDeploy's API-server queue, read behind `lmdeploy:`: the engine's own
    # family is kept whichever comes first (as for any prefixed name), not replaced by the renamed one
    api = "# TYPE lmdeploy:num_api_requests_waiting gauge\nlmdeploy:num_api_requests_waiting 50\n"
    for i, text in enumerate((_VLLM + api, api + _VLLM)):
        page = adapt_page(text, TargetInfo(url=f"http://mixed-{i}/metrics", prefix="lmdeploy:"), 0.0)
        (replica,) = page.replicas
        assert (replica.requests_running, replica.requests_waiting) == (2.0, 1.0)
