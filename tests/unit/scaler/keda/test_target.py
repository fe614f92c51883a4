"""Trigger metadata parsing and the replicas -> metric value arithmetic, without gRPC."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scaler.keda import codegen
from scaler.keda.target import MetadataError, int_field, parse_target
from tests.unit.scaler.keda.harness import decision, hpa_replicas

REPO = Path(__file__).resolve().parents[4]


@given(
    replicas=st.integers(min_value=0, max_value=1_000_000),
    target_milli=st.integers(min_value=1, max_value=10_000_000),
)
def test_hpa_arithmetic_lands_exactly_on_the_replicas(replicas: int, target_milli: int) -> None:
    target = parse_target("chat", "llm", {"targetSize": str(target_milli / 1000)})
    value = target.metric_value(decision(desired=replicas))
    # KEDA truncates both to milli-units and the HPA takes ceil(value / target): never one replica off
    assert hpa_replicas(value, target.target_size) == replicas


@given(replicas=st.integers(min_value=0, max_value=1_000_000), target=st.integers(min_value=1, max_value=100_000))
def test_int_fields_agree_for_integer_targets(replicas: int, target: int) -> None:
    parsed = parse_target("chat", "llm", {"targetSize": str(target)})
    value = parsed.metric_value(decision(desired=replicas))
    # the deprecated int64 fields, read by older KEDA, give the same replica count
    assert hpa_replicas(float(int_field(value)), float(target)) == replicas


PARSE_CASES = [
    # KEDA's own keys are tolerated beside ours, and the bearer token key (the servicer checks it)
    ({"scalerAddress": "kvpilot:9090", "enableTLS": "true", "unsafeSsl": "false", "bearerTokenFromEnv": "x"}, None),
    # a *FromEnv key for something kvpilot does not read is refused, not silently ignored
    ({"tokenFromEnv": "x"}, "kvpilot reads no `token`"),
    # the same setting twice, plain and from the environment
    ({"targetSize": "2", "targetSizeFromEnv": "3"}, "both `targetSize` and `targetSizeFromEnv`"),
    # a resolved *FromEnv value is validated like the plain key
    ({"targetSizeFromEnv": "zero"}, "`targetSize` 'zero' is not a number"),
    # a token written into the ScaledObject itself is refused, and its value is not echoed
    ({"bearerToken": "s3cr3t-s3cr3t-s3cr3t"}, "use `bearerTokenFromEnv`"),
    # metricType Value breaks the replica arithmetic
    ({"metricType": "Value"}, "AverageValue"),
    ({"metricType": "AverageValue"}, None),
    # a target below KEDA's milli resolution would become 0 in the HPA
    ({"targetSize": "0.0004"}, "below KEDA's resolution"),
    # a huge number is refused rather than overflowing int64 milli-quantities
    ({"targetSize": "1e300"}, "finite number below 1e12"),
    # a metric name with spaces
    ({"metricName": "my metric"}, "`metricName` 'my metric'"),
    # whitespace around booleans is forgiven (YAML quoting habits)
    ({"includeWarmPool": " False "}, None),
]


def test_from_env_keys_are_honoured() -> None:
    # what KEDA forwards for `targetSizeFromEnv: TARGET` etc. once it has resolved the variables
    metadata = {"targetSizeFromEnv": "4", "includeWarmPoolFromEnv": "false", "deploymentFromEnv": "other/chat"}
    target = parse_target("chat", "llm", metadata)
    assert (target.target_size, target.include_warm_pool, target.deployment) == (4.0, False, "other/chat")


@pytest.mark.parametrize(("metadata", "error"), PARSE_CASES)
def test_parse_target(metadata: dict[str, str], error: str | None) -> None:
    if error is None:
        assert parse_target("chat", "llm", metadata).deployment == "llm/chat"
    else:
        with pytest.raises(MetadataError, match=error):
            parse_target("chat", "llm", metadata)


@given(name=st.text(max_size=30), namespace=st.text(max_size=30), metadata=st.dictionaries(st.text(), st.text()))
def test_parse_target_raises_only_metadata_errors(name: str, namespace: str, metadata: dict[str, str]) -> None:
    try:
        target = parse_target(name, namespace, metadata)
    except MetadataError:
        return
    assert target.target_size >= 0.001
    assert target.deployment.count("/") == 1


def test_committed_stubs_match_the_proto_and_import_relatively() -> None:
    generated = codegen.generate()
    for rel, content in generated.items():
        assert (REPO / rel).read_text() == content, f"{rel} is stale: run `make generate`"
    assert "from . import externalscaler_pb2" in generated["scaler/keda/externalscaler_pb2_grpc.py"]


def test_example_scaledobject_metadata_is_accepted() -> None:
    import yaml

    documents = list(yaml.safe_load_all((REPO / "deploy/examples/scaledobject.yaml").read_text()))
    triggers = [
        (doc["metadata"], trigger["metadata"])
        for doc in documents
        if doc["kind"] == "ScaledObject"
        for trigger in doc["spec"]["triggers"]
        if trigger["type"] in {"external", "external-push"}
    ]
    assert triggers, "the example has no external trigger"
    for meta, metadata in triggers:
        # the documented example must parse exactly as kvpilot will parse it
        target = parse_target(meta["name"], meta["namespace"], metadata)
        assert target.deployment == f"{meta['namespace']}/{meta['name']}"
