"""A resume command's run: its end is its exit, its output is read as it comes, a cancelled delivery
stops it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tracemalloc
from pathlib import Path

import pytest
from adapter_kit import wait_until

from agents.delivery import CommandDelivery, DeliveryFailed, Directive, as_directive
from bus.directives import AnswerItem, ClarificationResponse
from bus.embedded import pid_alive
from bus.envelope import new_envelope


def directive() -> Directive:
    payload = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer="both")], next_step="Go on")
    found = as_directive(new_envelope(payload, agent_id="c1", group_id="g-command", source="test"))
    assert found is not None
    return found


def script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "resume.sh"
    path.write_text(body)
    return ["sh", str(path)]


async def written_pid(path: Path) -> int:
    async def written() -> bool:
        return await asyncio.to_thread(path.exists)

    await wait_until(written, 20, f"the pid in {path}")
    return int(await asyncio.to_thread(path.read_text))


def kill(pid_file: Path) -> None:
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


async def test_a_command_whose_background_process_holds_its_output_is_done_at_its_exit(
    tmp_path: Path,
) -> None:
    held = tmp_path / "sleep.pid"
    argv = script(tmp_path, f"echo resumed\nsleep 60 &\necho $! > {held}.tmp\nmv {held}.tmp {held}\n")
    logs: list[str] = []
    warnings: list[str] = []
    delivery = CommandDelivery(argv, dict, log=logs.append, warn=warnings.append)
    try:
        await asyncio.wait_for(delivery.deliver(directive()), 20)
        assert logs == ["sh: resumed"]
        assert warnings == ["sh exited, but a process it started holds its output open: not read any more"]
        assert pid_alive(int(held.read_text()))  # not the delivery's to end
    finally:
        kill(held)


async def test_a_command_that_closes_its_output_is_done_at_its_exit_still(tmp_path: Path) -> None:
    argv = script(tmp_path, "echo closing\nexec >/dev/null 2>&1\nsleep 0.5\nexit 3\n")
    logs: list[str] = []
    with pytest.raises(DeliveryFailed, match=r"sh exited with code 3: closing$"):
        await asyncio.wait_for(CommandDelivery(argv, dict, log=logs.append).deliver(directive()), 20)
    assert logs == ["sh: closing"]


async def test_a_long_output_is_logged_line_by_line_and_only_its_tail_kept(tmp_path: Path) -> None:
    """50 MB on one line, between lines: the long line is logged cut short, and the memory taken stays
    far below the output's size."""
    argv = script(
        tmp_path, "seq 1 20000\nhead -c 50000000 /dev/zero | tr '\\0' x\nprintf '\\nthe end\\n'\nexit 3\n"
    )
    logs: list[str] = []
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        delivery = CommandDelivery(argv, dict, log=logs.append)
        with pytest.raises(DeliveryFailed, match=r"sh exited with code 3: x+\nthe end$") as failed:
            await asyncio.wait_for(delivery.deliver(directive()), 60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not tracing:
            tracemalloc.stop()
    assert peak < 5_000_000
    assert logs[:20000] == [f"sh: {n}" for n in range(1, 20001)]
    assert (
        logs[20000] == "sh: " + "x" * 4096 + f" [and {50_000_000 - 4096} more bytes of this line, not logged]"
    )
    assert logs[20001:] == ["sh: the end"]
    assert len(str(failed.value)) < 600


async def test_a_cancelled_delivery_stops_its_command(tmp_path: Path) -> None:
    pid_file = tmp_path / "command.pid"
    argv = script(tmp_path, f"echo $$ > {pid_file}.tmp\nmv {pid_file}.tmp {pid_file}\nexec sleep 60\n")
    logs: list[str] = []
    delivering = asyncio.ensure_future(CommandDelivery(argv, dict, log=logs.append).deliver(directive()))
    try:
        pid = await written_pid(pid_file)
        delivering.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(delivering, 20)

        async def gone() -> bool:
            return not pid_alive(pid)

        await wait_until(gone, 20, "the command to be stopped")
    finally:
        delivering.cancel()
        kill(pid_file)


async def test_a_command_runs_in_a_session_of_its_own(tmp_path: Path) -> None:
    """A terminal's signals reach it only as the adapter passes them on: once, not twice."""
    code = "import os, sys; sys.exit(0 if os.getsid(0) == os.getpid() else 1)"
    await CommandDelivery([sys.executable, "-c", code], dict).deliver(directive())
