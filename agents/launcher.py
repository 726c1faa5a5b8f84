"""The launcher: the agent pool and task queue of seed 000's future extensions.

Launchers read LAUNCH requests (:class:`bus.directives.LaunchRequest`) from every shard's ``tasks``
stream as the consumer group ``launchers``, so any number of them, on any machines, share the work. Each
request becomes an agent, started wrapped by ``subagent-bus adapter run`` (:mod:`agents.spawn`).

At most ``max_parallel`` agents run at once (an agent that waits for its blocking delegates lends them its
slot, see :mod:`agents.delegate_wait`). A launcher reads no more requests than it has free slots,
so the others stay in the stream for any launcher, and it acknowledges a request only once its agent
started: a launcher killed before that leaves the request pending, and another launcher (or its own
restart) starts it. So a request is started at least once: a launcher killed between starting an agent
and acknowledging its request (one round trip) leaves an agent running and a request read again. Its mark
in the log directory (``<request>.started``, written once the adapter started and removed once the
request is acknowledged) keeps a launcher on that directory from starting it again; one elsewhere does.
An acknowledgement refused because Redis is unreachable is sent again, and the request is not started again by
the same process. A request that cannot be started after ``max_attempts`` deliveries (at once when its command
line is too long) is dead-lettered with the reason, and so is one that expired before it could be started,
also while an earlier adapter of its agent ended (``expires_at``, which the coordinator sets to when it will
declare the agent lost and retry it: started then, the agent would run twice). A request waits for that
adapter (up to ten seconds) in a task of its own, holding its agent's slot, while the launcher starts other
requests. Stopping a launcher with SIGTERM, SIGINT or SIGHUP stops the adapters it started, which stop their
agents (a second signal has them kill an agent that ignores it), and it starts no more: the requests it read
and had not started yet stay pending, for another launcher. A launcher killed with SIGKILL leaves its agents
running; the next launcher on the same log directory counts them against its ``max_parallel`` until they end
(:mod:`agents.orphans`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple

from agents import launch_marks
from agents.delivery import split_template
from agents.launch_marks import Mark
from agents.launch_refusals import ExpiryClock, expiry, refusal
from agents.orphans import Orphan, Proc, forget, left_running
from agents.spawn import PLACEHOLDERS, Spawner, adapter_command, file_stem
from bus.connection import Client
from bus.consumer import Ack, Consumer, Delivery
from bus.directives import LaunchRequest
from bus.errors import BusError, CommandFailed, ConnectionFailed
from bus.keys import ConsumerGroup, Keys, StreamKind
from bus.metrics import LauncherMetrics
from bus.settings import Settings
from bus.waits import wait_for

__all__ = ["GROUP", "PLACEHOLDERS", "Launcher", "LauncherOptions", "adapter_command", "file_stem"]

GROUP: Final = ConsumerGroup.LAUNCHERS.value
_POLL_S: Final = 0.2
_PREVIOUS_END_S: Final = 10.0
log = logging.getLogger("subagent_bus.launcher")


@dataclass(frozen=True)
class LauncherOptions:
    template: list[str]
    """The agent command, already split; see :data:`PLACEHOLDERS`."""
    max_parallel: int = 4
    name: str = field(default_factory=lambda: f"launcher-{socket.gethostname()}-{os.getpid()}")
    burst: bool = False
    prompt_dir: Path = Path(".subagent-bus/prompts")
    log_dir: Path = Path(".subagent-bus/logs")
    adapter_args: tuple[str, ...] = ()
    """Extra options for each ``adapter run`` (--deliver, --workdir, --heartbeat...)."""
    reclaim_idle_ms: int = 30_000
    max_attempts: int = 3
    adapter_url: str | None = None
    """The URL the adapters use, when they connect as another user (the adapter ACL role)."""

    @staticmethod
    def parse_template(template: str) -> list[str]:
        return split_template(template, PLACEHOLDERS)


class _Waiting(NamedTuple):
    """A request read while an earlier adapter of its agent runs here: it waits in a task of its own for
    that one to end, and the launcher goes on with other requests meanwhile."""

    consumer: Consumer
    delivery: Delivery
    request: LaunchRequest
    group_id: str


class Launcher:
    """Starts the agents of launch requests, at most ``max_parallel`` at a time; counts in ``metrics``."""

    def __init__(
        self,
        client: Client,
        keys: Keys,
        settings: Settings,
        options: LauncherOptions,
        metrics: LauncherMetrics | None = None,
    ) -> None:
        if options.max_parallel < 1:
            raise ValueError("max_parallel must be at least 1")
        self.client = client
        self.keys = keys
        self.settings = settings
        self.options = options
        self.metrics = metrics or LauncherMetrics()
        self.launched = 0
        self.dead_lettered = 0
        """Requests this launcher read and could not start (bad, expired, failed too often)."""
        self.running: dict[str, asyncio.subprocess.Process] = {}
        self._requests: dict[str, str] = {}
        """The request each running agent was started for."""
        self._clock = ExpiryClock(client, keys)
        self.adopted: dict[str, Orphan] = {}
        """Agents a killed launcher left running (:mod:`agents.orphans`): each counts like one started
        here."""
        self._me = Proc.of(os.getpid())
        self._spawner = Spawner(
            template=options.template,
            prompt_dir=options.prompt_dir,
            log_dir=options.log_dir,
            adapter_args=options.adapter_args,
            url=options.adapter_url or settings.url,
            namespace=settings.namespace,
            cluster=settings.cluster,
            launcher=self._me,
        )
        self.metrics.agents.set_function(self.busy)
        self._changed = asyncio.Event()
        self._consumers = [
            Consumer(
                client,
                keys.stream(shard, StreamKind.TASKS),
                GROUP,
                options.name,
                batch=1,
                block_ms=0,
                reclaim_idle_ms=options.reclaim_idle_ms,
                max_deliveries=options.max_attempts,
            )
            for shard in keys.all_shards()
        ]
        self._next = 0
        self._waiters: set[asyncio.Task[None]] = set()
        # Requests whose agent this process started but whose acknowledgement failed (Redis lost):
        # acknowledged again before anything else, and never started a second time by this process.
        self._unacked: dict[tuple[str, str], tuple[Consumer, Delivery]] = {}
        self._waiting: dict[str, str] = {}
        """Agents whose request waits for an earlier adapter of theirs to end, by agent id: the request's id.
        Each holds its agent's slot until it is judged."""
        self._ready: list[tuple[_Waiting, bool]] = []
        """Those whose wait is over, with whether the earlier adapter ended: judged by the read loop."""

    def busy(self) -> int:
        """The slots taken: agents running, started here or adopted, but those waiting for their blocking
        delegates (:mod:`agents.delegate_wait`), which lend them their slots."""
        idle, waiting = self._spawner.idle_file, self._waiting
        return sum(
            agent_id in waiting or not idle(agent_id).exists()
            for agent_id in {*self.running, *self.adopted, *waiting}
        )

    def _alive(self) -> int:
        """The adapters running, waiting agents' too, and the requests that wait for one to end."""
        return len({*self.running, *self.adopted, *self._waiting})

    async def run(self, stop: asyncio.Event) -> int:
        """Launch until ``stop`` (with ``burst``: until no request is left and every agent ended)."""
        for consumer in self._consumers:
            await consumer.ensure_group("0")
        self._adopt()
        try:
            while not stop.is_set():
                try:
                    found = await self._fill_slots(stop)
                    if self.options.burst and not found and not self._alive() and await self._drained():
                        break
                except (ConnectionFailed, CommandFailed) as exc:  # the agents keep running; the queue waits
                    await self._retry(exc, stop)
                    continue
                if not found or self.busy() >= self.options.max_parallel:
                    self._changed.clear()
                    await wait_for(self._changed, _POLL_S)
        finally:
            await self._shutdown()
        return self.launched

    async def _retry(self, exc: ConnectionFailed | CommandFailed, stop: asyncio.Event) -> None:
        """After an outage, or a server that lost the tasks streams or their group (restarted without its
        data, failed over): the groups are made again, as the coordinators and adapters do."""
        lost = isinstance(exc, CommandFailed)
        if lost and "NOGROUP" not in str(exc):
            raise exc
        log.warning("%s; %s", exc, "creating the consumer group again" if lost else "retrying")
        await wait_for(stop, 1.0)
        if lost:
            with contextlib.suppress(ConnectionFailed):  # then the next round fails and retries
                for consumer in self._consumers:
                    await consumer.ensure_group("0")

    def _adopt(self) -> None:
        for path, orphan in left_running(self.options.log_dir, self._me).items():
            self.adopted[orphan.agent_id] = orphan
            message = (
                f"adopted {orphan.agent_id} (group {orphan.group_id}, adapter pid {orphan.adapter.pid}), "
                "left running by a launcher that ended: it counts against --max-parallel until it ends"
            )
            log.info(message, extra={"agent_id": orphan.agent_id, "group_id": orphan.group_id})
            self._watch(self._ended(path, orphan))

    async def _ended(self, path: Path, orphan: Orphan) -> None:
        """Wait for an adopted agent's adapter to end."""
        while orphan.adapter.alive():  # noqa: ASYNC110 - not this process's child: nothing else to wait on
            await asyncio.sleep(_POLL_S)
        forget(path)
        if self.adopted.get(orphan.agent_id) is orphan:
            del self.adopted[orphan.agent_id]
            self._spawner.idle_file(orphan.agent_id).unlink(missing_ok=True)  # its adapter was killed
        extra = {"agent_id": orphan.agent_id, "group_id": orphan.group_id}
        log.info(f"adopted agent {orphan.agent_id} ended", extra=extra)
        self._changed.set()

    def _watch(self, wait: Coroutine[None, None, None]) -> None:
        waiter = asyncio.create_task(wait)
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)

    async def _drained(self) -> bool:
        for consumer in self._consumers:
            if await consumer.pending_count():
                return False
        return True

    async def _fill_slots(self, stop: asyncio.Event) -> bool:
        """Read and start requests while slots are free, until ``stop``; whether any request was read."""
        await self._acknowledge_started()
        found = await self._judge_ready(stop)
        for _ in range(len(self._consumers)):
            free = self.options.max_parallel - self.busy()
            if free <= 0 or stop.is_set():
                break
            consumer = self._consumers[self._next]
            self._next = (self._next + 1) % len(self._consumers)
            consumer.batch = free
            deliveries = await consumer.read()
            found = found or bool(deliveries)
            for delivery in deliveries:  # settled one by one: a started agent is acknowledged at once
                if (consumer.stream, delivery.entry_id) in self._unacked:  # its acknowledgement was lost
                    decided: tuple[Ack, str | None] | None = (Ack.ACK, None)
                elif stop.is_set():  # signalled during a start: its agent would only be stopped at once
                    continue  # left pending, for any launcher to take over
                else:
                    decided = await self._launch(consumer, delivery)
                if decided is not None:  # else it waits for an earlier adapter of its agent to end
                    await self._settle(consumer, delivery, *decided)
        return found

    async def _settle(self, consumer: Consumer, delivery: Delivery, ack: Ack, reason: str | None) -> None:
        key = (consumer.stream, delivery.entry_id)
        if ack is Ack.ACK:
            self._unacked[key] = (consumer, delivery)
        elif ack is Ack.DEAD:
            self.dead_lettered += 1
        await consumer.settle([(delivery, ack, reason)])
        if self._unacked.pop(key, None) is not None or ack is Ack.DEAD:
            self._acknowledged(delivery)

    async def _judge_ready(self, stop: asyncio.Event) -> bool:
        """Judge the requests whose wait for an earlier adapter of their agent is over (on ``stop`` they are
        left pending, for any launcher to take over); whether there were any."""
        found = bool(self._ready)
        while self._ready and not stop.is_set():
            waiting, previous_ended = self._ready.pop(0)
            try:
                decided = await self._judged(
                    waiting.delivery, waiting.request, waiting.group_id, previous_ended
                )
                await self._settle(waiting.consumer, waiting.delivery, *decided)
            finally:  # also when Redis is lost: the request is still pending, and is read again
                del self._waiting[waiting.request.new_agent_id]
        return found

    async def _acknowledge_started(self) -> None:
        for key, (consumer, delivery) in list(self._unacked.items()):
            await consumer.settle([(delivery, Ack.ACK, None)])
            del self._unacked[key]
            self._acknowledged(delivery)

    def _acknowledged(self, delivery: Delivery) -> None:
        """A request is acknowledged (started) or dead-lettered: no launcher will read it again, and its
        mark goes (a dead letter's was left by a start that never came)."""
        envelope = delivery.envelope
        if envelope is not None and isinstance(envelope.payload, LaunchRequest):
            mark, *earlier = self._spawner.started_files(envelope.payload, envelope.group_id)
            if not mark.exists():  # not started by this version: an earlier one's mark stood for it
                for old in earlier:
                    forget(old)
            forget(mark)

    async def _launch(self, consumer: Consumer, delivery: Delivery) -> tuple[Ack, str | None] | None:
        """What to do with one request; None when it waits for an earlier adapter of its agent to end, or
        for a start under way to say it started."""
        envelope = delivery.envelope
        self.metrics.read(envelope.type.value if envelope is not None else "undecodable")
        # Before any refusal: a request read again after it expired, or once too often, whose agent was
        # started is done, not one that could not start.
        if envelope is not None and isinstance(envelope.payload, LaunchRequest):
            # Claimed back while it waits here (held, but idle past --reclaim-ms once), or a start under
            # way: left pending, read again after --reclaim-ms (by then the start says it started, or not).
            waits_here = self._waiting.get(envelope.payload.new_agent_id) == envelope.payload.request_id
            said = Mark.STARTING if waits_here else self._started(envelope.payload, envelope.group_id)
            if said is not Mark.NONE:
                return (Ack.ACK, None) if said is Mark.STARTED else None
        refused = refusal(delivery)
        if refused is not None or envelope is None or not isinstance(envelope.payload, LaunchRequest):
            return _dead(delivery, refused)
        request, agent_id = envelope.payload, envelope.payload.new_agent_id
        if agent_id in self._waiting:
            return (
                Ack.RETRY,
                f"agent {agent_id} waits here to be started for request {self._waiting[agent_id]}",
            )
        if agent_id in self.running or agent_id in self.adopted:
            self._waiting[agent_id] = request.request_id
            self._watch(self._wait_previous(_Waiting(consumer, delivery, request, envelope.group_id)))
            return None
        return await self._judged(delivery, request, envelope.group_id, previous_ended=True)

    async def _wait_previous(self, waiting: _Waiting) -> None:
        # Held fresh meanwhile: idle for --reclaim-ms, the request would be taken over by another launcher,
        # which could start the agent beside the adapter this one waits for.
        holding = asyncio.create_task(self._hold(waiting.consumer, waiting.delivery))
        try:
            ended = await self._previous_ended(waiting.request.new_agent_id)
        finally:
            holding.cancel()
        self._ready.append((waiting, ended))
        self._changed.set()

    async def _hold(self, consumer: Consumer, delivery: Delivery) -> None:
        while True:
            await asyncio.sleep(max(self.options.reclaim_idle_ms / 3000, 0.01))
            with contextlib.suppress(BusError):  # the next one tries again; a lost one is claimed back
                await consumer.hold(delivery)

    async def _judged(
        self, delivery: Delivery, request: LaunchRequest, group_id: str, previous_ended: bool
    ) -> tuple[Ack, str | None]:
        # After a wait for an earlier adapter (seconds, maybe), by the time then: expired, its agent is the
        # coordinator's to retry.
        if (expired := expiry(request, await self._clock.now(request, group_id))) is not None:
            return _dead(delivery, expired)
        if not previous_ended:
            return Ack.RETRY, f"agent {request.new_agent_id} still runs here under another request"
        return await self._start(delivery, request, group_id)

    async def _start(
        self, delivery: Delivery, request: LaunchRequest, group_id: str
    ) -> tuple[Ack, str | None]:
        """Start the request's agent: acknowledged once started, else tried again or dead-lettered."""
        try:
            process, path = await self._spawner.start(request, group_id)
        except (OSError, ValueError) as exc:
            reason = f"cannot start agent {request.new_agent_id}: {exc}"
            too_long = isinstance(exc, OSError) and exc.errno == errno.E2BIG
            if too_long and any("{prompt}" in arg for arg in self.options.template):
                reason += " (the task is too long for {prompt}: pass {prompt_file} instead)"
            log.warning(reason, extra=_ids(request, group_id))
            self.metrics.launch_failures.inc()
            if too_long or delivery.deliveries >= self.options.max_attempts:
                return Ack.DEAD, reason  # the same request would be too long again
            return Ack.RETRY, reason
        message = f"launched {request.new_agent_id} (group {group_id}, pid {process.pid}, log {path})"
        log.info(message, extra={**_ids(request, group_id), "pid": process.pid})
        self.launched += 1
        self.running[request.new_agent_id] = process
        self._requests[request.new_agent_id] = request.request_id
        self.metrics.launched.inc()
        self._watch(self._reap(request.new_agent_id, group_id, process))
        return Ack.ACK, None

    def _started(self, request: LaunchRequest, group_id: str) -> Mark:
        """Whether the request's agent was started: it runs here for it (the request read again), or a
        launcher on this log directory killed before it acknowledged the request started it, or is starting
        it (its mark, :mod:`agents.launch_marks`)."""
        if self._requests.get(request.new_agent_id) == request.request_id:
            return Mark.STARTED
        mark, *earlier = self._spawner.started_files(request, group_id)
        said = launch_marks.read(mark)
        if said is Mark.NONE and any(old.exists() for old in earlier):
            said = Mark.STARTED
        if said is Mark.STARTED:
            why = "was started for this request by a launcher that ended before acknowledging it: not started again"
        elif said is Mark.STARTING:
            why = f"is being started for this request (its mark {mark} is held): looked at again after --reclaim-ms"
        else:
            return said
        log.info(f"{request.new_agent_id} {why}", extra=_ids(request, group_id))
        return said

    async def _previous_ended(self, agent_id: str) -> bool:
        """Whether no earlier adapter of this agent runs here, after a while for one to end (a resume
        launch answers the exit its previous adapter published, and that adapter ends moments later)."""
        previous = self.running.get(agent_id)
        if previous is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(previous.wait(), _PREVIOUS_END_S)
            return previous.returncode is not None
        for _ in range(int(_PREVIOUS_END_S / _POLL_S)):
            if agent_id not in self.adopted:
                return True
            await asyncio.sleep(_POLL_S)
        return agent_id not in self.adopted

    async def _reap(self, agent_id: str, group_id: str, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if self.running.get(agent_id) is process:  # not the same agent started again since
            del self.running[agent_id]
            del self._requests[agent_id]
            forget(self._spawner.pid_file(agent_id))
            self._spawner.idle_file(agent_id).unlink(missing_ok=True)  # its adapter was killed
        extra = {"agent_id": agent_id, "group_id": group_id, "exit_code": code}
        log.info(f"agent {agent_id} ended with exit status {code}", extra=extra)
        self._changed.set()

    def terminate(self) -> None:
        """Pass SIGTERM on to the adapters still running: each stops its agent on the first, and kills
        it on a second (the launcher's own second signal sends that)."""
        for process in list(self.running.values()):
            if process.returncode is None:
                process.terminate()
        for orphan in list(self.adopted.values()):
            orphan.adapter.terminate()

    async def _shutdown(self) -> None:
        """Stop the adapters still running and wait for them."""
        self.terminate()
        if self._waiters:
            await asyncio.gather(*list(self._waiters), return_exceptions=True)


def _dead(delivery: Delivery, reason: str | None) -> tuple[Ack, str | None]:
    log.warning("not started, dead-lettered: %s (entry %s)", reason, delivery.entry_id)
    return Ack.DEAD, reason


def _ids(request: LaunchRequest, group_id: str) -> dict[str, str]:
    """The fields of a log line about one request."""
    return {"agent_id": request.new_agent_id, "group_id": group_id, "request_id": request.request_id}
