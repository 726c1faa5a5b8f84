"""Real coordinator processes, the streams they work on, and the faults the scenarios inject.

:class:`CoordinatorProcess` is one ``subagent-bus coordinator`` child process with its log file;
:class:`Fleet` starts them and kills whatever is left when a test ends. :class:`Bus` is the test's own
view of the namespace: publishing, and reading the consumer group's pending lists, which is how a test
knows, from outside, what a process holds. :func:`freeze_holding` stops a process at the one instant a
scenario needs: it has read a batch and not committed it.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.exceptions
from checker import Report, check

from bus.connection import Client, connect
from bus.envelope import Envelope, decode
from bus.findings import Finding
from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher
from bus.settings import Settings
from coordinator.service import GROUP

__all__ = [
    "CLI",
    "NAMESPACE",
    "Bus",
    "CoordinatorProcess",
    "Fleet",
    "Recorder",
    "freeze_holding",
    "open_bus",
    "report_line",
    "wait_until",
]

CLI = str(Path(sys.executable).parent / "subagent-bus")
NAMESPACE = "sbus"
_BANNER = re.compile(r"coordinator (\S+): \d+ shards in namespace")
_STOPPED_STATES = frozenset({"T", "t", "X", "Z"})  # stopped, or no longer running at all

Recorder = Callable[..., None]
"""The ``fault_report`` fixture: ``fault_report(report=None, **facts)`` adds this scenario's line."""


async def wait_until(
    condition: Callable[[], Awaitable[bool]], seconds: float, what: str, *, interval: float = 0.02
) -> None:
    """Poll ``condition`` until it holds; an AssertionError naming ``what`` after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        await asyncio.sleep(interval)


def report_line(report: Report) -> str:
    return (
        f"published={report.published} applied={report.applied} lost={report.lost} "
        f"duplicated={report.duplicated} out_of_order={report.out_of_order} unexpected={report.unexpected}"
    )


class CoordinatorProcess:
    """One ``subagent-bus coordinator`` process; its stderr (the log) goes to ``log``."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path, name: str | None) -> None:
        self.popen = popen
        self.log = log
        self._name = name

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def name(self) -> str:
        """The consumer name (from ``--name``, else from the banner the process prints once connected)."""
        if self._name is None:
            match = _BANNER.search(self.log_text())
            if match is None:
                raise AssertionError(f"coordinator {self.pid} has not printed its name yet")
            self._name = match.group(1)
        return self._name

    async def started(self, seconds: float = 30.0) -> str:
        """Wait until the process has connected (it prints its banner); returns its name."""
        await wait_until(self._has_banner, seconds, f"coordinator {self.pid} to connect")
        return self.name

    async def _has_banner(self) -> bool:
        if not self.alive:
            raise AssertionError(f"coordinator {self.pid} exited early:\n{self.log_tail()}")
        return _BANNER.search(self.log_text()) is not None

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    async def wait_for_log(self, text: str, seconds: float) -> None:
        """Wait until the log contains ``text``."""

        async def logged() -> bool:
            return text in self.log_text()

        await wait_until(logged, seconds, f"{text!r} in the log of {self._name or self.pid}", interval=0.05)

    async def freeze(self) -> None:
        """SIGSTOP, and return only once the kernel reports the process stopped."""
        self.popen.send_signal(signal.SIGSTOP)
        await wait_until(self._stopped, 10, f"process {self.pid} to stop", interval=0.001)

    async def _stopped(self) -> bool:
        return _process_state(self.pid) in _STOPPED_STATES

    def thaw(self) -> None:
        if self.alive:
            self.popen.send_signal(signal.SIGCONT)

    def kill(self) -> int:
        """SIGKILL and reap; returns the exit status."""
        if self.alive:
            self.popen.send_signal(signal.SIGKILL)
        return self.popen.wait(timeout=30)

    def send(self, sig: int) -> None:
        if self.alive:
            self.popen.send_signal(sig)

    async def exited(self, seconds: float) -> int:
        """Wait for the process to exit on its own; returns its exit status."""

        async def gone() -> bool:
            return not self.alive

        await wait_until(gone, seconds, f"coordinator {self._name or self.pid} to exit", interval=0.05)
        return int(self.popen.returncode)


class Fleet:
    """Starts coordinator processes for one test and kills whatever is left of them at its end."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: list[CoordinatorProcess] = []

    def start(
        self,
        url: str,
        *,
        name: str | None = None,
        lease_ms: int = 1000,
        batch: int = 100,
        burst: bool = False,
        prefix: Sequence[str] = (),
        tick_s: float = 3600,
        max_deliveries: int | None = None,
    ) -> CoordinatorProcess:
        """A coordinator on ``url``; no ``name`` gives a random consumer name, as in production.

        ``prefix`` runs it under another command (``ip netns exec NS``, which execs, keeping the pid).
        Ticks are hourly by default: the scenarios publish everything they expect to see applied.
        """
        args = [*prefix, CLI, "coordinator", "--redis-url", url, "--namespace", NAMESPACE]
        args += ["--lease-ttl", str(lease_ms), "--batch", str(batch), "--tick", str(tick_s)]
        if name:
            args += ["--name", name]
        if burst:
            args.append("--burst")
        if max_deliveries is not None:
            args += ["--max-deliveries", str(max_deliveries)]
        log = self.log_dir / f"coordinator-{len(self.processes)}-{name or 'random'}.log"
        with log.open("wb") as sink:
            popen = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=sink)
        process = CoordinatorProcess(popen, log, name)
        self.processes.append(process)
        return process

    def close(self) -> None:
        for process in self.processes:
            if process.alive:
                process.thaw()
                process.kill()


@dataclass
class Bus:
    """The test's own connection to the namespace the coordinators work on."""

    client: Client
    keys: Keys

    @property
    def signals(self) -> list[str]:
        return [self.keys.stream(shard, StreamKind.SIGNALS) for shard in self.keys.all_shards()]

    def stream(self, shard: int, kind: StreamKind) -> str:
        return self.keys.stream(shard, kind)

    async def publish(self, envelopes: Sequence[Envelope], chunk: int = 100) -> None:
        publisher = Publisher(self.client, self.keys)
        for i in range(0, len(envelopes), chunk):
            await publisher.publish_many(envelopes[i : i + chunk])

    async def check(self, published: Sequence[Envelope]) -> Report:
        return await check(self.client, self.keys, list(published))

    async def stream_lengths(self, kind: StreamKind) -> int:
        pipe = self.client.pipeline(transaction=False)
        for shard in self.keys.all_shards():
            pipe.xlen(self.keys.stream(shard, kind))
        return sum(int(n) for n in await pipe.execute())

    async def applied(self) -> int:
        """Findings the coordinators have committed (the findings streams hold nothing else)."""
        return await self.stream_lengths(StreamKind.FINDINGS)

    async def applied_at_least(self, count: int) -> bool:
        return await self.applied() >= count

    async def pending_by_consumer(self, streams: Sequence[str] | None = None) -> dict[str, int]:
        """Entries each consumer of the coordinator group holds, summed over the shards (or ``streams``)."""
        totals: dict[str, int] = {}
        for stream in streams or self.signals:
            summary = await self._xpending(stream)
            for consumer in (summary or {}).get("consumers") or ():
                name = _text(consumer["name"])
                totals[name] = totals.get(name, 0) + int(consumer["pending"])
        return totals

    async def group_pending(self) -> int:
        total = 0
        for stream in self.signals:
            summary = await self._xpending(stream)
            total += int(summary["pending"]) if summary else 0
        return total

    async def held(self, name: str, streams: Sequence[str] | None = None) -> dict[str, list[str]]:
        """The ids ``name`` has read and not yet committed, per signals stream (only non-empty ones)."""
        out: dict[str, list[str]] = {}
        for stream in streams or self.signals:
            try:
                rows: list[Any] = await self.client.xpending_range(
                    stream, GROUP, min="-", max="+", count=100_000, consumername=name
                )
            except redis.exceptions.ResponseError:
                continue  # NOGROUP: no coordinator has started on this shard yet
            if rows:
                out[stream] = [_text(row["message_id"]) for row in rows]
        return out

    async def quiet(self) -> bool:
        """Nothing pending and nothing undelivered in any signals stream: everything was applied."""
        for stream in self.signals:
            summary = await self._xpending(stream)
            if summary is None:
                if await self.client.xlen(stream):
                    return False  # entries, and no coordinator has created its group yet
                continue
            if int(summary["pending"]):
                return False
            last: Any = await self.client.xrevrange(stream, count=1)
            if last and _id_key(_text(last[0][0])) > _id_key(await self._last_delivered(stream)):
                return False
        return True

    async def consumers(self) -> dict[str, int]:
        """Every consumer name known to the coordinator group on any shard, with its pending count."""
        names: dict[str, int] = {}
        for stream in self.signals:
            try:
                rows: list[Any] = await self.client.xinfo_consumers(stream, GROUP)
            except redis.exceptions.ResponseError:
                continue
            for row in rows:
                name = _text(row["name"])
                names[name] = names.get(name, 0) + int(row["pending"])
        return names

    async def titles_of(self, stream: str, ids: Sequence[str]) -> list[str]:
        """The finding titles of the given entries (entries that are not findings are left out)."""
        titles = []
        for entry_id in ids:
            rows = await self.client.xrange(stream, min=entry_id, max=entry_id)
            if rows and rows[0][1]:
                envelope = decode(rows[0][1].get(b"data"))
                if isinstance(envelope.payload, Finding):
                    titles.append(envelope.payload.title)
        return titles

    async def lease(self, shard: int) -> bytes | None:
        value: Any = await self.client.get(self.keys.state(shard, "lease"))
        return bytes(value) if value is not None else None

    async def lease_holders(self) -> list[str | None]:
        """The name of each shard's lease holder (a token is the holder's name, ``:``, a random part)."""
        leases = [await self.lease(shard) for shard in self.keys.all_shards()]
        return [lease.decode().rpartition(":")[0] if lease else None for lease in leases]

    async def _xpending(self, stream: str) -> dict[str, Any] | None:
        try:
            summary: dict[str, Any] = await self.client.xpending(stream, GROUP)
        except redis.exceptions.ResponseError:
            return None  # NOGROUP
        return summary

    async def _last_delivered(self, stream: str) -> str:
        for group in await self.client.xinfo_groups(stream):
            if _text(group["name"]) == GROUP:
                return _text(group["last-delivered-id"])
        return "0-0"


@asynccontextmanager
async def open_bus(url: str) -> AsyncIterator[Bus]:
    client = await connect(Settings.from_url(url))
    try:
        yield Bus(client, await open_namespace(client, NAMESPACE, 8))
    finally:
        await client.aclose()


async def freeze_holding(
    bus: Bus,
    candidates: Sequence[CoordinatorProcess],
    seconds: float = 60.0,
    streams: Sequence[str] | None = None,
) -> tuple[CoordinatorProcess, dict[str, list[str]]]:
    """Stop (SIGSTOP) one of ``candidates`` while it holds a batch it read and has not committed.

    Whoever shows entries in its pending list is stopped; once the kernel says it is stopped, the
    pending lists are read twice: the server has then run every command the process had sent, so a
    commit that was on its way has landed. If the process still holds entries, it is stopped between
    its read and its commit, and stays so: the caller decides its fate. Otherwise it is resumed and the
    next chance is taken. Returns the process and what it holds (ids per signals stream).

    Only a batch with at least one finding counts (a batch of nothing but TICK entries proves little).
    ``streams`` restricts the watch to some signals streams.
    """
    by_name = {process.name: process for process in candidates}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    next_drained_check = loop.time() + 1.0
    while loop.time() < deadline:
        pending = await bus.pending_by_consumer(streams)
        victim = next(
            (by_name[n] for n, count in pending.items() if count and n in by_name and by_name[n].alive),
            None,
        )
        if victim is None:
            if loop.time() >= next_drained_check:
                if await bus.quiet():
                    raise AssertionError("the backlog was drained before a coordinator was caught holding it")
                next_drained_check = loop.time() + 0.2
            await asyncio.sleep(0.002)
            continue
        await victim.freeze()
        await bus.held(victim.name, streams)
        held = await bus.held(victim.name, streams)
        if held and await _holds_findings(bus, held):
            return victim, held
        victim.thaw()
    raise AssertionError(f"no coordinator was caught holding a batch within {seconds}s")


async def _holds_findings(bus: Bus, held: dict[str, list[str]]) -> bool:
    for stream, ids in held.items():
        if await bus.titles_of(stream, ids):
            return True
    return False


def _process_state(pid: int) -> str:
    """The state letter of ``/proc/<pid>/stat`` (``T`` when stopped); ``X`` once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "X"
    return stat.rpartition(")")[2].split()[0]


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
