"""The one reader of published decisions for KEDA: the gRPC external scaler (``scaler/keda/servicer.py``) and the
metrics-api route (``api/routers/metrics_api.py``) both answer through ``DecisionReader.read``, so for the same
board they give the same decision, or the same refusal: no decision (gRPC NOT_FOUND, HTTP 404) or a decision older
than ``stale_after_s`` (gRPC UNAVAILABLE, HTTP 503, so KEDA's `fallback` replicas apply instead of a frozen number).

``kvpilot run`` builds one from settings (``Settings.decision_stale_after_s``: keda.stale_after_ticks loop
intervals) over the loop's ``DecisionBoard`` and clock, and hands that one object to both. Staleness measures the
control loop's liveness: a deployment at zero replicas, or loading its first replicas after scale-from-zero, is
decided every tick and stays fresh.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.clock import Clock
from scaler.publish import DecisionSource, Published

# The default settings' limit (6 ticks of 5 s); `kvpilot run` passes Settings.decision_stale_after_s.
DEFAULT_STALE_AFTER_S = 30.0
# A decision stamped further than this in the future of the clock reading it is stale too: the wall clock stepped
# back since (NTP daemons step, rather than slew, only past 0.128 s: ntpd's default step threshold), so its age is
# unknown; the loop's next decision carries the new time.
CLOCK_STEP_S = 1.0


class NoDecision(LookupError):
    """kvpilot has no decision for the deployment: never decided, or deleted and forgotten."""

    def __init__(self, deployment: str, known: list[str]) -> None:
        listing = ", ".join(known[:10]) + (" …" if len(known) > 10 else "") if known else "none yet"
        super().__init__(f"kvpilot has no decision for deployment {deployment}; deployments with decisions: {listing}")
        self.deployment = deployment


class StaleDecision(Exception):
    """The newest decision is older than the limit: the control loop is not keeping up."""

    def __init__(self, deployment: str, age_s: float, limit_s: float) -> None:
        why = (
            f"is {age_s:.0f} s old (limit {limit_s:g} s): kvpilot's control loop is not keeping up"
            if age_s >= 0
            else f"is stamped {-age_s:.0f} s in the future: the clock stepped back since, so its age is unknown"
        )
        super().__init__(f"the decision for {deployment} {why}; KEDA's fallback applies")
        self.deployment = deployment
        self.age_s = age_s


@dataclass(frozen=True, slots=True)
class DecisionReader:
    source: DecisionSource  # the loop's DecisionBoard; gRPC's StreamIsActive also waits on its changes
    clock: Clock
    stale_after_s: float = DEFAULT_STALE_AFTER_S  # 0 disables the check

    def __post_init__(self) -> None:
        if not self.stale_after_s >= 0:
            raise ValueError(f"stale_after_s must be >= 0, got {self.stale_after_s}")

    def read(self, deployment: str) -> tuple[Published, float]:
        """The newest decision for ``deployment`` ("namespace/name", "namespace/name@pool") and its age in seconds;
        raises NoDecision or StaleDecision."""
        published = self.source.latest(deployment)
        if published is None:
            raise NoDecision(deployment, self.source.deployments())
        age = self.clock.now() - published.as_of
        # below -CLOCK_STEP_S: before, a decision made before the wall clock stepped back an hour was fresh for that
        # hour, a loop that stopped deciding meanwhile included (the liveness this check is for)
        if self.stale_after_s and not -CLOCK_STEP_S <= age <= self.stale_after_s:
            raise StaleDecision(deployment, age, self.stale_after_s)
        return published, age
