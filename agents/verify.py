"""Checking an agent's claims against its working directory: no hallucinated paths (seed 001).

A reference ``file:line`` is verified when the file exists under the workdir and has at least ``line``
lines; a reference without a line only needs the file. A path that leaves the workdir (``..``, an
absolute path elsewhere, a symlink pointing out) is never opened and counts as not verified, but for a
deliverable, which is not judged then (nor is a URL): it may well exist where the agent wrote it. The
outcome is written on the payload: :attr:`Finding.verified`, :attr:`Reference.verified`, and for a
COMPLETION_REPORT the extra field ``deliverables_verified``: one ``{path, verified}`` per deliverable
listed as ``- NAME (comment)``.

A path that cannot be looked at (a name over 255 bytes, no permission) counts as not verified, as a
missing one does. A file's lines are counted once while its size and modification time stay the same
(the last :data:`CACHED_FILES` files are kept). A Key Reference that is a URL is not judged, as such a
deliverable is not, and a directory that exists stands for a deliverable or a Key Reference without a
line (a finding needs a file).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

from bus.envelope import Envelope, Payload, new_envelope
from bus.fields import Model
from bus.findings import MAX_LINE, Finding
from bus.results import Reference, ResultReport
from bus.signals import DELIVERABLES_VERIFIED, CompletionReport

__all__ = [
    "CACHED_FILES",
    "DELIVERABLES_FIELD",
    "DeliverableCheck",
    "Verifier",
    "deliverable_paths",
    "split_location",
    "verified_envelope",
]

DELIVERABLES_FIELD: Final = DELIVERABLES_VERIFIED
"""The field added to a COMPLETION_REPORT payload (an open model) with the deliverable checks."""

_LOCATION = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(?:[-:]\d+)?$")
_ITEM = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+(?:\[[ xX]\]\s+)?(?P<rest>\S.*)$")
_FILE_NAME = re.compile(r"^[\w.@~+-]*\w\.[A-Za-z0-9]{1,10}$")
_CHUNK: Final = 1 << 20
CACHED_FILES: Final = 256
"""How many files' line counts a :class:`Verifier` keeps."""
_T = TypeVar("_T")


class DeliverableCheck(Model):
    """One deliverable named in a completion report, and whether it exists under the workdir."""

    path: str
    verified: bool


def split_location(file: str, line: int | None) -> tuple[str, int | None]:
    """``("src/a.py", 12)`` from ``("src/a.py:12", None)``; the arguments unchanged otherwise."""
    cleaned = file.strip().strip("`")
    if line is None:
        match = _LOCATION.match(cleaned)
        if match:
            try:
                return match["file"], int(match["line"])
            except ValueError:  # more digits than int() reads (4300): a line no file has
                return match["file"], MAX_LINE + 1
    return cleaned, line


def deliverable_paths(text: str | None) -> list[str]:
    """The paths listed in a ``deliverables`` text: the first word of each list item that looks like a
    file or directory name (``- SECURITY_ANALYSIS.md (comprehensive report)`` -> the file name), and a
    line that is one such word (a YAML list, ``[a.md, b.md]``, or a single path, arrives one per line)."""
    if not text:
        return []
    found: list[str] = []
    for raw in text.splitlines():
        match = _ITEM.match(raw)
        if match is not None:
            token = _first_word(match["rest"])
        elif len(raw.split()) == 1:
            token = _first_word(raw)
        else:
            continue
        if ("/" in token or _FILE_NAME.match(token)) and token not in found:
            found.append(token)
    return found


def _first_word(text: str) -> str:
    """The first word of a list item, or its first `code span`, without trailing punctuation."""
    text = text.strip()
    end = text.find("`", 1)
    word = text[1:end] if text.startswith("`") and end > 0 else text.split()[0]
    return word.strip("*").rstrip(":,;")


class Verifier:
    """Verifies paths against one working directory."""

    def __init__(self, workdir: Path) -> None:
        self.root = workdir.resolve()
        if not self.root.is_dir():
            raise ValueError(f"workdir {workdir} is not a directory")
        self._counted: dict[tuple[Path, int, int, int, int], tuple[int, bool]] = {}
        """Of the files counted last (the least recently used first), the lines found and whether that is
        all of them (:func:`_line_count`)."""

    def _guarded(self, file: str, inspect: Callable[[Path], _T]) -> _T | None:
        """``inspect`` of the path of ``file`` inside the workdir: the one place where a path an agent gave
        meets the filesystem. None when the path leaves the workdir or cannot exist, and when a call on it
        fails (a name over 255 bytes, no permission, a symlink loop, a file removed meanwhile): agent output
        never stops the adapter, such a path is simply not verified."""
        if not file or "\x00" in file:
            return None
        try:
            candidate = (self.root / file).resolve()
            if candidate != self.root and not candidate.is_relative_to(self.root):
                return None
            return inspect(candidate)
        except (OSError, RuntimeError, ValueError):  # RuntimeError: a symlink loop
            return None

    def locate(self, file: str) -> Path | None:
        """The path of ``file`` inside the workdir, or None when it leaves it or cannot exist."""
        return self._guarded(file, lambda path: path)

    def exists(self, file: str) -> bool:
        return self._guarded(file, lambda path: path.stat()) is not None

    def check(self, file: str | None, line: int | None, *, directory: bool = False) -> bool | None:
        """True/False for a reference; None when there is no file to check. With ``directory``, one that
        exists is found too when no line is named."""
        if file is None or not file.strip():
            return None
        name, number = split_location(file, line)
        return self._guarded(name, lambda path: self._holds(path, number, directory=directory)) is True

    def _holds(self, path: Path, number: int | None, *, directory: bool) -> bool:
        """Whether ``path`` is a file with line ``number`` (any file without one, or a directory then)."""
        status = path.stat()
        if number is None:
            return stat.S_ISREG(status.st_mode) or (directory and stat.S_ISDIR(status.st_mode))
        return stat.S_ISREG(status.st_mode) and 1 <= number <= self._lines(path, status, number)

    def _lines(self, path: Path, status: os.stat_result, wanted: int) -> int:
        """The lines of a file, ``wanted`` at most: it is read only as far as it must be (line 1 of a file
        of gigabytes is at its start), and what is known of it kept while it stays the same (its size and
        modification time): each finding of a long report on one large file would read it again."""
        key = (path, status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        known = self._counted.pop(key, None)  # taken out: put back at the end, the least recent goes first
        if known is None or (not known[1] and known[0] < wanted):
            known = _line_count(path, wanted)
        while len(self._counted) >= CACHED_FILES:
            del self._counted[next(iter(self._counted))]
        self._counted[key] = known
        return min(known[0], wanted)

    def finding(self, finding: Finding) -> Finding:
        verified = self.check(finding.file, finding.line)
        return finding if verified is None else finding.model_copy(update={"verified": verified})

    def reference(self, reference: Reference) -> Reference:
        """A Key Reference is checked as a deliverable is: a URL is not judged, and a directory that
        exists is found when no line is named."""
        file = reference.file if reference.file is not None else reference.location
        line = reference.line if reference.file is not None else None
        verified = None if "://" in file else self.check(file, line, directory=True)
        return reference if verified is None else reference.model_copy(update={"verified": verified})

    def result(self, report: ResultReport) -> ResultReport:
        return report.model_copy(
            update={
                "findings": [self.finding(f) for f in report.findings],
                "key_references": [self.reference(r) for r in report.key_references],
            }
        )

    def completion(self, report: CompletionReport) -> CompletionReport:
        """The report with a check of each deliverable in the workdir; one elsewhere (a URL, a path outside
        it) is not judged: it is never opened, and not finding it here would say nothing."""
        checks = [
            DeliverableCheck(path=p, verified=self.exists(p))
            for p in deliverable_paths(report.deliverables)
            if "://" not in p and self.locate(p) is not None
        ]
        if not checks:
            return report
        return report.model_copy(update={DELIVERABLES_FIELD: [c.model_dump() for c in checks]})

    def payload(self, payload: Payload) -> Payload:
        """The payload with its verifiable claims marked; other payload types are returned unchanged."""
        if isinstance(payload, Finding):
            return self.finding(payload)
        if isinstance(payload, ResultReport):
            return self.result(payload)
        if isinstance(payload, CompletionReport):
            return self.completion(payload)
        return payload


def _line_count(path: Path, wanted: int) -> tuple[int, bool]:
    """Lines in a file (newlines, plus one for a last line without a newline), read a chunk at a time
    until ``wanted`` are found; and whether the whole file was read. An error reading it is the caller's
    (see :meth:`Verifier._guarded`)."""
    count = 0
    last = b""
    # Not blocking: the file checked as regular may have been swapped for a FIFO since, whose open waits
    # for a writer (which an agent's output could arrange); it is refused once opened.
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        while chunk := stream.read(_CHUNK):
            count += chunk.count(b"\n")
            last = chunk[-1:]
            if len(chunk) < _CHUNK:  # a regular file is read in whole chunks up to its last
                break
            if count >= wanted:
                return count, False
    return count + (1 if last and last != b"\n" else 0), True


def verified_envelope(
    verifier: Verifier | None,
    payload: Payload,
    *,
    agent_id: str,
    group_id: str,
    source: str,
    id: str | None = None,
) -> Envelope:
    """The envelope of an agent's ``payload``; with a ``verifier`` (a workdir), its file references are
    verified first."""
    if verifier is not None:
        payload = verifier.payload(payload)
    return new_envelope(payload, agent_id=agent_id, group_id=group_id, source=source, id=id)
