"""The agent's process as ``adapter run`` starts it: stdin closed, stdout and stderr on pipes, in a session
of its own (the terminal's signals reach the adapter, which passes them on once, after it has decided what
to do about them), and, on Linux, sent SIGTERM when the adapter dies, even by SIGKILL, rather than run on
unread as an orphan. An adapter that stops running for it while it runs (it failed, or gave up publishing)
ends it with SIGTERM, and SIGKILL only after :data:`STOP_GRACE_S`, reading its output meanwhile
(:func:`stop_agent`). Every signal the adapter sends it goes to its process group (:func:`signal_agent`).

Every process the agent side starts (an agent, a resume turn, an adapter) gets this process's environment
without what is this process's alone (:func:`child_environment`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from bus.human_key import KEY_FILE_ENV
from bus.ops import METRICS_PORT_ENV

__all__ = [
    "STOP_GRACE_S",
    "StderrTail",
    "child_environment",
    "dies_with_us",
    "exit_status",
    "signal_agent",
    "start_agent",
    "start_error",
    "stop_agent",
]

_TAIL_LINES: Final = 20
_TAIL_BYTES: Final = 4096
_PR_SET_PDEATHSIG: Final = 1
STOP_GRACE_S: Final = 5.0
"""How long an agent the adapter stops has between SIGTERM and SIGKILL: time for it to save its session
and work, not so long that one which ignores SIGTERM holds a failed adapter (and whatever waits for that
to exit) for long."""
_EXITED_POLL_S: Final = 0.2
_READ_ON_S: Final = 2.0
_KILLED_EXIT_S: Final = 5.0
"""How long a killed agent's exit is waited for: SIGKILL ends a process at once, unless the kernel holds
it (a stuck disk or network file system), which the adapter does not wait out."""


def child_environment() -> dict[str, str]:
    """This process's environment for a process it starts, without the metrics port (a second server
    cannot listen on it) and the human key file (an agent must never be able to sign a person's command,
    README "Security"; an adapter has no use for it)."""
    return {name: value for name, value in os.environ.items() if name not in (METRICS_PORT_ENV, KEY_FILE_ENV)}


async def start_agent(argv: list[str]) -> asyncio.subprocess.Process:
    """Start the agent's command ``argv`` (OSError or ValueError when it cannot be started)."""
    return await asyncio.create_subprocess_exec(
        *argv,
        env=child_environment(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        preexec_fn=dies_with_us(),
    )


def signal_agent(process: asyncio.subprocess.Process, sig: int) -> None:
    """Send ``sig`` to the process group of ``process``, started in a session of its own (it leads the
    group, whose id is its pid), unless it has been reaped: its pid may be another process's then.

    The group, not the process alone: an agent behind a wrapper (a shell script, ``npx``, ``uv run``), or
    one that runs its tools in processes of their own, would otherwise lose only the wrapper, and the
    processes it started would run on as orphans after the adapter has ended."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # its group is gone: it was reaped meanwhile
            os.killpg(process.pid, sig)


def _group_lives(pgid: int) -> bool:
    """Whether a process of the group ``pgid`` is left. Its id is not another's while one is (Linux does
    not reuse a pid that is a process group's id)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # one of another user (setuid): there, but not ours to stop
        return True
    return True


async def stop_agent(
    process: asyncio.subprocess.Process,
    *,
    termed: bool,
    warn: Callable[[str], None],
    reading: Iterable[Awaitable[None]] = (),
    what: str = "the agent",
) -> None:
    """End an agent that the adapter stops running for: SIGTERM, so that it can save its work (not sent
    again when it was ``termed`` already, to which a second one may mean "quit now"), then SIGKILL if it
    has not exited within :data:`STOP_GRACE_S` (said to ``warn``, of ``what``: a resume command runs a
    turn of the agent too). Both go to its process group (:func:`signal_agent`): it must have been started
    in a session of its own.

    ``reading`` reads the agent's outputs that nothing else reads any more, meanwhile: an agent that
    prints as it saves its work would otherwise block on a full pipe and be killed for it (and the
    agent's end, which waits for its pipes to close, would wait for ever for those unread). Once the agent
    has ended they read on to the outputs' end, for :data:`_READ_ON_S` at most (a process the agent
    started may hold them open)."""
    readers = [asyncio.ensure_future(read) for read in reading]
    try:
        if not termed:
            signal_agent(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        try:
            if await _exited(process, STOP_GRACE_S):  # what it started gets the rest of the grace
                await _group_ended(process.pid, deadline - time.monotonic())
        finally:  # cancelled while it waited (Ctrl-C again): it is not left running
            if process.returncode is None:
                warn(f"{what} did not exit within {STOP_GRACE_S:g}s of SIGTERM: killed")
                signal_agent(process, signal.SIGKILL)
            elif _group_lives(process.pid):  # its wrapper ended at SIGTERM, a process it started did not
                warn(f"a process {what} started did not exit within {STOP_GRACE_S:g}s of SIGTERM: killed")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
        if not await _exited(process, _KILLED_EXIT_S):
            warn(f"{what} had not exited {_KILLED_EXIT_S:g}s after SIGKILL: not waited for any more")
        if readers:
            await asyncio.wait(readers, timeout=_READ_ON_S)
    finally:
        unread = [reader for reader in readers if not reader.done()]
        for reader in unread:
            reader.cancel()
        if unread and process.returncode is not None:
            # A process it started holds its output open: our ends of the pipes are closed now, in this
            # loop, not whenever that process ends (or the transport is collected after the loop closed).
            process._transport.close()  # type: ignore[attr-defined]


async def _group_ended(pgid: int, within: float) -> None:
    """Wait up to ``within`` seconds for no process of the group ``pgid`` to be left."""
    deadline = time.monotonic() + within
    while _group_lives(pgid) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(_EXITED_POLL_S)


async def _exited(process: asyncio.subprocess.Process, within: float) -> bool:
    """Whether ``process`` exits within ``within`` seconds. Not ``process.wait()``: begun before the
    exit, it returns (on Python 3.11) only once the output has ended too, which a process the agent
    started may hold open for ever."""
    deadline = time.monotonic() + within
    while process.returncode is None and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(_EXITED_POLL_S)
    return process.returncode is not None


def start_error(program: str, exc: OSError | ValueError) -> str:
    """Why ``program`` did not start. A script that is there but whose ``#!`` interpreter is not fails
    with ENOENT too, which says "No such file or directory" of the script: the interpreter is named."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if isinstance(exc, FileNotFoundError):
        path = program if os.sep in program else shutil.which(program)
        wrong = _interpreter(path) if path is not None else None
        why = wrong if wrong is not None else why
    return f"cannot start {program}: {why}"


def _interpreter(path: str) -> str | None:
    """What is wrong with the ``#!`` line of the script at ``path``, when it is what failed: read as the
    kernel reads it (words split at spaces and tabs only), so a Windows line end is part of its name."""
    try:
        with open(path, "rb") as script:
            first = script.readline(4096).removesuffix(b"\n")
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    name = first[2:].lstrip(b" \t").replace(b"\t", b" ").split(b" ")[0]
    if name.endswith(b"\r"):
        named = name.decode(errors="replace")
        return f"its #! line ends in a carriage return (Windows line ends): no interpreter is named {named!r}"
    if not name or os.path.exists(name):
        return None
    return f"its interpreter {name.decode(errors='replace')} (its #! line) is not there"


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell reports it: 128 + N when killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, on Linux where it is found."""
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def dies_with_us() -> Callable[[], None] | None:
    """A ``preexec_fn`` by which the agent (or a resume command) gets SIGTERM when the adapter dies, even
    by SIGKILL, rather than run on unread as an orphan; None where there is no prctl (it then outlives
    the adapter).

    PR_SET_PDEATHSIG fires when the thread that forked exits, not the process: the agent is forked in
    the event loop's thread (asyncio.create_subprocess_exec calls subprocess.Popen there), which is the
    main thread that asyncio.run runs the adapter in.
    """
    prctl, adapter = _prctl(), os.getpid()
    if prctl is None:
        return None

    def in_the_child() -> None:
        # The adapter's handler of SIGTERM would catch it until the exec, which resets it to the default.
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGTERM))
        if os.getppid() != adapter:  # the adapter died before the prctl: no death is left to signal it
            os.kill(os.getpid(), signal.SIGTERM)

    return in_the_child


class StderrTail:
    """The last lines of the agent's stderr, which its exit is reported with."""

    def __init__(self) -> None:
        self._data = bytearray()

    def add(self, chunk: bytes) -> None:
        self._data += chunk
        if len(self._data) > 2 * _TAIL_BYTES:
            del self._data[:-_TAIL_BYTES]

    def text(self) -> str:
        lines = bytes(self._data[-_TAIL_BYTES:]).decode(errors="replace").splitlines()
        return "\n".join(lines[-_TAIL_LINES:])
