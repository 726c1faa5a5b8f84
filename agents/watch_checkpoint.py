"""The checkpoint of ``adapter watch`` (:class:`agents.watched_file.Checkpoint`) as the file is read:
what it says once the envelopes read are published, and when it is written with none.

The checkpoint, one key per agent and file in the group's shard (``offset:<agent>:<sha of path>``), is
written in the same MULTI/EXEC as the envelopes it accounts for. It holds the file's generation, how far
it was read, where a fresh parser can take over (:attr:`agents.output_stream.OutputStream.restart`), the end
of the last published item (``done``), where pauses ended lines at closing tags, fingerprints of the file's
first bytes and of the bytes just before the read position, and the file's inode. Bytes read without any
item are recorded too: at the end of the file, at a switch to another file, and in between every
:data:`_SAVE_EVERY` of them.
"""

from __future__ import annotations

import os
from typing import Final

from agents.adapter import OutputStream, completes
from agents.watched_file import Checkpoint, fingerprints
from bus.envelope import Envelope, EnvelopeType

__all__ = ["advanced", "due"]

_SAVE_EVERY: Final = 4 << 20
"""Bytes read without any item before the checkpoint is written anyway."""
_COMPLETION: Final = EnvelopeType.COMPLETION_REPORT


def advanced(
    cp: Checkpoint,
    stream: OutputStream,
    fd: int,
    directory: str | None,
    envelopes: list[Envelope],
    last: bytes,
) -> Checkpoint:
    """The checkpoint ``cp`` once ``envelopes`` are published: ``stream`` has read them from ``fd``, the
    file followed, in ``directory``; ``last``: the bytes it read last (:func:`~agents.watched_file.last_bytes`)."""
    resume, resume_line = stream.restart
    head, tail = cp.head, cp.tail
    if stream.fed != cp.read or not head:
        head, tail = fingerprints(fd, stream.fed, last)
    info = os.fstat(fd)
    return Checkpoint(
        generation=cp.generation,
        read=stream.fed,
        resume=resume,
        resume_line=resume_line,
        done=stream.done,
        reported=stream.parser.reported,
        format=stream.format,
        session_id=stream.session_id,
        completed=cp.completed or any(completes(e) for e in envelopes),
        completion_report=cp.completion_report or any(e.type is _COMPLETION for e in envelopes),
        started=cp.started,
        ended=cp.ended,
        pauses=tuple(stream.pauses),
        head=head,
        tail=tail,
        file=(info.st_dev, info.st_ino),
        directory=directory,
    )


def due(checkpoint: Checkpoint, saved: Checkpoint | None, *, force: bool) -> bool:
    """Whether ``checkpoint``, with no envelope to publish, is to be written: it differs from ``saved``
    (the one written last), and ``force`` says so or it has read :data:`_SAVE_EVERY` bytes more."""
    if checkpoint == saved:
        return False
    return force or saved is None or checkpoint.read - saved.read >= _SAVE_EVERY
