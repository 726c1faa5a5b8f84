"""`coordinator --metrics-port` serves Prometheus metrics; `--log-json` logs one object per line."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson

from bus.connection import connect
from bus.embedded import free_port
from bus.envelope import new_envelope
from bus.findings import Finding
from bus.keys import StreamKind, open_namespace
from bus.publisher import Publisher
from bus.settings import Settings

CLI = str(Path(sys.executable).parent / "subagent-bus")


def _scrape(port: int, deadline: float, *wanted: str) -> str:
    """The metrics page once it shows every line of ``wanted``."""
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                text: str = response.read().decode()
            if all(line in text.splitlines() for line in wanted):
                return text
        except OSError:
            text = ""
        if time.monotonic() > deadline:
            raise AssertionError(f"metrics never showed {wanted}:\n{text}")
        time.sleep(0.1)  # polling an HTTP endpoint that has no readiness signal


def _publish(url: str) -> int:
    """Three findings of one agent and an entry that is no envelope; the shard of the group."""

    async def go() -> int:
        client = await connect(Settings.from_url(url))
        keys = await open_namespace(client, "sbus", 8)
        envelopes = [
            new_envelope(
                Finding(title=f"issue {n}", file="a.py", line=n), agent_id="a1", group_id="g-metrics"
            )
            for n in (1, 2, 3)
        ]
        await Publisher(client, keys).publish_many(envelopes)
        shard = keys.shard_of("g-metrics")
        await client.xadd(keys.stream(shard, StreamKind.SIGNALS), {"data": b"not an envelope"})
        await client.aclose()
        return shard

    return asyncio.run(go())


def test_metrics_count_and_json_logs_name_the_agent(redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "coordinator.log"
    process = subprocess.Popen(
        [CLI, "coordinator", "--redis-url", redis_url, "--metrics-port", str(port), "--log-json"],
        stderr=log.open("wb"),
    )
    try:
        _scrape(port, time.monotonic() + 60, 'subagent_bus_lease_owned{shard="7"} 1.0')
        shard = _publish(redis_url)
        text = _scrape(
            port,
            time.monotonic() + 60,
            'subagent_bus_entries_in_total{role="coordinator",type="FINDING"} 3.0',
            'subagent_bus_entries_out_total{role="coordinator",type="FINDING"} 3.0',
            f'subagent_bus_dead_letters_total{{role="coordinator",shard="{shard}"}} 1.0',
            f'subagent_bus_pending_entries{{shard="{shard}"}} 0.0',  # set by the membership round
        )
        # the read sent behind a commit, which waits for new entries (0.5 s here), is not the commit's
        count = re.search(r"^subagent_bus_commit_seconds_count (\S+)$", text, re.MULTILINE)
        fast = re.search(r'^subagent_bus_commit_seconds_bucket\{le="0.25"\} (\S+)$', text, re.MULTILINE)
        assert count is not None and fast is not None and float(count[1]) >= 1, text
        assert fast[1] == count[1], text
        assert "subagent_bus_agents_running" not in text  # the launcher's
    finally:
        process.terminate()
        process.wait(timeout=30)
    records = [orjson.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(r["message"].startswith("shard 0 acquired") for r in records)
    assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    decisions = [r for r in records if r.get("decision") == "state_changed"]
    assert [(r["agent_id"], r["group_id"]) for r in decisions] == [("a1", "g-metrics")]
    assert any(r["message"].startswith("dead-lettered") and r["level"] == "warning" for r in records)
