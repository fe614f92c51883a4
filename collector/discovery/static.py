"""Targets from a YAML file, re-read when the file changes (docs/configuration-targets.md).

The file is a list of targets, or a mapping with ``defaults`` (applied to every target) and ``targets``.
Errors name the file, the line, the target index and the field, so a typo is found without guessing; an engine
kvpilot has no adapter for is one (``vLLM`` is read as ``vllm``, as the API does). A bad edit of a file that loaded
before keeps the previous targets (and says why) rather than dropping the fleet. The names and URL rules the API
applies (``store.fields.TargetSpec``) are applied above this package, by ``kvpilot.runtime.sources``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from collector.engines import ENGINES
from collector.roles import parse_role
from collector.samples import TargetInfo
from collector.urls import is_http_url, redacted

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 32 << 20  # some 300,000 targets of a line or so each
FIELDS = ("url", "kind", "engine", "namespace", "deployment", "pod", "node", "prefix", "role")
KINDS = ("engine", "gpu")


class TargetFileError(ValueError):
    """The targets file is unreadable or invalid; the message names the file, line, target index and field."""


# (target index or None for ``defaults``, field or None) -> 1-based line in the file, or None when unknown.
LineOf = Callable[[int | None, str | None], int | None]


def _no_lines(index: int | None, key: str | None) -> int | None:
    return None


def parse_targets(data: Any, *, source: str = "targets", line_of: LineOf = _no_lines) -> list[TargetInfo]:
    """Validate the loaded YAML and build targets; raise `TargetFileError` naming what is wrong (and where, when
    ``line_of`` knows the lines: `load_targets` passes one)."""

    def at(index: int | None, key: str | None = None) -> str:
        line = line_of(index, key)
        return f"{source}:{line}" if line is not None else source

    defaults: Mapping[str, Any] = {}
    if isinstance(data, Mapping):
        unknown = set(data) - {"targets", "defaults"}
        if unknown:
            raise TargetFileError(f"{source}: unknown top-level key(s) {sorted(unknown)}; expected targets, defaults")
        defaults = data.get("defaults") or {}
        if not isinstance(defaults, Mapping):
            raise TargetFileError(f"{at(None)}: defaults: expected a mapping, got {type(defaults).__name__}")
        _check_fields(defaults, lambda key: f"{at(None, key)}: defaults", allow_url=False)
        data = data.get("targets")
    if data is None:
        return []
    if not isinstance(data, list):
        raise TargetFileError(f"{source}: expected a list of targets, got {type(data).__name__}")
    out: list[TargetInfo] = []
    seen: dict[str, int] = {}
    pods: dict[tuple[str, str], str] = {}  # (namespace, pod) of the engine targets naming one -> "target i"
    for i, item in enumerate(data):
        if isinstance(item, str):
            item = {"url": item}
        if not isinstance(item, Mapping):
            raise TargetFileError(f"{at(i)}: target {i}: expected a mapping or a URL, got {type(item).__name__}")
        merged = {**defaults, **item}

        def where(key: str | None, i: int = i, own: Mapping[str, Any] = item) -> str:
            # a field the target inherits from ``defaults`` is pointed at there
            line = at(i, key) if key is None or key in own or key not in defaults else at(None, key)
            return f"{line}: target {i}"

        _check_fields(merged, where, allow_url=True)
        if merged.get("engine"):
            merged["engine"] = _engine(merged["engine"], where)
        if merged.get("role"):
            try:
                merged["role"] = parse_role(merged["role"])
            except ValueError as e:
                raise TargetFileError(f"{where('role')}: {e}") from None
        target = TargetInfo(**{k: v for k, v in merged.items() if v is not None or k in ("engine", "prefix")})
        if target.url in seen:
            raise TargetFileError(f"{where('url')}: url: {redacted(target.url)} is already target {seen[target.url]}")
        seen[target.url] = i
        twin = same_replica(target, pods)
        if twin is not None:
            raise TargetFileError(f"{where('pod')}: pod: {twin}")
        pods.setdefault((target.namespace, target.pod), f"target {i}")
        out.append(target)
    return out


class SameReplica(ValueError):
    """A target naming the pod another engine target names (``same_replica``): the API's 409."""


class _Named(Protocol):  # a TargetInfo, or the settings' StaticTarget
    @property
    def kind(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def pod(self) -> str: ...


def same_replica(target: _Named, pods: Mapping[tuple[str, str], str]) -> str | None:
    """Why ``target`` cannot be scraped beside the engine targets of ``pods`` ((namespace, pod) -> which target, in
    the reader's words: "target 3", a URL), or None.
    A replica is known by its namespace and pod: two pages under one name were read as one replica, its counters
    taken from each page in turn (two replicas counted as one, and each switch read as a restart: a fleet at rest
    read at 9.8 requests/s)."""
    if target.kind != "engine" or not target.pod:
        return None
    first = pods.get((target.namespace, target.pod))
    if first is None:
        return None
    return (
        f"{target.namespace}/{target.pod} is already {first}'s (another URL): a replica is known by its "
        "namespace and pod, so the two pages would be read as one replica; give each its own pod"
    )


def _engine(value: str, where: Callable[[str | None], str]) -> str:
    """One of the adapters' names, matched case-insensitively: a misspelt engine would only leave the target down."""
    name = value.strip().lower()
    if name not in ENGINES:
        known = f"known: {', '.join(ENGINES)} (or leave it out)"  # the words of store.fields, as the API says it
        raise TargetFileError(f"{where('engine')}: engine: unknown engine {value[:40]!r}; {known}")
    return name


def _check_fields(item: Mapping[str, Any], where: Callable[[str | None], str], *, allow_url: bool) -> None:
    for key in item:
        if key not in FIELDS or (key == "url" and not allow_url):
            raise TargetFileError(f"{where(str(key))}: unknown field {key!r}; expected one of {', '.join(FIELDS)}")
    for key in ("kind", "engine", "namespace", "deployment", "pod", "node", "prefix", "role"):
        value = item.get(key)
        if value is not None and not isinstance(value, str):
            raise TargetFileError(f"{where(key)}: {key}: expected a string, got {type(value).__name__} {value!r}")
    if "kind" in item and item["kind"] not in KINDS:
        raise TargetFileError(f"{where('kind')}: kind: must be one of {', '.join(KINDS)}, got {item['kind']!r}")
    if allow_url:
        url = item.get("url")
        if not isinstance(url, str) or not url:
            raise TargetFileError(f"{where(None)}: url: required")
        if not is_http_url(url):  # `http://[::1/m` (an unclosed IPv6 host) was a ValueError let through
            raise TargetFileError(f"{where('url')}: url: must be an http(s) URL with a host, got {redacted(url)!r}")


# Values YAML aliases may add to a file once expanded. An anchor repeated by aliases of aliases ("a billion laughs")
# loads as one shared list, but whatever walks it (an error's repr, the settings library's dump) expands it: 10 lines
# took 60 s and 4-7 GB before the process was killed.
MAX_ALIAS_VALUES = 100_000


def alias_values(root: yaml.Node | None) -> int:
    """How many values the aliases of a composed YAML document add when expanded (0 without aliases): each node is
    counted once, so a bomb is measured without being expanded. A node an alias points back into (a cycle) counts 1."""
    sizes: dict[int, int] = {}  # node id -> values at and below it, expanded (1 while being counted)

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        sizes[id(node)] = total
        return total

    return 0 if root is None else size(root) - len(sizes)


# What PyYAML's constructors raise, beside YAMLError, on a scalar its resolver or a tag sent to them: `2024-02-30`
# (read as a date), `!!int abc`, `!!bool maybe`, `!!timestamp x`, an integer of more than 4,300 digits. Each ended the
# command with a traceback (exit 1), and a targets file re-read so each tick.
CONSTRUCT_ERRORS = (ValueError, TypeError, AttributeError, KeyError, OverflowError)


# NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR: line breaks to PyYAML (YAML 1.1), not to editors, grep or YAML 1.2.
_HIDDEN_BREAK = re.compile("[\u0085\u2028\u2029]")


def yaml_loader(text: str) -> tuple[yaml.SafeLoader | None, int, str]:
    """A SafeLoader over ``text``, or None, the line and why it cannot be one: PyYAML refuses a control character
    (NUL, BEL, ESC, ... anywhere in the text: a binary file, a stray byte an editor or a paste left) when the loader
    is made, before any parse, with a ReaderError that named a position in characters: raised where only a parse's
    errors were caught, it was a traceback (the settings file: exit 1; the targets file: a traceback every tick).
    NEL, U+2028 and U+2029 are refused too: PyYAML reads them as line breaks, so text an editor shows inside a
    comment was live (``retention_days: 3 # note<U+2028>buffer_max_writes: 5`` set buffer_max_writes)."""
    hidden = _HIDDEN_BREAK.search(text)
    if hidden is not None:
        line = text.count("\n", 0, hidden.start()) + 1
        return (
            None,
            line,
            (
                f"character U+{ord(hidden.group()):04X} is not allowed: YAML reads it as a line break where "
                "editors and grep show none (text after it in a comment would be read as settings)"
            ),
        )
    try:
        return yaml.SafeLoader(text), 0, ""
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        char = e.character if isinstance(e.character, int) else ord(str(e.character)[:1] or "\0")
        return None, line, f"character U+{char:04X} is not allowed in YAML (no control characters, nor U+FFFE, U+FFFF)"


def unreadable_scalar(loader: yaml.SafeLoader, root: yaml.Node) -> tuple[int, str]:
    """(1-based line, what it says) of the first scalar of ``root`` that ``loader`` cannot construct, once
    ``construct_document`` failed with one of CONSTRUCT_ERRORS (whose messages name no line); (0, "") if none does."""
    scalars: list[yaml.ScalarNode] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            scalars.append(node)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(n for pair in node.value for n in pair)
    loader.recursive_objects = {}  # the failed construction left its node marked as being built
    for node in sorted(scalars, key=lambda n: n.start_mark.index):
        try:
            loader.construct_object(node)
        except yaml.YAMLError:
            continue
        except CONSTRUCT_ERRORS as e:
            shown = node.value if len(node.value) <= 40 else node.value[:40] + "..."
            said = str(e).split(";")[0]  # int()'s advice to raise its limit is not the user's to follow
            said = said if len(said) <= 120 else said[:120] + "..."
            tag = node.tag.rsplit(":", 1)[-1]
            return node.start_mark.line + 1, f"{shown!r} cannot be read as {tag} ({type(e).__name__}: {said})"
    return 0, ""


def _line_finder(text: str) -> LineOf:
    """Lines of the targets and their fields, from the YAML's node tree (``safe_load`` keeps no positions)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        return _no_lines
    items: list[yaml.Node] = []
    defaults: yaml.Node | None = None
    if isinstance(root, yaml.MappingNode):
        for k, v in root.value:
            if k.value == "targets" and isinstance(v, yaml.SequenceNode):
                items = list(v.value)
            elif k.value == "defaults":
                defaults = v
    elif isinstance(root, yaml.SequenceNode):
        items = list(root.value)

    def line_of(index: int | None, key: str | None) -> int | None:
        node = defaults if index is None else items[index] if 0 <= index < len(items) else None
        if node is None:
            return None
        if key is not None and isinstance(node, yaml.MappingNode):
            for k, _v in node.value:
                if k.value == key:
                    return int(k.start_mark.line) + 1
        return int(node.start_mark.line) + 1

    return line_of


def _refuse_duplicate_keys(root: yaml.Node | None, path: Path) -> None:
    """A key given twice in one mapping (`url:` twice in a target) is refused with both lines: YAML loaders keep the
    last one silently, and the settings file refuses the same (kvpilot.settings.sources)."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen_nodes:  # an alias of a node already walked
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key, value in node.value:
                stack.append(value)
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                line = key.start_mark.line + 1
                if key.value in lines:
                    raise TargetFileError(
                        f"{path}:{line}: {key.value!r} is given twice in one mapping (lines {lines[key.value]} and "
                        f"{line}); keep one"
                    )
                lines[key.value] = line
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def load_targets(path: Path) -> list[TargetInfo]:
    try:
        # Not waited on: a FIFO opened for reading waits for a writer, and at start-up that held `kvpilot run` before
        # its first line, deaf to SIGTERM (its open() retried after the handler), until a SIGKILL.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(fd).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                raise TargetFileError(f"{path}: not a regular file; not read")
            raw = f.read(MAX_FILE_BYTES + 1)  # bounded: /dev/zero was read until memory ran out
            if raw is None:  # a device with nothing to read yet (a terminal), opened without waiting: not waited on
                raise TargetFileError(f"{path}: not a regular file; not read")
    except OSError as e:
        raise TargetFileError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise TargetFileError(f"{path}: larger than {MAX_FILE_BYTES} bytes: not a list of targets")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise TargetFileError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x})") from None
    loader, line, why = yaml_loader(text)  # parsed once: the node tree is checked, then built (as safe_load does)
    if loader is None:
        raise TargetFileError(f"{path}:{line}: {why}")
    try:
        root = loader.get_single_node()
        if alias_values(root) > MAX_ALIAS_VALUES:
            raise TargetFileError(f"{path}: its aliases expand to more than {MAX_ALIAS_VALUES} values")
        _refuse_duplicate_keys(root, path)
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as e:
        raise TargetFileError(f"{path}: invalid YAML: {e}") from None
    except RecursionError:  # PyYAML builds nested collections recursively
        raise TargetFileError(f"{path}: nested too deeply for a list of targets") from None
    except TargetFileError:  # a ValueError too: already in words
        raise
    except CONSTRUCT_ERRORS as e:
        line, why = unreadable_scalar(loader, root) if root is not None else (0, "")
        raise TargetFileError(f"{path}:{line}: {why}" if line else f"{path}: {type(e).__name__}: {e}") from None
    finally:
        loader.dispose()
    return parse_targets(data, source=str(path), line_of=_line_finder(text))


# A changed list of targets is applied once the file has held it this long, at a later read (0: at once).
SETTLE_S = 2.0
# ...and, for a file that changes between every two reads (a generator that rewrites it at each pod change, faster
# than the tick), the newest list read whole is applied once changes have waited this long: six 5 s ticks, longer
# than any one write of the file is caught in.
MAX_WAIT_S = 30.0

Stamp = tuple[int, int, int, bool]  # modification time (ns), size, inode, whether a regular file


@dataclass(frozen=True, slots=True)
class _Pending:
    """A changed list read from the file, not applied yet."""

    stamp: Stamp
    targets: list[TargetInfo]
    seen_at: float  # monotonic
    since: float  # monotonic: when the first change not applied yet was read (lists replaced meanwhile included)


class StaticFileDiscovery:
    """`Discovery` over a YAML file. The first load must succeed (fail fast at start-up); later, the file
    is re-read whenever its modification time, size or inode changes, in a worker thread (20,000 targets are some
    10 s of YAML parsing that held the event loop, the API and KEDA with it).

    A re-read keeps the previous targets, and says why, when the file is caught mid-write: empty (0 bytes, as a
    shell's ``>`` or an editor that truncates leaves it until it writes), cut where it does not parse (counted in
    ``kept_total``), changed while it was being read (tried again at the next look), or no longer a regular file (a
    FIFO in its place was opened and waited on forever). A file cut at a line end parses: the targets after the cut
    were dropped at once, and a cut inside the last target made a wrong one (its URL cut short, its pod or deployment
    left out). So a changed list is applied once a later read, ``settle_s`` or more after the first, finds the file
    unchanged (same modification time, size and inode); a writer still writing changes it in between. A file that
    changes between every two reads never holds still: once changes have waited ``max_wait_s``, the newest list read
    whole is applied (a fleet whose pods change faster than the tick still gets its targets, at most that late)."""

    def __init__(
        self,
        path: Path | str,
        *,
        settle_s: float = SETTLE_S,
        max_wait_s: float = MAX_WAIT_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not settle_s >= 0:
            raise ValueError(f"settle_s must be >= 0, got {settle_s}")
        if not max_wait_s >= settle_s:
            raise ValueError(f"max_wait_s must be >= settle_s ({settle_s}), got {max_wait_s}")
        self.path = Path(path)
        self.settle_s = settle_s
        self.max_wait_s = max_wait_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self._targets = load_targets(self.path)
        self._pending: _Pending | None = None
        self.last_error: str | None = None
        self.kept_total = 0  # reads of a changed file that kept the previous targets (it did not load)
        # the file holds what the last read could not read (empty, unparsable, no regular file), until one reads it
        # whole (applied, or waiting to settle): ``kvpilot_targets_file_unread``
        self.unread = False

    def _stat(self) -> Stamp | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino, stat.S_ISREG(st.st_mode))

    def _keep(self, error: str) -> None:
        self.last_error = error
        self.kept_total += 1
        self.unread = True
        log.error("keeping the previous %d targets: %s", len(self._targets), self.last_error)

    def current(self) -> list[TargetInfo]:
        with self._lock:  # a tick abandoned mid-read leaves its thread running; the next one waits for it
            return self._current()

    def _current(self) -> list[TargetInfo]:
        stamp = self._stat()
        if stamp == self._stamp:
            return list(self._targets)
        pending = self._pending
        if pending is not None and stamp == pending.stamp:  # read before and changed: settled yet?
            if self._due(pending):
                self._apply(stamp, pending.targets)
            return list(self._targets)
        if stamp is not None and not stamp[3]:
            self._stamp, self._pending = stamp, None
            self._keep(f"{self.path}: not a regular file; not read")
        elif stamp is not None and stamp[1] == 0 and self._targets:
            self._stamp, self._pending = stamp, None  # taken up when it changes again: the rest of the write
            self._keep(f"{self.path}: empty (0 bytes), as while it is being written; a file of [] removes every target")
        else:
            try:
                targets = load_targets(self.path)
            except TargetFileError as e:
                self._stamp, self._pending = stamp, None
                self._keep(str(e))
                return list(self._targets)
            self.unread = False
            if self._stat() != stamp:  # written while it was read: read again, whole, at the next look
                log.info("targets file %s changed while it was read; reading it again at the next tick", self.path)
                return list(self._targets)
            if targets == self._targets:  # written again as it was
                self._apply(stamp, targets)
            elif stamp is not None:
                self._settle(stamp, targets, pending)
        return list(self._targets)

    def _settle(self, stamp: Stamp, targets: list[TargetInfo], pending: _Pending | None) -> None:
        """A changed list waits until the file has held it for ``settle_s``; ``settle_s`` 0 applies it at once. The
        same list written again whole (a generator that rewrites the file each few seconds: a new stamp, the same
        size) keeps its wait; a file that grew did not hold it, whatever it parses to (a comment being written)."""
        now = self._monotonic()
        same = pending is not None and pending.targets == targets and pending.stamp[1] == stamp[1]
        seen_at = pending.seen_at if pending is not None and same else now
        self._pending = _Pending(stamp, targets, seen_at, pending.since if pending is not None else now)
        if self._due(self._pending):
            self._apply(stamp, targets)
        elif not same:
            kept = set(targets)
            log.info(
                "targets file %s changed (%d targets; %d of the %d before dropped or changed): applied once it "
                "stays unchanged for %g s (a file read while it is written keeps the targets)",
                self.path,
                len(targets),
                sum(1 for t in self._targets if t not in kept),
                len(self._targets),
                self.settle_s,
            )

    def _due(self, pending: _Pending) -> bool:
        """Whether a changed list is applied now: the file held it ``settle_s``, or changes waited ``max_wait_s``."""
        now = self._monotonic()
        return now - pending.seen_at >= self.settle_s or now - pending.since >= self.max_wait_s

    def _apply(self, stamp: Stamp | None, targets: list[TargetInfo]) -> None:
        self._stamp, self._targets, self.last_error, self._pending = stamp, targets, None, None

    async def targets(self) -> list[TargetInfo]:
        return await asyncio.to_thread(self.current)


def from_settings(settings: Any) -> StaticFileDiscovery:
    """Build from ``collector.discovery`` settings (``static_file``)."""
    if getattr(settings, "static_file", None) is None:
        raise TargetFileError("collector.discovery.static_file is not set")
    return StaticFileDiscovery(settings.static_file)
