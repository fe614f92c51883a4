"""Pages read around bad lines (``parse(..., drop_bad_lines=True)``, collector/exposition/_partial.py): what a
scrape costs while a target's exporter keeps writing a line no parser can read, against the same page clean.

Two pages, each read as the scrape loop reads it (``collector.adapt``'s parser behind a ``LayoutCache``, one
target), every scrape with its values moved:

* ``dcgm``: a 44 KB dcgm-exporter page (the A800 MIG fixture) whose GPU temperature field is written as dcgm-exporter
  writes a field it cannot render, ``ERROR - FAILED TO CONVERT TO STRING``, on every GPU; CPU per scrape, steady
  state (the page's layout known), clean and with the bad field.
* ``large``: a 6.7 MB vLLM page (the DataDog vLLM fixture, every series repeated for 400 pods: 74,100 lines, past the
  size a layout is kept for), bad values on the last lines of the last 1 or 8 wanted metric names (the worst case:
  each is found only at the end of a read); CPU of the target's first scrape with the bad lines, and of its next
  scrapes (steady state), every family and the selective read.

    .venv/bin/python bench/partial_pages.py [--case dcgm|large|all] [--repeats 7]

Prints one line per case, medians of ``--repeats`` timings (process CPU), then ``ratio`` lines: each bad case over its
clean case, same run.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collector.adapt import WANTED_FAMILIES, parse  # noqa: E402  (the scrape loop's parser: drop_bad_lines=True)
from collector.exposition import DEFAULT_MAX_SAMPLES, LayoutCache  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "metrics"
DCGM = FIXTURES / "dcgm-a800-mig-prof__gpu-dcgm-exporter-blog__index-5731120479__trimmed.txt"
VLLM = FIXTURES / "vllm__DataDog__integrations-core__vllm_metrics.txt"
UNCONVERTIBLE = "ERROR - FAILED TO CONVERT TO STRING"
_VALUE_RE = re.compile(r"^([^#\n][^\n]*?(?<=[ }]))([0-9][0-9.e+-]*)$", re.MULTILINE)
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def moved(page: str, scrape: int) -> str:
    """The page at a later scrape: every plain value moved, the layout kept."""
    return _VALUE_RE.sub(lambda m: m[1] + repr(float(m[2]) + scrape * 1.5), page)


def garbled(page: str, lines: Callable[[list[str]], list[int]]) -> str:
    """``page`` with the value of each line ``lines`` picks written as dcgm-exporter writes a field it cannot render."""
    out = page.split("\n")
    for i in lines(out):
        out[i] = out[i].rsplit(" ", 1)[0] + " " + UNCONVERTIBLE
    return "\n".join(out)


def cpu_per_scrape(pages: list[str], wanted: frozenset[str] | None, scrapes: int, repeats: int) -> list[float]:
    """Seconds of CPU per scrape of one target serving ``pages`` in turn, its first scrape untimed."""
    cache = LayoutCache(parse)
    cache.parse("target", pages[0], wanted=wanted, max_samples=DEFAULT_MAX_SAMPLES)
    out = []
    for r in range(repeats):
        t0 = time.process_time()
        for k in range(scrapes):
            cache.parse("target", pages[(r * scrapes + k) % len(pages)], wanted=wanted, max_samples=DEFAULT_MAX_SAMPLES)
        out.append((time.process_time() - t0) / scrapes)
    return out


def first_scrape(page: str, wanted: frozenset[str] | None, repeats: int) -> list[float]:
    """Seconds of CPU of a target's first scrape of ``page`` (no layout, no names known from before)."""
    out = []
    for _ in range(repeats):
        cache = LayoutCache(parse)
        t0 = time.process_time()
        cache.parse("target", page, wanted=wanted, max_samples=DEFAULT_MAX_SAMPLES)
        out.append(time.process_time() - t0)
    return out


def report(label: str, times: list[float], unit: float, unit_name: str) -> float:
    median = statistics.median(times)
    print(f"{label:44s} median {median * unit:10.1f} {unit_name}  (min {min(times) * unit:.1f}, n={len(times)})")
    return median


def dcgm_case(repeats: int) -> None:
    page = DCGM.read_text(encoding="utf-8")
    field = "DCGM_FI_DEV_GPU_TEMP{"
    pages = [moved(page, s) for s in range(8)]
    bad = [garbled(p, lambda ls: [i for i, line in enumerate(ls) if line.startswith(field)]) for p in pages]
    print(f"dcgm: {len(page):,} bytes, {sum(line.startswith(field) for line in page.split(chr(10)))} lines garbled")
    clean = report("dcgm clean, per scrape", cpu_per_scrape(pages, WANTED_FAMILIES, 200, repeats), 1e6, "us")
    broken = report(
        "dcgm one field bad on every GPU, per scrape", cpu_per_scrape(bad, WANTED_FAMILIES, 200, repeats), 1e6, "us"
    )
    print(f"ratio dcgm bad/clean: {broken / clean:.2f}")


def large_page(pods: int) -> str:
    """The DataDog vLLM fixture with every series repeated for ``pods`` pods (a ``pod`` label), typed once."""
    families: dict[str, tuple[list[str], list[str]]] = {}
    current = None
    for line in VLLM.read_text(encoding="utf-8").splitlines():
        if line.startswith(("# TYPE", "# HELP")):
            current = line.split()[2]
            families.setdefault(current, ([], []))[0].append(line)
        elif line.strip() and current:
            families[current][1].append(line)
    out: list[str] = []
    for head, samples in families.values():
        out += head
        for i in range(pods):
            for s in samples:
                out.append(s.replace("{", f'{{pod="p{i}",', 1) if "{" in s else s.replace(" ", f'{{pod="p{i}"}} ', 1))
    return "\n".join(out) + "\n"


def last_wanted_lines(count: int) -> Callable[[list[str]], list[int]]:
    """The last line of each of the ``count`` wanted metric names whose last line comes last on the page."""

    def family(name: str) -> str:
        for suffix in ("_total", "_bucket", "_sum", "_count", "_created"):
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return name

    def pick(lines: list[str]) -> list[int]:
        last: dict[str, int] = {}
        for i, line in enumerate(lines):
            if line and line[0] != "#" and (m := _NAME_RE.match(line)) is not None:
                last[m.group()] = i
        wanted = [i for n, i in last.items() if n in WANTED_FAMILIES or family(n) in WANTED_FAMILIES]
        return sorted(wanted)[-count:]

    return pick


def large_case(repeats: int) -> None:
    page = large_page(400)
    pages = [page, moved(page, 1)]
    print(f"large: {len(page) / 1e6:.2f} MB, {page.count(chr(10)):,} lines")
    for wanted, label in ((None, "every family"), (WANTED_FAMILIES, "selective")):
        clean = report(f"large {label}, clean, per scrape", cpu_per_scrape(pages, wanted, 1, repeats), 1e3, "ms")
        for count in (1, 8):
            bad = [garbled(p, last_wanted_lines(count)) for p in pages]
            first = report(
                f"large {label}, {count} bad, first scrape", first_scrape(bad[0], wanted, repeats), 1e3, "ms"
            )
            steady = report(
                f"large {label}, {count} bad, per scrape", cpu_per_scrape(bad, wanted, 1, repeats), 1e3, "ms"
            )
            print(f"ratio large {label} {count} bad/clean: first {first / clean:.2f}, steady {steady / clean:.2f}")


CASES: dict[str, Callable[[int], None]] = {"dcgm": dcgm_case, "large": large_case}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=(*CASES, "all"), default="all")
    ap.add_argument("--repeats", type=int, default=7, help="timings per case (median)")
    args = ap.parse_args()
    for name, case in CASES.items():
        if args.case in (name, "all"):
            case(args.repeats)


if __name__ == "__main__":
    main()
