"""Generates docs/configuration.md from the Settings model, so the reference can never drift from the code
(registered in kvpilot.generate.GENERATORS; `make check-generated` fails when it is stale)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from kvpilot.settings import ENV_PREFIX, FLAT_ALIASES, Settings

INTRO = """\
# Configuration

kvpilot reads one YAML file (`kvpilot run --config FILE`) plus `KVPILOT_*` environment variables, validates
everything at start, and refuses to start with a message that names every bad field:

```
error: invalid configuration (config file kvpilot.yaml and KVPILOT_* environment):
  collector.interval_s: Input should be greater than 0
  scaler.deployments: scaler.deployments key 'chat' must be 'namespace/name'
```

Precedence, highest first: command-line flags (`--port`), nested environment variables
(`KVPILOT_COLLECTOR__INTERVAL_S=2`: the path in upper case, sections joined by `__`), the flat aliases below,
the YAML file, the defaults. Unknown keys are errors, not silently ignored.

With no configuration at all, kvpilot runs the zero-config demo: a SQLite file under
`$XDG_DATA_HOME/kvpilot/` (`~/.local/share/kvpilot/`) and the built-in simulator as its fleet.

## Secrets

API tokens (`KVPILOT_READ_TOKENS`, `KVPILOT_ADMIN_TOKENS`, comma-separated) are kept as secrets: never logged,
never shown in reprs. In `environment: development` (the default) an API without tokens is open (and says so
in the log). In `environment: production` at least one admin token is required, and any token that is a
well-known default (`changeme`, `admin`, …) or shorter than 16 characters is refused. Generate tokens with
`openssl rand -hex 24`. Put the database password in `KVPILOT_DATABASE_URL` from a Kubernetes Secret.

## Flat aliases

| variable | sets |
| --- | --- |
{aliases}

## Example

```yaml
environment: production
collector:
  interval_s: 5
  discovery:
    kind: kubernetes
    kubernetes_label_selector: kvpilot.io/scrape=true
scaler:
  mode: keda
  cold_start_s: 180
  deployments:
    llm/chat: {{min_replicas: 2, max_replicas: 24}}
detectors:
  kv: {{near_full: 0.92}}          # overrides of detectors.thresholds, validated by the detectors
drains:
  dry_run: false
  max_concurrent: 1
ha:
  enabled: true
  lease_namespace: kvpilot
```

## Reference

Every setting, its environment variable, type and default (generated from `kvpilot/settings.py`).

| setting | environment variable | type | default | constraints |
| --- | --- | --- | --- | --- |
"""


def _type(field: FieldInfo) -> str:
    ann = field.annotation
    text = getattr(ann, "__name__", None) if not getattr(ann, "__args__", None) else None
    out = str(text or ann)
    for noise in ("typing.", "pathlib.", "kvpilot.settings.", "pydantic.types."):
        out = out.replace(noise, "")
    return out


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = "(computed)" if field.default is PydanticUndefined else field.default
        with contextlib.suppress(TypeError):
            value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, str) and value not in ("", "(computed)"):
            return "(host name)" if value else "''"
        if isinstance(value, dict | list | tuple) and not value:
            return "`" + json.dumps(value if not isinstance(value, tuple) else []) + "`"
        return "(computed)" if not isinstance(value, int | float | bool) else f"`{value}`"
    if isinstance(field.default, BaseModel):
        return "(section)"
    if field.default is None:
        return "unset"
    if isinstance(field.default, tuple):
        return "`[]`" if not field.default else f"`{list(field.default)}`"
    return f"`{field.default}`"


def _constraints(field: FieldInfo) -> str:
    parts = []
    for m in field.metadata:
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            v = getattr(m, attr, None)
            if v is not None:
                parts.append(f"{sym} {v}")
    return ", ".join(parts)


def _rows(model: type[BaseModel], prefix: tuple[str, ...]) -> Iterator[str]:
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _rows(ann, path)
            continue
        env = ENV_PREFIX + "__".join(p.upper() for p in path)
        yield (
            f"| `{'.'.join(path)}` | `{env}` | {_type(field).replace('|', '&#124;')} | {_default(field)} | "
            f"{_constraints(field)} |"
        )


def render() -> str:
    aliases = "\n".join(f"| `{env}` | `{'.'.join(path)}` |" for env, path in FLAT_ALIASES.items())
    return INTRO.format(aliases=aliases) + "\n".join(_rows(Settings, ())) + "\n"


def generate() -> dict[str, str]:
    return {"docs/configuration.md": render()}
