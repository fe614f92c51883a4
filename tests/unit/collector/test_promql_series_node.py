"""A GPU target read through Prometheus: which node its GPUs are on (the drain rails act on that name)."""

from __future__ import annotations

import json

import pytest

from collector.promql.series import read_answers


def _answer(labels: dict[str, str]) -> bytes:
    metric = {"__name__": "DCGM_FI_DEV_XID_ERRORS", "job": "dcgm", "instance": "10.0.0.5:9400", "gpu": "0", **labels}
    result = [{"metric": {**metric, "UUID": "GPU-a"}, "value": [1.0, "79"]}]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@pytest.mark.parametrize(
    ("labels", "node"),
    [
        ({"Hostname": "gpu-node-3"}, "gpu-node-3"),  # NODE_NAME set, as dcgm-exporter's chart does
        ({"node": "gpu-node-4", "Hostname": "dcgm-exporter-7x2kq", "pod": "dcgm-exporter-7x2kq"}, "gpu-node-4"),
        # no NODE_NAME: the exporter's Hostname is its own pod's name, which no node is called
        ({"Hostname": "dcgm-exporter-7x2kq", "pod": "dcgm-exporter-7x2kq"}, ""),
        ({"hostname": "gpu-node-5", "pod": "dcgm-exporter-7x2kq"}, "gpu-node-5"),
    ],
)
def test_a_gpus_node_is_the_relabelled_node_or_a_hostname_that_is_not_the_exporter_pod(
    labels: dict[str, str], node: str
) -> None:
    (result,) = read_answers(
        [("gpus", _answer(labels))], None, {"DCGM_FI_DEV_XID_ERRORS": "gauge"}, 1.0, frozenset(), 0.0
    )
    assert result.ok, result.error
    assert result.target.node == node
    assert [(g.node, g.index) for g in result.gpus] == [(node, "0")]
