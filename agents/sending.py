"""How an adapter's batches reach the server: one in flight at a time, retried while the server is
unreachable, until a stop signal gives up (or, for a command, until its patience runs out).

An agent's output is not dropped while Redis is briefly away: a batch the server did not take is sent
again, with backoff, for as long as it takes. Only a stop request that cannot be passed on to an agent
(none is left, or it is the second signal) calls :meth:`Sender.give_up`; from then on a batch the server
does not take at the next attempt is dropped, counted, and :class:`GaveUp` raised, so that the adapter
can say what was not published and exit. A command (``findings add``, ``import-findings``) is no adapter
that must not lose what its agent said: given ``patience``, it raises :class:`NotTaken` once a batch has
waited that long, rather than hang while the server is away or refuses writes for now (OOM, READONLY).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from bus import wire
from bus.connection import Client
from bus.envelope import EnvelopeType
from bus.errors import BusError, ConnectionFailed
from bus.waits import backoff, wait_for

__all__ = ["GIVE_UP_GRACE_S", "GaveUp", "NotTaken", "Sender"]

GIVE_UP_GRACE_S: Final = 2.0
"""How long an attempt under way when :meth:`Sender.give_up` is called may still take: a healthy server
answers in far less, a hung one (no socket timeout) would hold the adapter for ever."""


class GaveUp(Exception):
    """Publishing was given up after a stop signal while the server did not take a batch."""

    def __init__(self, message: str, sig: int, unanswered: str = "") -> None:
        super().__init__(message)
        self.signal = sig
        self.kept: str | None = None
        """Where the unpublished output still is, when it is not lost (a watched file)."""
        self.unanswered = unanswered
        """The envelopes (``1 PROGRESS``; heartbeats aside) of the batch a server that did not answer was
        sent last: it may still apply them, when it runs again."""

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended."""
        return 128 + self.signal


class NotTaken(BusError):
    """A batch was not on the server within the sender's patience: it may or may not be published."""


class Sender:
    """Batches for the stream ``key``'s server, in the order they are sent, one in flight at a time."""

    def __init__(
        self, client: Client, key: str, log: Callable[[str], None], *, patience: float | None = None
    ) -> None:
        self.key = key
        self.patience = patience
        """Seconds a batch may take to reach the server before :class:`NotTaken`; None: for ever."""
        self.log = log
        self.unsent: Counter[EnvelopeType] = Counter()
        """Envelopes dropped when publishing was given up, by type (heartbeats are not counted)."""
        self.confirmed: dict[str, bytes] = {}
        """The state keys written with batches the server confirmed, each as last written."""
        self._pipe = wire.Pipe(client, key.encode())
        self._lock = asyncio.Lock()
        self._in_flight: tuple[list[EnvelopeType], Mapping[str, bytes]] = ([], {})
        self._stop_signal: int | None = None
        self._given_up = asyncio.Event()
        self._attempt: asyncio.Timeout | None = None
        self._sent_at = 0.0

    @property
    def given_up(self) -> bool:
        return self._stop_signal is not None

    async def send(
        self,
        commands: Sequence[wire.Command],
        types: list[EnvelopeType],
        state: Mapping[str, bytes],
        *,
        wait: bool,
    ) -> None:
        """Send a batch (in MULTI/EXEC with ``state``) once the one before it is on the server; with
        ``wait``, return once this one is too. ``types``: the envelopes it carries."""
        async with self._lock:
            try:
                await self._settle()
            except BaseException:  # GaveUp, or cancelled while waiting to retry
                if self.given_up:
                    self._drop(types)  # never sent
                raise
            self._in_flight = (types, state)
            self._sent_at = asyncio.get_running_loop().time()
            with contextlib.suppress(ConnectionFailed):  # the batch stays in flight, settled later
                await self._pipe.send(commands, transaction=bool(state))
            if wait:
                await self._settle()

    async def flush(self) -> None:
        """Wait until the batch in flight, if any, is on the server."""
        async with self._lock:
            await self._settle()

    def give_up(self, sig: int) -> None:
        """Stop retrying, because of the stop signal ``sig``: a batch the server does not take at the
        next attempt is dropped and :class:`GaveUp` raised. An attempt under way has
        :data:`GIVE_UP_GRACE_S` left; one waiting to retry tries again at once."""
        if self._stop_signal is None:
            self._stop_signal = sig
        self._given_up.set()
        if self._attempt is not None:
            self._attempt.reschedule(asyncio.get_running_loop().time() + GIVE_UP_GRACE_S)

    def unpublished(self) -> str:
        """What was dropped or is still unconfirmed, heartbeats aside: ``2 envelope(s) (1 PROGRESS,
        1 AGENT_EXITED)``."""
        counts = self.unsent + Counter(t for t in self._in_flight[0] if t is not EnvelopeType.HEARTBEAT)
        kinds = _kinds(counts)
        return f"{counts.total()} envelope(s)" + (f" ({kinds})" if kinds else "")

    def _drop(self, types: list[EnvelopeType]) -> None:
        self.unsent.update(t for t in types if t is not EnvelopeType.HEARTBEAT)

    async def _settle(self) -> None:
        delays = backoff()
        while True:
            try:
                async with asyncio.timeout(self._cutoff()) as attempt:
                    self._attempt = attempt
                    try:
                        await self._pipe.settle()
                    finally:
                        self._attempt = None  # a finished Timeout cannot be rescheduled
            except (ConnectionFailed, TimeoutError) as exc:
                if self._stop_signal is not None:
                    sent = _kinds(Counter(t for t in self._in_flight[0] if t is not EnvelopeType.HEARTBEAT))
                    await self._forget()
                    why = str(exc) or f"no answer within {GIVE_UP_GRACE_S:g}s"
                    unanswered = sent if isinstance(exc, TimeoutError) else ""
                    raise GaveUp(f"the bus is unreachable: {why}", self._stop_signal, unanswered) from exc
                delay = next(delays)
                if self.patience is not None and self._since_sent() + delay >= self.patience:
                    await self._forget()
                    why = str(exc) or "no answer"
                    raise NotTaken(
                        f"the server did not take the batch within {self.patience:g}s ({why})"
                    ) from exc
                self.log(f"publishing to {self.key} failed ({exc}); retrying in {delay:.1f}s")
                await wait_for(self._given_up, delay)
            else:
                self.confirmed.update(self._in_flight[1])
                self._in_flight = ([], {})
                return

    def _cutoff(self) -> float | None:
        """When the attempt under way is cut short: the stop grace, or what is left of the patience."""
        now = asyncio.get_running_loop().time()
        cutoffs = [] if self._stop_signal is None else [now + GIVE_UP_GRACE_S]
        if self.patience is not None:
            cutoffs.append(self._sent_at + self.patience)
        return min(cutoffs, default=None)

    def _since_sent(self) -> float:
        return asyncio.get_running_loop().time() - self._sent_at

    async def _forget(self) -> None:
        """Drop the batch in flight (counted as unsent)."""
        self._drop(self._in_flight[0])
        self._in_flight = ([], {})
        await self._pipe.close()


def _kinds(counts: Counter[EnvelopeType]) -> str:
    """``1 PROGRESS, 1 AGENT_EXITED``."""
    return ", ".join(f"{n} {kind.value}" for kind, n in counts.items())
