"""Parse throughput: kvpilot's exposition parser against prometheus_client's, same pages, same run.

The page mix is every real and hand-written /metrics page in tests/fixtures/metrics; one round
parses each page on its own (as a scrape does), ``--repeat`` times over. Three cases: (a) every
family; (b) the selective read kvpilot does each tick, ~40 engine and GPU families (prometheus_client
has no selection: it parses everything, then we filter); (c) the same selective read as a scrape does
it once it knows its target's page layout (``LayoutCache``, collector/exposition/_layout.py): each
fixture is a target, each repeat its next scrape with every value moved, the first scrape (which
learns the layout) untimed. Rounds alternate the two parsers; medians are compared. The last line is
``ratio: N.NN``, ours over prometheus_client's samples per second in the selective case (b).

    .venv/bin/python bench/parse.py [--repeat 20] [--rounds 7]
    .venv/bin/python bench/parse.py --pages-at 92e949e   # the fixture mix as it was at a commit (comparable runs)
    .venv/bin/python bench/parse.py --passes N [--case selective|all]   # untimed, for callgrind
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collector.exposition import DEFAULT_MAX_SAMPLES, LayoutCache, _text, parse  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "metrics"

# The families kvpilot's adapters read: queue, KV cache, prefix cache, tokens, latency histograms, GPU health.
WANTED = frozenset(
    {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries",
        "vllm:gpu_prefix_cache_hits",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "vllm:num_preemptions",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
        "vllm:request_success",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:prompt_tokens",
        "sglang:generation_tokens",
        "sglang:time_to_first_token_seconds",
        "tgi_queue_size",
        "tgi_batch_current_size",
        "tgi_request_generated_tokens",
        "nv_trt_llm_request_metrics",
        "nv_trt_llm_kv_cache_block_metrics",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_PROF_SM_ACTIVE",
    }
)


# The fixture mix grows as stacks are added (the ratio moves with it): ``--pages-at REV`` holds it to a commit's.
_PAGES_AT: str | None = None


def page_mix() -> list[str]:
    if _PAGES_AT is None:
        return [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.glob("*.txt"))]
    rel = FIXTURES.relative_to(REPO).as_posix()
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "--name-only", _PAGES_AT, f"{rel}/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [
        subprocess.run(
            ["git", "-C", str(REPO), "show", f"{_PAGES_AT}:{name}"], check=True, capture_output=True
        ).stdout.decode()
        for name in sorted(n for n in listed if n.endswith(".txt"))
    ]


def theirs_all(pages: list[str]) -> int:
    return sum(len(f.samples) for page in pages for f in text_string_to_metric_families(page))


def theirs_selective(pages: list[str]) -> int:
    return sum(len(f.samples) for page in pages for f in text_string_to_metric_families(page) if f.name in WANTED)


def ours_all(pages: list[str]) -> int:
    return sum(len(f.samples) for page in pages for f in parse(page).values())


def ours_selective(pages: list[str]) -> int:
    return sum(len(f.samples) for page in pages for f in parse(page, wanted=WANTED).values())


_VALUE_RE = re.compile(r"^([^#\n][^\n]*?(?<=[ }]))([^ \n{}\"]+)$", re.MULTILINE)


def moved(page: str, scrape: int) -> str:
    """The page at a later scrape: every sample value moved (counters grow, the rest wobble), layout kept."""

    def move(m: re.Match[str]) -> str:
        value = float(m[2])
        return m[1] + (repr(value + scrape * 1.5) if math.isfinite(value) else m[2])

    return _VALUE_RE.sub(move, page)


def scrape_mix(repeat: int) -> list[tuple[int, str]]:
    """(target, page) for ``repeat`` scrapes of every fixture as a target, values moving from one to the next."""
    return [(i, moved(page, r)) for r in range(repeat) for i, page in enumerate(page_mix())]


def ours_known_layout(scrapes: list[tuple[int, str]], cache: LayoutCache) -> int:
    return sum(
        len(f.samples)
        for target, page in scrapes
        for f in cache.parse(target, page, wanted=WANTED, max_samples=DEFAULT_MAX_SAMPLES).values()
    )


def interleaved_medians(
    ours: Callable[[list[str]], int], theirs: Callable[[list[str]], int], pages: list[str], rounds: int
) -> tuple[float, float, int, int]:
    """Median seconds of each parser, alternating them round by round so drift hits both alike."""
    t_ours: list[float] = []
    t_theirs: list[float] = []
    kept_ours = kept_theirs = 0
    for _ in range(rounds):
        start = time.process_time()
        kept_theirs = theirs(pages)
        t_theirs.append(time.process_time() - start)
        start = time.process_time()
        kept_ours = ours(pages)
        t_ours.append(time.process_time() - start)
    return statistics.median(t_ours), statistics.median(t_theirs), kept_ours, kept_theirs


def count_passes(passes: int, case: str) -> None:
    """Parse the fixture mix ``passes`` times with nothing else timed or printed: under callgrind, the instructions of
    two such runs differ by the parser's own (start-up, imports and the caches a first page fills cancel out)."""
    pages = page_mix()
    read = ours_selective if case == "selective" else ours_all
    read(pages)  # the cached run pattern and the like, made before the counted passes
    for _ in range(passes):
        read(pages)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20, help="copies of the fixture mix in one page")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds per parser and case (median)")
    ap.add_argument(
        "--passes",
        type=int,
        help="instead: parse the fixture mix this many times, untimed, for instruction counts (see BENCHMARKS.md)",
    )
    ap.add_argument("--case", choices=("selective", "all"), default="selective", help="with --passes")
    ap.add_argument("--pages-at", metavar="REV", help="the fixture pages as they were at this git revision")
    args = ap.parse_args()
    global _PAGES_AT
    _PAGES_AT = args.pages_at
    if args.passes is not None:
        count_passes(args.passes, args.case)
        return
    pages = page_mix() * args.repeat
    total = theirs_all(pages)  # every sample of every page, counted by the peer: the work both must do
    size = sum(len(p) for p in pages)
    # A build older than any compiled module's source is ignored (collector/__init__.py): say which parser ran.
    compiled = not _text.__file__.endswith(".py")
    print(f"parser: {'compiled' if compiled else 'pure Python'} ({Path(_text.__file__).name})")
    print(f"pages: {len(pages)} ({args.repeat} x {len(pages) // args.repeat} fixtures), {size} bytes, {total} samples")
    ratios: dict[str, float] = {}
    for case, ours, theirs in (("all", ours_all, theirs_all), ("selective", ours_selective, theirs_selective)):
        t_ours, t_theirs, kept_ours, kept_theirs = interleaved_medians(ours, theirs, pages, args.rounds)
        if kept_ours != kept_theirs:
            raise SystemExit(f"{case}: ours kept {kept_ours} samples, prometheus_client {kept_theirs}")
        ours_rate, theirs_rate = total / t_ours, total / t_theirs
        ratios[case] = ours_rate / theirs_rate
        print(
            f"{case:9s} kept {kept_ours:6d} samples | ours {ours_rate:12,.0f} samples/s "
            f"| prometheus_client {theirs_rate:12,.0f} samples/s | ratio {ratios[case]:.2f}"
        )
    scrapes = scrape_mix(args.repeat)
    cache = LayoutCache(parse)
    ours_known_layout(scrapes[: len(scrapes) // args.repeat], cache)  # first scrape of each target: learns
    timed = [page for _, page in scrapes]
    t_ours, t_theirs, kept_ours, kept_theirs = interleaved_medians(
        lambda _pages: ours_known_layout(scrapes, cache), theirs_selective, timed, args.rounds
    )
    if kept_ours != kept_theirs:
        raise SystemExit(f"layout known: ours kept {kept_ours} samples, prometheus_client {kept_theirs}")
    total = theirs_all(timed)
    ratios["known"] = (total / t_ours) / (total / t_theirs)
    print(
        f"{'scrape':9s} kept {kept_ours:6d} samples | ours {total / t_ours:12,.0f} samples/s "
        f"| prometheus_client {total / t_theirs:12,.0f} samples/s | ratio {ratios['known']:.2f} "
        f"(selective, layout known; {cache.hits} of {cache.hits + cache.misses} pages read off a layout)"
    )
    print(f"ratio: {ratios['selective']:.2f}")


if __name__ == "__main__":
    main()
