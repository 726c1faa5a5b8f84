"""A file an adapter takes onto the bus resumably: its name there, its checkpoint, the fingerprints that
tell it is still the same output, and opening it safely. Shared by ``adapter watch``
(:mod:`agents.watch`) and ``adapter import-findings`` (:mod:`agents.findings_import`).

A file is named by its directory's real path and its own name (:func:`canonical`): that name is hashed
into its checkpoint key and is part of its envelopes' ids (their ``source``), so a restart that spells
the path otherwise resumes instead of publishing everything again.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from agents.adapter import AgentBus
from agents.transcript import Format
from bus.connection import translated
from bus.errors import ConnectionFailed, CredentialsRefused
from bus.fields import Model
from bus.waits import backoff, wait_for

__all__ = [
    "Checkpoint",
    "canonical",
    "check_sized",
    "checkpoint_key",
    "directory_of",
    "fingerprints",
    "last_bytes",
    "load_checkpoint",
    "moved",
    "named",
    "open_file",
    "renamed",
    "source_of",
]

_PRINT: Final = 4096
"""Bytes hashed for each fingerprint."""


class Checkpoint(Model):
    """How far one agent's output file has been taken onto the bus."""

    generation: int = 0
    read: int = 0
    resume: int = 0
    resume_line: int = 1
    done: int = 0
    reported: bool = False
    """A result report was read before ``resume``: a section under another heading after it is a recap,
    not a report to hold (:mod:`agents.unread`)."""
    format: Format = Format.AUTO
    session_id: str | None = None
    completed: bool = False
    """A COMPLETION_REPORT or a result report was published."""
    completion_report: bool = False
    """A COMPLETION_REPORT was published: with ``--until-complete``, nothing more is followed."""
    started: bool = False
    """AGENT_STARTED was published (once per generation, not per adapter restart)."""
    ended: bool = False
    """AGENT_EXITED was published."""
    pauses: tuple[int, ...] = ()
    """Where a pause ended a line at a closing tag (:attr:`agents.output_stream.OutputStream.pauses`)."""
    head: str = ""
    tail: str = ""
    file: tuple[int, int] | None = None
    """The device and inode of the file read, by which a restart finds it renamed (rotated)."""
    directory: str | None = None
    """The directory of the file read (a symbolic link's target's), where a restart looks for it too: a
    link that a rotation pointed at a file elsewhere leaves the file read in another directory."""


def canonical(path: Path) -> Path:
    """The path that names a file in its checkpoint key and its envelopes' ids: absolute, through its
    directory's real path (``../logs/a.log`` and ``a.log`` in ``logs`` are one file, so a restart that
    spells it otherwise resumes instead of publishing everything again). The last part stays as given:
    a symbolic link is followed by its name, to whatever file it names at the time."""
    absolute = path.absolute()
    try:
        return absolute.parent.resolve() / absolute.name
    except (OSError, RuntimeError):  # a loop of links (RuntimeError before Python 3.13): as given
        return absolute


async def named(bus: AgentBus, given: Path, key_of: Callable[[Path], str]) -> Path:
    """:func:`canonical` of ``given``, or ``given`` made absolute when only that names a checkpoint
    (``key_of`` a path): one written before files were named by their directory's real path, whose file
    goes on under its old name (and envelope ids) instead of being published again."""
    path, old = _names(given)
    if path == old:
        return path
    with translated():  # GET, not EXISTS: the adapter role may only GET and SET its checkpoints
        if await bus.client.get(key_of(path)) is not None or await bus.client.get(key_of(old)) is None:
            return path
    return old


def _names(given: Path) -> tuple[Path, Path]:
    """:func:`canonical` of a path, and the path made absolute: its name before canonical()."""
    return canonical(given), given.absolute()


async def load_checkpoint(
    bus: AgentBus, given: Path, waiting: asyncio.Event | None = None
) -> tuple[Path, str, Checkpoint]:
    """The file's name (:func:`named`), its checkpoint key, and its checkpoint (an empty one when there
    is none or it is unreadable). With ``waiting`` (``--wait-for-redis``: a blip right after connecting
    ended a hook's adapter, which nobody restarts), read again after an outage until read or ``waiting``
    is set, which ends it with the outage's error."""
    delays = backoff()
    while True:
        try:
            path = await named(bus, given, lambda p: checkpoint_key(bus, p))
            key = checkpoint_key(bus, path)
            with translated():
                raw = await bus.client.get(key)
            break
        except ConnectionFailed as exc:
            if waiting is None or isinstance(exc, CredentialsRefused):
                raise
            delay = next(delays)
            bus.warn(f"{exc}; retrying in {delay:.1f}s")
            if await wait_for(waiting, delay):
                raise
    if raw is None:
        return path, key, Checkpoint()
    try:
        return path, key, Checkpoint.model_validate_json(raw)
    except ValidationError:
        bus.warn(f"checkpoint {key} is unreadable; starting {path} from byte 0")
        return path, key, Checkpoint(generation=1)


def checkpoint_key(bus: AgentBus, path: Path) -> str:
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return bus.state_key(f"offset:{bus.agent_id}:{digest}")


def source_of(path: Path, generation: int) -> str:
    """The ``source`` of the envelopes of one generation of a file (part of their ids)."""
    return f"file:{path}" if generation == 0 else f"file:{path}#{generation}"


def fingerprints(fd: int, read: int, last: bytes = b"") -> tuple[str, str]:
    """Hashes of the first bytes of a file and of the bytes just before ``read``. ``last``: the bytes
    that ended at ``read`` as they were read, when known; where they cover what is hashed, they are
    hashed, not the file's, which may have been written again since (truncated and rewritten while they
    were parsed: fingerprints of the new bytes would vouch for them as what was read)."""
    size = min(_PRINT, read)
    tail = last[-size:] if len(last) >= size else os.pread(fd, size, read - size)
    head = tail if read <= _PRINT else os.pread(fd, size, 0)
    return hashlib.sha256(head).hexdigest(), hashlib.sha256(tail).hexdigest()


def last_bytes(last: bytes, chunk: bytes) -> bytes:
    """The bytes :func:`fingerprints` hashes at the end of what was read, once ``chunk`` is read after
    ``last``."""
    return chunk[-_PRINT:] if len(chunk) >= _PRINT else (last + chunk)[-_PRINT:]


def moved(
    path: Path,
    file: tuple[int, int] | None,
    fd: int,
    same: Callable[[int], bool],
    directory: str | None = None,
) -> int:
    """``fd`` (the file at ``path``), or, when it is not the file ``file`` (device, inode) nor holds what
    was read from it (``same``), that file found under another name and still holding it (a log rotated
    by renaming it, or a symbolic link pointed at another file): in the path's directory, in
    ``directory`` (where it was read) or in the directory of the link's new target. ``fd`` is then
    closed."""
    info = os.fstat(fd)
    if file is None or (info.st_dev, info.st_ino) == file or same(fd):
        return fd
    old = renamed(path, file, same, directory)
    if old is None:
        return fd
    os.close(fd)
    return old


def renamed(
    path: Path, file: tuple[int, int], same: Callable[[int], bool], directory: str | None = None
) -> int | None:
    """The file ``file`` (device, inode), opened, found under another name than ``path`` and still
    holding what was read from it (``same``), where :func:`moved` looks for it; None if it is not there."""
    names: list[Path] = []
    for where in dict.fromkeys((path.parent, *((Path(directory),) if directory else ()), _target_dir(path))):
        try:
            with os.scandir(where) as entries:
                names += [Path(e.path) for e in entries if e.inode() == file[1] and e.path != str(path)]
        except OSError:
            continue
    for name in names:
        try:
            old = open_file(name)
        except OSError:
            continue
        info = os.fstat(old)
        if (info.st_dev, info.st_ino) == file and same(old):
            return old
        os.close(old)
    return None


def _target_dir(path: Path) -> Path:
    """The directory of the file ``path`` names (through symbolic links)."""
    return Path(os.path.realpath(path)).parent


def directory_of(fd: int, path: Path) -> str:
    """The directory of the file open at ``fd`` (which ``path`` named when it was opened): where the
    system says it is now (Linux), else where ``path`` leads."""
    try:
        return str(Path(os.readlink(f"/proc/self/fd/{fd}")).parent)
    except OSError:
        return str(_target_dir(path))


_PIPE_HINT: Final = "pipe the agent's output into `subagent-bus adapter stdin` instead"


def open_file(path: Path, pipe_hint: str = _PIPE_HINT) -> int:
    """A read-only descriptor of the regular file at ``path``; anything else is an ``OSError`` that
    says why (``pipe_hint`` says what to do with a pipe). Opened without blocking, so a FIFO with no
    writer cannot hang the caller; ``FileNotFoundError`` is raised as it is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise OSError(f"cannot read {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        os.set_blocking(fd, True)
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise OSError(f"cannot read {path}: it is a directory, not a file")
    raise OSError(f"cannot read {path}: it is a pipe or a device, not a regular file ({pipe_hint})")


def check_sized(fd: int, path: Path) -> None:
    """Refuse (``OSError``) a file whose size stays 0 while it is read (a ``/proc`` or ``/sys`` file, some
    FUSE files): its size is what tells a truncation from more output, and each read would look like one."""
    if os.fstat(fd).st_size:
        return
    at = os.lseek(fd, 0, os.SEEK_CUR)
    os.lseek(fd, 0, os.SEEK_SET)
    if os.read(fd, 1) and not os.fstat(fd).st_size:
        raise OSError(
            f"cannot follow {path}: it does not report its size (a /proc or /sys file?), so its truncation "
            "cannot be told from more output; pipe it into `subagent-bus adapter stdin`"
        )
    os.lseek(fd, at, os.SEEK_SET)
