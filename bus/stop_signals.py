"""The signals that stop the long-running commands (coordinator, ``up``, launcher, adapters) gracefully.

SIGTERM, SIGINT and SIGHUP (its terminal closed) each stop them, except one the process was started
ignoring: ``nohup`` has SIGHUP ignored, a shell without job control SIGINT for a command run with ``&``,
and the command is to outlive them, as any program that keeps the ignoring it inherited does.
"""

from __future__ import annotations

import functools
import signal
from typing import Final

__all__ = ["STOP_SIGNALS", "handled_stop_signals"]

STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""What stops a long-running command: SIGHUP too, as a closed terminal would otherwise end it without
its graceful stop (a coordinator's leases unreleased, an adapter's agent, in a session of its own, left
running)."""


@functools.cache
def handled_stop_signals() -> tuple[signal.Signals, ...]:
    """The stop signals this process handles: those of :data:`STOP_SIGNALS` it was not started ignoring.

    The first answer is kept: it must be asked before any handler is installed, since an asyncio handler
    replaces the ignoring, and removing the handler leaves the default action, not the ignoring.
    """
    return tuple(sig for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN)
