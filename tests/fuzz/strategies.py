"""Hypothesis strategies for hostile input files: byte mutations of a valid seed, and
documents of the seed's syntax with hostile values (NaN, huge integers, wrong types, deep
nesting, aliases) planted at the keys the loaders read."""

from __future__ import annotations

import json
import math
from typing import Any

import yaml
from hypothesis import strategies as st

from .targets import Target

#: Byte strings that broke a parser or a model somewhere: spliced into seeds.
TOKENS = [
    b"nan", b"inf", b"-inf", b".nan", b".inf", b"NaN", b"Infinity", b"1e999", b"-0", b"0", b"~", b"null",
    b"9" * 5000, b"9" * 40, b"[" * 200, b"{a=" * 70, b"{a: " * 70, b"- " * 70, b"\xff", b"\xfe\xff", b"\x00",
    b"&a [*a]", b"*a", b"&a", b"!!binary AAAA", b"!!set {a}", b"!!python/object:os.system", b"<<: *a",
    b"{", b"}", b"[", b"]", b"\n", b'"', b"'", b"\\", b"=", b":", b",", b"#", b"\t", b"\r", b"\xef\xbb\xbf",
    b"/", b"/logs", b"/app/../logs", b"{instance_id", b"1979-05-27T07:32:00Z", b"true", b"[]", b"{}",
]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` with a few byte-level edits: inserts, deletions, repeats and hostile tokens."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(("insert", "delete", "replace", "repeat", "token", "truncate")))
        if op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 32))]
        elif op == "replace":
            data[pos : pos + 1] = draw(st.binary(min_size=1, max_size=2))
        elif op == "repeat":
            chunk = bytes(data[pos : pos + draw(st.integers(1, 64))])
            data[pos:pos] = chunk * draw(st.integers(1, 30))
        elif op == "token":
            data[pos:pos] = draw(st.sampled_from(TOKENS))
        else:
            del data[pos:]
    return bytes(data)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**80),
    st.floats(),  # NaN and infinities included
    _TEXT,
    st.sampled_from(["/", "/logs", "/logs/agent", "/app/../x", "", " ", "img{", "{nope}", "1G", "infG", "separate"]),
)
VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=6
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a parsed document (where a hostile value may go)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: _set(doc.get(head), rest, value)}
    if isinstance(doc, list) and isinstance(head, int) and head < len(doc):
        return [*doc[:head], _set(doc[head], rest, value), *doc[head + 1 :]]
    return value


def parse_seed(target: Target) -> Any:
    import tomllib

    text = target.seed.decode()
    if target.syntax == "toml":
        return tomllib.loads(text)
    if target.syntax == "yaml":
        return yaml.safe_load(text)
    if target.syntax == "json":
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None) + "}"
    return json.dumps(str(value), ensure_ascii=False)


def dump(doc: Any, syntax: str) -> bytes:
    """``doc`` written in ``syntax`` (TOML: top-level tables become sections)."""
    if syntax == "yaml":
        return yaml.safe_dump(doc, allow_unicode=True).encode()
    if syntax == "json":
        return json.dumps(doc, ensure_ascii=False).encode()
    if syntax == "jsonl":
        rows = doc if isinstance(doc, list) else [doc]
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    if not isinstance(doc, dict):
        return f"x = {_toml_value(doc)}\n".encode()
    plain = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict) and v is not None]
    tables = [
        f"[{json.dumps(k)}]\n"
        + "".join(f"{json.dumps(kk)} = {_toml_value(vv)}\n" for kk, vv in v.items() if vv is not None)
        for k, v in doc.items()
        if isinstance(v, dict)
    ]
    return ("\n".join(plain) + "\n" + "\n".join(tables)).encode()


@st.composite
def hostile_document(draw: st.DrawFn, target: Target) -> bytes:
    """The seed document with hostile values at a few of its key paths (or new keys)."""
    doc = parse_seed(target)
    paths = _paths(doc)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths)) if paths and draw(st.booleans()) else (draw(_TEXT),)
        doc = _set(doc, path, draw(VALUES))
    return dump(doc, target.syntax)


def cases(target: Target) -> st.SearchStrategy[bytes]:
    """Every strategy that applies to ``target``'s syntax."""
    if target.syntax in ("text", "parquet"):
        return mutated(target.seed) | st.binary(max_size=256)
    return mutated(target.seed) | hostile_document(target) | st.binary(max_size=64)
