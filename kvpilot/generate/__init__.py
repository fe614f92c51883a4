"""Writes (or, with --check, verifies) every generated artefact that is committed to the repository
(`python -m kvpilot.generate`). The generators of kvpilot's own pages live beside this driver: the configuration
reference (`settings_doc`), the engines page (`engines_doc`) and the deployment manifests (`manifests`).

Each generator returns {relative path: file content}. `make generate` writes them;
`make check-generated` (part of `make test`) fails when a committed file differs from what the code generates.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# "module:function" returning dict[str, str] of repository-relative path -> content.
GENERATORS: list[str] = [
    "scaler.keda.codegen:generate",
    "dashboards.generate:files",
    "alerts.rules:generate",
    "alerts.recording:generate",
    "kvpilot.generate.manifests:files",
    "kvpilot.generate.settings_doc:files",
    "kvpilot.generate.engines_doc:files",
]


def _load(spec: str) -> Callable[[], dict[str, str]]:
    module_name, func = spec.split(":")
    fn: Callable[[], dict[str, str]] = getattr(importlib.import_module(module_name), func)
    return fn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a committed file is stale")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for spec in GENERATORS:
        for rel, content in _load(spec)().items():
            path = ROOT / rel
            if args.check:
                if not path.exists() or path.read_text() != content:
                    stale.append(rel)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
                print(f"wrote {rel}")
    if stale:
        print("stale generated files (run `make generate` and commit):", *stale, sep="\n  ", file=sys.stderr)
        return 1
    return 0
