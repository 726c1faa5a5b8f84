"""The agents a launcher left running when it was killed, found again by the launcher that follows it.

A launcher writes ``<agent>.pid`` next to each agent's log when it starts the agent's adapter, and
removes it when the adapter ends. A launcher killed with SIGKILL leaves its adapters running (they run
in sessions of their own, so their agents finish their work) and their pid files behind. A launcher
started on the same log directory adopts each one whose adapter still runs and whose launcher does not:
the adopted agent counts against its ``max_parallel`` until it ends, and stopping that launcher
stops it like the agents it started itself. Without this, a restarted launcher started a full
``max_parallel`` of new agents beside the ones still running.

A process is known by its pid and its start time (from ``/proc`` on Linux), so a pid reused by another
process is not taken for the adapter; where there is no ``/proc``, the pid alone is trusted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import Annotated, Final

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from bus.embedded import pid_alive

__all__ = ["PID_SUFFIX", "Adapter", "Orphan", "Proc", "forget", "left_running", "record"]

PID_SUFFIX: Final = ".pid"
log = logging.getLogger("subagent_bus.launcher")


class Proc(BaseModel):
    """A process: its pid and, where ``/proc`` tells it, its start time (clock ticks after boot)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pid: Annotated[int, Field(ge=1)]
    started: int | None = None

    @classmethod
    def of(cls, pid: int) -> Proc:
        return cls(pid=pid, started=_stat(pid)[1])

    def alive(self) -> bool:
        """Whether this very process still runs (a zombie has ended; a reused pid is another process)."""
        state, started = _stat(self.pid)
        if state is None:
            return pid_alive(self.pid) if self.started is None else False
        return state != "Z" and (self.started is None or started == self.started)

    def terminate(self) -> None:
        """SIGTERM, if it still runs."""
        self.send(signal.SIGTERM)

    def send(self, sig: int) -> None:
        """Send ``sig``, if it still runs."""
        if self.pid > 1 and self.alive():  # not a group, every process, or init
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.pid, sig)


def _signalled(proc: Proc) -> Proc:
    if proc.pid < 2:
        raise ValueError(f"pid {proc.pid}: signalled, it would reach a process group, every process or init")
    return proc


Adapter = Annotated[Proc, AfterValidator(_signalled)]
"""An adapter's process, which a file (anyone who can write its directory can write one) names to be
stopped with a signal: never a pid of 1 or below."""


class Orphan(BaseModel):
    """What a pid file says: whose adapter runs where, and which launcher answers for it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_id: str
    group_id: str
    adapter: Adapter
    launcher: Proc


def _stat(pid: int) -> tuple[str | None, int | None]:
    """A process's state letter and start time from ``/proc/PID/stat``; (None, None) when unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None, None
    # The command name (field 2) is in parentheses and may hold anything: the fields follow its last ")".
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[19])
    except (IndexError, ValueError):
        return None, None


def record(path: Path, model: BaseModel) -> None:
    """Write a pid file, or any record of a process (whole or not at all: a reader never sees half)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(orjson.dumps(model.model_dump(mode="json")))
    partial.replace(path)


def forget(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def left_running(log_dir: Path, me: Proc) -> dict[Path, Orphan]:
    """The pid files of ``log_dir`` whose adapter runs and whose launcher does not, now recorded as
    ``me``'s; the files of ended adapters are removed."""
    if not log_dir.is_dir():
        return {}
    found: dict[Path, Orphan] = {}
    for path in sorted(log_dir.glob(f"*{PID_SUFFIX}")):
        try:
            orphan = Orphan.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            log.warning(f"ignoring {path}: not a pid file this launcher wrote ({str(exc).splitlines()[0]})")
            continue
        if orphan.launcher != me and orphan.launcher.alive():
            continue  # another launcher's agent, on the same log directory
        if not orphan.adapter.alive():
            forget(path)
            continue
        orphan = orphan.model_copy(update={"launcher": me})
        record(path, orphan)
        found[path] = orphan
    return found
