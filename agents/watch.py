"""Following an agent's output file (seed 004's ``outputFile``, or any log) across adapter restarts.

The checkpoint, one key per agent and file in the group's shard, is written in the same MULTI/EXEC as
the envelopes it accounts for (what it holds: :mod:`agents.watch_checkpoint`). A restarted adapter
re-parses from the restart point and publishes only the items at or after ``done``: nothing is published
twice and nothing is skipped.

The file may not exist yet (the adapter waits for it), may be truncated, or may be replaced (another
inode at the path). A file whose fingerprints still match what was read is the same output (an editor's
save-by-rename, say) and is followed on; otherwise the output starts over from byte 0 as a new
generation, with a new ``source`` and so new envelope ids, and the adapter says so on stderr. The file
read before, renamed in the same directory meanwhile (a log rotated), is read to its end first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from agents.adapter import AgentBus, OutputStream, heartbeat_loop
from agents.transcript import Format
from agents.until_complete import UntilComplete, ends_with_a_report
from agents.watch_checkpoint import advanced, due
from agents.watch_resume import Turns
from agents.watched_file import (
    Checkpoint,
    canonical,
    check_sized,
    checkpoint_key,
    directory_of,
    fingerprints,
    last_bytes,
    load_checkpoint,
    moved,
    open_file,
    renamed,
    source_of,
)
from bus.embedded import pid_alive
from bus.envelope import Envelope, deterministic_id
from bus.waits import wait_for

__all__ = ["FileWatch", "WatchOptions"]


@dataclass(frozen=True)
class WatchOptions:
    path: Path
    fmt: Format = Format.AUTO
    until_complete: bool = False
    pid: int | None = None
    heartbeat_s: float = 30.0
    poll_s: float = 0.1
    chunk_bytes: int = 1 << 20
    task: str | None = None
    name: str | None = None
    wait_for_redis: bool = False
    """Wait out an outage while reading the checkpoint at the start too, as ``--wait-for-redis`` does
    while connecting (a blip right after the connection ended a hook's adapter, which nobody restarts)."""
    idle_stop_s: float | None = None
    """Stop as a stop signal does once the file has not grown for this long (``--idle-stop``): what is
    left open (a block half written) is not closed but kept in the checkpoint, for a later watch."""
    resumes: bool = False
    """The adapter resumes the agent with a command (``--until-complete``, ``--pid`` and ``--deliver
    command:``): the ``--pid`` process's end ends a turn, not the watch, which follows the file until the
    agent completes (see :class:`~agents.watch_resume.Turns`)."""


class FileWatch:
    """Tails one file into the bus until ``stop`` (or completion, with ``until_complete``)."""

    def __init__(
        self, bus: AgentBus, options: WatchOptions, stop: asyncio.Event, turns: Turns | None = None
    ) -> None:
        self.bus = bus
        self.options = options
        self.turns = turns if turns is not None else Turns(options.pid)
        """The agent's turns, shared with the runner of its resume commands."""
        self._ended = False
        """The turn was seen ended: the file is read to its end once more before its end is told."""
        self.path = canonical(options.path)
        self.stop = stop
        self.key = checkpoint_key(bus, self.path)
        self.checkpoint = Checkpoint()
        self.stream: OutputStream | None = None
        self._fd: int | None = None
        self._last = b""
        """The bytes the stream read last (:func:`~agents.watched_file.last_bytes`), for the checkpoint's
        fingerprints."""
        self._until = UntilComplete()
        self._saved: Checkpoint | None = None
        self._loaded = Checkpoint()
        self._grew = False
        self._caught_up = False  # the end of the file followed was reached: what comes later is new
        self._vanished = False
        self._directory: str | None = None
        self._finishing = False
        self._unopened: str | None = None
        """Why the file that replaced the one read could not be opened, as said last."""

    def finish(self) -> None:
        """Read the file to its end, publish all of it (waiting for Redis as long as that takes), then
        stop without saying the agent exited: it goes on elsewhere (resumed with another output file)."""
        self._finishing = True

    @property
    def session_id(self) -> str | None:
        return self.stream.session_id if self.stream is not None else self.checkpoint.session_id

    async def run(self) -> bool:
        """Follow the file; whether the agent completed."""
        try:
            return await self._run()
        finally:
            self.turns.unwatched = True  # a resume command waits for no turn's end any more

    async def _run(self) -> bool:
        self.path, self.key, loaded = await load_checkpoint(
            self.bus, self.options.path, self.stop if self.options.wait_for_redis else None
        )
        self.checkpoint = self._saved = self._loaded = loaded
        if self.checkpoint.completed:
            self.bus.mark_completed()  # published by an earlier run of the adapter
        if self.options.until_complete and self.checkpoint.completion_report:
            self.bus.warn(
                f"{self.path}: its COMPLETION_REPORT was published before (the checkpoint says so): "
                "--until-complete ends here, and what a resumed turn writes to this file is not followed"
            )
        fd = await self._open()
        if fd is None:
            if self._vanished:
                self.bus.log(
                    f"process {self.options.pid} ended before {self.path} existed; "
                    "publishing its end with no output"
                )
                if not self.checkpoint.started:
                    await self._started()
                await self._exited()
            return self.checkpoint.completed
        fd = self._renamed(fd)
        try:
            self._adopt(fd, initial=True)
            if not self.checkpoint.started:
                await self._started()
            beats = asyncio.create_task(self._beats())
            try:
                return await self._follow()
            finally:
                beats.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await beats
        finally:
            if self._fd is not None:
                os.close(self._fd)

    def kept(self) -> str:
        """Where output that was not published is: still in the file, after the last checkpoint the
        server took (for a message when publishing was given up)."""
        raw = self.bus.sender.confirmed.get(self.key)
        cp = Checkpoint.model_validate_json(raw) if raw is not None else self._loaded
        read = cp.read if cp.generation == self.checkpoint.generation else 0
        return (
            f"they are still in {self.path}, after byte {read} (the checkpoint on the server), and the "
            "next `adapter watch` of that file publishes them"
        )

    async def _open(self) -> int | None:
        """The file, opened once it exists; None if stopped first (``--idle-stop`` counts from the start
        here), or if the ``--pid`` process ended before the file appeared (:attr:`_vanished`)."""
        said = False
        since = time.monotonic()
        while True:
            try:
                return open_file(self.path)
            except FileNotFoundError:
                cp = self.checkpoint
                if not said and cp.file is not None and cp.read:  # renamed while the adapter was away
                    old = renamed(self.path, cp.file, self._same_output, cp.directory)
                    if old is not None:
                        self.bus.log(f"{self.path} was renamed while the adapter was away; reading it on")
                        return old
                if not said:  # once: a mistyped path would otherwise wait in silence
                    missing = "" if self.path.parent.is_dir() else f" (nor its directory {self.path.parent})"
                    self.bus.log(f"waiting for {self.path}: it does not exist yet{missing}")
                    said = True
                pid = self.options.pid
                if pid is not None and not pid_alive(pid):
                    try:
                        return open_file(self.path)  # written just before the process ended
                    except FileNotFoundError:
                        self._vanished = True
                        return None
                idle = self.options.idle_stop_s
                if idle is not None and time.monotonic() - since >= idle:
                    self.bus.log(f"{self.path} did not appear within {idle:g}s: stopping")
                    return None
                if self._finishing or await wait_for(self.stop, self.options.poll_s):
                    return None

    def _renamed(self, fd: int) -> int:
        """The file read before, when another file took its name while the adapter was away (a log
        rotated): it is read to its end first, then :meth:`_rotated` goes on with the one at the path."""
        cp = self.checkpoint
        found = moved(self.path, cp.file, fd, self._same_output, cp.directory)
        if found != fd:
            self.bus.log(f"{self.path} was renamed while the adapter was away; reading it to its end first")
        return found

    def _same_output(self, fd: int) -> bool:
        """Whether ``fd`` holds at least the bytes the checkpoint has read, unchanged."""
        cp = self.checkpoint
        if cp.read == 0:
            return True
        if os.fstat(fd).st_size < cp.read:
            return False
        return fingerprints(fd, cp.read) == (cp.head, cp.tail)

    def _other(self, fd: int, *, initial: bool) -> str:
        """How ``fd`` came to be another output than the one read: replaced, truncated or rewritten."""
        info = os.fstat(fd)
        known = self.checkpoint.file if initial else None  # a restarted adapter knows it by its inode
        if (not initial and fd != self._fd) or known not in (None, (info.st_dev, info.st_ino)):
            return "was replaced by another file"
        if info.st_size < self.checkpoint.read:
            return "was truncated"
        return "no longer holds the bytes already read"

    def _adopt(self, fd: int, *, initial: bool) -> None:
        """Follow ``fd`` from the checkpoint, or as a new generation when it is another output."""
        cp = self.checkpoint
        if not self._same_output(fd):
            away = " while the adapter was away" if initial else ""
            self.bus.warn(
                f"{self.path} {self._other(fd, initial=initial)}{away}; starting over from byte 0 as "
                f"generation {cp.generation + 1} (new envelope ids)"
            )
            cp = self.checkpoint = Checkpoint(generation=cp.generation + 1)
        if self._fd is not None and self._fd != fd:
            os.close(self._fd)
        self._fd = fd
        self._caught_up = False
        self._directory = directory_of(fd, self.path)
        os.lseek(fd, cp.resume, os.SEEK_SET)
        self._last = b""  # the bytes the stream read last: none yet
        self.stream = OutputStream(
            self.bus,
            source_of(self.path, cp.generation),
            cp.format if self.options.fmt is Format.AUTO else self.options.fmt,
            base=cp.resume,
            base_line=cp.resume_line,
            done=cp.done,
            reported=cp.reported,
            session_id=cp.session_id,
            pauses=cp.pauses,
        )

    async def _follow(self) -> bool:
        options = self.options
        quiet_since: float | None = None  # the end of the file was reached, and nothing came since then
        while not self.stop.is_set():
            assert self.stream is not None
            if await self._read():
                quiet_since = None
                continue
            # Only a read that found nothing may end the watch on a quiet spell: timed from the first
            # such read, the spell may have passed while the loop was held (a flush waiting out a Redis
            # outage, the process paused), and the agent may have written on meanwhile.
            if options.until_complete and await self._done(quiet_since):
                break
            if quiet_since is None:
                quiet_since = time.monotonic()
            self._caught_up = True
            await self._publish(self.stream.settle(), force=True)
            await self.bus.flush()  # at the end of the file: everything read is on the server
            if await self._idle(quiet_since):
                break
            if self._finishing:  # the end of its output: a report or block it leaves open ends here
                await self._publish(self.stream.close(), force=True)
                await self.bus.flush()
                break
            if await self._rotated():
                continue
            if not await self._turn():
                break
        await self.bus.flush()
        if self.checkpoint.completed and options.until_complete:
            await self._exited()
        else:
            await self.turns.stopped(self.bus, source_of(self.path, self.checkpoint.generation))
        return self.checkpoint.completed

    async def _turn(self) -> bool:
        """At the end of the file, the agent's turn; whether the watch goes on. When the turn ended, the
        file is read once more (what the agent wrote just before it ended), then its end is told: the
        watch ends, or, when the adapter resumes the agent (``resumes``), goes on until it completes.
        Otherwise the watch waits for more."""
        pid, resumes = self.options.pid, self.options.resumes
        if pid is not None and (self.turns.over() if resumes else not pid_alive(pid)):
            if not self._ended:
                self._ended = True
                return True
            self._ended = False
            if not resumes:
                assert self.stream is not None
                await self._publish(self.stream.close(), force=True)
                await self._exited()
                return False
            await self.turns.ended(
                self.bus, source_of(self.path, self.checkpoint.generation), self.checkpoint.read
            )
        else:
            self._ended = False
        await wait_for(self.stop, self.options.poll_s)
        return True

    async def _idle(self, quiet_since: float) -> bool:
        """``--idle-stop``: whether the file has not grown for that long, the watch then stopped as a stop
        signal stops it. Not as :meth:`finish` does: a block the agent was writing when the time ran out
        would be closed and published as an error, and the later watch that goes on from the checkpoint
        would never publish it whole. But a result report that ends the file is published: in text only
        the next heading or tag would end it, which a quiet agent may never write."""
        idle = self.options.idle_stop_s
        if idle is None or time.monotonic() - quiet_since < idle:
            return False
        self.bus.log(f"{self.path} has not grown for {idle:g}s: stopping (a later watch goes on from here)")
        assert self.stream is not None
        if ends_with_a_report(self.stream):
            await self._publish(self.stream.close(), force=True)
        self.stop.set()
        return True

    async def _read(self) -> bool:
        """Read what comes next in the file and publish what it makes; whether anything came."""
        assert self._fd is not None and self.stream is not None
        chunk = os.read(self._fd, self.options.chunk_bytes)
        if not chunk:
            return False
        if not self._same_output(self._fd):
            # Truncated and written again, past where it was read, since the last read: the new
            # output's bytes after that point are not the rest of the old one.
            await self._switch(self._fd)
        else:
            self._grew = self._grew or self._caught_up
            self._last = last_bytes(self._last, chunk)
            await self._publish(self.stream.feed(chunk), force=False)
        return True

    async def _done(self, quiet_since: float | None) -> bool:
        """Whether ``--until-complete`` ends here (a block left open so long is published as an error)."""
        assert self.stream is not None
        until, stream = self._until, self.stream
        if not (
            until.complete(self.checkpoint, stream, quiet_since) or await self._ends_a_report(quiet_since)
        ):
            return False
        if until.unended(quiet_since):
            await self._publish(stream.close(), force=True)
        return True

    async def _ends_a_report(self, quiet_since: float | None) -> bool:
        """Whether a result report ended the file (:meth:`UntilComplete.ends_a_report`), now published."""
        assert self.stream is not None
        if not self._until.ends_a_report(self.checkpoint, self.stream, quiet_since):
            return False
        await self._publish(self.stream.close(), force=True)
        return True

    async def _publish(self, envelopes: list[Envelope], *, force: bool) -> None:
        """Publish ``envelopes`` with the new checkpoint; without envelopes, save it when due."""
        assert self.stream is not None and self._fd is not None
        self.checkpoint = advanced(
            self.checkpoint, self.stream, self._fd, self._directory, envelopes, self._last
        )
        if not envelopes and not due(self.checkpoint, self._saved, force=force):
            return
        state = {self.key: self.checkpoint.model_dump_json().encode()}
        await self.bus.publish(envelopes, state=state, wait=force)
        self._saved = self.checkpoint

    async def _rotated(self) -> bool:
        """At the end of the file: switch to a truncated or replaced file; whether it happened."""
        assert self._fd is not None
        try:
            at_path = os.stat(self.path)
        except OSError:  # deleted (or a link loop, a directory made a file): the agent may still write
            return False  # to it; a new file is picked up later
        if not stat.S_ISREG(at_path.st_mode):
            return False  # not a file (yet): as if deleted, until a file is there again
        mine = os.fstat(self._fd)
        if (at_path.st_dev, at_path.st_ino) != (mine.st_dev, mine.st_ino):
            return await self._replaced()
        if self._same_output(self._fd):
            return False
        await self._switch(self._fd)
        return True

    async def _replaced(self) -> bool:
        """Another file took the path: the one read is read to its end, then the new one is followed (read
        on when it holds every byte read so far); whether it was."""
        try:
            fd = open_file(self.path)
        except OSError as exc:  # not readable by this user, say: the output may go on there
            if str(exc) != self._unopened:
                self.bus.warn(f"{exc}: still reading the file it replaced, and trying again")
                self._unopened = str(exc)
            return False
        self._unopened = None
        await self._drain()
        if self.options.until_complete and self.checkpoint.completion_report:
            os.close(fd)  # it completed in what was drained: nothing more to follow
        elif self._same_output(fd):
            await self._read_on(fd)
        else:
            await self._switch(fd)
        return True

    async def _drain(self) -> None:
        """Read the file being replaced to its end: what the agent wrote to it after the last read, before
        the new file appeared (a log rotated by renaming it and creating another), is its output too.
        (What it writes to it later, having not yet opened the new one, is not read.)"""
        assert self._fd is not None and self.stream is not None
        while chunk := os.read(self._fd, self.options.chunk_bytes):
            self._last = last_bytes(self._last, chunk)
            await self._publish(self.stream.feed(chunk), force=False)

    async def _read_on(self, fd: int) -> None:
        """Read on in ``fd``, a new file at the path that holds every byte read so far (the output written
        anew and renamed over the old file, an editor's save): the same output, so a block or report it
        left open is still open."""
        assert self._fd is not None and self.stream is not None
        os.close(self._fd)
        self._fd = fd
        self._directory = directory_of(fd, self.path)
        os.lseek(fd, self.stream.fed, os.SEEK_SET)
        await self._publish([], force=True)  # the checkpoint names the new file

    async def _switch(self, fd: int) -> None:
        """Follow ``fd``, another output than the one read so far, from its start. What the old one
        leaves open (a report at its end, a block, a last line without its newline) ends with it, as at
        the end of the agent's output."""
        assert self.stream is not None
        if fd == self._fd:  # truncated, by its size
            check_sized(fd, self.path)
        await self._publish(self.stream.close(), force=True)
        self._adopt(fd, initial=False)
        await self._publish([], force=True)
        if not self.checkpoint.started:
            await self._started()

    async def _started(self) -> None:
        """AGENT_STARTED, with the checkpoint that records it in the same transaction."""
        source = source_of(self.path, self.checkpoint.generation)
        self.checkpoint = self.checkpoint.model_copy(update={"started": True})
        state = {self.key: self.checkpoint.model_dump_json().encode()}
        started_id = deterministic_id(self.bus.agent_id, f"{source}#started", 0)
        await self.bus.started(
            source=source, id=started_id, state=state, task=self.options.task, name=self.options.name
        )
        self._saved = self.checkpoint

    async def _exited(self) -> None:
        """AGENT_EXITED once per generation, recorded in the checkpoint in the same transaction."""
        if self.checkpoint.ended:
            return
        source = source_of(self.path, self.checkpoint.generation)
        self.checkpoint = self.checkpoint.model_copy(update={"ended": True})
        state = {self.key: self.checkpoint.model_dump_json().encode()}
        exit_id = deterministic_id(self.bus.agent_id, f"{source}#exited", 0)
        await self.bus.exited(source=source, exit_code=None, id=exit_id, state=state)
        self._saved = self.checkpoint

    async def _beats(self) -> None:
        await heartbeat_loop(
            self.bus,
            self.options.heartbeat_s,
            self.stop,
            source=source_of(self.path, self.checkpoint.generation),
            alive=self._alive_now,
            pid=lambda: self.options.pid,
        )

    def _alive_now(self) -> bool:
        """With a pid: whether a turn runs (that process, or a resume command). Without: whether the file
        grew since the last beat while watched (what it held when the adapter came to it may be older than
        the agent's end, or its loss)."""
        if self.options.pid is not None:
            return self.turns.running()
        grew, self._grew = self._grew, False
        return grew
