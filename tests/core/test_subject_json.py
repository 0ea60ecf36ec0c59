"""Bounded reading of JSON a subject wrote: depth and size refused as a parse error, never a RecursionError."""

from __future__ import annotations

import json

import pytest

from pytest_maka.core import subject_json


@pytest.mark.parametrize("levels", [65, 999, 200_000])
def test_deep_documents_are_refused_as_value_errors(levels: int) -> None:
    for text in ("[" * levels + "]" * levels, '{"a":' * levels + "1" + "}" * levels):
        with pytest.raises(subject_json.RefusedJson, match="nested more than 64 levels"):
            subject_json.loads(text)


def test_documents_within_the_bounds_read_as_json_does() -> None:
    text = json.dumps({"a": "[[[{{{", "b": [[1, {"c": None}]] * 3, "d": '\\"[' * 100})
    assert subject_json.loads(text) == json.loads(text)
    assert subject_json.loads(("[" * 64 + "]" * 64).encode()) == json.loads("[" * 64 + "]" * 64)


def test_size_and_encoding_are_refused_as_value_errors() -> None:
    with pytest.raises(subject_json.RefusedJson, match="larger than 10 bytes"):
        subject_json.loads(b"[" + b"1," * 10 + b"1]", max_bytes=10)
    with pytest.raises(ValueError):
        subject_json.loads(b"\xff\xfe")
