"""`collector.arrivals`: a gateway's request counter is configured with errors that say what is wrong, once at start,
rather than a query Prometheus refuses at every tick."""

from __future__ import annotations

from typing import Any

import pytest

from kvpilot.settings import SettingsError, load_settings

URL = "http://prometheus:9090"


def _arrivals(**given: Any) -> Any:
    return load_settings(collector={"arrivals": given}).collector.arrivals


def test_the_default_reads_the_engines() -> None:
    assert load_settings().collector.arrivals.source == "engines"


def test_a_gateway_counter_with_a_model_map() -> None:
    a = _arrivals(
        source="promql",
        promql_url=URL,
        query='inference_objective_request_total{namespace="llm"}',
        deployment_label="model_name",
        deployments={"meta-llama/Llama-3.1-8B-Instruct": "llm/chat"},
    )
    assert a.deployments == {"meta-llama/Llama-3.1-8B-Instruct": "llm/chat"}


def test_the_discovery_prometheus_serves_when_arrivals_name_none() -> None:
    s = load_settings(
        collector={
            "discovery": {"kind": "promql", "promql_url": URL},
            "arrivals": {"source": "promql", "query": "envoy_cluster_upstream_rq_total"},
        }
    )
    assert s.collector.arrivals.promql_url is None


@pytest.mark.parametrize(
    ("given", "said"),
    [
        # no Prometheus to ask
        ({"source": "promql", "query": "x_total"}, "neither collector.arrivals.promql_url nor"),
        # no query
        ({"source": "promql", "promql_url": URL}, "query is not set"),
        # a rate, not the counter: kvpilot computes the rate and the burst floor needs the count
        ({"query": "rate(x_total[1m])"}, "reads rate(...), not the counter"),
        ({"query": "sum by (model_name) (irate(x_total[1m]))"}, "reads irate(...)"),
        ({"query": " increase(x_total[5m])"}, "reads increase(...)"),
        # a range vector
        ({"query": "x_total[5m]"}, "ends in a range"),
        # brackets and quotes that Prometheus would refuse with bad_data every tick
        ({"query": 'x_total{job="gw"'}, "'}' missing at the end"),
        ({"query": 'x_total{job="gw}'}, 'string opened with " is not closed'),
        ({"query": "sum(x_total))"}, "')' at character 13 closes nothing"),
        ({"query": "   "}, "is blank"),
        # label names Prometheus would not have
        ({"deployment_label": "model-name"}, "must be a Prometheus label name"),
        ({"namespace_label": ""}, "must be a Prometheus label name"),
        # a map to something that is no deployment key
        ({"deployments": {"llama": "chat"}}, "'llama' maps to 'chat': must be 'namespace/name'"),
        ({"promql_url": "prometheus:9090"}, "must be an http(s) URL"),
        ({"namespace": "LLM"}, "namespace"),
    ],
)
def test_refused_with_what_is_wrong(given: dict[str, Any], said: str) -> None:
    with pytest.raises(SettingsError) as e:
        _arrivals(**given)
    assert said in str(e.value)


def test_brackets_in_strings_and_comments_are_not_counted() -> None:
    a = _arrivals(query='x_total{route=~"a(b|c\\"]"} # a comment ) ]\n')
    assert a.query.startswith("x_total")
