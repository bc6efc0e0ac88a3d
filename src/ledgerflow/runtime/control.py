"""Control-flow signals between workflow code and the executor (internal).

They derive from BaseException so that ``except Exception`` in workflow code cannot swallow
them: suspending, parking and losing ownership are the engine's decisions, not the workflow's.
"""

from __future__ import annotations


class Suspend(BaseException):
    """Give up the instance until ``available_at``; nothing is held meanwhile."""

    def __init__(self, available_at: float) -> None:
        super().__init__(available_at)
        self.available_at = available_at


class Park(BaseException):
    """Stop in MANUAL_INTERVENTION with a reason code and a human-readable reason."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason


class Abandon(BaseException):
    """Stop driving this instance now and leave it to recovery (its lease will lapse).

    Raised when a commit could not be made: whatever the workflow would do next must not be
    built on a write that did not happen.
    """


class LostOwnership(Abandon):
    """The store refused a write: another owner holds the instance now. Stop touching it."""


class Cancelled(BaseException):
    """Someone asked to cancel: stop before new work; ``stopped`` says what did not start."""

    def __init__(self, stopped: str) -> None:
        super().__init__(stopped)
        self.stopped = stopped


class Waiting(BaseException):
    """The instance is WAITING: that, and its wake-up time, are already committed."""


class Diverged(Park):
    """The code asked, at journal position ``seq``, for something other than what the journal
    holds there: ``holds`` and ``asks`` describe both sides (``None``: nothing)."""

    def __init__(self, seq: int, *, holds: str | None, asks: str | None, reason: str) -> None:
        super().__init__("replay_divergence", reason)
        self.seq = seq
        self.holds = holds
        self.asks = asks


class ContinueAsNew(BaseException):
    """The workflow asked to close this run and open the next one with ``input_text`` (its
    input as the codec wrote it): ``ctx.continue_as_new``."""

    def __init__(self, input_text: str) -> None:
        super().__init__(input_text)
        self.input_text = input_text
