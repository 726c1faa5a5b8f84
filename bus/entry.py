"""The console script ``subagent-bus``.

Its imports take a second or so; a Ctrl-C meanwhile would end in a traceback (``KeyboardInterrupt`` in
some module's import), so until they are done it ends the command quietly, with the status of an
interrupted one. This module imports nothing of the package's until then (``bus`` itself imports its
names lazily). A write to stdout that fails is the command's one-line error (:mod:`bus.output`).
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

__all__ = ["EXIT_INTERRUPTED", "main"]

EXIT_INTERRUPTED = 130
"""Exit status of a command interrupted by Ctrl-C (SIGINT): 128 + 2."""


def _interrupted(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("\n")  # ends the line of the terminal's ^C
    raise SystemExit(EXIT_INTERRUPTED)


def main() -> None:
    """``subagent-bus``: the CLI of :mod:`bus.cli`, its imports made quietly interruptible, its output's
    errors its own (a full disk, a closed stdout: one line on stderr and exit status 1)."""
    before = signal.getsignal(signal.SIGINT)
    quiet = before is signal.default_int_handler  # not one ignored (nohup, a background job) or set
    if quiet:
        signal.signal(signal.SIGINT, _interrupted)
    from bus.cli import main as cli  # noqa: PLC0415
    from bus.output import run_printing  # noqa: PLC0415

    if quiet:
        signal.signal(signal.SIGINT, before)
    run_printing(cli)
