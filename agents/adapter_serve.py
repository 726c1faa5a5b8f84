"""Running an adapter command's body on the bus: connect (with ``--wait-for-redis``, until the server
answers or a stop signal ends the wait), run the body, close. Bus and file errors become a clean exit with
a message, and a body that gave up publishing at a stop signal is reported as what it left unpublished.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable

from agents.adapter import AgentBus, GaveUp, connect_bus
from agents.options import Common
from bus.cli_connection import run_command
from bus.errors import ConnectionFailed, CredentialsRefused
from bus.metrics import AdapterMetrics
from bus.settings import Settings
from bus.stop_signals import STOP_SIGNALS, handled_stop_signals
from bus.waits import backoff, wait_for

__all__ = ["serve"]

_log = logging.getLogger("subagent_bus.adapter")


def serve(settings: Settings, common: Common, body: Callable[[AgentBus], Awaitable[int]]) -> int:
    """Connect, run ``body``, close; bus and file errors become a clean exit with a message."""
    common.ops.setup_logging(agent_id=common.agent_id, group_id=common.group_id)
    logging.getLogger("bus.consumer").setLevel(logging.ERROR)  # failures are reported by the adapter
    metrics = common.ops.serve(lambda: AdapterMetrics(common.agent_id, common.group_id))

    def connecting() -> Awaitable[AgentBus]:
        return connect_bus(
            settings, common.agent_id, common.group_id, workdir=common.workdir, metrics=metrics
        )

    async def main() -> int:
        bus = await (_waiting_for(connecting) if common.wait_for_redis else connecting())
        if isinstance(bus, int):
            return bus  # stopped while it waited: nothing was started
        bus.log, bus.warn = _log.info, _log.warning
        try:
            return await body(bus)
        except GaveUp as exc:
            bus.warn(_gave_up(bus, exc))
            return exc.exit_status
        finally:
            await bus.client.aclose()

    return run_command(main(), also=(OSError, ValueError))


async def _waiting_for(connect: Callable[[], Awaitable[AgentBus]]) -> AgentBus | int:
    """``connect()`` until the server answers (``--wait-for-redis``): a launched adapter that exited at
    an outage would leave its acknowledged request's agent never started. A stop signal ends the wait
    (the exit status). One that comes during a try that connects ends it too, but for a launcher's
    adapter, which has the stop signals blocked: there it is left pending for the command's own handler,
    which reports the agent stopped before it started."""
    loop, stopped = asyncio.get_running_loop(), asyncio.Event()
    signals: list[int] = []

    def on_signal(sig: int) -> None:
        signals.append(sig)
        stopped.set()

    handled = handled_stop_signals()
    for sig in handled:
        loop.add_signal_handler(sig, on_signal, sig)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        bus = await _connected(connect, stopped)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a launcher's adapter: blocked again
        for sig in handled:
            loop.remove_signal_handler(sig)
    if signals and bus is not None and not set(handled) <= mask:
        await bus.client.aclose()  # run by hand: nothing would take the signal up, so it stops here
        bus = None
    if bus is None:
        return 128 + signals[0]
    for number in signals:  # blocked (a launcher's adapter): pending until the command's handler
        os.kill(os.getpid(), number)
    return bus


async def _connected(connect: Callable[[], Awaitable[AgentBus]], stopped: asyncio.Event) -> AgentBus | None:
    """``connect()``, tried again after a wait that doubles, until it connects or ``stopped``."""
    delays = backoff()
    while True:
        try:
            return await connect()  # a try is bounded by the socket timeout
        except CredentialsRefused:
            raise  # no outage: waiting would not end it
        except ConnectionFailed as exc:
            if stopped.is_set():
                return None
            delay = next(delays)
            _log.warning("%s; retrying in %.1fs", exc, delay)
            if await wait_for(stopped, delay):
                return None


def _gave_up(bus: AgentBus, exc: GaveUp) -> str:
    """What a stop signal left unpublished, and where it is (if anywhere)."""
    # Counted: what was read and parsed. Not counted, and lost with them: the output after it that was not
    # read yet (reading waits while publishing does) and the agent's end, which was never published.
    fate = (
        "they are lost, and so are any output of the agent's not read yet and the report of its end"
        if exc.kept is None
        else exc.kept
    )
    if exc.unanswered:  # its request may sit in the server's socket buffer, applied once it runs again
        fate += f" (the server, which did not answer, may still apply the {exc.unanswered} it was sent last)"
    notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
    return (
        f"{signal.Signals(exc.signal).name}: gave up publishing: {bus.sender.unpublished()} of agent "
        f"{bus.agent_id} in group {bus.group_id} were not published: {fate}{notes} ({exc})"
    )
