"""Direct push of open findings to Alertmanager's v2 API, for users without kvpilot's Prometheus rules.

Each open finding that an alert rule would page on (``alerts.rules.alert_for_finding``) is posted as that alert,
with the same name, labels, severity and runbook, so routing and silences written for the rules work for the
push too. Alertmanager resolves an alert whose ``endsAt`` passes, so open findings are re-sent every tick with
``endsAt`` a few intervals ahead, and a closed finding is sent once with ``endsAt`` = now.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from alerts.rules import alert_for_finding, expand
from detectors.finding import Finding


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class PushResult:
    sent: int
    skipped: int  # findings no alert pages on (info severity, …)


class AlertmanagerPusher:
    def __init__(
        self,
        url: str,
        *,
        client: httpx.Client | None = None,
        resend_s: float = 5.0,
        generator_url: str = "",
        extra_labels: dict[str, str] | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Alertmanager url {url!r} must start with http:// or https://")
        if resend_s <= 0:
            raise ValueError(f"resend_s must be > 0, got {resend_s}")
        self._url = url.rstrip("/") + "/api/v2/alerts"
        self._client = client or httpx.Client(timeout=5.0)
        self._resend_s = resend_s
        self._generator_url = generator_url
        self._extra = dict(extra_labels or {})

    def payload(self, active: Iterable[Finding], closed: Iterable[Finding], *, now: float) -> tuple[list[Any], int]:
        """The v2 ``postableAlerts`` body for one tick, and how many findings were skipped."""
        body: list[dict[str, Any]] = []
        skipped = 0
        for findings, ends in ((active, now + 4 * self._resend_s), (closed, now)):
            for f in findings:
                alert = alert_for_finding(f.kind, str(f.severity))
                if alert is None:
                    skipped += 1
                    continue
                labels = {
                    "alertname": alert.name,
                    "severity": alert.severity,
                    "kind": f.kind,
                    **{k: v for k, v in f.alert_labels().items() if v},
                    **self._extra,
                }
                body.append(
                    {
                        "labels": labels,
                        "annotations": {
                            "summary": f.summary,
                            "description": expand(alert.description, labels),
                            "runbook_url": alert.runbook_url,
                            "finding_id": f.id,
                        },
                        "startsAt": _iso(f.since),
                        "endsAt": _iso(ends),
                        "generatorURL": self._generator_url,
                    }
                )
        return body, skipped

    def push(self, active: Iterable[Finding], closed: Iterable[Finding] = (), *, now: float) -> PushResult:
        """POST this tick's findings; raises ``httpx.HTTPStatusError`` naming Alertmanager's answer."""
        body, skipped = self.payload(active, closed, now=now)
        if body:
            r = self._client.post(self._url, json=body)
            if r.status_code >= 300:
                raise httpx.HTTPStatusError(
                    f"Alertmanager {self._url} answered {r.status_code}: {r.text[:300]}", request=r.request, response=r
                )
        return PushResult(sent=len(body), skipped=skipped)
