"""``adapter watch`` when another file takes the path: one holding the same bytes is the same output (an
editor's save, a writer that writes a new file and renames it over the old one), and files it cannot
follow are said so."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from adapter_kit import open_bus, wait_until

from agents.adapter import AgentBus, connect_bus
from agents.watch import FileWatch, WatchOptions
from agents.watched_file import open_file
from bus.envelope import EnvelopeType as T
from bus.settings import Settings

GROUP = "g-replaced"
CLI = str(Path(sys.executable).parent / "subagent-bus")
PROGRESS = "[PROGRESS]\nagent_id: r1\npercent: {}\n[/PROGRESS]\n"
HALF = "[CLARIFICATION_NEEDED]\nagent_id: r1\ntimestamp: 2026-01-01T00:00:00Z\n"
REST = (
    "blocked_at: step 3\nreason: two databases\nquestions:\n  - question_id: Q1\n    text: which one?\n"
    "can_resume_with: its name\ncurrent_state: half done\n[/CLARIFICATION_NEEDED]\n"
)


@contextlib.asynccontextmanager
async def _watching(url: str, out: Path) -> AsyncIterator[tuple[FileWatch, list[str]]]:
    """An adapter watching ``out`` in this process, and what it warned of; stopped at the block's end."""
    bus: AgentBus = await connect_bus(Settings.from_url(url), "r1", GROUP)
    said: list[str] = []
    bus.warn = said.append
    stop = asyncio.Event()
    follower = FileWatch(bus, WatchOptions(path=out, poll_s=0.01), stop)
    following = asyncio.create_task(follower.run())
    try:
        yield follower, said
    finally:
        stop.set()
        await following
        await bus.client.aclose()


def _renamed_over(out: Path, text: str) -> tuple[int, int]:
    """``text`` written to a new file renamed over ``out``; the new file's device and inode."""
    new = out.with_suffix(".new")
    new.write_text(text)
    os.replace(new, out)
    info = out.stat()
    return info.st_dev, info.st_ino


async def test_a_block_half_written_when_the_same_bytes_are_renamed_over_the_file_is_read_on(
    redis_url: str, tmp_path: Path
) -> None:
    """Not ended as unterminated at the switch (a STOP_WORK in place of the question), its rest skipped."""
    out = tmp_path / "agent.out"
    out.write_text(PROGRESS.format(10) + HALF)
    async with open_bus(redis_url) as reader, _watching(redis_url, out) as (follower, said):
        await wait_until(lambda: reader.has(GROUP, T.PROGRESS), 20, "the first progress")
        new = _renamed_over(out, out.read_text())

        async def switched() -> bool:
            return follower.checkpoint.file == new

        await wait_until(switched, 20, "the adapter to follow the new file")
        with out.open("a") as more:
            more.write(REST + PROGRESS.format(20))
        await wait_until(lambda: reader.has(GROUP, T.PROGRESS, 2), 20, "the second progress")
        types = [e.type for e in await reader.envelopes(GROUP) if e.type is not T.HEARTBEAT]
    assert types == [T.AGENT_STARTED, T.PROGRESS, T.CLARIFICATION_NEEDED, T.PROGRESS]
    assert said == []  # the same output: no new generation to speak of


async def test_a_replacement_it_cannot_open_is_said_once_and_tried_again(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file another user wrote and this one cannot read, say: ignored in silence, its output was lost
    without a word while the adapter read on in the old file."""
    out = tmp_path / "agent.out"
    out.write_text(PROGRESS.format(10))
    refusals = 0

    def not_yet(path: Path) -> int:
        nonlocal refusals
        if refusals < 3:
            refusals += 1
            raise OSError(f"cannot read {path}: Permission denied")
        return open_file(path)

    async with open_bus(redis_url) as reader, _watching(redis_url, out) as (follower, said):
        await wait_until(lambda: reader.has(GROUP, T.PROGRESS), 20, "the first progress")
        monkeypatch.setattr("agents.watch.open_file", not_yet)
        new = _renamed_over(out, PROGRESS.format(10) + PROGRESS.format(20))

        async def switched() -> bool:
            return follower.checkpoint.file == new

        await wait_until(switched, 20, "the adapter to follow the new file once it can")  # tried thrice
        await wait_until(lambda: reader.has(GROUP, T.PROGRESS, 2), 20, "the second progress")
    assert said == [
        f"cannot read {out}: Permission denied: still reading the file it replaced, and trying again"
    ]


def test_a_file_that_does_not_report_its_size_is_refused_not_read_over_and_over(
    redis_url: str, tmp_path: Path
) -> None:
    """``/proc`` files say they hold 0 bytes: each read looked like a truncation, a new generation and
    its AGENT_STARTED, without end."""
    done = subprocess.run(
        [
            CLI,
            "adapter",
            "watch",
            "/proc/self/status",
            "--agent-id=p1",
            "--group=g",
            "--redis-url",
            redis_url,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "it does not report its size (a /proc or /sys file?)" in done.stderr
    assert done.stderr.count("generation") <= 1, done.stderr
