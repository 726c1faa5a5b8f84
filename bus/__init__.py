"""subagent-bus: the wire contract and the transport.

The names below are the supported API for programs that publish to or consume from the bus; payload
models live in :mod:`bus.signals`, :mod:`bus.results`, :mod:`bus.findings`, :mod:`bus.directives` and
:mod:`bus.events`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from bus.connection import Client, connect
    from bus.consumer import Ack, Consumer, Delivery
    from bus.envelope import Envelope, decode, deterministic_id, encode, new_envelope
    from bus.errors import (
        BusError,
        CommandFailed,
        ConfigError,
        ConnectionFailed,
        DecodeError,
        EmbeddedRedisError,
        EncodeError,
        EnvelopeTooLarge,
        NamespaceMissing,
        PermissionDenied,
        ProtocolError,
    )
    from bus.keys import Keys, StreamKind, open_namespace
    from bus.payloads import EnvelopeType, Kind
    from bus.publisher import Publisher
    from bus.settings import Settings

__all__ = [
    "Ack",
    "BusError",
    "Client",
    "CommandFailed",
    "ConfigError",
    "ConnectionFailed",
    "Consumer",
    "DecodeError",
    "Delivery",
    "EmbeddedRedisError",
    "EncodeError",
    "Envelope",
    "EnvelopeTooLarge",
    "EnvelopeType",
    "Keys",
    "Kind",
    "NamespaceMissing",
    "PermissionDenied",
    "ProtocolError",
    "Publisher",
    "Settings",
    "StreamKind",
    "connect",
    "decode",
    "deterministic_id",
    "encode",
    "new_envelope",
    "open_namespace",
]

_HOME: Final = {
    "Client": "bus.connection",
    "connect": "bus.connection",
    "Ack": "bus.consumer",
    "Consumer": "bus.consumer",
    "Delivery": "bus.consumer",
    "Envelope": "bus.envelope",
    "decode": "bus.envelope",
    "deterministic_id": "bus.envelope",
    "encode": "bus.envelope",
    "new_envelope": "bus.envelope",
    "BusError": "bus.errors",
    "CommandFailed": "bus.errors",
    "ConfigError": "bus.errors",
    "ConnectionFailed": "bus.errors",
    "DecodeError": "bus.errors",
    "EmbeddedRedisError": "bus.errors",
    "EncodeError": "bus.errors",
    "EnvelopeTooLarge": "bus.errors",
    "NamespaceMissing": "bus.errors",
    "PermissionDenied": "bus.errors",
    "ProtocolError": "bus.errors",
    "Keys": "bus.keys",
    "StreamKind": "bus.keys",
    "open_namespace": "bus.keys",
    "EnvelopeType": "bus.payloads",
    "Kind": "bus.payloads",
    "Publisher": "bus.publisher",
    "Settings": "bus.settings",
}
"""The module each name comes from. They are imported when first used (PEP 562), not with the package:
the console script imports it first, and a Ctrl-C during a second of imports would end in a traceback
(:mod:`bus.entry`)."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'bus' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
