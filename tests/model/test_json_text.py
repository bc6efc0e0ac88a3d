"""Reading a caller's JSON with its nesting bounded (issue 15, item 5)."""

from __future__ import annotations

import pytest

from ledgerflow.errors import PayloadError
from ledgerflow.limits import JSON_DEPTH_MAX
from ledgerflow.model.codec import JSON
from ledgerflow.model.json_text import loads, nesting_depth


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"[[[{{{"', 0),
        ("[]", 1),
        ('{"a": [1, {"b": "]]]"}]}', 3),
        ('["\\"[", [[]]]', 3),
    ],
)
def test_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    """Goal: brackets inside string literals (escaped quotes included) do not count.
    Method: known documents and their depths."""
    assert nesting_depth(text) == depth


def test_deep_json_is_a_clear_payload_error_not_a_recursion_error() -> None:
    """Goal: input nested deeper than the bound is refused by name (the bug: RecursionError).

    Method: JSON_DEPTH_MAX levels load; one more, and 100 000 more, are PayloadError naming the
    option and the bound; broken JSON is a PayloadError too.
    """
    at_bound = "[" * JSON_DEPTH_MAX + "]" * JSON_DEPTH_MAX
    assert nesting_depth(at_bound) == JSON_DEPTH_MAX
    loads(at_bound, what="--input")
    for depth in (JSON_DEPTH_MAX + 1, 100_000):
        with pytest.raises(PayloadError, match=f"--input nests {depth} levels deep"):
            loads("[" * depth + "]" * depth, what="--input")
    with pytest.raises(PayloadError, match="--payload is not valid JSON"):
        loads("{bad", what="--payload")


def test_the_codec_refuses_a_value_too_deep_to_encode() -> None:
    """Goal: the library's encoder turns RecursionError into PayloadError.
    Method: encode a list nested 100 000 deep."""
    value: list[object] = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(PayloadError, match="nests too deeply"):
        JSON.encode(value)
