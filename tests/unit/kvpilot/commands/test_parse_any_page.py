"""`kvpilot parse` on any page, with or without --prefix: the samples (exit 0) or a reason in words (exit 2), never a
traceback. With --prefix, the check for the prefix parsed the page strictly and a line the adapters read past ended
in a ParseError traceback, exit 1 (`kvpilot parse --prefix foo` a page holding `x`)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvpilot.cli import app

# Lines a /metrics page is made of, whole and broken, and the characters that break them.
_LINES = st.sampled_from(
    [
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{model_name="m"} 1',
        'ray_vllm:num_requests_running{model_name="m"} 2',
        "vllm:gpu_cache_usage_perc 0.5",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n"} 50',
        "# HELP x y",
        "# EOF",
        "x",
        "x 1 2 3",
        'x{a="b} 1',
        "vllm:num_requests_waiting NaN",
        "",
    ]
)
_PAGE = st.lists(st.one_of(_LINES, st.text(max_size=20)), max_size=8).map("\n".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(page=_PAGE, prefix=st.sampled_from([None, "ray_", "foo", "vllm:", ""]))
def test_any_page_is_read_or_refused_in_words(tmp_path: Path, page: str, prefix: str | None) -> None:
    path = tmp_path / "page.txt"
    path.write_text(page, encoding="utf-8")
    argv = ["parse", "--json", *(["--prefix", prefix] if prefix is not None else []), str(path)]
    result = CliRunner().invoke(app, argv)
    assert isinstance(result.exception, SystemExit) or result.exception is None, repr(result.exception)
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output
