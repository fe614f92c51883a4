"""An hour of `kvpilot run`'s history in minutes: the real loop (wiring, FleetState, detectors, planner, store)
on a virtual clock, fed bench/scrape.py's moving pages through the real Collector (parse, adapt), no sockets.

Prints, every ``--report-every`` ticks, the process CPU of the last ticks (median ms a tick, page rendering
excluded: pages are rendered before each tick starts), the time spent in garbage collections (gc.callbacks)
per generation, and each stage's thread CPU. ``--profile-at N`` cProfiles ticks N..N+``--profile-ticks``.

    nice .venv/bin/python bench/history_profile.py --ticks 720          # an hour of 5 s ticks
    nice .venv/bin/python bench/history_profile.py --ticks 720 --profile-at 700 --profile-ticks 10

``--ab code:DIR`` times this tree's code against another checkout's (DIR: e.g. ``git worktree add /tmp/before REV``)
in the same process, in alternating blocks of ticks: every function of the ``--ab-modules`` whose code differs is
given DIR's code in the baseline blocks (``__code__`` swapped, names only DIR's version has added), so both run
against the same state, heap and load; per-stage CPU is compared too.

    nice .venv/bin/python bench/history_profile.py --ticks 720 --ab code:/tmp/before --report-every 60
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import importlib
import importlib.util
import inspect
import pstats
import statistics
import sys
import tempfile
import time
import types
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scrape import MovingPage, build_pages, kvpilot_config, target_path  # noqa: E402

START = 1_700_000_000.0
BASE = "http://127.0.0.1:1"


class PageFetcher:
    """The bench's pages by URL, rendered for the tick before it starts (so their cost is not kvpilot's)."""

    def __init__(self, n_targets: int, n_gpu: int) -> None:
        vllm, dcgm = (MovingPage(page) for page in build_pages())
        self.pages = {target_path(i): (dcgm if i >= n_targets - n_gpu else vllm) for i in range(n_targets)}
        self.bodies: dict[str, bytes] = {}
        self.n = 0

    def render_next(self) -> None:
        self.n += 1
        rendered = {page: page.render(self.n) for page in {id(p): p for p in self.pages.values()}.values()}
        self.bodies = {path: rendered[page] for path, page in self.pages.items()}

    async def get(self, url: str, *, max_bytes: int) -> tuple[bytes, str | None]:
        return self.bodies[url.removeprefix(BASE)], "text/plain; version=0.0.4"

    async def aclose(self) -> None:
        pass


def _code_swaps(root: Path, modules: list[str]) -> tuple[Callable[[], None], Callable[[], None]]:
    """(use ``root``'s code, use this tree's) for every function, module-level or a class's method, of ``modules``
    whose code differs between ``root``'s copy and the imported one. ``root``'s copy is loaded as a module of its own
    (it imports this tree's packages); names its functions read that the imported module lacks are added to it."""
    swaps: list[tuple[types.FunctionType, types.CodeType, Any, types.CodeType, Any]] = []
    for name in modules:
        module = importlib.import_module(name)
        spec = importlib.util.spec_from_file_location(
            f"_ab_{name.replace('.', '_')}", root / (name.replace(".", "/") + ".py")
        )
        assert spec is not None
        assert spec.loader is not None
        other = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up there
        spec.loader.exec_module(other)
        for key, value in vars(other).items():
            if key not in vars(module):
                setattr(module, key, value)
        for new, old in _function_pairs(module, other, other.__name__):
            theirs_src, mine_src = _source(old), _source(new)
            if new.__module__ == name and theirs_src is not None and mine_src is not None and theirs_src != mine_src:
                swaps.append((new, old.__code__, old.__defaults__, new.__code__, new.__defaults__))
                print(f"A/B code: {name}.{new.__qualname__} differs", flush=True)

    def theirs() -> None:
        for fn, code, defaults, _, _ in swaps:
            fn.__code__, fn.__defaults__ = code, defaults

    def mine() -> None:
        for fn, _, _, code, defaults in swaps:
            fn.__code__, fn.__defaults__ = code, defaults

    return theirs, mine


def _source(fn: types.FunctionType) -> str | None:
    """A function's source; None for one without (a dataclass's generated methods)."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def _function_pairs(mine: Any, theirs: Any, their_module: str) -> Any:
    """(this tree's function, the other's) by name, module-level and in the classes both define, nested ones too."""
    for attr, fn in vars(theirs).items():
        new = vars(mine).get(attr)
        if isinstance(fn, types.FunctionType) and isinstance(new, types.FunctionType):
            yield new, fn
        elif isinstance(fn, type) and isinstance(new, type) and fn.__module__ == their_module:
            yield from _function_pairs(new, fn, their_module)


async def _polled(done: Callable[[], bool]) -> None:
    """Until ``done()``: the service's state, which its tasks and worker threads change without an event."""
    while not done():  # noqa: ASYNC110
        await asyncio.sleep(0.001)


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _caught_up(service: Any, ticks: int) -> bool:
    """The loop made ``ticks`` ticks and the work each tick wakes (store writer, actuator) is done."""
    return bool(
        service.loop.tick_count >= ticks
        and service.actuator_passes_done == service.actuator_passes_started
        and not service._wake_writer.is_set()
        and not service._wake_actuator.is_set()
        and service.writer.pending == 0
    )


def harness(targets: int, gpu_targets: int, prefix: str) -> tuple[Any, Any, PageFetcher, Any]:
    """`kvpilot run`'s settings for this bench's targets (SQLite in a fresh temporary folder), a virtual clock at
    START, the moving pages' fetcher and the real Collector reading through it: (settings, clock, fetcher,
    collector). Shared with bench/replay_digest.py."""
    from collector.clock import VirtualClock
    from collector.scrape import Collector, ScrapeConfig
    from kvpilot.settings import load_settings

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    ns = argparse.Namespace(targets=targets, gpu_targets=gpu_targets, interval=5.0, concurrency=16)
    config, _ = kvpilot_config(BASE, ns, tmp)
    settings = load_settings(config)
    clock = VirtualClock(START)
    fetcher = PageFetcher(targets, gpu_targets)
    collector = Collector(ScrapeConfig(timeout_s=1000.0, max_concurrency=16), clock=clock, fetcher=fetcher)
    return settings, clock, fetcher, collector


async def run(args: argparse.Namespace) -> None:
    from collector.scrape import VirtualTimer
    from kvpilot.runtime import loop as loop_module
    from kvpilot.runtime.service import freeze_startup_heap
    from kvpilot.runtime.sources import build as build_sources
    from kvpilot.runtime.wiring import build_service

    settings, clock, fetcher, collector = harness(args.targets, args.gpu_targets, "kvpilot-hist-")
    sources = build_sources(settings)
    timer = VirtualTimer(clock)
    extra = {"sleep": timer.sleep} if args.service else {}
    service, restored = build_service(settings, sources, clock=clock, collector=collector, **extra)
    loop = service.loop
    if args.service:  # its first tick runs at start, before the ticks counted below
        fetcher.render_next()
        await service.start(restored)
        await _polled(lambda: loop.tick_count >= 1 and timer.sleepers > 0)

    stage_cpu: dict[str, float] = defaultdict(float)
    guard = loop_module.ControlLoop._guard

    stage_profiler = cProfile.Profile()  # the stages run in worker threads, which the main profiler does not see
    profiling = [False]

    def timed_guard(self: Any, stage: str, fn: Any, default: Any) -> Any:
        t0 = time.thread_time()
        if profiling[0]:
            stage_profiler.enable()
        try:
            return guard(self, stage, fn, default)
        finally:
            if profiling[0]:
                stage_profiler.disable()
            stage_cpu[stage] += time.thread_time() - t0

    loop_module.ControlLoop._guard = timed_guard  # type: ignore[method-assign]

    gc_time: dict[int, float] = defaultdict(float)
    gc_count: dict[int, int] = defaultdict(int)
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_started[0] = time.thread_time()
        else:
            gc_time[info["generation"]] += time.thread_time() - gc_started[0]
            gc_count[info["generation"]] += 1

    gc.callbacks.append(on_gc)
    adapt = collector._adapt
    variant_on = [False]

    def adapt_variant(*a: Any, **kw: Any) -> Any:
        if not variant_on[0]:
            return adapt(*a, **kw)
        gc.disable()
        try:
            return adapt(*a, **kw)
        finally:
            gc.enable()

    if args.ab == "inline":
        collector._adapt = adapt_variant
    if args.ab == "window":  # baseline: the rollout detector's window read as before 2026-12-04 (the whole history)
        from collector.state import FleetState

        since_new = FleetState.deployment_history_since

        def since_variant(self: Any, key: str, since: float) -> Any:
            if variant_on[0]:
                return since_new(self, key, since)
            return tuple(p for p in self.deployment_history(key) if p.t >= since)

        FleetState.deployment_history_since = since_variant  # type: ignore[method-assign]

    use_theirs = use_mine = None
    if args.ab.startswith("code:"):
        use_theirs, use_mine = _code_swaps(Path(args.ab.removeprefix("code:")), args.ab_modules.split(","))
        snapshot = loop_module.ControlLoop._snapshot

        def timed_snapshot(self: Any, *a: Any) -> Any:  # the snapshot runs in a worker thread, unguarded
            t0 = time.thread_time()
            try:
                return snapshot(self, *a)
            finally:
                stage_cpu["snapshot"] += time.thread_time() - t0

        loop_module.ControlLoop._snapshot = timed_snapshot  # type: ignore[method-assign,assignment]

    def set_variant(on: bool) -> None:
        variant_on[0] = on
        if use_theirs is not None and use_mine is not None:
            (use_mine if on else use_theirs)()
        if args.ab.startswith("young:"):
            gc.set_threshold(int(args.ab.split(":")[1]) if on else 700, 10, 100)

    ab: dict[bool, list[float]] = {False: [], True: []}
    ab_stages: list[tuple[int, bool, dict[str, float]]] = []  # (tick, variant, stage CPU ms) of the counted ticks

    def is_variant(tick: int) -> bool:
        """In blocks of ``--ab-block`` ticks from ``--ab-from``, every other block the variant."""
        return tick >= args.ab_from and (tick - args.ab_from) // args.ab_block % 2 == 1

    def counted(tick: int) -> bool:
        """Not a block's first tick: it may pay for collections the block before deferred (a raised threshold)."""
        return tick >= args.ab_from and (args.ab_block == 1 or (tick - args.ab_from) % args.ab_block != 0)

    tick_ms: list[float] = []
    profiler: cProfile.Profile | None = None
    for tick in range(1, args.ticks + 1):
        fetcher.render_next()
        if args.ab:
            set_variant(is_variant(tick))
        if tick == args.profile_at:
            profiler = cProfile.Profile()
            profiler.enable()
            profiling[0] = True
        t0 = time.process_time()
        stages_before = dict(stage_cpu)
        if args.service:  # the whole service: its loop, writer, actuator, drain worker and store probe tasks
            await timer.advance(5.0)
            await _polled(partial(_caught_up, service, tick + 1))
        else:
            await loop.tick()
            await asyncio.to_thread(service.writer.flush)
            if tick == 1 and not args.no_freeze:
                freeze_startup_heap()
        tick_ms.append((time.process_time() - t0) * 1000)
        if args.ab and counted(tick):
            ab[variant_on[0]].append(tick_ms[-1])
            spent = {k: (v - stages_before.get(k, 0.0)) * 1000 for k, v in stage_cpu.items()}
            ab_stages.append((tick, variant_on[0], spent))
        if profiler is not None and tick == args.profile_at + args.profile_ticks - 1:
            profiler.disable()
            profiling[0] = False
            print("== the event loop's thread (scrape, parse, adapt)")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
            print("== the stages in worker threads (observe, detect, decide, ...)")
            pstats.Stats(stage_profiler).sort_stats("cumulative").print_stats(60)
            pstats.Stats(stage_profiler).sort_stats("tottime").print_stats(40)
            profiler = None
        if not args.service:
            clock.advance(5.0)
        if tick % args.report_every == 0:
            last = tick_ms[-args.report_every :]
            gcs = " ".join(f"g{g} {gc_count[g]}x {gc_time[g] * 1000 / args.report_every:.1f}" for g in sorted(gc_count))
            stages = " ".join(f"{k} {v * 1000 / args.report_every:.1f}" for k, v in sorted(stage_cpu.items()))
            print(
                f"tick {tick:4d} ({tick * 5 / 60:5.1f} min): median {statistics.median(last):6.1f} ms "
                f"mean {statistics.fmean(last):6.1f} | gc ms/tick {gcs} | stages ms/tick {stages} "
                f"| objects {len(gc.get_objects())} | VmRSS {_rss_mb():.1f} MB",
                flush=True,
            )
            if args.ab and ab[True]:
                base, var = (statistics.median(ab[k][-args.report_every // 2 :]) for k in (False, True))
                print(f"    A/B {args.ab}: baseline {base:.1f} ms, variant {var:.1f} ms, ratio {var / base:.3f}")
            gc_time.clear()
            gc_count.clear()
            stage_cpu.clear()
    if args.service:
        service.stop.set()
        await timer.advance(5.0)
        await service.wait()
    await collector.aclose()
    if args.ab:
        for window in args.ab_windows.split(","):
            lo, hi = (int(x) for x in window.split("-"))
            inside = [(t, ms) for t, ms in enumerate(tick_ms, 1) if lo <= t <= hi and counted(t)]
            base = [ms for t, ms in inside if not is_variant(t)]
            var = [ms for t, ms in inside if is_variant(t)]
            if base and var:
                b, v = statistics.median(base), statistics.median(var)
                print(
                    f"A/B {args.ab} ticks {window}: baseline {b:.1f} ms (n={len(base)}), "
                    f"variant {v:.1f} ms (n={len(var)}), ratio {v / b:.3f}"
                )
                for stage in sorted({k for _, _, spent in ab_stages for k in spent}):
                    per = {
                        flag: [spent.get(stage, 0.0) for t, on, spent in ab_stages if on is flag and lo <= t <= hi]
                        for flag in (False, True)
                    }
                    if per[False] and per[True]:
                        sb, sv = statistics.median(per[False]), statistics.median(per[True])
                        print(
                            f"    stage {stage}: baseline {sb:.2f} ms, variant {sv:.2f} ms, "
                            f"ratio {sv / sb if sb else float('nan'):.3f}"
                        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ticks", type=int, default=720)
    p.add_argument("--targets", type=int, default=1000)
    p.add_argument("--gpu-targets", type=int, default=100)
    p.add_argument("--report-every", type=int, default=30)
    p.add_argument("--profile-at", type=int, default=0)
    p.add_argument("--profile-ticks", type=int, default=10)
    p.add_argument("--no-freeze", action="store_true", help="without --service: no heap freeze after tick 1")
    p.add_argument(
        "--ab",
        default="",
        help="variant blocks from --ab-from: young:N (gc threshold), inline (gc off in page reads), window, "
        "code:DIR (this tree's code against DIR's, for the --ab-modules)",
    )
    p.add_argument(
        "--ab-modules",
        default="detectors.kv_exhaustion,detectors.kv_trend,detectors.rollout,detectors.stuck_gpu,"
        "scaler.version_speed,kvpilot.runtime.loop",
        help="with --ab code:DIR, the modules whose differing functions take DIR's code in the baseline blocks",
    )
    p.add_argument("--ab-from", type=int, default=60)
    p.add_argument("--ab-block", type=int, default=10, help="ticks per block; each block's first is not counted")
    p.add_argument(
        "--ab-windows", default="60-180,600-720", help="tick windows whose A/B medians are printed at the end"
    )
    p.add_argument("--service", action="store_true", help="run the whole Service (its tasks) on a virtual timer")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
