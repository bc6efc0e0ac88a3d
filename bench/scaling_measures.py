"""What ``pg_scaling.py`` reads while its workers run: CPU time from ``/proc`` (a process, every
PostgreSQL process, the whole machine) and what the workers' sessions do (``pg_stat_activity``).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any

import psycopg

ACTIVITY_SAMPLE_SECONDS = 0.05


def proc_cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu() -> dict[int, float]:
    """CPU seconds used so far by every PostgreSQL process on this machine (if visible)."""
    found: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm", encoding="ascii") as f:
                if f.read().strip() != "postgres":
                    continue
            found[int(entry)] = proc_cpu_seconds(int(entry))
        except (OSError, ValueError):
            continue
    return found


def machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


class ActivitySampler(threading.Thread):
    """Samples the workers' sessions in pg_stat_activity: what each active one waits on."""

    def __init__(self, base_url: str, app_name: str) -> None:
        super().__init__(daemon=True, name="activity-sampler")
        self.base_url = base_url
        self.app_name = app_name
        self.samples = 0
        self.sessions = 0
        self.states: Counter[str] = Counter()
        self._halt = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.base_url, autocommit=True) as conn:
            while not self._halt.is_set():
                rows = conn.execute(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (self.app_name,),
                ).fetchall()
                self.samples += 1
                for state, wait_type, wait_event in rows:
                    self.sessions += 1
                    if state == "active":
                        key = f"active:{wait_type}:{wait_event}" if wait_type else "active:cpu"
                    else:
                        key = state or "unknown"
                    self.states[key] += 1
                self._halt.wait(ACTIVITY_SAMPLE_SECONDS)

    def stop(self) -> dict[str, Any]:
        self._halt.set()
        self.join(timeout=5)
        total = max(1, self.sessions)
        return {
            "samples": self.samples,
            "sessions_per_sample": round(self.sessions / max(1, self.samples), 2),
            "share": {k: round(v / total, 3) for k, v in self.states.most_common()},
        }
