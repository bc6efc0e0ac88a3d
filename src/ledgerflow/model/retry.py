"""Retry policies as data: attempt limit, backoff, jitter and which errors retry.

A policy is recorded with the step it governs (see :meth:`RetryPolicy.to_record`), so what an
instance was promised survives a deploy that changes the code's defaults.

Jitter is "full jitter": each pause is drawn between 0 and the exponential backoff, so the
retries of many instances that failed together (a participant's outage) spread out instead of
arriving together again. The draw is not random: it is a hash of the step's or effect's
identity and the attempt number, so one attempt of one effect always waits the same, on every
worker, in every replay, under the fake clock and for every seed of the fault explorer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError

_MICROSECOND = timedelta(microseconds=1)
# A hash's first 64 bits, read as a fraction of this, are uniform in [0, 1).
_FRACTIONS = 2**64


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how soon a failed attempt is tried again.

    Example::

        RetryPolicy(attempts_max=5, backoff_initial=timedelta(milliseconds=200),
                    retry_on=("TimeoutError", "ConnectionError"))

    ``retry_on`` names exception classes (or error codes carried by
    :class:`~ledgerflow.errors.EffectRejectedError`); an empty tuple retries every error.
    ``jitter=False`` waits the exponential backoff exactly (by default each pause is drawn
    between 0 and it, from the identity of what is retried: see the module docstring).
    """

    attempts_max: int = 3
    backoff_initial: timedelta = timedelta(milliseconds=100)
    backoff_multiplier: float = 2.0
    backoff_max: timedelta = timedelta(seconds=30)
    retry_on: tuple[str, ...] = field(default=())
    jitter: bool = True

    def __post_init__(self) -> None:
        self._check_kinds()
        if not 1 <= self.attempts_max <= limits.ATTEMPTS_MAX:
            raise ConfigurationError(
                f"attempts_max must be between 1 and {limits.ATTEMPTS_MAX}, got {self.attempts_max}"
            )
        if self.backoff_multiplier < 1.0:
            raise ConfigurationError("backoff_multiplier must be at least 1.0")
        if self.backoff_initial < timedelta(0) or self.backoff_max < self.backoff_initial:
            raise ConfigurationError("backoff must satisfy 0 <= backoff_initial <= backoff_max")

    def _check_kinds(self) -> None:
        """Each field of the wrong kind says what to pass (a float of seconds where a timedelta
        is taken failed with a TypeError comparing the two)."""
        given: dict[str, Any] = {f: getattr(self, f) for f in self.__dataclass_fields__}
        wrong = []
        if not isinstance(given["attempts_max"], int) or isinstance(given["attempts_max"], bool):
            wrong.append("attempts_max= takes an int, e.g. attempts_max=5")
        for name in ("backoff_initial", "backoff_max"):
            if not isinstance(given[name], timedelta):
                wrong.append(
                    f"{name}= takes a datetime.timedelta, e.g. {name}=timedelta(seconds=1)"
                )
        multiplier = given["backoff_multiplier"]
        if isinstance(multiplier, bool) or not isinstance(multiplier, int | float):
            wrong.append("backoff_multiplier= takes a number, e.g. backoff_multiplier=2.0")
        retry_on = given["retry_on"]
        if isinstance(retry_on, list):  # a list reads as well; kept as the tuple it is recorded as
            retry_on = tuple(retry_on)
            object.__setattr__(self, "retry_on", retry_on)
        if not isinstance(retry_on, tuple) or not all(isinstance(n, str) for n in retry_on):
            wrong.append("retry_on= takes a tuple of error names, e.g. retry_on=('timeout',)")
        if not isinstance(given["jitter"], bool):
            wrong.append("jitter= takes True or False")
        if wrong:
            name = wrong[0].split("=", 1)[0]
            got = type(given[name]).__name__
            article = "an" if got[:1].lower() in "aeiou" else "a"
            raise ConfigurationError(
                f"RetryPolicy: {'; '.join(wrong)} (got {article} {got} for {name})"
            )

    def retries(self, error_names: tuple[str, ...]) -> bool:
        """Whether an error (named by its class names and code) is one this policy retries."""
        return not self.retry_on or any(name in self.retry_on for name in error_names)

    def delay_before(self, attempt: int, *, identity: str) -> timedelta:
        """The pause before ``attempt`` (2 is the first retry) of what ``identity`` names (an
        effect's idempotency key, a step's command id): at most the exponential backoff, never
        more than ``backoff_max``; with jitter, a fraction of it fixed by identity and attempt."""
        backoff = self._backoff(attempt)
        if not self.jitter:
            return backoff
        digest = hashlib.sha256(f"{identity}\0{attempt}".encode()).digest()
        fraction = int.from_bytes(digest[:8], "big") / _FRACTIONS
        # Whole microseconds, as the policy itself is recorded: the same pause everywhere.
        return timedelta(microseconds=int(backoff / _MICROSECOND * fraction))

    def _backoff(self, attempt: int) -> timedelta:
        """The exponential backoff before ``attempt``, capped at ``backoff_max``."""
        if attempt <= 1:
            return timedelta(0)
        cap = self.backoff_max.total_seconds()
        seconds = self.backoff_initial.total_seconds()
        # Grow step by step and stop at the cap: a closed form overflows for late attempts.
        for _ in range(min(attempt, limits.ATTEMPTS_MAX) - 2):
            if seconds >= cap:
                break
            seconds *= self.backoff_multiplier
        return timedelta(seconds=min(seconds, cap))

    def pauses_total(self) -> timedelta:
        """The longest the pauses between all of ``attempts_max`` attempts can add up to (jitter
        only shortens them): part of how long a key may still be sent again."""
        return sum(
            (self._backoff(attempt) for attempt in range(2, self.attempts_max + 1)), timedelta(0)
        )

    def to_record(self) -> dict[str, Any]:
        """The policy as a JSON record (durations in whole microseconds), as the ledger and
        fingerprints keep it."""
        record: dict[str, Any] = {
            "attempts_max": self.attempts_max,
            # Whole microseconds: exact, where float seconds would round.
            "backoff_initial_us": self.backoff_initial // _MICROSECOND,
            "backoff_multiplier": self.backoff_multiplier,
            "backoff_max_us": self.backoff_max // _MICROSECOND,
            "retry_on": list(self.retry_on),
        }
        if not self.jitter:
            # Recorded only when off: the default adds nothing, so the records (and the
            # workflow fingerprints made from them) of existing definitions stay the same.
            record["jitter"] = False
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RetryPolicy:
        """The policy a record written by :meth:`to_record` describes."""
        return cls(
            attempts_max=int(record["attempts_max"]),
            backoff_initial=timedelta(microseconds=int(record["backoff_initial_us"])),
            backoff_multiplier=float(record["backoff_multiplier"]),
            backoff_max=timedelta(microseconds=int(record["backoff_max_us"])),
            retry_on=tuple(record["retry_on"]),
            jitter=bool(record.get("jitter", True)),
        )


DEFAULT_STEP_RETRY = RetryPolicy()
# A workflow defect (see model/defects.py) is tried this often before the instance parks.
DEFAULT_DEFECT_RETRY = RetryPolicy(attempts_max=limits.DEFECT_ATTEMPTS_DEFAULT)
DEFAULT_EFFECT_RETRY = RetryPolicy()
# Asking a participant's lookup again when it could not be asked at all (unreachable): a short
# outage must not park work, so the lookup outlasts about three quarters of a minute of it on
# average before a person is asked (ten asks; pauses of 0.2 s doubling to a 30 s cap, at most
# 88 s in all, each jittered).
DEFAULT_LOOKUP_RETRY = RetryPolicy(
    attempts_max=10,
    backoff_initial=timedelta(milliseconds=200),
    backoff_max=timedelta(seconds=30),
)
