"""A resume command's run (``--deliver command:TEMPLATE``): started in a session of its own, to die with
the adapter; its output (stdout and stderr on one pipe) read as it comes, each line logged and only a tail
kept, however much it prints; its end is its exit, not the end of its output, which a process it started
(``server &``, a ``nohup`` daemon) may hold open for ever; the adapter's stop signals passed on to it
(:class:`Stopping`); and a delivery cancelled while it runs does not leave it running.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Final

from agents.agent_process import child_environment, dies_with_us, signal_agent, start_error, stop_agent
from bus.errors import BusError

__all__ = ["DeliveryFailed", "Stopping", "finished", "run_checked", "run_command"]

_CHUNK: Final = 64 * 1024
_TAIL_BYTES: Final = 4096
_LINE_BYTES: Final = 4096
"""The most of one line of the output that is logged."""
_EXITED_POLL_S: Final = 0.2
_READ_ON_S: Final = 2.0
"""How long the output is read on after the command's exit, for what it printed last to be logged."""


class DeliveryFailed(BusError):
    """A directive could not be handed to the agent (it is retried, then dead-lettered)."""


class Stopping:
    """The stop signals the adapter received (SIGTERM, SIGINT, SIGHUP), passed on to the resume commands
    running meanwhile, as ``adapter run`` passes them on to its agent: the first as it came, since the
    command is often a turn of the agent (``claude --resume``), for which SIGINT is Ctrl-C and SIGHUP a
    closed terminal as much as for an agent ``run`` started; a second as SIGKILL, so that the adapter,
    which waits for the command's exit, can end when the command does not stop."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._running: set[asyncio.subprocess.Process] = set()

    def forward(self, sig: int) -> None:
        """Take the stop signal ``sig``: pass it on to the commands running (see the class)."""
        self.received.append(sig)
        for process in self._running:
            self._pass_on(process)

    @contextlib.contextmanager
    def running(self, process: asyncio.subprocess.Process) -> Iterator[None]:
        """While the command ``process`` runs: a signal that came while it started is passed on now."""
        self._running.add(process)
        try:
            if self.received:
                self._pass_on(process)
            yield
        finally:
            self._running.discard(process)

    def _pass_on(self, process: asyncio.subprocess.Process) -> None:
        # its whole group: run_command started it in a session of its own
        signal_agent(process, signal.SIGKILL if len(self.received) > 1 else self.received[0])


async def run_checked(
    argv: list[str],
    log: Callable[[str], None],
    warn: Callable[[str], None] | None = None,
    stopping: Stopping | None = None,
    started: Callable[[], None] | None = None,
) -> None:
    """:func:`run_command`; an exit status other than 0 is a :class:`DeliveryFailed` with its output."""
    code, tail = await run_command(argv, log, warn, stopping, started)
    if code != 0:
        raise DeliveryFailed(f"{argv[0]} exited with code {code}: {tail.strip()[-500:]}")


async def run_command(
    argv: list[str],
    log: Callable[[str], None],
    warn: Callable[[str], None] | None = None,
    stopping: Stopping | None = None,
    started: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """Run ``argv`` (no shell, stdin closed) to its exit; its output goes to ``log`` line by line, what
    went wrong to ``warn`` (default ``log``; see :func:`finished`), the stop signals
    ``stopping`` takes to it; ``started`` is called once it runs. (exit code, output tail). Not started
    once a stop signal came."""
    if stopping is not None and stopping.received:
        raise DeliveryFailed("the adapter is stopping")
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # In a session of its own, as the agent of `adapter run` is: a terminal's Ctrl-C (or its
            # closing) reaches it only as the adapter passes it on, once, not twice. And like that agent it
            # gets SIGTERM when the adapter dies: the adapter run next delivers the directive again, and a
            # turn of the agent left running would then be one of two at once.
            start_new_session=True,
            preexec_fn=dies_with_us(),
            env=child_environment(),
        )
    except (OSError, ValueError) as exc:
        raise DeliveryFailed(start_error(argv[0], exc)) from None
    if started is not None:
        started()
    return await finished(process, argv[0], log, warn or log, stopping)


async def finished(
    process: asyncio.subprocess.Process,
    name: str,
    log: Callable[[str], None],
    warn: Callable[[str], None],
    stopping: Stopping | None = None,
) -> tuple[int, str]:
    """Wait for the exit of ``process``, its output logged line by line (``name: line``) meanwhile:
    (its return code, the tail of its output). The stop signals ``stopping`` takes meanwhile are passed
    on to it. Cancelled, it stops the process first. What went wrong (its output not read to the end, the
    process killed) is said to ``warn``."""
    output = _Output(name, log)
    assert process.stdout is not None
    reading = asyncio.ensure_future(output.read(process.stdout))
    try:
        try:
            with stopping.running(process) if stopping is not None else contextlib.nullcontext():
                await _drained(process, reading, name, warn)
        except asyncio.CancelledError:
            # SIGTERM first, SIGKILL after a grace: the command is often a turn of the agent (``claude
            # --resume``), which is given the time to save its session that an agent the adapter stops is.
            # Not sent again when it was passed on already, to which a second one may mean "quit now".
            termed = stopping is not None and stopping.received[:1] == [signal.SIGTERM]
            await stop_agent(
                process, termed=termed, warn=warn, reading=[reading], what=f"the resume command {name}"
            )
            raise
    finally:
        reading.cancel()
        if not output.ended:  # not left open until the process holding it ends
            _stop_reading(process)
        output.end()
    assert process.returncode is not None
    return process.returncode, output.tail()


async def _drained(
    process: asyncio.subprocess.Process, reading: asyncio.Future[None], name: str, warn: Callable[[str], None]
) -> None:
    """Wait for the command's exit and the end of its output, which is read on for :data:`_READ_ON_S`
    at most once the command has exited. The exit is polled for: ``process.wait()`` begun before it
    returns (on Python 3.11) only once the output has ended too."""
    while process.returncode is None and not reading.done():
        await asyncio.wait({reading}, timeout=_EXITED_POLL_S)
    if process.returncode is not None:
        await asyncio.wait({reading}, timeout=_READ_ON_S)
        if not reading.done():
            warn(f"{name} exited, but a process it started holds its output open: not read any more")
            _stop_reading(process)
    await reading
    await process.wait()  # at once when it has exited; else (the output ended first) at its exit


def _stop_reading(process: asyncio.subprocess.Process) -> None:
    """Close our end of the output now rather than when the process holding it ends: the read then ends as
    at the end of the output. asyncio offers no other handle on it than the process's transport (closing
    it kills the process only when it has not exited)."""
    process._transport.close()  # type: ignore[attr-defined]


class _Output:
    """What is kept of the command's output: its tail, and the start of the line being read."""

    def __init__(self, name: str, log: Callable[[str], None]) -> None:
        self._name = name
        self._log = log
        self._tail = bytearray()
        self._line = bytearray()
        self._dropped = 0
        """Bytes of the line being read beyond :data:`_LINE_BYTES`, not kept."""
        self.ended = False
        """Whether the output was read to its end."""

    async def read(self, stdout: asyncio.StreamReader) -> None:
        while chunk := await stdout.read(_CHUNK):
            self._add(chunk)
        self.ended = True

    def _add(self, chunk: bytes) -> None:
        self._tail += chunk
        if len(self._tail) > 2 * _TAIL_BYTES:
            del self._tail[:-_TAIL_BYTES]
        *lines, rest = chunk.split(b"\n")
        for line in lines:
            self._keep(line)
            self._log_line()
        self._keep(rest)

    def _keep(self, piece: bytes) -> None:
        kept = piece[: max(_LINE_BYTES - len(self._line), 0)]
        self._line += kept
        self._dropped += len(piece) - len(kept)

    def _log_line(self) -> None:
        lines = self._line.decode(errors="replace").splitlines() or [""]  # "\r" ends a line too
        if self._dropped:
            lines[-1] += f" [and {self._dropped} more bytes of this line, not logged]"
        for line in lines:
            self._log(f"{self._name}: {line}")
        self._line.clear()
        self._dropped = 0

    def end(self) -> None:
        """Log the last line, when the output did not end with a line end."""
        if self._line or self._dropped:
            self._log_line()

    def tail(self) -> str:
        return bytes(self._tail[-_TAIL_BYTES:]).decode(errors="replace")
