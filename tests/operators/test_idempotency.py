"""Idempotent answers over a real journal, on SQLite and PostgreSQL: a claim that was never
answered is taken over by a retry of the same request after ``IDEMPOTENCY_PENDING_SECONDS``,
once, and only the claim that holds a key keeps an answer or frees it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledgerflow import limits
from ledgerflow.errors import IdempotencyKeyReusedError
from ledgerflow.operators.idempotency import Claim, IdempotentAnswers, Replay
from ledgerflow.storage import open_store
from ledgerflow.testing import FakeClock

BOUND = limits.IDEMPOTENCY_PENDING_SECONDS


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(autojump=False)


@pytest.fixture
def answers(journal_url: str, clock: FakeClock) -> Iterator[IdempotentAnswers]:
    store = open_store(journal_url)
    try:
        yield IdempotentAnswers(store, clock=clock)
    finally:
        store.close()


def test_an_unanswered_claim_is_taken_over_after_its_bound_by_the_same_request_only(
    answers: IdempotentAnswers, clock: FakeClock
) -> None:
    """Goal: a key whose request never got its answer (its server died) is not stuck for the
    24 h retention: after the bound the same request claims it again, once; another request
    never does; and the first claim, should it still finish, keeps nothing.

    Method: claim K for request A; at once and just before the bound a retry is refused
    (LF304, still being answered); another request B past the bound is refused too (LF304,
    another request); A past the bound claims it (a second retry then is refused: the new
    claim holds it); the first claim finishing or releasing changes nothing; the takeover's
    answer is the one replayed.
    """
    first = answers.claim(scope="tok", key="K", request="A")
    assert isinstance(first, Claim)
    for _ in range(2):
        with pytest.raises(IdempotencyKeyReusedError, match="still being answered"):
            answers.claim(scope="tok", key="K", request="A")
        clock.advance(BOUND - 1)
    clock.advance(2)
    with pytest.raises(IdempotencyKeyReusedError, match="another request"):
        answers.claim(scope="tok", key="K", request="B")
    retry = answers.claim(scope="tok", key="K", request="A")
    assert isinstance(retry, Claim)
    assert retry.claimed_at > first.claimed_at
    with pytest.raises(IdempotencyKeyReusedError, match="still being answered"):
        answers.claim(scope="tok", key="K", request="A")
    answers.finish(first, status=201, body='{"from": "the first"}')
    answers.release(first)
    answers.finish(retry, status=200, body='{"from": "the retry"}')
    assert answers.claim(scope="tok", key="K", request="A") == Replay(
        status=200, body='{"from": "the retry"}'
    )


def test_an_answered_key_is_never_taken_over(answers: IdempotentAnswers, clock: FakeClock) -> None:
    """Goal: the bound frees only claims that were never answered: an answer is replayed for
    the whole retention, however long after it was kept.

    Method: claim and answer K; well past the pending bound (and just inside retention) the
    same request replays the answer.
    """
    claim = answers.claim(scope="tok", key="K", request="A")
    assert isinstance(claim, Claim)
    answers.finish(claim, status=201, body="{}")
    clock.advance(limits.IDEMPOTENCY_RETENTION_SECONDS - 1)
    assert answers.claim(scope="tok", key="K", request="A") == Replay(status=201, body="{}")
