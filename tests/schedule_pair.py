"""Two schedules that fire every second, for the tests that SIGKILL a real worker process at
each statement of a firing and race five worker processes on their slots
(``schedule_pair:registry``: this folder is on a worker process's path). One is allow_all,
one skip (its overlap watched), so a tick's batch holds both kinds of decision. The workflow
is ``schedule_racing``'s: each instance returns the slot it fired for."""

from __future__ import annotations

import ledgerflow as lf
from schedule_racing import beat

registry = lf.Registry()
registry.workflow(name="beat", version=1)(beat)
registry.schedule("heartbeat", workflow="beat", every=1, overlap="allow_all")
registry.schedule("pulse", workflow="beat", every=1, overlap="skip")
