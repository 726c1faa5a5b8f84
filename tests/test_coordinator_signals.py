"""Stopping a coordinator: the first SIGTERM or Ctrl-C stops it gracefully, a second one at once.

A graceful stop applies what is pending on the process's shards and releases its leases, which waits for
the server; with the server stalled a supervisor's second signal must still end the process (commits are
atomic, so stopping at once is a crash, which loses nothing).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from adapter_kit import exited, logged, start, wait_until

from bus.embedded import RedisProcess


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_second_signal_stops_a_coordinator_waiting_for_a_stalled_server(
    fresh_redis: RedisProcess, tmp_path: Path, sig: signal.Signals
) -> None:
    log = tmp_path / "coordinator.log"
    coordinator = start(["coordinator", "--name", "stalled", "--shards", "2"], fresh_redis.url, log)
    assert fresh_redis.process is not None
    try:
        await wait_until(logged(log, "shard 1 acquired by stalled"), 30, "the coordinator to take its shards")
        fresh_redis.process.send_signal(signal.SIGSTOP)
        coordinator.send_signal(sig)
        await wait_until(
            logged(log, f"{sig.name}: stopping after the entries pending"), 20, "the first signal"
        )
        assert coordinator.poll() is None  # the graceful stop waits for the server
        coordinator.send_signal(sig)
        assert await exited(coordinator, 20) == 128 + sig
    finally:
        fresh_redis.process.send_signal(signal.SIGCONT)
    assert f"{sig.name} again: stopping at once" in log.read_text()
