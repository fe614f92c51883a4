"""The shell commands in README.md and docs/quickstart.md, run as a reader would, top to bottom.

Every command in a ```sh block is classified below: run as written, run against a stand-in (a cluster command in
kubectl's client-side dry run, the service on free ports), left to KVPILOT_DOCS_SLOW=1 (minutes long), or not run,
with the reason. A command added to either page without a class fails the first test, so the pages cannot grow
commands that nobody runs. Commands run from a sandbox laid out like a checkout (the repository's entries linked,
deploy/ copied so that the quickstart's overlay can be written, `../shared` beside it), so nothing lands in the
repository.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers.poll import wait_for

pytestmark = pytest.mark.integration  # kubectl, a live `kvpilot run`

REPO = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/quickstart.md")
SLOW = os.environ.get("KVPILOT_DOCS_SLOW") == "1"

RUN = "run"  # as written; exit 0
DRY_RUN = "dry-run"  # a cluster command: kubectl's --dry-run=client -o yaml; exit 0
SERVICE = "service"  # `kvpilot run`: started on free ports, stopped after the curl lines that follow it
AGAINST_SERVICE = "against-service"  # a curl line: the service's port for 8080, retried until it answers
CONFIG_SHOW = "config-show"  # `kvpilot run --config F`: `kvpilot config show --config F` (the targets are yours)
SLOW_RUN = "slow"  # as written only with KVPILOT_DOCS_SLOW=1

# (pattern matched at the start of the command, class, why). The first that matches wins.
CLASSES: list[tuple[str, str, str]] = [
    (r"make demo\b", "skip", "4 minutes paced for a viewer; tests/e2e/test_demo.py runs the demo and its CLI"),
    (r"make test\b", "skip", "the whole suite, this test included"),
    (r"make image\b", "skip", "no container engine here; tests/deploy/test_image.py runs it with a stand-in docker"),
    (r"\.venv/bin/kvpilot demo --json", SLOW_RUN, "about a minute of simulated fleet"),
    (r"\.venv/bin/kvpilot backtest ", SLOW_RUN, "several minutes: four policies and the frontier on an hour x10"),
    (r"\.venv/bin/kvpilot run --config ", CONFIG_SHOW, "the targets are the reader's own servers"),
    (r"\.venv/bin/kvpilot run\b", SERVICE, ""),
    (r"curl -s localhost:8080/", AGAINST_SERVICE, ""),
    (r"kubectl kustomize ", RUN, ""),
    (r"kubectl create namespace ", DRY_RUN, "needs a cluster"),
    (r"kubectl -n kvpilot create secret ", DRY_RUN, "needs a cluster"),
    (r"kubectl apply ", "skip", "needs a cluster; tests/deploy/test_manifests.py validates what it would apply"),
    (r"kubectl -n llm create secret ", "skip", "needs a cluster (reads kvpilot-secrets from it) and your own CA"),
    (r"helm install ", "skip", "needs a cluster and the helm command (on no registry here); test_helm.py renders it"),
]


@dataclass(frozen=True)
class Command:
    page: str
    text: str  # continuation lines joined

    def klass(self) -> tuple[str, str]:
        for pattern, klass, why in CLASSES:
            if re.match(pattern, self.text):
                return klass, why
        return "unclassified", ""


def _commands() -> list[Command]:
    found = []
    for page in PAGES:
        for block in re.findall(r"^```sh\n(.*?)^```", (REPO / page).read_text(), re.S | re.M):
            for line in block.replace("\\\n", " ").splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    found.append(Command(page, " ".join(line.split())))
    return found


def _named_yaml_files(page: str) -> dict[str, str]:
    """```yaml blocks whose first line is `# PATH` (optionally followed by a note): the files the page asks for."""
    files = {}
    for block in re.findall(r"^```yaml\n(.*?)^```", (REPO / page).read_text(), re.S | re.M):
        first = block.splitlines()[0]
        m = re.match(r"# ([\w./-]+\.ya?ml)\b", first)
        if m:
            files[m.group(1)] = block
    return files


def test_every_command_is_classified() -> None:
    commands = _commands()
    assert len(commands) >= 10, "the pages' shell blocks were not found"
    unclassified = [f"{c.page}: {c.text}" for c in commands if c.klass()[0] == "unclassified"]
    assert not unclassified, "add each to CLASSES (run, stand-in or skip with a reason):\n" + "\n".join(unclassified)
    for pattern, klass, why in CLASSES:
        assert any(re.match(pattern, c.text) for c in commands), f"stale entry {pattern!r}: no such command"
        assert klass in (RUN, SERVICE, AGAINST_SERVICE) or why, f"{pattern!r}: say why it is not run as written"


def test_the_pages_name_shared_data_relatively() -> None:
    # A trace path a reader copies must work from their checkout: `../shared/traces/...`, never this machine's.
    for c in _commands():
        for path in re.findall(r"--trace (\S+)", c.text):
            assert path.startswith("../shared/traces/"), f"{c.page}: `{c.text}`"
    for page in PAGES:
        assert "/work/" not in (REPO / page).read_text(), f"{page}: an absolute path to this machine"


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    main = tmp_path / "main"
    main.mkdir()
    for entry in REPO.iterdir():
        if entry.name == "deploy":
            shutil.copytree(entry, main / "deploy")
        elif entry.name != ".git":
            (main / entry.name).symlink_to(entry)
    (tmp_path / "shared").symlink_to((REPO.parent / "shared").resolve())
    return main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVPILOT_")}
    env.update(extra)
    return env


def _bash(cmd: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


class _Service:
    """`kvpilot run` as the quickstart starts it, on free ports and its own data folder."""

    def __init__(self, cmd: str, cwd: Path) -> None:
        self.port = _free_port()
        self.log = (cwd / "kvpilot-run.log").open("w")
        env = _env(
            KVPILOT_HTTP_PORT=str(self.port), KVPILOT_GRPC_PORT=str(_free_port()), KVPILOT_DATA_DIR=str(cwd / "data")
        )
        self.proc = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=cwd, env=env, stdout=self.log, stderr=self.log)
        wait_for(self._healthy, what="kvpilot run to answer /healthz", timeout_s=90, every_s=0.2)

    def _healthy(self) -> bool:
        assert self.proc.poll() is None, f"kvpilot run exited {self.proc.returncode}: see {self.log.name}"
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.proc.terminate()  # its exit is awaited at the end, while the next commands run

    def wait(self) -> None:
        self.proc.terminate()
        assert self.proc.wait(timeout=60) == 0, "kvpilot run stops cleanly on SIGTERM"
        self.log.close()


def _runs(commands: list[Command]) -> Iterator[tuple[Command, str]]:
    for c in commands:
        klass, _ = c.klass()
        if klass == SLOW_RUN and SLOW:
            klass = RUN
        yield c, klass


def _succeeds(cmd: str, cwd: Path) -> Callable[[], bool]:
    return lambda: _bash(cmd, cwd, _env(), timeout=30).returncode == 0


def _check_secret(manifest: str) -> None:
    """The Secret the quickstart's line makes holds tokens `kvpilot run` accepts in production."""
    from kvpilot.settings import Settings

    secret = yaml.safe_load(manifest)
    assert secret["kind"] == "Secret"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert set(data) >= {"KVPILOT_ADMIN_TOKENS", "KVPILOT_READ_TOKENS"}
    settings = Settings.model_validate(
        {
            "environment": "production",
            "api": {"admin_tokens": data["KVPILOT_ADMIN_TOKENS"], "read_tokens": data["KVPILOT_READ_TOKENS"]},
        }
    )
    assert settings.auth_enabled


def test_the_pages_run_top_to_bottom(sandbox: Path) -> None:
    files: dict[str, str] = {}
    for page in PAGES:
        files.update(_named_yaml_files(page))
    service: _Service | None = None
    services: list[_Service] = []
    ran = []
    try:
        for c, klass in _runs(_commands()):
            if service is not None and klass != AGAINST_SERVICE:
                service.stop()
                service = None
            if klass == RUN:
                out = _bash(c.text, sandbox, _env(), timeout=1800 if SLOW else 120)
                assert out.returncode == 0, f"{c.page}: `{c.text}` exited {out.returncode}:\n{out.stderr[-2000:]}"
            elif klass == DRY_RUN:
                out = _bash(f"{c.text} --dry-run=client -o yaml", sandbox, _env(), timeout=60)
                assert out.returncode == 0, f"{c.page}: `{c.text}`:\n{out.stderr}"
                if " secret " in c.text:
                    _check_secret(out.stdout)
            elif klass == SERVICE:
                service = _Service(c.text, sandbox)
                services.append(service)
            elif klass == AGAINST_SERVICE:
                assert service is not None, f"{c.page}: `{c.text}` comes before the service it asks"
                cmd = c.text.replace("localhost:8080", f"127.0.0.1:{service.port}")
                # The first tick's series appear a tick after /healthz answers: wait for the answer, not a delay.
                wait_for(_succeeds(cmd, sandbox), what=f"`{c.text}`", timeout_s=90, every_s=0.2)
            elif klass == CONFIG_SHOW:
                config = c.text.split("--config ")[1].split()[0]
                for name, text in files.items():
                    if name in (config, "targets.yaml"):
                        (sandbox / name).write_text(text)
                out = _bash(f".venv/bin/kvpilot config show --config {config} --json", sandbox, _env(), timeout=60)
                assert out.returncode == 0, f"{c.page}: the page's {config} is refused:\n{out.stderr}"
            else:
                continue
            ran.append(c.text)
    finally:
        for started in services:
            started.wait()
    assert any(t.startswith("curl") for t in ran), "the service block ran"
    if SLOW:
        assert (sandbox / "backtest.png").stat().st_size > 10_000, "the README's backtest drew its plot"


def test_the_quickstarts_overlay_names_the_pushed_image(sandbox: Path) -> None:
    # The overlay the quickstart shows for a registry renders, and moves every container to the pushed image.
    files = _named_yaml_files("docs/quickstart.md")
    (name,) = [n for n in files if n.startswith("deploy/overlays/")]
    (sandbox / name).parent.mkdir(parents=True)
    (sandbox / name).write_text(files[name])
    out = _bash(f"kubectl kustomize {Path(name).parent}", sandbox, _env(), timeout=60)
    assert out.returncode == 0, out.stderr
    images = set(re.findall(r"^\s+image: (\S+)$", out.stdout, re.M))
    assert images == {"registry.example.com/kvpilot:0.1.0"}
