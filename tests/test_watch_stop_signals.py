"""``adapter watch`` stopped while a resume command delivers a directive: the stop signal is passed on to
the command, whose exit is waited for, and a second one kills it; killed, it leaves no command running
(real processes, a real Redis)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from adapter_kit import exited, open_bus, start, wait_until

from bus.directives import AnswerItem, ClarificationResponse
from bus.embedded import pid_alive
from bus.envelope import new_envelope
from bus.publisher import Publisher

GROUP = "g-watch-stop"
AGENT = "ws1"


def _resume_script(tmp_path: Path, on_term: str) -> Path:
    """A resume command that runs ``on_term`` at SIGTERM and otherwise waits for a minute, its pid (and
    its sleep's) written once the trap is set."""
    script = tmp_path / "resume.sh"
    script.write_text(
        f"trap '{on_term}' TERM\n"
        "sleep 60 >/dev/null 2>&1 &\n"
        f"echo $! > {tmp_path}/sleep.pid\n"
        f"echo $$ > {tmp_path}/command.pid.tmp && mv {tmp_path}/command.pid.tmp {tmp_path}/command.pid\n"
        "while kill -0 $! 2>/dev/null; do wait $!; done\n"
    )
    return script


def _file(path: Path) -> Callable[[], Awaitable[bool]]:
    async def exists() -> bool:
        return await asyncio.to_thread(path.exists)

    return exists


@contextlib.asynccontextmanager
async def _delivering(
    redis_url: str, tmp_path: Path, on_term: str
) -> AsyncIterator[tuple[subprocess.Popen[bytes], int]]:
    """A watch adapter running the resume command of :func:`_resume_script` for a directive: (the adapter's
    process, the command's pid). What the command left running is killed afterwards."""
    script = _resume_script(tmp_path, on_term)
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    out.touch()
    args = ["adapter", "watch", str(out), "--agent-id", AGENT, "--group", GROUP]
    adapter = start([*args, "--deliver", f"command:sh {script} {{type}}"], redis_url, log)
    try:
        async with open_bus(redis_url) as bus:
            response = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer="both")])
            directive = new_envelope(response, agent_id=AGENT, group_id=GROUP, source="test")
            await Publisher(bus.client, bus.keys).send_directive(directive)
        pid_file = tmp_path / "command.pid"
        await wait_until(_file(pid_file), 30, "the resume command")
        yield adapter, int(pid_file.read_text())
    finally:
        for name in ("command.pid", "sleep.pid"):
            with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
                os.kill(int((tmp_path / name).read_text()), signal.SIGKILL)


async def test_a_stop_signal_is_passed_on_to_the_resume_command_and_its_exit_waited_for(
    redis_url: str, tmp_path: Path
) -> None:
    termed = tmp_path / "termed"
    async with _delivering(redis_url, tmp_path, f"echo termed > {termed}; exit 143") as (adapter, pid):
        adapter.send_signal(signal.SIGTERM)
        await wait_until(_file(termed), 20, "the command's SIGTERM")
        assert await exited(adapter, 20) == 0
        assert not pid_alive(pid)
    log = (tmp_path / "adapter.log").read_text()
    assert "exited with code 143" in log, log  # a failed attempt, retried by the next run


async def test_a_second_stop_signal_kills_a_resume_command_that_goes_on(
    redis_url: str, tmp_path: Path
) -> None:
    termed = tmp_path / "termed"
    async with _delivering(redis_url, tmp_path, f"echo termed > {termed}") as (adapter, pid):
        adapter.send_signal(signal.SIGTERM)
        await wait_until(_file(termed), 20, "the command's SIGTERM")
        adapter.send_signal(signal.SIGTERM)
        await exited(adapter, 20)
        assert not pid_alive(pid)


async def test_a_resume_command_gets_sigterm_when_its_adapter_is_killed(
    redis_url: str, tmp_path: Path
) -> None:
    # The next adapter delivers the directive again: the command left running would be a second turn.
    termed = tmp_path / "termed"
    async with _delivering(redis_url, tmp_path, f"echo termed > {termed}; exit 143") as (adapter, pid):
        adapter.kill()
        await exited(adapter, 20)
        await wait_until(_file(termed), 20, "the command's SIGTERM")
        await wait_until(lambda: asyncio.to_thread(lambda: not pid_alive(pid)), 20, "the command's exit")
