"""One exception tree for the whole project.

Every error this project raises on purpose derives from :class:`BusError`, so a caller can catch one type.
Errors of the redis client are translated into this tree at one seam (:mod:`bus.connection`).
"""

from __future__ import annotations

__all__ = [
    "BusError",
    "CommandFailed",
    "ConfigError",
    "ConnectionFailed",
    "CredentialsRefused",
    "DecodeError",
    "EmbeddedRedisError",
    "EncodeError",
    "EnvelopeTooLarge",
    "NamespaceMissing",
    "PermissionDenied",
    "ProtocolError",
]


class BusError(Exception):
    """Base class of every error raised by subagent-bus."""


class ConfigError(BusError):
    """A setting, URL, policy file or command-line value is invalid."""


class NamespaceMissing(ConfigError):
    """The namespace does not exist on the server, and the caller asked not to create it."""


class ConnectionFailed(BusError):
    """The Redis server could not be reached or answered with a transport error."""


class CredentialsRefused(ConnectionFailed):
    """The Redis server refused the URL's user name or password: no outage, which waiting would end."""


class CommandFailed(BusError):
    """The Redis server refused a command (wrong key type, missing consumer group, script error...)."""


class PermissionDenied(CommandFailed):
    """The server's ACL refused a command to the connection's user (``NOPERM``)."""


class EncodeError(BusError):
    """An envelope has a text that JSON in UTF-8 cannot carry (a lone surrogate, ``"\\ud800"``); it was
    not published."""


class EnvelopeTooLarge(BusError):
    """An envelope is over ``MAX_ENVELOPE_BYTES`` once encoded; it was not published."""


class EmbeddedRedisError(BusError):
    """The embedded local Redis server could not be found or started."""


class DecodeError(BusError):
    """A stream entry is not a valid envelope (bad JSON, unknown type, failed validation)."""


class ProtocolError(BusError):
    """Agent output violates the signal protocol (reported by the parser as an error item)."""
