"""A command's whole input read into memory: a file, or stdin for ``-``, never more than a limit.

For the commands that take their input in one piece (a task prompt, findings, a hook's call). A path
such as ``/dev/zero``, or a stdin that never ends, would otherwise grow the process until it fails, and
a stdin closed at start (``<&-``) leaves Python without ``sys.stdin`` at all.
"""

from __future__ import annotations

import sys

__all__ = ["InputError", "read_whole"]


class InputError(ValueError):
    """The input could not be read, or is larger than allowed; the message says which, for people."""


def read_whole(source: str, limit: int, *, what: str = "the input") -> bytes:
    """The bytes of file ``source`` (stdin for ``-``), if there are no more than ``limit`` of them.

    Reads at most ``limit + 1`` bytes. Raises :class:`InputError` for a closed stdin, a file that cannot
    be read (the system's reason), and an input over ``limit``, naming it as ``what``.
    """
    try:
        if source == "-":
            if sys.stdin is None:  # started with it closed
                raise InputError(f"stdin is closed: give {what} as a file, or pipe it in")
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(source, "rb") as stream:
                data = stream.read(limit + 1)
    except OSError as exc:
        raise InputError(f"cannot read {source}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{what} is larger than {limit} bytes")
    return data
