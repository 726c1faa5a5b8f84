"""One output of an agent (a file, a process's stdout, a pipe) parsed into envelopes.

Their ids are ``deterministic_id(agent_id, source, offset)``: the same bytes always give the same ids, so
anything published twice is recognised downstream.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from agents.items import TurnFailedItem
from agents.lines import MAX_TAG_LINE
from agents.lost import AWAITED, failed_turn, lost_signal
from agents.parser import DEFAULT_MAX_BLOCK_BYTES, ErrorItem, Item, SignalItem
from agents.transcript import AnyParser, Format
from agents.transcript_format import LINE_FORMATS
from bus.envelope import Envelope, EnvelopeType, Payload, deterministic_id
from bus.signals import ClarificationNeeded, StopReason, StopWork, recap_key

if TYPE_CHECKING:
    from agents.adapter import AgentBus

__all__ = ["OutputStream", "completes"]

_WAITS: Final = frozenset({EnvelopeType.STOP_WORK, EnvelopeType.CLARIFICATION_NEEDED})
"""The signals by which an agent says it waits for an answer (a stop that reports completion aside)."""
_COMPLETING: Final = frozenset({EnvelopeType.COMPLETION_REPORT, EnvelopeType.RESULT})


def completes(envelope: Envelope) -> bool:
    """Whether ``envelope`` says the agent finished its work: a completion report, a result report, or a
    ``STOP_WORK`` whose ``stop_reason`` is ``completion`` (which the coordinator takes as a completion)."""
    if envelope.type in _COMPLETING:
        return True
    payload = envelope.payload
    return isinstance(payload, StopWork) and payload.stop_reason is StopReason.COMPLETION


class OutputStream:
    """One output of an agent, parsed and turned into envelopes with deterministic ids.

    ``base``/``base_line`` place the first byte fed on the whole output (a file adapter that resumes
    mid-file); items before ``done`` (an offset) were published before and are skipped; ``reported``: a
    result report came before ``base`` (see :mod:`agents.unread`). For JSONL output (a Claude Code
    transcript, Codex CLI's ``exec --json``), :attr:`restart` is the start of the first incomplete line:
    a fresh stream started there yields exactly the remaining items, since each line is parsed on its own.
    Plain text can only be re-parsed from its beginning (code fences around a report change its
    meaning), so there :attr:`restart` stays at ``base``, and a fresh stream given :attr:`pauses`
    pauses where this one did.
    """

    def __init__(
        self,
        bus: AgentBus,
        source: str,
        fmt: Format = Format.AUTO,
        *,
        base: int = 0,
        base_line: int = 1,
        done: int = 0,
        reported: bool = False,
        session_id: str | None = None,
        max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
        pauses: Iterable[int] = (),
    ) -> None:
        self.bus = bus
        self.source = source
        self.parser = AnyParser(fmt, max_block_bytes=max_block_bytes, first_line=base_line, reported=reported)
        self.base = base
        self.base_line = base_line
        self.done = done
        self.fed = base
        """The offset after the last byte fed."""
        self._line = base_line
        self._line_start = (base, base_line)
        self._session_id = session_id
        self.pauses = list(pauses)
        """The offsets at which a pause ended a line at a closing tag (:meth:`settle`). A reading of the
        same bytes without those pauses would differ when the rest of the line made it longer than a
        tag line can be: a fresh stream given them pauses there too, wherever its chunks end."""
        self._replay = deque(p for p in self.pauses if p > base)
        self._paused: tuple[int, int] | None = None
        """The latest pause and the start of its line, until the line ends: a line that ends within
        :data:`MAX_TAG_LINE` bytes reads the same without it, and its pause is forgotten (so only pauses
        in lines longer than a tag line can be are kept)."""
        self.waits: list[str | None] = []
        """The questions and stops it held, read or lost (:data:`_WAITS`), and its failed turns: each
        :func:`recap_key`, None for an undated or lost one or a failed turn. The agent said it waits for an
        answer (unless it only recalled one)."""
        self._completed = False  # it held a completion report or a result report

    @property
    def format(self) -> Format:
        return self.parser.format

    @property
    def session_id(self) -> str | None:
        """The JSONL output's session id (what a resume command needs), once seen."""
        return self.parser.session_id or self._session_id

    @property
    def restart(self) -> tuple[int, int]:
        """(offset, line) where a fresh stream can take over from this one: in JSONL output, the start of
        the first incomplete JSONL line, or of the line of a section held until the agent's end
        (:mod:`agents.unread`), so that a fresh stream holds it again, or of the last assistant text
        since a ``result`` entry, so that a fresh stream knows the next result repeats it (the items
        of the lines read again were published: ``done`` skips them)."""
        if self.parser.format not in LINE_FORMATS:
            return self.base, self.base_line
        restart = self._line_start
        held, answered = self.parser.held, self.parser.answered_at
        if held is not None and held.reread_from is not None:
            restart = min(restart, (held.reread_from + self.base, held.line))
        if answered is not None:
            restart = min(restart, (answered[0] + self.base, answered[1]))
        return restart

    def feed(self, chunk: bytes) -> list[Envelope]:
        """The envelopes completed by the next bytes of output."""
        out: list[Envelope] = []
        while self._replay and self._replay[0] <= self.fed + len(chunk):
            cut = self._replay.popleft() - self.fed
            out += self._feed(chunk[:cut])
            self._paused = (self.fed, self._line_start[0])
            out += self._envelopes(self.parser.settle())
            chunk = chunk[cut:]
        return out + self._feed(chunk) if chunk else out

    def _feed(self, chunk: bytes) -> list[Envelope]:
        items = self.parser.feed(chunk)
        if self.bus.metrics is not None:
            self.bus.metrics.read_bytes.inc(len(chunk))
        newlines = chunk.count(b"\n")
        if newlines:
            if self._paused is not None:
                pause, start = self._paused
                if self.fed + chunk.find(b"\n") - start < MAX_TAG_LINE:
                    self.pauses.remove(pause)
                self._paused = None
            self._line += newlines
            self._line_start = (self.fed + chunk.rfind(b"\n") + 1, self._line)
        self.fed += len(chunk)
        return self._envelopes(items)

    def settle(self) -> list[Envelope]:
        """The output paused: the envelope of a signal whose closing tag ends it without a newline."""
        if self.parser.pausing:
            self.pauses.append(self.fed)
            self._paused = (self.fed, self._line_start[0])
        return self._envelopes(self.parser.settle())

    def close(self) -> list[Envelope]:
        """End of this output: the envelopes of its last items."""
        return self._envelopes(self.parser.close())

    def _envelopes(self, items: list[Item]) -> list[Envelope]:
        out: list[Envelope] = []
        for item in items:
            offset = item.offset + self.base
            if offset < self.done:
                continue
            self.done = offset + 1
            if isinstance(item, ErrorItem):
                line = item.line
                self.bus.warn(
                    f"{self.bus.agent_id}: {self.source} line {line}: not published: {item.message}"
                )
                if self.bus.metrics is not None:
                    self.bus.metrics.rejected.labels("parse_error").inc()
                if item.type in AWAITED:
                    lost = lost_signal(self.bus.agent_id, item.type, f"line {line}", item.message)
                    out.append(self._envelope(lost, offset))
                if item.type in _WAITS:
                    self.waits.append(None)
                continue
            if isinstance(item, TurnFailedItem):
                out += self._failed(item, offset)
                continue
            payload: Payload = item.payload if isinstance(item, SignalItem) else item.report
            if isinstance(payload, ClarificationNeeded) or (
                isinstance(payload, StopWork) and payload.stop_reason is not StopReason.COMPLETION
            ):
                self.waits.append(recap_key(payload))
            if isinstance(item, SignalItem) and item.payload.agent_id != self.bus.agent_id:
                self.bus.foreign_id(item.payload.agent_id, self.source)
            out.append(self._envelope(payload, offset))
            self._completed = self._completed or completes(out[-1])
        return out

    def _failed(self, item: TurnFailedItem, offset: int) -> list[Envelope]:
        """The STOP_WORK error of a failed turn (:func:`failed_turn`); none once the agent completed, whose
        outcome is recorded, as a failed exit after a completion is no error either."""
        where = f"{self.bus.agent_id}: {self.source} line {item.line}"
        if self._completed or self.bus.completed:
            self.bus.log(f"{where}: after the agent's completion: {item.message}")
            return []
        self.bus.warn(f"{where}: the agent's turn failed: {item.message}")
        self.waits.append(None)
        return [self._envelope(failed_turn(self.bus.agent_id, item.message), offset)]

    def _envelope(self, payload: Payload, offset: int) -> Envelope:
        """The envelope of what the output holds at ``offset``: its id is the same on every reading."""
        envelope_id = deterministic_id(self.bus.agent_id, self.source, offset)
        return self.bus.envelope(payload, source=self.source, id=envelope_id)
