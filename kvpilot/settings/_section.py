"""The base of every settings section: unknown keys are refused and values are frozen once read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from collector.urls import password_masked


class _Section(BaseModel):
    # allow_inf_nan: a number a setting holds is finite. Infinity passed every bound (gt=0, renew < lease) and
    # failed where it was used: ha.lease_duration_s .inf made every Lease write fail (a whole number of seconds)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _home_expanded(path: Path) -> Path:
    try:
        return path.expanduser()
    except RuntimeError:  # no home folder to name (no HOME, a user with no passwd entry): the path as written
        return path


# A file or folder setting: `~` and `~user` at its start name a home folder, as the shell reads them. Written in the
# YAML file or in a quoted KVPILOT_* value, `data_dir: ~/kvpilot` was the folder `~/kvpilot` under the working
# directory: a kvpilot started from another folder found an empty store.
HomePath = Annotated[Path, AfterValidator(_home_expanded)]


def url_or_unset(value: str | None) -> str | None:
    """A URL setting's value (``store.database_url``, ``collector.discovery.promql_url``,
    ``sharding.advertise_address``): empty is unset, as an empty environment variable is (the setting's default); one
    of only white space, or with white space around it, is refused. Before (session 20), ``KVPILOT_DATABASE_URL=" "``
    passed validation and failed at the first use of the store; a Secret written with ``echo`` keeps its newline."""
    if value is None or value == "":
        return None
    if not value.strip():
        raise ValueError(f"is blank ({value[:20]!r}, only white space): unset it for the default, or give a value")
    if value != value.strip():
        shown = value.replace(value.strip(), password_masked(value.strip()))  # never a password in the message
        raise ValueError(
            f"has white space around it ({shown[:10]!r}...{shown[-10:]!r}): remove it (a value written with echo "
            "keeps its newline)"
        )
    return value
