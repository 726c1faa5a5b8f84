"""Adapters around a process (``adapter run``) and a pipe (``adapter stdin``).

A :class:`Session` runs the agent's processes one at a time: the first command, then, with a command
delivery, each resume command (``claude --resume ...``), whose stdout is the agent's output as well.
For every process it publishes AGENT_STARTED, the envelopes parsed from stdout as they arrive (the
output is read, copied and parsed by :class:`agents.agent_output.AgentOutput`), HEARTBEATs while it
runs, and at its end AGENT_EXITED with the exit code and the last lines of stderr.
A non-zero exit without a completion report is published first as a ``[STOP_WORK]`` with
``stop_reason: error`` and ``blocker_type: error``, the stderr tail in ``details``, so the parent can
recover it like any error the agent reports itself; unless the turn's output said why already: a
question or a stop of the agent's, or a failed turn its program reported (:func:`agents.lost.failed_turn`).
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from agents.adapter import AgentBus, GaveUp, heartbeat_loop
from agents.agent_output import CHUNK, AgentOutput, Chunks
from agents.agent_process import (
    StderrTail,
    exit_status,
    signal_agent,
    start_agent,
    start_error,
    stop_agent,
)
from agents.delegate_wait import DelegateWait
from agents.delivery import AgentDone, DeliveryFailed, Directive
from agents.lost import RECOVERY
from agents.transcript import Format
from bus.envelope import deterministic_id
from bus.signals import BlockerType, StopReason, StopWork

__all__ = ["ProcessOptions", "Session"]

_EXITED_POLL_S: Final = 0.2
_DRAIN_S: Final = 2.0
"""How long the agent's output is read on after it exited, for a process it started that holds it open."""


@dataclass(frozen=True)
class ProcessOptions:
    fmt: Format = Format.AUTO
    heartbeat_s: float = 30.0
    tee: bool = True
    """Copy the agent's output to the adapter's stdout."""
    stderr_log: Path | None = None
    """Append the agent's stderr here instead of copying it to the adapter's stderr."""
    task: str | None = None
    name: str | None = None
    session_id: str | None = None
    until_complete: bool = False
    """The adapter resumes the agent with its directives until it completes (``--until-complete``)."""
    idle_file: Path | None = None
    """Exists while the agent waits for its blocking delegates (:mod:`agents.delegate_wait`)."""


class Session:
    """The processes of one agent, one at a time, and what they print."""

    def __init__(self, bus: AgentBus, options: ProcessOptions, stop: asyncio.Event) -> None:
        self.bus = bus
        self.options = options
        self.stop = stop
        self.base = f"{uuid.uuid4().hex[:12]}"
        self.idle = asyncio.Event()
        self.idle.set()
        self.last_code: int | None = None
        self.process: asyncio.subprocess.Process | None = None
        self._runs: set[asyncio.Task[int]] = set()
        self._signals = 0
        self.signalled: int | None = None
        """The last stop signal received."""
        self._gave_up: GaveUp | None = None
        self._resumable = False
        """What the last AGENT_EXITED said: the adapter goes on resuming the agent."""
        self._exited = False
        """An AGENT_EXITED was published (of a process's turn, or of the end of a piped output)."""
        self._delegates = DelegateWait(options.idle_file, bus.log)
        self.output = AgentOutput(
            bus, self._delegates, fmt=options.fmt, tee=options.tee, stderr_log=options.stderr_log
        )
        self._recalled: set[str] = set()
        """The :func:`~bus.signals.recap_key` of the dated questions and stops of earlier turns."""

    @property
    def session_id(self) -> str | None:
        """The session id the agent's output carried last (a transcript), else ``--session-id``."""
        return self.output.session_id or self.options.session_id

    def forward(self, sig: int) -> None:
        """Pass a signal on to the running process (a second one kills it); no resume starts after.

        A signal that finds no process to pass it to, or a second one, also gives up publishing (see
        :meth:`agents.sending.Sender.give_up`): only the agent being stopped is waited for.
        """
        self._signals += 1
        self.signalled = sig
        self.stop.set()
        process = self.process
        if process is not None and process.returncode is None:
            signal_agent(process, signal.SIGKILL if self._signals > 1 else sig)
            if self._signals == 1:
                return
        self.bus.sender.give_up(sig)

    async def run(self, argv: list[str]) -> int:
        """Run the agent's command to its end; its exit status (127/126 when it cannot start)."""
        source = f"run:{self.base}"
        try:
            task = await self._start(argv, source, first=True)
        except DeliveryFailed as exc:
            self.bus.warn(str(exc))  # no agent ran, so nothing else would tell the terminal why
            if self.signalled is not None:
                code = 128 + self.signalled
                await self._report_end(source, code, "", why=str(exc))
            else:
                code = 127 if isinstance(exc.__cause__, FileNotFoundError) else 126
                await self._report_end(source, code, str(exc))
            self.last_code = code
            self.idle.set()
            return code
        return await task

    async def resume(self, argv: list[str], directive: Directive) -> None:
        """The runner of a command delivery: run the resume command's turn once no process runs."""
        await self.idle.wait()
        self._delegates.directed(directive.envelope)
        if self.bus.completed:
            raise AgentDone()
        if self.stop.is_set():
            raise DeliveryFailed("the adapter is stopping")
        if self._exited and not self._resumable:
            # Its last AGENT_EXITED said nobody resumes it here: the coordinator starts it again with the
            # directives of its inbox (or leaves them to whoever starts it), which a turn here would repeat.
            raise DeliveryFailed(
                "the agent's turn ended, and this adapter ends with it (no --until-complete)"
            )
        turn = await self._start(argv, f"run:{self.base}:resume:{directive.envelope.id}", first=False)
        # Delivered once the turn has ended, not once it started: an adapter killed during it (which
        # stops the turn, PR_SET_PDEATHSIG) leaves the directive pending, for its next run to deliver.
        await asyncio.wait({turn})

    async def pipe(self, chunks: Chunks) -> None:
        """Take an output that is not a process of ours (stdin) to its end."""
        self.idle.clear()
        source = f"stdin:{self.base}"
        await self.bus.started(source=source, task=self.options.task, name=self.options.name)
        eof = asyncio.Event()
        beats = asyncio.create_task(
            heartbeat_loop(self.bus, self.options.heartbeat_s, eof, source=source, alive=lambda: True)
        )
        try:
            await self.output.pump(chunks, source)
        finally:
            eof.set()
            await beats
        await self.bus.exited(source=source, exit_code=None, resumable=self._resumes())
        self.idle.set()

    async def finished(self) -> None:
        """Wait for every process started so far; a resumed one's :class:`GaveUp` is raised here."""
        while self._runs:
            await asyncio.gather(*list(self._runs), return_exceptions=True)
        if self._gave_up is not None:
            raise self._gave_up

    async def _start(self, argv: list[str], source: str, *, first: bool) -> asyncio.Task[int]:
        if self.signalled is not None:  # a stop signal came first (a launcher stopped as it started us)
            name = signal.Signals(self.signalled).name
            raise DeliveryFailed(f"{name} stopped the adapter before it started the agent")
        self.idle.clear()
        self._delegates.between_turns(False)
        self.output.turn = None
        try:
            process = await start_agent(argv)
        except (OSError, ValueError) as exc:
            self.idle.set()
            self._delegates.between_turns(self._between_turns())
            raise DeliveryFailed(start_error(argv[0], exc)) from exc
        self.process = process
        if self.signalled is not None:  # it came while the process started, which it is meant for
            signal_agent(process, self.signalled)
        task = asyncio.create_task(self._supervise(process, argv, source, first=first))
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)
        return task

    async def _supervise(
        self, process: asyncio.subprocess.Process, argv: list[str], source: str, *, first: bool
    ) -> int:
        pumps: list[asyncio.Future[None]] = []  # the readers of its stdout and stderr, once started
        try:
            await self.bus.started(
                source=source,
                pid=process.pid,
                command=argv,
                task=self.options.task if first else None,
                name=self.options.name if first else None,
            )
            running = asyncio.Event()
            beats = asyncio.create_task(
                heartbeat_loop(
                    self.bus,
                    self.options.heartbeat_s,
                    running,
                    source=source,
                    alive=lambda: process.returncode is None,
                    pid=lambda: process.pid,
                )
            )
            tail = StderrTail()
            assert process.stdout is not None and process.stderr is not None
            stdout, stderr = process.stdout, process.stderr
            try:
                pumps += (
                    asyncio.ensure_future(self.output.pump(lambda: stdout.read(CHUNK), source)),
                    asyncio.ensure_future(self.output.pump_stderr(stderr, tail)),
                )
                await self._drained(process, asyncio.gather(*pumps))
                # not process.wait(): it waits for the output's end too, which may be never
                assert process.returncode is not None
                code = exit_status(process.returncode)
            finally:
                running.set()
                await beats
            await self._report_end(source, code, tail.text())
            self.last_code = code
            return code
        except GaveUp as exc:
            if process.returncode is not None:
                exc.add_note(f"the agent exited with status {exit_status(process.returncode)}")
            self._gave_up = exc
            raise
        finally:
            if process.returncode is None:
                await self._stop_agent(process, pumps)
            self.process = None
            self.idle.set()
            self._delegates.between_turns(self._between_turns())

    async def _stop_agent(
        self, process: asyncio.subprocess.Process, pumps: list[asyncio.Future[None]]
    ) -> None:
        """:func:`stop_agent`, reading the outputs whose readers ended (or never started) meanwhile. The
        stdout read then cannot be published (the adapter failed, or gave up publishing): it is copied
        to stdout as ever, and the log says how much of it the bus lacks. The stderr goes where it goes."""
        out, err = process.stdout, process.stderr
        assert out is not None and err is not None
        dropped = 0

        async def read_on() -> None:
            nonlocal dropped
            while chunk := await out.read(CHUNK):
                self.output.copy(chunk)
                dropped += len(chunk)

        out_pump, err_pump = pumps or (None, None)
        reading: list[Awaitable[None]] = []
        if out_pump is None or out_pump.done():
            reading.append(read_on())
        if err_pump is None or err_pump.done():
            reading.append(self.output.pump_stderr(err, StderrTail()))
        termed = self.signalled == signal.SIGTERM  # an already passed-on SIGTERM is not sent again
        await stop_agent(process, termed=termed, warn=self.bus.warn, reading=reading)
        if dropped:
            self.bus.warn(
                f"{dropped} bytes of the agent's output read while it was being stopped were not published"
            )

    def _between_turns(self) -> bool:
        """Whether the agent, no process of it running, waits for the directive that resumes it."""
        return self.options.until_complete and not self.stop.is_set() and not self.bus.completed

    def ended(self) -> None:
        """The adapter ends: its agent waits no more."""
        self._delegates.between_turns(False)

    async def _drained(self, process: asyncio.subprocess.Process, pumps: asyncio.Future[Any]) -> None:
        """Wait for the agent's exit and the end of its output; a process it left running that keeps
        the output open (``server &``) is given :data:`_DRAIN_S` of reading to close it, then it is not
        read any more: the agent's exit must be reported, and its next turn started."""
        while process.returncode is None and not pumps.done():
            await asyncio.wait({pumps}, timeout=_EXITED_POLL_S)
        # Only the time spent reading counts: while Redis does not take what was read (down, restarting)
        # the rest of the agent's output waits in the pipe, and is read once it does.
        exited_at, waited = time.monotonic(), self.output.redis_wait()
        while not pumps.done():
            await asyncio.wait({pumps}, timeout=_EXITED_POLL_S)
            if time.monotonic() - exited_at - (self.output.redis_wait() - waited) >= _DRAIN_S:
                break
        if not pumps.done():
            self.bus.warn(
                "the agent exited, but a process it started holds its output open: not read any more"
            )
            # Our ends of its pipes, closed now rather than when that process ends: the reads then end
            # as at the end of the output. asyncio offers no other handle on them than the process's
            # transport (closing it kills no process that has exited).
            process._transport.close()  # type: ignore[attr-defined]
        await pumps
        if process.returncode is None:  # the output ended first: the agent is still ending
            await process.wait()

    async def _report_end(self, source: str, code: int, tail: str, *, why: str | None = None) -> None:
        """A STOP_WORK error for a failed exit without completion (``why``: why the agent did not run
        at all), then AGENT_EXITED."""
        waits = self._said_it_waits()
        if code != 0 and not self.bus.completed and not waits:
            how = f"was killed by signal {code - 128}" if code > 128 else f"exited with code {code}"
            details = f"The agent process {how} without a completion report."
            if why is not None:
                details = f"The agent did not run: {why}."
            if tail.strip():
                details += f"\n\nLast lines of its stderr:\n{tail}"
            stop = StopWork(
                agent_id=self.bus.agent_id,
                timestamp=datetime.now(UTC),
                stop_reason=StopReason.ERROR,
                blocker_type=BlockerType.ERROR,
                details=details,
                error_recovery=RECOVERY,
            )
            stop_id = deterministic_id(self.bus.agent_id, f"{source}#exit", 0)
            await self.bus.publish([self.bus.envelope(stop, source=source, id=stop_id)])
        await self.bus.exited(
            source=source, exit_code=code, stderr_tail=tail or None, resumable=self._resumes()
        )

    def _said_it_waits(self) -> bool:
        """Whether this turn's output said the agent waits: a question or a stop, read or lost, that
        recalls none of an earlier turn (which the coordinator does not apply again), or a failed turn its
        program reported. Its exit then ends the turn, whatever its status, and is no error of its own to
        report over what it said."""
        turn = self.output.turn
        if turn is None:
            return False
        waits = any(key is None or key not in self._recalled for key in turn.waits)
        self._recalled.update(key for key in turn.waits if key is not None)
        return waits

    def _resumes(self) -> bool:
        """Whether this adapter goes on resuming the agent with its directives after this exit: only
        with ``--until-complete``, and not once it was told to stop. Otherwise it ends with the agent,
        and the coordinator has a launcher start an agent it launched again instead."""
        self._exited = True
        self._resumable = self._between_turns()
        return self._resumable

    async def stopped(self) -> None:
        """The adapter stops while it waits between two turns of an agent that has not completed: its
        last AGENT_EXITED said it would resume the agent, so it now says nobody will."""
        if self._resumable and not self.bus.completed:
            self._resumable = False
            await self.bus.exited(source=f"run:{self.base}:stop", exit_code=None, resumable=False)
