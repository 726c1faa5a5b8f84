"""`coordinator --metrics-port` serves Prometheus metrics; `--log-json` logs one object per line."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson

from bus.embedded import free_port

CLI = str(Path(sys.executable).parent / "subagent-bus")


def _scrape(port: int, deadline: float) -> str:
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                text: str = response.read().decode()
            if 'subagent_bus_lease_owned{shard="7"} 1.0' in text:
                return text
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("no metrics with every lease owned")
        time.sleep(0.1)  # polling an HTTP endpoint that has no readiness signal


def test_metrics_and_json_logs(redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "coordinator.log"
    process = subprocess.Popen(
        [CLI, "coordinator", "--redis-url", redis_url, "--metrics-port", str(port), "--log-json"],
        stderr=log.open("wb"),
    )
    try:
        text = _scrape(port, time.monotonic() + 60)
        for name in (
            "subagent_bus_commit_seconds",
            "subagent_bus_pending_entries",
            "subagent_bus_dead_letters",
        ):
            assert name in text
    finally:
        process.terminate()
        process.wait(timeout=30)
    records = [orjson.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(r["message"].startswith("shard 0 acquired") for r in records)
    assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
