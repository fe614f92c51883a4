"""The edge's rules for targets, names and text (store.fields), shared by the API and the configuration."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from collector.engines import ENGINES
from store.fields import KNOWN_ENGINES, TargetSpec, fit, is_deployment_key, redact_url


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"url": "http:///////"}, "no host"),  # a URL without a host
        ({"url": "http://h:99999/m"}, "port"),  # port out of range
        ({"url": "http://h:0/m"}, "port"),  # port 0 is no port
        ({"url": "http://u:pw@h:1/m"}, "credentials"),  # credentials would end up in labels
        ({"url": "ftp://h/m"}, "http"),  # scheme
        ({"url": "http://h/a b"}, "white space"),  # spaces
        ({"url": "http://h/\ud800"}, "surrogate"),  # not encodable
        ({"url": "http://h:1/", "engine": "bogus"}, "unknown engine"),  # a typo lists the known ones
        ({"url": "http://h:1/", "deployment": "../../x y/\u202e"}, "Kubernetes name"),  # path, space, bidi
        ({"url": "http://h:1/", "deployment": "a/b"}, "Kubernetes name"),  # the name that broke restarts
        ({"url": "http://h:1/", "namespace": "Prod"}, "Kubernetes name"),  # upper case
        ({"url": "http://h:1/", "namespace": "a" * 64}, "63"),  # label length
        ({"url": "http://h:1/", "deployment": "d" * 190}, "189"),  # fits namespace/name in 253
        ({"url": "http://h:1/", "pod": 7}, "string"),  # no coercion of numbers into names
        ({"url": "http://h:1/", "extra": 1}, "Extra"),  # unknown fields
    ],
)
def test_refused_targets_name_the_reason(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError) as e:
        TargetSpec(**fields)  # type: ignore[arg-type]
    assert named in str(e.value)


def test_accepted_targets_are_normalised() -> None:
    t = TargetSpec(url="https://[::1]:8443/metrics", engine="vLLM", namespace="llm", deployment="chat.v2", pod="p-0")
    assert t.engine == "vllm"  # case variants accepted, stored lower-case
    assert TargetSpec(url="http://10.0.0.7:8000/metrics", engine="").engine is None  # empty: detect


def test_known_engines_are_the_registered_adapters() -> None:
    assert set(KNOWN_ENGINES) == set(ENGINES)


def test_fit_clips_keeping_long_values_apart() -> None:
    a, b = "x" * 300 + "a", "x" * 300 + "b"
    assert len(fit(a, 253)) == 253
    assert fit(a, 253) != fit(b, 253)
    assert fit("ok", 253) == "ok"
    assert fit("a\x00b\ud800", 10) == "a\ufffdb\ufffd"  # storable on PostgreSQL and as UTF-8


def test_deployment_keys_and_redaction() -> None:
    assert is_deployment_key("llm/chat")
    assert not is_deployment_key("probe/a/b")
    assert not is_deployment_key("x")
    assert redact_url("http://u:pw@h:1/m") == "http://redacted@h:1/m"
    assert redact_url("http://h:1/m") == "http://h:1/m"
