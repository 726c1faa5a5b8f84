"""``subagent-bus tail``: the command that prints a stream kind's entries, one line each, as they come.

It picks the streams (a kind across every shard, or an agent's inbox), checks its options, and prints
each entry :mod:`bus.display`'s way; the reading, merging by id and following through lost connections
is :func:`bus.tail.tail_streams`.
"""

from __future__ import annotations

from typing import Final

import click

from bus.cli_connection import redis_options, run_command
from bus.connection import connect
from bus.display import cut, format_item
from bus.errors import ConfigError
from bus.keys import ConsumerGroup, Keys, StreamKind, open_namespace
from bus.params import FiniteFloatRange, an_id, not_blank
from bus.retention import stream_id
from bus.settings import Settings
from bus.tail import Item, TailOptions, tail_streams

__all__ = ["tail"]


def _streams(keys: Keys, stream: str, group_id: str | None) -> list[tuple[int, str]]:
    if stream.startswith("inbox:"):
        agent = stream.removeprefix("inbox:")
        if not agent:
            raise click.BadParameter("inbox:AGENT needs an agent id", param_hint="--stream")
        shards = [keys.shard_of(group_id)] if group_id else list(keys.all_shards())
        return [(shard, keys.inbox(shard, agent)) for shard in shards]
    if group_id is not None:
        raise click.BadParameter("applies only to --stream inbox:AGENT", param_hint="--group-id")
    try:
        kind = StreamKind(stream)
    except ValueError:
        choices = ", ".join(k.value for k in StreamKind)
        raise click.BadParameter(
            f"{stream!r} is not one of {choices} or inbox:AGENT", param_hint="--stream"
        ) from None
    return [(shard, keys.stream(shard, kind)) for shard in keys.all_shards()]


async def _tail(
    settings: Settings, stream: str, group_id: str | None, options: TailOptions, as_json: bool
) -> int:
    client = await connect(settings)
    try:
        keys = await open_namespace(client, settings.namespace, settings.shards, create=False)
        streams = _streams(keys, stream, group_id)
        dead = stream == StreamKind.DEAD.value

        def emit(item: Item) -> bool:
            line, warning = format_item(item, as_json=as_json, dead=dead)
            if warning:
                click.echo(warning, err=True)
            if line is None:
                return False
            click.echo(line)
            return True

        return await tail_streams(client, streams, options, emit)
    finally:
        await client.aclose()


_READERS: Final = {
    ConsumerGroup.COORDINATOR: "coordinators",
    ConsumerGroup.LAUNCHERS: "launchers",
    ConsumerGroup.ADAPTER: "adapters",
}


def _own_group(ctx: click.Context, param: click.Parameter, group: str | None) -> str | None:
    """A consumer group of the reader's own: an entry read in one of the bus's would be acknowledged,
    and so taken from the readers it was written for."""
    if group == "":
        raise click.BadParameter("a consumer group needs a name")
    if group in _READERS:
        raise click.BadParameter(
            f"{group!r} is the group the bus's {_READERS[ConsumerGroup(group)]} read with: what tail read "
            "with it would be acknowledged, and taken from them; choose a name of your own"
        )
    return group


@click.command("tail")
@click.option(
    "--stream",
    default="signals",
    show_default=True,
    help="signals, events, findings, dead, tasks, or inbox:AGENT (every shard; --group-id picks one).",
)
@click.option(
    "--group",
    default=None,
    callback=_own_group,
    help="Read with this consumer group (created at --from) and ack; not one of the bus's own (coordinator, "
    "launchers, adapter).",
)
@click.option(
    "--consumer",
    default=None,
    callback=not_blank,
    help="With --group: this consumer name (default: one per process). A tail restarted under the same "
    "name prints what a killed one held first; under a new one, only once that has been idle 30 s.",
)
@click.option(
    "--group-id",
    default=None,
    callback=an_id,
    help="For inbox:AGENT: the agent's task group, to read its shard only (needed with --group).",
)
@click.option(
    "--from",
    "start",
    default="$",
    show_default=True,
    help="Start after this entry id; 0 = all, $ = new. With --group, where the group starts when it is "
    "created here; a group that exists goes on from where it is.",
)
@click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after N entries.")
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=0, min_open=True),
    default=None,
    help="Stop after S seconds without entries (the coordinators' TICK entries, which come every few "
    "seconds, do not count).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print each envelope's JSON as stored, one per line (a line break in it as a space).",
)
@redis_options
def tail(
    *,
    settings: Settings,
    stream: str,
    group: str | None,
    consumer: str | None,
    group_id: str | None,
    start: str,
    count: int | None,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Print the entries of a stream across all shards, oldest first, then follow.

    Without --count or --timeout it follows until Ctrl-C (exit status 130). Without --timeout a lost
    connection is said on stderr and retried until the server answers, resuming where it stopped; with
    --timeout it is an error (exit status 1). With --group, what was read and not printed (past --count)
    goes to the group's next reader first. Entries that are not valid envelopes are reported on stderr
    and skipped. With --json, dead letters print as one JSON object each: the dead-letter fields plus the
    original data (parsed when it is JSON).
    """
    try:
        start = start if start == "$" else stream_id(start)
    except ConfigError:
        raise click.BadParameter(
            f"{cut(repr(start), 80)} is not 0, $, MS or MS-SEQ (each number below 2^64)", param_hint="--from"
        ) from None
    if consumer is not None and group is None:
        raise click.UsageError("--consumer names a consumer of --group: give the group too")
    if group is not None and group_id is None and stream.startswith("inbox:"):
        # the group (and the stream) would be made on every shard, for an inbox that is on one of them
        raise click.UsageError("--group on inbox:AGENT needs --group-id, the agent's task group")
    dead = stream == StreamKind.DEAD.value
    options = TailOptions(
        start=start, count=count, timeout=timeout, group=group, consumer=consumer, all_fields=dead
    )
    run_command(_tail(settings, stream, group_id, options, as_json))
