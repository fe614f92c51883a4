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
    .venv/bin/python bench/parse.py --per-page [--repeat 20] [--rounds 7]   # each page cold: a ratio per page
    .venv/bin/python bench/parse.py --per-page --callgrind   # instructions per page, ours and theirs

``--per-page``: the selective read (b) of each fixture page on its own, parsed cold (a fresh parse, as a target's
first scrape or a changed layout does), ``--repeat`` times in a row, ours and prometheus_client's alternating page by
page, ``--rounds`` rounds; per page the median of each and their ratio, then how many pages reach ``--goal`` (15x).
``--callgrind`` runs the same under valgrind's callgrind (bench/_callgrind.py): the instructions each parser executes
per page (PYTHONHASHSEED=0 for repeatable counts), and their ratio; ``--counts-out FILE`` keeps them as JSON
(``--compare FILE`` prints each page's count against such a file's, e.g. the commit before a change).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
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
    return [text for _, text in named_pages()]


def named_pages() -> list[tuple[str, str]]:
    """(file name, text) of every fixture page, now or at ``--pages-at``."""
    if _PAGES_AT is None:
        return [(p.name, p.read_text(encoding="utf-8")) for p in sorted(FIXTURES.glob("*.txt"))]
    rel = FIXTURES.relative_to(REPO).as_posix()
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "--name-only", _PAGES_AT, f"{rel}/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return [
        (
            name.rpartition("/")[2],
            subprocess.run(
                ["git", "-C", str(REPO), "show", f"{_PAGES_AT}:{name}"], check=True, capture_output=True
            ).stdout.decode(),
        )
        for name in sorted(n for n in listed if n.endswith(".txt"))
    ]


def theirs_all(pages: list[str]) -> int:
    return sum(len(f.samples) for page in pages for f in text_string_to_metric_families(page))


def theirs_selective(pages: list[str]) -> int:
    # a wanted family, or an untyped part of one (``X_bucket``, ``X_sum``, ``X_count`` of a page without TYPE lines),
    # which ours puts back together as ``X`` (collector/exposition/_untyped.py) and prometheus_client leaves apart
    return sum(
        len(f.samples)
        for page in pages
        for f in text_string_to_metric_families(page)
        if f.name in WANTED
        or (f.type == "unknown" and f.name.endswith(_PARTS) and f.name[: f.name.rindex("_")] in WANTED)
    )


_PARTS = ("_bucket", "_sum", "_count")


def _untyped_parts(text: str) -> bool:
    """Whether prometheus_client reads an untyped part of a wanted family on the page (see ``theirs_selective``)."""
    return any(
        f.type == "unknown" and f.name.endswith(_PARTS) and f.name[: f.name.rindex("_")] in WANTED
        for f in text_string_to_metric_families(text)
    )


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


def check_kept(pages: list[tuple[str, str]]) -> None:
    """Each page once, untimed: both parsers' selective reads keep the same samples, on every page whose wanted
    families are all typed. Untyped parts of a wanted family are where ours knowingly differs (it puts a histogram's
    untyped parts together only where they make one, collector/exposition/_untyped.py: a lone ``X_sum`` is left out):
    a page holding any (every page without TYPE lines; a page whose typed families are followed by untyped lines, as
    the vLLM two-node excerpt pinned in 3eb9a2d) is not compared."""
    for name, text in pages:
        if "# TYPE " not in text or _untyped_parts(text):
            continue
        ours, theirs = ours_selective([text]), theirs_selective([text])
        if ours != theirs:
            raise SystemExit(f"{name}: ours kept {ours} samples, prometheus_client {theirs}")


def _short(name: str) -> str:
    """A fixture's name without its source part (``vllm-v1-dp2__handwritten.txt`` -> ``vllm-v1-dp2``)."""
    return name.removesuffix(".txt").partition("__")[0]


def _goal_line(ratios: dict[str, float], goal: float, what: str) -> str:
    met = sum(r >= goal for r in ratios.values())
    worst = sorted(ratios.items(), key=lambda item: item[1])[:3]
    shown = ", ".join(f"{_short(n)} {r:.1f}x" for n, r in worst)
    return (
        f"per page ({what}): {met} of {len(ratios)} pages >= {goal:g}x;"
        f" median page {statistics.median(ratios.values()):.2f}x; lowest {shown}"
    )


def per_page_times(repeat: int, rounds: int, goal: float) -> None:
    """``--per-page``: each page's cold selective read, ours against prometheus_client's, a ratio per page."""
    pages = named_pages()
    t_ours: dict[str, list[float]] = {name: [] for name, _ in pages}
    t_theirs: dict[str, list[float]] = {name: [] for name, _ in pages}
    clock = time.process_time
    check_kept(pages)
    for _ in range(rounds):
        for name, text in pages:
            batch = [text] * repeat
            start = clock()
            theirs_selective(batch)
            t_theirs[name].append(clock() - start)
            start = clock()
            ours_selective(batch)
            t_ours[name].append(clock() - start)
    ratios: dict[str, float] = {}
    print(f"{'page':48s} {'bytes':>7s} {'kept':>6s} {'ours us':>9s} {'theirs us':>10s} {'ratio':>6s}")
    rows = []
    for name, text in pages:
        ours, theirs = statistics.median(t_ours[name]) / repeat, statistics.median(t_theirs[name]) / repeat
        ratios[name] = theirs / ours
        rows.append((ratios[name], name, len(text), ours_selective([text]), ours, theirs))
    for ratio, name, size, kept, ours, theirs in sorted(rows):
        flag = "" if ratio >= goal else "  < goal"
        print(f"{_short(name)[:48]:48s} {size:7d} {kept:6d} {ours * 1e6:9.1f} {theirs * 1e6:10.1f} {ratio:6.2f}{flag}")
    total_ours = sum(row[4] for row in rows)
    total_theirs = sum(row[5] for row in rows)
    print(
        f"every page once: ours {total_ours * 1e3:.3f} ms, prometheus_client {total_theirs * 1e3:.3f} ms,"
        f" ratio {total_theirs / total_ours:.2f}"
    )
    print(_goal_line(ratios, goal, "CPU time, medians of " + str(rounds) + " rounds"))


def per_page_counts(args: argparse.Namespace) -> None:
    """``--per-page --callgrind``: run this script under callgrind, instructions per page for each parser."""
    from bench import _callgrind

    lacks = _callgrind.missing()
    if lacks:
        raise SystemExit(f"bench/parse.py --callgrind: missing {', '.join(lacks)} (Debian: apt-get install valgrind)")
    _callgrind.client_library()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        child = [
            sys.executable,
            __file__,
            "--role",
            "counted",
            "--callgrind-out",
            str(out),
            "--repeat",
            str(args.repeat),
        ]
        if args.pages_at:
            child += ["--pages-at", args.pages_at]
        subprocess.run([*_callgrind.command(out), *child], check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        counts: dict[str, dict[str, float]] = {}
        for dump in _callgrind.dumps(out):
            text = dump.read_text(errors="replace")
            label = re.search(r"^desc: Trigger: Client Request: (\S+)", text, re.M)
            if label is None:
                continue
            who, _, name = label[1].partition(":")
            counts.setdefault(name, {})[who] = _callgrind.totals(dump) / (args.repeat if who == "ours" else 1)
    before: dict[str, dict[str, float]] = {}
    if args.compare:
        before = json.loads(Path(args.compare).read_text())["pages"]
    ratios = {name: c["theirs"] / c["ours"] for name, c in counts.items()}
    head = f"{'page':48s} {'ours Ir':>10s} {'theirs Ir':>11s} {'ratio':>6s}"
    print(head + (f" {'before Ir':>10s} {'after/before':>12s}" if before else ""))
    for name, c in sorted(counts.items(), key=lambda item: ratios[item[0]]):
        row = f"{_short(name)[:48]:48s} {c['ours']:10.0f} {c['theirs']:11.0f} {ratios[name]:6.2f}"
        if name in before:
            row += f" {before[name]['ours']:10.0f} {c['ours'] / before[name]['ours']:12.4f}"
        print(row)
    ours_all = sum(c["ours"] for c in counts.values())
    theirs_all = sum(c["theirs"] for c in counts.values())
    print(
        f"every page once: ours {ours_all / 1e6:.3f} M, prometheus_client {theirs_all / 1e6:.3f} M instructions,"
        f" ratio {theirs_all / ours_all:.2f}"
    )
    if before:
        common = [n for n in counts if n in before]
        changes = [counts[n]["ours"] / before[n]["ours"] for n in common]
        worst = max(common, key=lambda n: counts[n]["ours"] / before[n]["ours"])
        print(
            f"against {args.compare}: {len(common)} pages, ours after/before median {statistics.median(changes):.4f},"
            f" highest {max(changes):.4f} ({_short(worst)}), lowest {min(changes):.4f}; every page once"
            f" {ours_all / sum(before[n]['ours'] for n in common):.4f}"
        )
    print(_goal_line(ratios, args.goal, "instructions, callgrind"))
    if args.counts_out:
        Path(args.counts_out).write_text(json.dumps({"repeat": args.repeat, "pages": counts}, indent=1, sort_keys=True))


def counted_role(args: argparse.Namespace) -> None:
    """Under callgrind (``per_page_counts``): each page parsed by ours ``--repeat`` times and by prometheus_client once,
    each count dumped under its page's name; a first read of every page, uncounted, fills what a first page fills."""
    from bench import _callgrind

    requests = _callgrind.Requests()
    pages = named_pages()
    for _, text in pages:
        ours_selective([text])
        theirs_selective([text])
    requests.start()
    for name, text in pages:
        ours_selective([text])  # the page's own first read (its label bodies' first sight is per parse anyway)
        batch = [text] * args.repeat
        requests.zero()
        ours_selective(batch)
        requests.dump("ours:" + name)
        theirs_selective([text])
        requests.dump("theirs:" + name)
    requests.stop()


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
    ap.add_argument(
        "--per-page", action="store_true", help="instead: each page's cold selective read, a ratio per page"
    )
    ap.add_argument("--goal", type=float, default=15.0, help="with --per-page: the ratio each page should reach")
    ap.add_argument("--callgrind", action="store_true", help="with --per-page: instructions per page (valgrind)")
    ap.add_argument("--counts-out", metavar="FILE", help="with --callgrind: the counts per page as JSON")
    ap.add_argument("--compare", metavar="FILE", help="with --callgrind: each page's count against --counts-out's")
    ap.add_argument("--role", choices=("counted",), help=argparse.SUPPRESS)
    ap.add_argument("--callgrind-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global _PAGES_AT
    _PAGES_AT = args.pages_at
    if args.role == "counted":
        counted_role(args)
        return
    if args.per_page:
        if args.callgrind:
            per_page_counts(args)
        else:
            compiled = not _text.__file__.endswith(".py")
            print(f"parser: {'compiled' if compiled else 'pure Python'} ({Path(_text.__file__).name})")
            per_page_times(args.repeat, args.rounds, args.goal)
        return
    if args.passes is not None:
        count_passes(args.passes, args.case)
        return
    check_kept(named_pages())
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
        if case == "all" and kept_ours != kept_theirs:  # the selective reads are compared page by page (check_kept)
            raise SystemExit(f"{case}: ours kept {kept_ours} samples, prometheus_client {kept_theirs}")
        ours_rate, theirs_rate = total / t_ours, total / t_theirs
        ratios[case] = ours_rate / theirs_rate
        print(
            f"{case:9s} kept {kept_ours:6d} samples (theirs {kept_theirs}) | ours {ours_rate:12,.0f} samples/s "
            f"| prometheus_client {theirs_rate:12,.0f} samples/s | ratio {ratios[case]:.2f}"
        )
    scrapes = scrape_mix(args.repeat)
    cache = LayoutCache(parse)
    ours_known_layout(scrapes[: len(scrapes) // args.repeat], cache)  # first scrape of each target: learns
    timed = [page for _, page in scrapes]
    t_ours, t_theirs, kept_ours, kept_theirs = interleaved_medians(
        lambda _pages: ours_known_layout(scrapes, cache), theirs_selective, timed, args.rounds
    )
    if kept_ours != ours_selective(timed):
        raise SystemExit(f"layout known: ours kept {kept_ours} samples, {ours_selective(timed)} when parsed")
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
