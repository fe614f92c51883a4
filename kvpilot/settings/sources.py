"""Where kvpilot's settings come from besides the environment and the keyword arguments (pydantic-settings'
sources): the flat ``KVPILOT_HTTP_PORT``-style aliases and the YAML file, whose relative paths are read from its
folder; and the line in that file of a field, for the errors ``load_settings`` tells."""

from __future__ import annotations

import os
import stat
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, YamlConfigSettingsSource

from api.json_body import loads_once
from collector.discovery.static import (
    CONSTRUCT_ERRORS,
    MAX_ALIAS_VALUES,
    alias_values,
    unreadable_scalar,
    yaml_loader,
)

# Flat variables that map onto a nested field: the names the issue, the Helm chart and the docs promise.
FLAT_ALIASES: dict[str, tuple[str, ...]] = {
    "KVPILOT_HTTP_PORT": ("api", "http_port"),
    "KVPILOT_GRPC_PORT": ("api", "grpc_port"),
    "KVPILOT_READ_TOKENS": ("api", "read_tokens"),
    "KVPILOT_ADMIN_TOKENS": ("api", "admin_tokens"),
    "KVPILOT_DATABASE_URL": ("store", "database_url"),
}


class SettingsError(ValueError):
    """The configuration is invalid; the message lists every offending field and why."""


class FieldError(ValueError):
    """A model validator's error about one field below the model (``loc``, relative to it): ``load_settings`` names
    that field, and its line in the YAML file, rather than the whole section."""

    def __init__(self, loc: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class EnvSource(EnvSettingsSource):
    """KVPILOT_* variables. A JSON value (``KVPILOT_COLLECTOR='{"interval_s": 5}'``) refuses a key given twice in any
    object, as the settings file and the API do: ``json.loads`` kept the last of two in silence. One nested past
    the JSON reader's recursion is refused in words, as the settings file's is (it was a RecursionError traceback)."""

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        try:
            decoded = super().decode_complex_value(field_name, field, value)
            if decoded is not value and isinstance(value, str | bytes):
                loads_once(value)  # DuplicateKey (a ValueError): "error parsing value for field ..." with its words
        except RecursionError:
            raise ValueError("its JSON is nested too deeply") from None
        return decoded


class FlatAliasSource(PydanticBaseSettingsSource):
    """Maps the flat ``KVPILOT_HTTP_PORT``-style variables onto their nested fields."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for env, path in FLAT_ALIASES.items():
            if env in os.environ:
                node = out
                for part in path[:-1]:
                    node = node.setdefault(part, {})
                node[path[-1]] = os.environ[env]
        return out


MAX_CONFIG_BYTES = 4 << 20


class YamlFileSource(YamlConfigSettingsSource):
    """pydantic-settings' YAML source, with errors that name the file: one that is missing, unreadable, not YAML or
    not a mapping at the top fails the start (the library skips a missing file and trips over a list). Its keys are
    taken as written, so a misspelt or miscased one is refused like any unknown key (the library would match the top
    level case-insensitively, as it does environment variables). Relative file paths in it are read from its
    folder."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        if path is not None:
            try:
                # a pipe is not opened to check it: once its writer has written and closed, closing the check's end
                # loses what it wrote, and the read that follows waits for a writer forever
                if stat.S_ISREG(path.stat().st_mode):
                    path.open("rb").close()
            except OSError as e:
                raise SettingsError(f"cannot read config file {path}: {e.strerror}") from e
        super().__init__(settings_cls, yaml_file=path)
        self.init_kwargs = dict(self.yaml_data)

    @staticmethod
    def _existing_files(files: Any) -> list[Path | Traversable]:
        # The library reads regular files only: a config given as `-c <(...)` or `-c /dev/stdin` (a pipe) was
        # ignored in silence, and kvpilot ran on its defaults. __init__ has checked the one path can be opened.
        return [] if files is None else [Path(files).expanduser() if isinstance(files, str) else files]

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        try:
            with file_path.open("rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)  # bounded: `-c /dev/zero` read until memory ran out
        except OSError as e:
            raise SettingsError(f"cannot read config file {file_path}: {e.strerror}") from e
        if len(raw) > MAX_CONFIG_BYTES:
            raise SettingsError(f"config file {file_path} is larger than {MAX_CONFIG_BYTES} bytes: not a configuration")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            raise SettingsError(
                f"config file {file_path} is not UTF-8 text: byte 0x{raw[e.start]:02x} on line {line}"
            ) from None
        loader, line, why = yaml_loader(text)  # parsed once: the node tree is checked, then built (as safe_load does)
        if loader is None:
            raise SettingsError(f"config file {file_path}, line {line}: {why}")
        try:
            node = loader.get_single_node()
            _refuse_duplicate_keys(node, file_path)
            if alias_values(node) > MAX_ALIAS_VALUES:
                raise SettingsError(
                    f"config file {file_path}: its aliases expand to more than {MAX_ALIAS_VALUES} values"
                )
            data = (loader.construct_document(node) if node is not None else None) or {}
        except yaml.YAMLError as e:
            raise SettingsError(f"config file {file_path} is not valid YAML: {e}") from e
        except RecursionError:  # PyYAML builds nested collections recursively
            line = loader.get_mark().line + 1
            raise SettingsError(f"config file {file_path}: nested too deeply near line {line}") from None
        except SettingsError:  # a ValueError too: already in words
            raise
        except CONSTRUCT_ERRORS as e:  # `2024-02-30`, `!!int abc`, 5,000 digits: was a traceback, exit 1
            line, why = unreadable_scalar(loader, node) if node is not None else (0, "")
            raise SettingsError(
                f"config file {file_path}, line {line}: {why}" if line else f"config file {file_path}: {e}"
            ) from None
        finally:
            loader.dispose()
        if not isinstance(data, dict):
            raise SettingsError(f"config file {file_path} must hold a mapping at the top, not {type(data).__name__}")
        data = {str(key): value for key, value in data.items()}  # `1:` or `true:` is an unknown key like any other
        if isinstance(file_path, Path):
            _paths_from_folder(data, file_path.parent)
        return data


def _refuse_duplicate_keys(
    node: yaml.Node | None, file_path: Path | Traversable, where: str = "", seen_nodes: set[int] | None = None
) -> None:
    """A key given twice in one mapping is refused with both lines: YAML loaders keep the last one silently, and
    nothing in this file is silently ignored."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:  # an alias of a node already walked (or of itself)
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else None
            if name is None or key.tag == "tag:yaml.org,2002:merge":
                continue
            line = key.start_mark.line + 1
            path = f"{where}.{name}" if where else name
            if name in seen:
                raise SettingsError(
                    f"config file {file_path}: {path} is given twice (lines {seen[name]} and {line}); keep one"
                )
            seen[name] = line
            _refuse_duplicate_keys(value, file_path, path, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicate_keys(item, file_path, f"{where}[{i}]", seen_nodes)


# File paths the YAML file names are read from the file's folder, as kubectl and Prometheus read theirs, so
# `kvpilot run -c deploy/kvpilot.yaml` finds `static_file: targets.yaml` beside it from any working directory. The
# same settings from KVPILOT_* variables or the command line stay relative to the working directory.
_FILE_RELATIVE = (
    ("data_dir",),
    ("collector", "discovery", "static_file"),
    ("collector", "discovery", "simulator_trace"),
    ("keda", "tls_cert_file"),
    ("keda", "tls_key_file"),
    ("keda", "tls_client_ca_file"),
)


def _paths_from_folder(data: dict[str, Any], folder: Path) -> None:
    for path in _FILE_RELATIVE:
        node: Any = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        value = node.get(path[-1]) if isinstance(node, dict) else None
        # `synthetic[:k=v]` is the simulator's built-in trace, not a file
        if not isinstance(value, str) or not value or value.startswith("synthetic"):
            continue
        p = Path(value).expanduser()
        if not p.is_absolute():
            node[path[-1]] = str(folder / p)


def yaml_lines(path: Path | None) -> Any:
    """loc -> the line in the YAML file of the value at ``loc`` (None when the file does not hold it)."""
    root: Any = None
    if path is not None and path.is_file():  # a pipe was read once, for the settings: reading it again would wait
        try:
            root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        except (OSError, ValueError, RecursionError, yaml.YAMLError):
            root = None

    def line_of(loc: tuple[int | str, ...]) -> int | None:
        node, line = root, None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                found = next(((k, v) for k, v in node.value if k.value == str(part)), None)
                if found is None:
                    return None
                line, node = found[0].start_mark.line + 1, found[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return None  # not (all) in the file: the environment or a default set it
        return line

    return line_of
