"""Shared by the adapter tests: the CLI, the fake agent, reading what adapters published, waiting."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bus.connection import Client, connect
from bus.envelope import Envelope, EnvelopeType, decode
from bus.keys import Keys, StreamKind, open_namespace
from bus.settings import Settings

__all__ = [
    "CLI",
    "FAKE",
    "Bus",
    "exited",
    "fake",
    "kill_started",
    "logged",
    "open_bus",
    "run",
    "run_ok",
    "spawn",
    "start",
    "wait_until",
]

CLI = str(Path(sys.executable).parent / "subagent-bus")
FAKE = str(Path(__file__).parent / "fake_agents" / "fake_agent.py")

_started: list[subprocess.Popen[bytes]] = []
"""The processes :func:`start` and :func:`spawn` started during the current test."""


def kill_started() -> None:
    """Kill what the test started and left running (it failed before waiting for it): a failed test
    leaves no adapter behind to publish into the next one's server."""
    while _started:
        process = _started.pop()
        if process.poll() is None:
            process.kill()
            process.wait()


def kill_naming(directory: Path) -> None:
    """Kill the processes whose command line names ``directory`` (a test's own): the adapters a launcher
    or the Task hook started, in sessions of their own, and a failed test left running."""
    mark, proc = os.fsencode(directory), Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        named = any(arg == mark or arg.startswith(mark + b"/") or b"=" + mark + b"/" in arg for arg in args)
        if named:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def fake(*steps: str, **options: str | float | Path) -> list[str]:
    """The command line of the fake agent: ``fake("say:hi", "complete", out=path, agent_id="a1")``."""
    argv = [sys.executable, FAKE]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return [*argv, *steps]


def start(args: list[str], url: str, log: Path, **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subagent-bus ARGS --redis-url URL`` (the URL goes in through the environment)."""
    env = {**kwargs.pop("env", {}), "SUBAGENT_BUS_REDIS_URL": url}
    return spawn(
        [CLI, *args],
        stdout=kwargs.pop("stdout", subprocess.DEVNULL),
        stderr=log.open("ab"),
        env={**os.environ, **env},
        **kwargs,
    )


async def wait_until(condition: Callable[[], Awaitable[bool]], seconds: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        await asyncio.sleep(0.05)


def logged(log: Path, text: str) -> Callable[[], Awaitable[bool]]:
    """A condition for :func:`wait_until`: ``text`` is in the log file."""

    async def condition() -> bool:
        return text in await asyncio.to_thread(log.read_text)

    return condition


async def exited(process: subprocess.Popen[bytes], seconds: float) -> int:
    """Wait for a process without blocking the loop; its exit status. One that does not exit in time is
    killed (a failed test leaves no process behind) and the wait fails."""

    async def done() -> bool:
        return process.poll() is not None

    try:
        await wait_until(done, seconds, f"{process.args!r} to exit")
    except AssertionError:
        process.kill()
        process.wait()
        raise
    assert process.returncode is not None
    return process.returncode


class Bus:
    """A test's view of the bus: the streams of one group."""

    def __init__(self, client: Client, keys: Keys) -> None:
        self.client, self.keys = client, keys

    def stream(self, group: str, kind: StreamKind = StreamKind.SIGNALS) -> str:
        return self.keys.stream(self.keys.shard_of(group), kind)

    def inbox(self, group: str, agent: str) -> str:
        return self.keys.inbox(self.keys.shard_of(group), agent)

    async def envelopes(self, group: str, kind: StreamKind = StreamKind.SIGNALS) -> list[Envelope]:
        reply: Any = await self.client.xrange(self.stream(group, kind), "-", "+")
        return [decode(fields[b"data"]) for _, fields in reply]

    async def of_type(self, group: str, *types: EnvelopeType) -> list[Envelope]:
        return [e for e in await self.envelopes(group) if e.type in types]

    async def count(self, group: str, *types: EnvelopeType) -> int:
        return len(await self.of_type(group, *types))

    async def has(self, group: str, type_: EnvelopeType, n: int = 1) -> bool:
        return await self.count(group, type_) >= n


@asynccontextmanager
async def open_bus(url: str) -> AsyncIterator[Bus]:
    client = await connect(Settings.from_url(url))
    try:
        yield Bus(client, await open_namespace(client, "sbus", 8))
    finally:
        await client.aclose()


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Any process (a fake agent, a producer for a pipe); killed after the test if it still runs."""
    process = subprocess.Popen(argv, **kwargs)
    _started.append(process)
    return process


async def run(argv: list[str], stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    """Run a process to its end without blocking the loop: (exit status, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate(stdin)
    return await process.wait(), out, err


async def run_ok(argv: list[str]) -> bytes:
    """Run a process that must succeed; its stdout."""
    code, out, err = await run(argv)
    assert code == 0, f"{argv!r} exited with {code}: {err.decode(errors='replace')}"
    return out


async def stream_fields(client: Client, key: str) -> list[dict[bytes, bytes]]:
    """The fields of every entry of a stream (XRANGE)."""
    reply: Any = await client.xrange(key, "-", "+")
    return [dict(fields) for _, fields in reply]
