"""The container image without a container engine: the Dockerfile's build stage as it would run, and `make image`.

No docker, podman or buildah engine runs here or in CI, so the image itself is never built. What can break it is
checked instead: the wheel is built from exactly the files the build stage copies, and the kvpilot inside that
wheel (not the checkout) runs the commands the image runs; `make image` names the tag deploy/base uses and says
plainly when there is nothing to build with.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _build_stage_copies() -> list[str]:
    """Sources of the `COPY` lines in the Dockerfile's first stage (the one that runs `pip wheel`)."""
    text = (REPO / "Dockerfile").read_text()
    first_stage = text.split("\nFROM ", 2)[1]
    sources: list[str] = []
    for line in first_stage.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            *srcs, _dest = line.split()[1:]
            sources += srcs
    return sources


def _image_tag() -> str:
    kustomization = yaml.safe_load((REPO / "deploy" / "base" / "kustomization.yaml").read_text())
    (image,) = [i for i in kustomization["images"] if i["name"] == "kvpilot"]
    return f"{image['newName']}:{image['newTag']}"


@pytest.fixture(scope="module")
def wheel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build stage's `pip wheel .` on a folder holding only what the stage copies, unpacked."""
    ctx = tmp_path_factory.mktemp("context")
    for src in _build_stage_copies():
        path = REPO / src
        if path.is_dir():
            shutil.copytree(path, ctx / src, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.db"))
        else:
            shutil.copy2(path, ctx / src)
    out = tmp_path_factory.mktemp("wheels")
    # --no-build-isolation: setuptools from the virtualenv instead of a download (the image's stage downloads it).
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), "."],
        cwd=ctx,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = out.glob("kvpilot-*.whl")
    unpacked = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
    return unpacked


def _run_from_wheel(site: Path, tmp_path: Path, commands: list[list[str]], env: dict[str, str]) -> list[str]:
    """Each command through the wheel's `kvpilot` CLI, in one interpreter (imports once); their outputs."""
    # PYTHONPATH comes before the virtualenv's editable install of the checkout, so `kvpilot` is the wheel's.
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KVPILOT_")}
    full_env.update(env, PYTHONPATH=str(site), KVPILOT_DATA_DIR=str(tmp_path))
    code = (
        "import contextlib, io, json, sys, kvpilot, kvpilot.cli\n"
        "assert kvpilot.__file__.startswith(sys.argv[1]), kvpilot.__file__\n"
        "outs = []\n"
        "for args in json.loads(sys.argv[2]):\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        kvpilot.cli.app(args, standalone_mode=False)\n"
        "    outs.append(buf.getvalue())\n"
        "print(json.dumps(outs))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(site), json.dumps(commands)],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stderr
    return list(json.loads(run.stdout.splitlines()[-1]))


def test_the_wheel_holds_the_data_the_image_needs(wheel_dir: Path) -> None:
    # The embedded demo trace, Alembic's migrations and the generated dashboards are package data: a wheel that
    # lost them would build and then fail at start.
    assert list((wheel_dir / "kvpilot" / "data").glob("*.csv")), "the demo trace"
    assert (wheel_dir / "migrations" / "env.py").exists()
    assert list((wheel_dir / "migrations").rglob("versions/*.py")), "Alembic revisions"
    assert list((wheel_dir / "dashboards").rglob("*.json")), "generated dashboards"


def test_the_wheels_kvpilot_runs_the_deployed_configuration(wheel_dir: Path, tmp_path: Path) -> None:
    # The ConfigMap's config.yaml with tokens as the quickstart's `kubectl create secret` makes them: what the
    # container's `kvpilot run --config /etc/kvpilot/config.yaml` reads at start (production, so tokens are checked).
    configmap = yaml.safe_load((REPO / "deploy" / "base" / "configmap.yaml").read_text())
    config = tmp_path / "config.yaml"
    config.write_text(configmap["data"]["config.yaml"])
    tokens = {"KVPILOT_ADMIN_TOKENS": os.urandom(24).hex(), "KVPILOT_READ_TOKENS": os.urandom(24).hex()}
    shown, _ = _run_from_wheel(
        wheel_dir, tmp_path, [["config", "show", "--config", str(config), "--json"], ["db", "upgrade"]], env=tokens
    )
    effective = json.loads(shown)
    assert effective["environment"] == "production"
    assert effective["collector"]["discovery"]["kind"] == "kubernetes"
    assert effective["api"]["admin_tokens"] == ["**********"], "the Secret's admin token reached the settings"
    assert (tmp_path / "kvpilot.db").exists(), "migrations from the wheel ran"


def test_make_image_builds_the_tag_deploy_base_runs(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "calls"
    (fake / "docker").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (fake / "docker").chmod(0o755)
    out = subprocess.run(
        [shutil.which("make") or "make", "-s", "image"],
        cwd=REPO,
        env={**os.environ, "PATH": f"{fake}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert log.read_text().splitlines() == ["info", f"build -t {_image_tag()} ."]
    version = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert version
    assert _image_tag() == f"kvpilot:{version.group(1)}"


def test_make_image_says_there_is_no_builder(tmp_path: Path) -> None:
    if any(shutil.which(b, path="/usr/bin:/bin") for b in ("docker", "podman", "buildah")):
        pytest.skip("a container builder is installed in /usr/bin or /bin")
    out = subprocess.run(
        [shutil.which("make") or "make", "-s", "image"],
        cwd=REPO,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "no container builder here (looked for docker, podman, buildah)" in out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 2
