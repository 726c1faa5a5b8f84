"""Stopping an agent (:func:`agents.agent_process.stop_agent`) with real processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from agents import agent_process
from agents.agent_process import start_agent, stop_agent


async def test_a_killed_agent_whose_output_a_process_it_started_holds_open_is_not_waited_for_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its exit after SIGKILL was awaited with process.wait(), which on Python 3.11 returns only once
    # the output has ended too: here, never
    monkeypatch.setattr(agent_process, "STOP_GRACE_S", 0.5)  # the grace itself is not what is tested
    child, script = tmp_path / "child", tmp_path / "agent.sh"
    script.write_text(
        # setsid: out of the agent's process group, which the stop signals reach, it holds the output open
        f"trap 'echo saving' TERM\nsetsid sleep 60 &\necho $! > {child}\necho started\nwhile :; do wait; done\n"
    )
    process = await start_agent(["sh", str(script)])
    assert process.stdout is not None
    stdout, read, warnings = process.stdout, bytearray(), list[str]()

    async def reading() -> None:
        while chunk := await stdout.read(4096):
            read.extend(chunk)

    try:
        assert await asyncio.wait_for(stdout.readline(), 10) == b"started\n"
        await asyncio.wait_for(
            stop_agent(process, termed=False, warn=warnings.append, reading=[reading()]), 20
        )
        assert process.returncode == -signal.SIGKILL
        assert warnings == ["the agent did not exit within 0.5s of SIGTERM: killed"]
        assert bytes(read) == b"saving\n"  # what it printed as it was being stopped was read
        await asyncio.sleep(0)  # the pipes' closing is one loop round away
        assert stdout.at_eof()  # our ends closed, in this loop: not left to be collected after it closed
    finally:
        if process.returncode is None:
            process.kill()
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(child.read_text()), signal.SIGKILL)
