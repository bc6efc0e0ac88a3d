"""Reading a Prometheus exposition as a test would: samples by name and labels."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

WAIT_SECONDS_MAX = 30.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(url: str) -> Samples:
    response = httpx.get(url, timeout=WAIT_SECONDS_MAX)
    response.raise_for_status()
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; 0 for a labelled sample never created (nothing happened)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


class StderrLines:
    """Every stderr line of ``process``, read on a thread (so the process never blocks on a
    full pipe); a test waits for the line that starts with a prefix."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._lines: list[str] = []
        self._new: queue.Queue[str] = queue.Queue()
        stream = process.stderr
        assert stream is not None

        def read() -> None:
            for line in stream:
                self._lines.append(line)
                self._new.put(line)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()

    def wait_for(self, pattern: str) -> str:
        """The first match of ``pattern`` in a line from now on (a JSON line is searched
        in its message)."""
        deadline = time.monotonic() + WAIT_SECONDS_MAX
        while True:
            line = self._new.get(timeout=max(0.0, deadline - time.monotonic()))
            if line.startswith("{"):
                line = json.loads(line)["message"]
            found = re.search(pattern, line)
            if found:
                return found.group(0)

    def all(self) -> list[str]:
        """Every line so far (after the process ended: every line it wrote)."""
        self._reader.join(timeout=WAIT_SECONDS_MAX)
        return list(self._lines)
