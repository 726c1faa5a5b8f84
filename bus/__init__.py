"""subagent-bus: the wire contract and the transport.

The names below are the supported API for programs that publish to or consume from the bus; payload
models live in :mod:`bus.signals`, :mod:`bus.results`, :mod:`bus.findings`, :mod:`bus.directives` and
:mod:`bus.events`.
"""

from __future__ import annotations

from bus.connection import Client, connect
from bus.consumer import Ack, Consumer, Delivery
from bus.envelope import Envelope, EnvelopeType, Kind, decode, deterministic_id, encode, new_envelope
from bus.errors import (
    BusError,
    CommandFailed,
    ConfigError,
    ConnectionFailed,
    DecodeError,
    EmbeddedRedisError,
    EnvelopeTooLarge,
    NamespaceMissing,
    PermissionDenied,
    ProtocolError,
)
from bus.keys import Keys, StreamKind, open_namespace
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
