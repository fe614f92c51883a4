"""A GPU page on no node whose URL carries a password: the instance that keeps it (``owned_targets``) is the one that
closes its down finding, which names the page by its URL with the password redacted (``ControlLoop._closes``).
Before, the keeper hashed the raw URL and the closer the redacted one: another instance closed the finding the
keeper had open, and the keeper reopened it as a new episode every tick, its acknowledgement lost."""

from __future__ import annotations

from types import SimpleNamespace

from collector.samples import TargetInfo
from collector.urls import redacted
from kvpilot.runtime.loop import ControlLoop
from kvpilot.runtime.shards import Held, owned_targets

SHARDS = 3


def test_a_credentialed_gpu_page_on_no_node_is_closed_by_its_keeper() -> None:
    state = SimpleNamespace(gpus=lambda: [], replicas=lambda: [], stale_after_s=30.0)
    for i in range(1, 40):
        page = TargetInfo(url=f"http://scraper:pw{i}@10.0.0.{i}:9400/metrics", kind="gpu")
        instances = [Held(SHARDS, frozenset({shard})) for shard in range(SHARDS)]
        keepers = [n for n, held in enumerate(instances) if owned_targets([page], held)]
        closers = [
            n
            for n, held in enumerate(instances)
            if ControlLoop._closes(SimpleNamespace(state=state), held.owns)("", redacted(page.url), "", "", 0.0)  # type: ignore[arg-type]
        ]
        assert closers == keepers, page.url
