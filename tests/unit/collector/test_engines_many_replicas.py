"""Pages that name many replicas (a gateway's page of every worker, a model label written per request): the page is
read in one pass whatever the number of replicas, and one naming more than MAX_REPLICAS_PER_PAGE is refused in one
line. Each replica's share of the page is what it was when read one replica at a time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.adapt import adapt_page
from collector.engines import ENGINES
from collector.engines._declarative import MAX_REPLICAS_PER_PAGE, Group, _narrowed
from collector.exposition import MetricFamily, Sample
from collector.samples import TargetInfo

TARGET = TargetInfo(url="http://10.0.0.1:8000/metrics", namespace="llm", deployment="chat", pod="chat-0", node="n0")


def _page(models: int) -> str:
    lines = ["# TYPE vllm:num_requests_waiting gauge"]
    lines += [f'vllm:num_requests_waiting{{model_name="m{i}"}} {i}' for i in range(models)]
    return "\n".join(lines) + "\n"


def test_a_page_naming_more_replicas_than_the_cap_is_refused_in_one_line() -> None:
    read = adapt_page(_page(MAX_REPLICAS_PER_PAGE), TARGET, 1.0)
    assert len(read.replicas) == MAX_REPLICAS_PER_PAGE
    assert all(r.replica == f"chat-0#m{r.requests_waiting:g}" for r in read.replicas)  # each its own value
    with pytest.raises(ValueError, match=r"^the page names 1,001 replicas \(values of model_name\); at most 1,000"):
        adapt_page(_page(MAX_REPLICAS_PER_PAGE + 1), TARGET, 1.0)


class _CountingLabels(dict[str, str]):
    """A sample's labels, counting the lookups made through ``get``."""

    gets = 0

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        _CountingLabels.gets += 1
        return super().get(key, default)


def test_a_page_is_read_in_one_pass_whatever_its_replicas() -> None:
    # 400 replicas of one sample each, and an engine-wide series every replica keeps: the parent narrowed the whole
    # page once a replica (400 x 401 label lookups, 3.6 s of CPU on the event loop for 2,337 replicas in 128 KiB)
    samples = [Sample("vllm:num_requests_waiting", _CountingLabels(model_name=f"m{i}"), float(i)) for i in range(400)]
    samples.append(Sample("vllm:num_requests_waiting", _CountingLabels(), 0.0))
    families = {"vllm:num_requests_waiting": MetricFamily("vllm:num_requests_waiting", "gauge", "", samples)}
    _CountingLabels.gets = 0
    replicas = ENGINES["vllm"].adapt(families, TARGET, 1.0)
    assert [r.requests_waiting for r in replicas[:3]] == [0.0, 1.0, 10.0]  # m0, m1, m10: sorted by name
    assert _CountingLabels.gets < 40 * len(samples), _CountingLabels.gets


LABELS = ("model_name", "worker_addr")
VALUES = st.sampled_from(["a", "b", "c", ""])
SAMPLE_LABELS = st.fixed_dictionaries({}, optional={"model_name": VALUES, "worker_addr": VALUES, "other": VALUES})


@settings(max_examples=300, deadline=None, database=None)
@given(
    per_family=st.lists(st.lists(SAMPLE_LABELS, max_size=8), min_size=1, max_size=3),
    keys=st.sampled_from([LABELS[:1], LABELS[1:], LABELS]),
    values=st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("abc")), min_size=1, max_size=9, unique=True),
)
def test_each_replica_gets_the_samples_it_got_when_narrowed_alone(
    per_family: list[list[dict[str, str]]], keys: tuple[str, ...], values: list[tuple[str, str]]
) -> None:
    families = {
        f"f{i}": MetricFamily(f"f{i}", "gauge", "", [Sample(f"f{i}", labels, 1.0) for labels in samples])
        for i, samples in enumerate(per_family)
    }
    groups: list[Group] = sorted({tuple(zip(keys, v, strict=False)) for v in values})
    got = [{name: fam.samples for name, fam in narrowed.items()} for narrowed in _narrowed(families, groups)]
    # the definition, one replica at a time: samples carrying another value of a group label are left out
    wanted = [
        {name: [s for s in fam.samples if all(s.labels.get(k, v) == v for k, v in g)] for name, fam in families.items()}
        for g in groups
    ]
    assert got == wanted
