"""Reading a caller's JSON with its nesting (issue 15, item 5) and its values (issue 22,
item 1) bounded, measured in time linear in the text."""

from __future__ import annotations

import time

import pytest

from ledgerflow.errors import PayloadError
from ledgerflow.limits import JSON_DEPTH_MAX, JSON_VALUES_MAX
from ledgerflow.model.codec import JSON
from ledgerflow.model.json_text import Shape, loads, measure, nesting_depth


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


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text",
    [
        '"' + '\\"' * 1_000_000,  # an unterminated string of escaped quotes (issue 22)
        '"' + "\\" * 2_000_000,
        '"a' * 1_000_000,
        "[" * 2_000_000,
        "[" + "[]," * 600_000 + "[]]",
    ],
    ids=["escaped-quotes", "backslashes", "quote-runs", "open-brackets", "flat-brackets"],
)
def test_measuring_is_linear_whatever_the_text(text: str) -> None:
    """Goal: the shape of 2 MB of any text is measured in well under a second (the old
    expression backtracked: 24 KB of escaped quotes took 2 s, each doubling four times more).

    Method: each text once, timed; the bound is generous (it takes tens of milliseconds).
    """
    started = time.monotonic()
    nesting_depth(text)
    assert time.monotonic() - started < 1.0


def test_values_past_the_bound_are_refused_before_parsing() -> None:
    """Goal: a text holding more than JSON_VALUES_MAX values is refused by name, whatever
    their kind, and commas and brackets inside strings are not counted.

    Method: arrays of exactly the bound and one past it (numbers and empty objects); a
    string holding a million commas loads.
    """
    at_bound = "[" + ",".join(["0"] * (JSON_VALUES_MAX - 1)) + "]"
    assert measure(at_bound) == Shape(depth=1, values=JSON_VALUES_MAX)
    loads(at_bound, what="the body")
    for text in (
        "[" + ",".join(["0"] * JSON_VALUES_MAX) + "]",
        "[" + "{}," * JSON_VALUES_MAX + "{}]",
    ):
        with pytest.raises(PayloadError, match=f"at most {JSON_VALUES_MAX} are read"):
            loads(text, what="the body")
    assert loads('"' + "," * 1_000_000 + "[{" + '"', what="x") == "," * 1_000_000 + "[{"
