"""The one way every input file is read: bounded, strict, and failing with one line.

Every YAML, TOML and JSON document a user or a benchmark hands us goes through here, so
the limits hold for all of them: text must be UTF-8 and not huge; YAML may use a few
anchors but no alias bomb and no recursive alias; nesting, numbers and keys are bounded;
NaN, infinities and integers beyond 64 bits are refused. The result is plain data (dict
with str keys, list, str, int, float, bool, None; TOML dates become ISO strings) that
pydantic models then validate. Any problem raises the caller's MakaUserError subclass.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from .errors import MakaUserError, SpecError

#: Bytes in one configuration file (spec, task.toml, task.yaml, instruction, ...).
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: Bytes in one data file (SWE-bench instances, predictions).
MAX_DATA_BYTES = 2 * 1024 * 1024 * 1024
#: Nesting of lists and mappings in any document.
MAX_DEPTH = 64
#: ``[``/``{`` nesting in a YAML text (brackets inside strings count, hence the margin).
MAX_FLOW_DEPTH = 256
#: YAML aliases (``*name``) in one document, and the nodes they may add once expanded
#: (a 417-byte alias bomb would otherwise expand to millions of nodes and 62 MB records).
MAX_ALIASES = 256
MAX_ALIAS_NODES = 10_000
#: Integers beyond a signed 64-bit range are never a meaningful setting.
MAX_INT = 2**63 - 1

ErrorType = type[MakaUserError]
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def read_bytes(path: Path, *, what: str, error: ErrorType = SpecError, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of ``path``; missing, unreadable or oversized files are one-line errors."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        raise error(path, None, f"{what} not found") from None
    except IsADirectoryError:
        raise error(path, None, f"cannot read {what}: it is a directory, expected a file") from None
    except OSError as e:
        raise error(path, None, f"cannot read {what}: {e.strerror or e}") from None
    if len(data) > limit:
        raise error(path, None, f"{what} is larger than {limit // (1024 * 1024)} MiB")
    return data


def decode(data: bytes, path: Path, *, what: str, error: ErrorType = SpecError) -> str:
    """Strict UTF-8 (a leading BOM is dropped); the error names the line and byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(path, f"line {line}", f"{what} is not valid UTF-8 (byte 0x{data[e.start]:02x})") from None
    return text.removeprefix("\ufeff")


def read_text(path: Path, *, what: str, error: ErrorType = SpecError, limit: int = MAX_CONFIG_BYTES) -> str:
    return decode(read_bytes(path, what=what, error=error, limit=limit), path, what=what, error=error)


# -- plain data ---------------------------------------------------------------------------


def _reason(e: Exception) -> str:
    """A parser's complaint in a few words (Python's own wording for huge integers is a paragraph)."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    if "integer string conversion" in text:
        return "a number has more than 4300 digits"
    return text[:160]


def _where(keys: tuple[Any, ...]) -> str | None:
    out = ""
    for k in keys:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out or None


def plain(data: Any, path: Path, *, error: ErrorType = SpecError, keys: tuple[Any, ...] = ()) -> Any:
    """A checked copy of parsed data: bounded depth, finite numbers, string keys, plain types."""
    if len(keys) > MAX_DEPTH:
        raise error(path, _where(keys[:MAX_DEPTH]), f"nested more than {MAX_DEPTH} levels deep")
    if data is None or isinstance(data, bool):
        return data
    if isinstance(data, str):
        if "\0" in data:
            raise error(path, _where(keys), "a string holds a NUL character (\\0)")
        return data
    if isinstance(data, int):
        if abs(data) > MAX_INT:
            raise error(path, _where(keys), f"integer out of range (it has {len(str(abs(data)))} digits)")
        return data
    if isinstance(data, float):
        if not math.isfinite(data):
            raise error(path, _where(keys), f"expected a finite number (got {data})")
        return data
    if isinstance(data, (_dt.date, _dt.time)):
        return data.isoformat()
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            if not isinstance(k, str):
                raise error(path, _where(keys), f"key {k!r} is not a string (quote it)")
            if "\0" in k:
                raise error(path, _where(keys), "a key holds a NUL character (\\0)")
            out[k] = plain(v, path, error=error, keys=(*keys, k))
        return out
    if isinstance(data, list):
        return [plain(v, path, error=error, keys=(*keys, i)) for i, v in enumerate(data)]
    raise error(path, _where(keys), f"unsupported value of type {type(data).__name__}")


# -- YAML -----------------------------------------------------------------------------------


class _LimitExceeded(Exception):
    pass


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with bounded depth and aliases; dates stay strings (as in YAML 1.2)."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _LimitExceeded(f"more than {MAX_ALIASES} aliases")
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _LimitExceeded(f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def expanded_size(root: yaml.Node, limit: int = MAX_ALIAS_NODES) -> int:
    """Nodes the document has once every alias is expanded.

    Refuses a recursive alias, and aliases that add more than ``limit`` nodes beyond the
    ones written out (an alias bomb); a large document without aliases is fine.
    """
    sizes: dict[int, int] = {}
    started: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            started.discard(nid)
            sizes[nid] = 1 + sum(sizes[id(c)] for c in _children(node))
            if sizes[nid] - len(sizes) > limit:
                raise _LimitExceeded(f"its aliases expand to more than {limit} extra nodes (an alias bomb)")
            continue
        if nid in sizes:
            continue
        started.add(nid)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in started:
                raise _LimitExceeded("a recursive alias (an anchor used inside itself)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def flow_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in ``text`` (brackets in strings count too).

    PyYAML scans a whole flow collection before its first node, in time quadratic in its
    depth, so a deep one is refused before parsing, not after.
    """
    opens = text.count("[") + text.count("{")
    if opens <= MAX_FLOW_DEPTH:
        return opens  # an upper bound, and the common case: no scan needed
    depth = deepest = 0
    for char in _NOT_BRACKET.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_FLOW_DEPTH:
                break
        elif depth:
            depth -= 1
    return deepest


def load_yaml(text: str, path: Path, *, error: ErrorType = SpecError) -> Any:
    """One YAML document as plain data, within the limits above."""
    if flow_depth(text) > MAX_FLOW_DEPTH:
        raise error(path, None, f"YAML refused: brackets nested more than {MAX_FLOW_DEPTH} deep")
    loader = None
    try:
        loader = BoundedLoader(text)  # its reader already refuses some characters
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node)
        data = loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise error(path, where, f"invalid YAML: {problem}") from None
    except _LimitExceeded as e:
        raise error(path, None, f"YAML refused: {e}") from None
    except (ValueError, OverflowError) as e:  # e.g. an integer with thousands of digits
        raise error(path, None, f"invalid YAML: {_reason(e)}") from None
    except RecursionError:
        raise error(path, None, f"YAML refused: nested more than {MAX_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()
    return plain(data, path, error=error)


def read_yaml(path: Path, *, what: str, error: ErrorType = SpecError) -> Any:
    return load_yaml(read_text(path, what=what, error=error), path, error=error)


# -- TOML and JSON --------------------------------------------------------------------------


def load_toml(text: str, path: Path, *, error: ErrorType = SpecError) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(path, None, f"invalid TOML: {e}") from None
    except (ValueError, OverflowError) as e:
        raise error(path, None, f"invalid TOML: {_reason(e)}") from None
    except RecursionError:
        raise error(path, None, f"TOML refused: nested more than {MAX_DEPTH} levels deep") from None
    return plain(data, path, error=error)


def read_toml(path: Path, *, what: str, error: ErrorType = SpecError) -> dict[str, Any]:
    return load_toml(read_text(path, what=what, error=error), path, error=error)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def load_json(text: str, path: Path, *, error: ErrorType = SpecError, line: int | None = None) -> Any:
    """One JSON document (``line``: its line in a .jsonl file, for the message)."""
    where = f"line {line}" if line is not None else None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise error(path, where or f"line {e.lineno}", f"invalid JSON: {e.msg}") from None
    except (ValueError, OverflowError) as e:
        raise error(path, where, f"invalid JSON: {_reason(e)}") from None
    except RecursionError:
        raise error(path, where, f"JSON refused: nested more than {MAX_DEPTH} levels deep") from None
    return plain(data, path, error=error, keys=(f"line {line}",) if line is not None else ())


def load_jsonl(text: str, path: Path, *, error: ErrorType = SpecError) -> list[Any]:
    return [load_json(row, path, error=error, line=n) for n, row in enumerate(text.splitlines(), 1) if row.strip()]
