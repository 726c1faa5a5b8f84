"""Publishing envelopes: one ``XADD`` of one field, ``data``, into the stream of the envelope's shard
(packed by :mod:`bus.wire`)."""

from __future__ import annotations

from collections.abc import Sequence

from bus import wire
from bus.connection import Client, as_text
from bus.envelope import MAX_ENVELOPE_BYTES, Envelope, encode
from bus.errors import EnvelopeTooLarge
from bus.human_key import SIGNATURE_FIELD, signature
from bus.keys import Keys, StreamKind

__all__ = ["Publisher"]


class Publisher:
    """Appends envelopes to the streams of a namespace.

    The shard is ``keys.shard_of(envelope.group_id)``, so a group's entries stay in order in one
    stream. ``maxlen`` caps each stream approximately on every write (``XADD MAXLEN ~``); that cap does
    not look at consumer groups and can drop entries nobody has read yet, so it is off by default:
    :mod:`bus.retention` trims without losing unread entries.
    """

    def __init__(self, client: Client, keys: Keys, *, maxlen: int | None = None) -> None:
        if maxlen is not None and maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self.client = client
        self.keys = keys
        self.maxlen = maxlen

    def stream_for(self, envelope: Envelope, kind: StreamKind) -> str:
        return self.keys.stream(self.keys.shard_of(envelope.group_id), kind)

    async def publish(
        self, envelope: Envelope, kind: StreamKind = StreamKind.SIGNALS, *, signed_with: bytes | None = None
    ) -> str:
        """Append one envelope; returns its entry id. ``signed_with``: the key a human command is signed
        with (:mod:`bus.human_key`)."""
        data = _encoded(envelope)
        signed = () if signed_with is None else (SIGNATURE_FIELD, signature(signed_with, data))
        return await self._add(self.stream_for(envelope, kind), data, *signed)

    async def publish_many(
        self, envelopes: Sequence[Envelope], kind: StreamKind = StreamKind.SIGNALS
    ) -> list[str]:
        """Append several envelopes in one pipelined round trip per server; ids in the input order.

        Every envelope is encoded and size-checked before anything is sent, so a too-large one refuses
        the whole batch. The pipeline is not a transaction (on a cluster its commands go to the node of
        each shard); if the connection fails midway, some entries may have been written.
        """
        commands = [self._xadd(self.stream_for(envelope, kind), _encoded(envelope)) for envelope in envelopes]
        ids = await wire.execute_routed(self.client, commands)
        return [as_text(entry_id) for entry_id in ids]

    async def send_directive(self, envelope: Envelope) -> str:
        """Append a directive to the inbox of ``envelope.agent_id`` in its group's shard."""
        inbox = self.keys.inbox(self.keys.shard_of(envelope.group_id), envelope.agent_id)
        return await self._add(inbox, _encoded(envelope))

    async def _add(self, stream: str, data: bytes, *fields: bytes) -> str:
        key, command = self._xadd(stream, data, *fields)
        (entry_id,) = await wire.execute(self.client, key, [command])
        return as_text(entry_id)  # bytes, or text from a client made with decode_responses

    def _xadd(self, stream: str, data: bytes, *fields: bytes) -> tuple[bytes, wire.Command]:
        """``XADD stream [MAXLEN ~ n] * data <data> [name value]...``, with the key that routes it."""
        key = stream.encode()
        cap = (b"MAXLEN", b"~", b"%d" % self.maxlen) if self.maxlen is not None else ()
        return key, (b"XADD", key, *cap, b"*", b"data", data, *fields)


def _encoded(envelope: Envelope) -> bytes:
    data = encode(envelope)
    if len(data) > MAX_ENVELOPE_BYTES:
        raise EnvelopeTooLarge(
            f"envelope {envelope.id} ({envelope.type.value}) is {len(data)} bytes encoded, "
            f"over the {MAX_ENVELOPE_BYTES}-byte limit; it was not published"
        )
    return data
