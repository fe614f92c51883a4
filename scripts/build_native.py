"""Compile kvpilot's pure hot path with mypyc (optional): ``make compile``, undone by ``make clean-native``.

The exposition parser, the adapters' reading primitives (engines/_read.py), the validity checks and FleetState
(state.py, rates.py) are fully typed Python; mypyc turns them into C extensions that sit next to the sources
(``*.so``, git-ignored), which Python then imports instead. Without a C compiler, or with ``KVPILOT_PURE=1``
in the environment (see ``collector/__init__.py``), the same modules run as Python: the tests run against both.

    .venv/bin/python scripts/build_native.py          # compile in place
    .venv/bin/python scripts/build_native.py --clean  # remove what it built
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The modules compiled: pure (no I/O, no clock), strictly typed, on every scrape's or tick's path. The adapters
# themselves (collector/engines/<engine>.py, _declarative.py) are not tried yet: they change often.
MODULES = [
    "collector/exposition/_lex.py",
    "collector/exposition/_model.py",
    "collector/exposition/_om_checks.py",
    "collector/exposition/_openmetrics.py",
    "collector/exposition/_text.py",
    "collector/exposition/_layout.py",
    "collector/validity.py",
    "collector/engines/_read.py",
    "collector/rates.py",
    "collector/state.py",
]
GROUP = "collector._native"  # the shared library, inside the package: collector/_native__mypyc.<abi>.so


def built_files() -> list[Path]:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    files = [REPO / m.removesuffix(".py") for m in MODULES]
    return [f.with_name(f.name + suffix) for f in files] + [REPO / (GROUP.replace(".", "/") + f"__mypyc{suffix}")]


def clean() -> None:
    for f in built_files():
        f.unlink(missing_ok=True)
    shutil.rmtree(REPO / "build" / "native", ignore_errors=True)


def main() -> int:
    if "--clean" in sys.argv[1:]:
        clean()
        return 0
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError as e:
        print(f"build_native: {e}; the pure-Python modules stay in use", file=sys.stderr)
        return 1
    if shutil.which(os.environ.get("CC", "cc")) is None:
        print("build_native: no C compiler (cc); the pure-Python modules stay in use", file=sys.stderr)
        return 1
    os.chdir(REPO)
    extensions = mypycify(MODULES, opt_level="3", group_name=GROUP, target_dir=str(REPO / "build" / "native" / "c"))
    build_temp = str(REPO / "build" / "native")
    setup(
        name="kvpilot-native",
        ext_modules=extensions,
        script_args=[
            "build_ext",
            "--inplace",
            "--build-temp",
            build_temp,
            "--build-lib",
            build_temp + "/lib",
            f"--parallel={os.cpu_count() or 1}",
        ],
    )
    for built in built_files():  # setuptools keeps the mtime of a module it did not rebuild: mark the build's time
        built.touch()
    print("build_native: compiled " + ", ".join(MODULES), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
