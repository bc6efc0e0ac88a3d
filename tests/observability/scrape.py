"""Reading a Prometheus exposition as a test would: samples by name and labels."""

from __future__ import annotations

import queue
import subprocess
import threading

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


def announced(process: subprocess.Popen[str], prefix: str) -> str:
    """The rest of the first stderr line of ``process`` that starts with ``prefix``; the
    remaining lines are drained on a thread, so the process never blocks on a full pipe."""
    stream = process.stderr
    assert stream is not None
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            if line.startswith(prefix):
                found.put(line[len(prefix) :].strip())

    threading.Thread(target=read, daemon=True).start()
    return found.get(timeout=WAIT_SECONDS_MAX)
