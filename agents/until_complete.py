"""When ``adapter watch --until-complete`` takes the agent as completed, and stops following its file.

The agent completed once its COMPLETION_REPORT was read. Its result report read without one counts once
nothing more came for :data:`AFTER_RESULT_S` (the COMPLETION_REPORT its prompt asks for next may still
come), or for :data:`OPEN_BLOCK_S` with a block left open after it; so does a result report that the end
of the file ended. :class:`~agents.watch.FileWatch` asks each time it has read to the end of the file.
"""

from __future__ import annotations

import copy
import time
from typing import Final

from agents.adapter import OutputStream
from agents.items import ResultItem
from agents.watched_file import Checkpoint

__all__ = ["AFTER_RESULT_S", "OPEN_BLOCK_S", "UntilComplete", "ends_with_a_report"]

AFTER_RESULT_S: Final = 2.0
"""How long ``--until-complete`` goes on following the file, once the agent's result report is read
without a COMPLETION_REPORT, for the one it prints next (the order its prompt asks for)."""

OPEN_BLOCK_S: Final = 30.0
"""How long, after a result report, ``--until-complete`` waits for a block still open to end (its closing
tag) before it takes the agent as completed, the block reported as not terminated."""


class UntilComplete:
    """Whether the agent completed, looked at once per quiet spell (``quiet_since``: since when the end
    of the file was reached and nothing came; None while it grows)."""

    def __init__(self) -> None:
        self._open_since: float | None = None
        self._unended = False
        """Whether, in the quiet spell since :attr:`_open_since`, the parser holds a block still open."""
        self._tried_at: float | None = None
        """The quiet spell in which :meth:`ends_a_report` looked for a report ending the file."""

    def complete(self, cp: Checkpoint, stream: OutputStream, quiet_since: float | None) -> bool:
        """Whether the agent completed: its COMPLETION_REPORT was read, or its result report and, for
        :data:`AFTER_RESULT_S` after the end of the file, nothing more; with a block left open after it
        (a COMPLETION_REPORT being written), for :data:`OPEN_BLOCK_S`."""
        if cp.completion_report or not cp.completed:
            return cp.completion_report
        if quiet_since is None or time.monotonic() - quiet_since < AFTER_RESULT_S:
            return False
        if self._open_since != quiet_since:  # looked at once per quiet spell
            pending = copy.deepcopy(stream.parser).close()  # those published before (a restart) are not
            self._open_since = quiet_since
            self._unended = any(item.offset + stream.base >= stream.done for item in pending)
        return not self._unended or time.monotonic() - quiet_since >= OPEN_BLOCK_S

    def unended(self, quiet_since: float | None) -> bool:
        """Whether :meth:`complete` found a block left open in this quiet spell (published as an error)."""
        return self._unended and self._open_since == quiet_since

    def ends_a_report(self, cp: Checkpoint, stream: OutputStream, quiet_since: float | None) -> bool:
        """Whether a result report ended the file, nothing following it for :data:`AFTER_RESULT_S`: in
        text a report ends at the next heading or tag, which then never comes. The output is to be taken
        as ended, and the report published, when that makes it a result (tried once per quiet spell)."""
        if cp.completed or quiet_since is None or quiet_since == self._tried_at:
            return False
        if time.monotonic() - quiet_since < AFTER_RESULT_S:
            return False
        self._tried_at = quiet_since
        return ends_with_a_report(stream)


def ends_with_a_report(stream: OutputStream) -> bool:
    """Whether the output, taken as ended here, ends with a result report: in text a report ends only at
    the next heading or tag, which may never come."""
    return any(isinstance(item, ResultItem) for item in copy.deepcopy(stream.parser).close())
