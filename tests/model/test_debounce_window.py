"""The debounce window's arithmetic (model/debounce.py): pure, no store."""

from __future__ import annotations

import pytest

from ledgerflow import limits
from ledgerflow.errors import PayloadError
from ledgerflow.model.debounce import (
    Debounce,
    debounce_of,
    debounced_due,
    due_line,
    due_of,
    replaced_detail,
    replaced_input,
)


def test_a_collapsed_start_is_due_a_window_on_never_past_the_longest_wait() -> None:
    d = Debounce(window_seconds=5, max_seconds=12)
    assert debounced_due(d, now=103, opened_at=100, starts=2) == 108
    assert debounced_due(d, now=110, opened_at=100, starts=3) == 112
    assert debounced_due(d, now=130, opened_at=100, starts=4) == 112  # past it: due already


def test_a_window_full_of_starts_is_due_at_once() -> None:
    d = Debounce(window_seconds=5, max_seconds=12)
    cap = limits.DEBOUNCE_STARTS_MAX
    assert debounced_due(d, now=101, opened_at=100, starts=cap - 1) == 106
    assert debounced_due(d, now=101, opened_at=100, starts=cap) == 101


def test_the_longest_wait_defaults_to_ten_windows() -> None:
    assert debounce_of(3, None, delayed=False) == Debounce(window_seconds=3, max_seconds=30)
    assert debounce_of(None, None, delayed=False) is None
    with pytest.raises(PayloadError, match="at most"):
        debounce_of(limits.START_DELAY_SECONDS_MAX * 2, None, delayed=False)


def test_a_timeline_line_gives_back_its_due_time_and_replaced_input() -> None:
    line = replaced_detail(due_line("debounced start 2", 1_800_000_008.25), '{"n":1}')
    assert due_of(line) == 1_800_000_008.25
    assert replaced_input(line) == '{"n":1}'
    assert (due_of("started"), replaced_input("started"), replaced_input(None)) == (None,) * 3
