"""Signed human commands: the proof that an ``answer``, ``resolve``, ``approve``... came from a person.

ACLs cannot stop a user who may append to a signals stream from appending a human command, and every agent
holds its adapter's credentials (README "Security"). So a human command's entry may carry, beside its
``data``, a field ``sig``: the HMAC-SHA256 (hex) of those exact bytes under a key that the people's
commands and the coordinators read from a file (``--human-key-file``), and that agents never see. A
coordinator given the key dead-letters every human command whose signature is missing or wrong; one
without a key applies them all, signed or not, as before.

The signature covers the ``data`` bytes as stored, so it needs no canonical form: an envelope changed by a
single byte is refused. It does not stop a replay of a signed entry's bytes, which the coordinator's
idempotency window drops like any duplicate while it remembers the envelope's id.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import select
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from bus.errors import ConfigError

__all__ = [
    "KEY_FILE_ENV",
    "MIN_KEY_BYTES",
    "SIGNATURE_FIELD",
    "fingerprint",
    "read_key",
    "signature",
    "signature_problem",
]

SIGNATURE_FIELD: Final = b"sig"
KEY_FILE_ENV: Final = "SUBAGENT_BUS_HUMAN_KEY_FILE"
"""The key file's environment variable; the agent side leaves it out of what it starts."""
MIN_KEY_BYTES: Final = 16
_MAX_KEY_FILE_BYTES: Final = 4096
_PIPE_WAIT_S: Final = 5.0


def read_key(path: Path) -> bytes:
    """The key in ``path``: its bytes without a final line break, at least :data:`MIN_KEY_BYTES` of them
    (e.g. ``head -c 32 /dev/urandom | base64 > FILE``); a :class:`~bus.errors.ConfigError` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO with no writer would wait for ever
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode):  # `--human-key-file <(pass show bus-key)`: the key never on a disk
            data = _from_pipe(fd, path)
        elif stat.S_ISREG(mode):
            data = os.read(fd, _MAX_KEY_FILE_BYTES + 1)
        else:
            raise ConfigError(f"{path} is neither a file nor a pipe: not a key file")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise ConfigError(f"{path} is over {_MAX_KEY_FILE_BYTES} bytes: not a key file")
    key = data.rstrip(b"\r\n")
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(
            f"{path} holds a key of {len(key)} bytes, fewer than {MIN_KEY_BYTES} "
            "(make one with `head -c 32 /dev/urandom | base64 > FILE`)"
        )
    return key


def signature(key: bytes, data: bytes) -> bytes:
    """The ``sig`` field of an entry whose ``data`` is ``data``."""
    return hmac.new(key, data, hashlib.sha256).hexdigest().encode()


def _from_pipe(fd: int, path: Path) -> bytes:
    """What a pipe's writer writes until it closes it, waited for :data:`_PIPE_WAIT_S` at most (a FIFO
    with no writer is at its end at once)."""
    data = b""
    deadline = time.monotonic() + _PIPE_WAIT_S
    while len(data) <= _MAX_KEY_FILE_BYTES:
        try:
            chunk = os.read(fd, _MAX_KEY_FILE_BYTES + 1)
        except BlockingIOError:  # its writer has not written yet
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ConfigError(
                    f"{path}: a pipe whose writer did not finish within {_PIPE_WAIT_S:g}s"
                ) from None
            continue
        if not chunk:
            break
        data += chunk
    return data


def fingerprint(key: bytes | None) -> str:
    """What a coordinator shows the others of its namespace of its key (``key-`` and 12 hex digits of an
    HMAC, which does not give the key away), or ``no-key``: coordinators that disagree about the key would
    apply forged commands on some shards and refuse them on others."""
    if key is None:
        return "no-key"
    return "key-" + hmac.new(key, b"subagent-bus coordinators", hashlib.sha256).hexdigest()[:12]


def signature_problem(key: bytes, data: bytes, fields: Sequence[tuple[bytes, bytes]]) -> str | None:
    """Why a human command's entry (its ``data`` and its other fields) is not signed with ``key``, or
    None when it is."""
    given = [value for name, value in fields if name == SIGNATURE_FIELD]
    if not given:
        return "human command not signed, and the coordinators apply only signed ones (--human-key-file)"
    if len(given) > 1 or not hmac.compare_digest(given[0], signature(key, data)):
        return "human command whose signature does not match its data under the coordinators' key"
    return None
