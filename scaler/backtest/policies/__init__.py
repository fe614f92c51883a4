"""Backtest policies, one per file, registered by the name `--policies` uses."""

from __future__ import annotations

from collections.abc import Callable

from scaler.backtest.policies.base import Context, ForecastPoint, Policy
from scaler.backtest.policies.dynamo import Dynamo
from scaler.backtest.policies.dynamo_sla import DynamoSla
from scaler.backtest.policies.hpa_util import HpaUtil
from scaler.backtest.policies.kpa import Kpa
from scaler.backtest.policies.kpa_knative import KpaKnative
from scaler.backtest.policies.kvpilot import Kvpilot
from scaler.backtest.policies.reactive import Reactive
from scaler.backtest.policies.wva import Wva

POLICIES: dict[str, Callable[[Context], Policy]] = {
    "reactive": Reactive,
    "hpa-util": HpaUtil,
    "kpa": Kpa,
    "kpa-knative": KpaKnative,  # Knative-style variant, not AIBrix's current semantics
    "wva": Wva,
    "dynamo": Dynamo,
    "dynamo-sla": DynamoSla,
    "kvpilot": Kvpilot,
}

__all__ = ["POLICIES", "Context", "ForecastPoint", "Policy"]
