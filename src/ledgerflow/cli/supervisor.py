"""``ledgerflow worker --processes N``: one supervisor keeping N worker processes up (internal).

One event loop drives one worker, and one worker's store calls go through one store thread;
where that loop is the limit, more processes on the same journal share the work. Each child
is an ordinary ``ledgerflow worker`` process (the same command line, without ``--processes``):
its own loop, its own store pool, its own worker identity in the worker registry, fenced by
its own leases exactly as separately started workers are. The supervisor holds no store
connection and drives nothing: it only starts the children, forwards a stop to them, and
starts again one that died when nobody asked it to (a worker killed at any moment is
replaced by starting another, which takes its instances over once their leases lapse).

Why children are whole processes started afresh (``subprocess``), not ``fork``ed copies of
the supervisor: a forked child would inherit the parent's threads' state and open sockets;
a fresh interpreter is the same thing an operator gets by starting N workers by hand.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError

log = logging.getLogger("ledgerflow.worker")

# Linux's prctl(PR_SET_PDEATHSIG): the kernel sends the child this signal when the
# supervisor dies, even by SIGKILL, so no worker outlives it unsupervised.
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Run in the child between fork and exec (Linux only; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Child:
    """One worker process slot: the process in it now, and how its last starts went."""

    slot: int
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    # Deaths one after another, each within the start bound of its start: resets once a
    # child has lived past that bound.
    early_deaths: int = 0
    restart_at: float | None = None


def _how_it_ended(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class Supervisor:
    """Keeps ``processes`` children running until stopped, slot ``i`` (from 1) running
    ``command(i)``.

    ``run()`` returns the supervisor's exit code: 0 once every child stopped after a stop
    was asked (or, with ``until_idle``, once every child exited 0 on its own); non-zero when
    children kept dying at start, after stopping the others.

        Supervisor(lambda slot: ["ledgerflow", "worker", "shop:registry"], processes=2).run()
    """

    def __init__(
        self,
        command: Callable[[int], Sequence[str]],
        *,
        processes: int,
        until_idle: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if processes < 1:
            raise ConfigurationError(f"--processes must be at least 1, not {processes}")
        self.command = command
        self.until_idle = until_idle
        self.env = None if env is None else dict(env)
        self.children = [Child(slot=i + 1) for i in range(processes)]
        self._stop = threading.Event()
        self._failure: str | None = None

    # -- signals ------------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info(
            "supervisor: %s received, stopping the worker processes", signal.Signals(signum).name
        )
        self.stop()

    def stop(self) -> None:
        """Ask every child to stop as a ``worker`` stops on SIGTERM (in-flight instances
        finish or are released), and start no more."""
        self._stop.set()
        self._signal_children()

    def _signal_children(self) -> None:
        for child in self.children:
            child.restart_at = None
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)

    # -- the loop -----------------------------------------------------------------------------

    def _spawn(self, child: Child) -> None:
        child.process = subprocess.Popen(
            list(self.command(child.slot)), env=self.env, preexec_fn=_die_with_parent
        )
        child.started_at = time.monotonic()
        child.restart_at = None
        log.info(
            "supervisor: worker process %d of %d started, pid %d",
            child.slot,
            len(self.children),
            child.process.pid,
        )

    def _ended(self, child: Child, code: int) -> None:
        """A child's process ended: done, restarted after a backoff, or the end of it all."""
        pid = child.process.pid if child.process is not None else 0
        child.process = None
        if self._stop.is_set():
            log.info("supervisor: worker process %d (pid %d) stopped", child.slot, pid)
            return
        if self.until_idle and code == 0:
            log.info("supervisor: worker process %d (pid %d) found nothing left", child.slot, pid)
            return
        lived = time.monotonic() - child.started_at
        if lived < limits.SUPERVISOR_START_SECONDS:
            child.early_deaths += 1
        else:
            child.early_deaths = 0
        if child.early_deaths >= limits.SUPERVISOR_EARLY_DEATHS_MAX:
            self._failure = (
                f"worker process {child.slot} {_how_it_ended(code)} within "
                f"{limits.SUPERVISOR_START_SECONDS:g}s of starting, {child.early_deaths} times "
                "in a row: giving up (its own output above says why)"
            )
            self.stop()
            return
        # Backoff doubles with each early death, bounded; a child that had run a while is
        # restarted at once (its instances wait for their leases to lapse anyway).
        delay = (
            0.0
            if child.early_deaths == 0
            else min(
                limits.SUPERVISOR_RESTART_SECONDS_MAX,
                limits.SUPERVISOR_RESTART_SECONDS_MIN * 2 ** (child.early_deaths - 1),
            )
        )
        log.warning(
            "supervisor: worker process %d (pid %d) %s unexpectedly after %.1fs; "
            "restarting it in %.1fs",
            child.slot,
            pid,
            _how_it_ended(code),
            lived,
            delay,
        )
        child.restart_at = time.monotonic() + delay

    def run(self) -> int:
        for child in self.children:
            self._spawn(child)
        while True:
            for child in self.children:
                if child.process is not None:
                    code = child.process.poll()
                    if code is not None:
                        self._ended(child, code)
                if (
                    child.process is None
                    and child.restart_at is not None
                    and time.monotonic() >= child.restart_at
                    and not self._stop.is_set()
                ):
                    self._spawn(child)
            alive = any(c.process is not None or c.restart_at is not None for c in self.children)
            if not alive:
                break
            # A short bounded wait, woken at once by a stop: the supervisor only watches its
            # children, so a look every few tens of milliseconds costs nothing.
            self._stop.wait(limits.SUPERVISOR_POLL_SECONDS)
            if self._stop.is_set():
                # Once more: a stop that came while a child was being spawned did not reach
                # that child. Then wait for them all; nothing is restarted now.
                self._signal_children()
                for child in self.children:
                    if child.process is not None:
                        self._ended(child, child.process.wait())
                break
        if self._failure is not None:
            raise ConfigurationError(self._failure)
        return 0
