"""The commit script writes all of a batch or nothing, even when one of its writes would fail.

Redis keeps what a script wrote before one of its commands failed; a batch applied again after such a
failure would write its first entries twice. The script checks every write before the first.
"""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest
import redis

from bus.stream_replies import stream_entries
from coordinator.commit import COMMIT_SCRIPT, Commit


def _commit() -> Commit:
    """A batch that appends an event, then writes a group state field."""
    commit = Commit("lease", "signals", "version")
    commit.xadd_data("events", b"decided")
    commit.hset("group", "meta", b"{}")
    return commit


def _run(client: redis.Redis, commit: Commit) -> object:
    keys, argv = commit.script_args("token", "coordinator", 5000, 0)
    return client.eval(COMMIT_SCRIPT, len(keys), *keys, *argv)


def test_a_write_to_a_key_of_another_type_fails_the_batch_before_anything_is_written(server_url: str) -> None:
    client = redis.Redis.from_url(server_url)
    client.set("lease", "token")
    client.set("group", "not a hash")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE group holds a string, not a hash"):
        _run(client, _commit())
    assert client.exists("events", "version") == 0
    client.delete("group")
    assert _run(client, _commit()) == b"ok"
    assert (client.xlen("events"), client.hgetall("group"), client.get("version")) == (
        1,
        {b"meta": b"{}"},
        b"1",
    )
    client.close()


@pytest.mark.parametrize(
    ("denied", "message"),
    [
        ("hset", "this user may not HSET group: nothing of the batch was written"),
        # the checks themselves need TYPE, which the coordinator role of 0.1.0 did not have
        ("type", r"may not TYPE events: .* apply the rules of this one"),
    ],
)
def test_a_write_the_user_may_not_make_fails_the_batch_before_anything_is_written(
    server_url: str, denied: str, message: str
) -> None:
    admin = redis.Redis.from_url(server_url)
    admin.set("lease", "token")
    admin.acl_setuser("limited", enabled=True, nopass=True, keys=["*"], commands=["+@all", f"-{denied}"])
    client = redis.Redis.from_url(server_url, username="limited", password="")
    with pytest.raises(redis.ResponseError, match=message):
        _run(client, _commit())
    assert admin.exists("events", "version", "group") == 0
    client.close()
    admin.close()


def test_a_stream_without_ids_left_fails_the_batch_before_anything_is_written(server_url: str) -> None:
    """A user that may add to a stream (an adapter, to the dead letters) can add its last possible id."""
    client = redis.Redis.from_url(server_url)
    client.set("lease", "token")
    near = "18446744073709551615-18446744073709551614"  # one id left: a batch of two would stop half-way
    client.xadd("events", {"f": "v"}, id=near)
    client.xdel("events", near)  # gone, but its id stays the stream's last
    commit = _commit()
    commit.xadd_data("events", b"second")
    with pytest.raises(
        redis.ResponseError, match=f"events has .next to. no entry ids left: its last is {near}"
    ):
        _run(client, commit)
    assert (client.xlen("events"), client.exists("group", "version")) == (0, 0)
    client.close()


def test_a_batch_of_thousands_is_acked_and_remembered_whole(server_url: str) -> None:
    """Lua's unpack stops at about 8 000 values: the acks and a long list go out in slices."""
    client = redis.Redis.from_url(server_url)
    client.set("lease", "token")
    client.xgroup_create("signals", "coordinator", id="0", mkstream=True)
    for start in range(0, 9000, 1000):
        pipe = client.pipeline(transaction=False)
        for n in range(start, start + 1000):
            pipe.xadd("signals", {"data": b"x"}, id=f"1-{n + 1}")
        pipe.execute()
    client.xreadgroup("coordinator", "c", {"signals": ">"}, count=9000)
    commit = Commit("lease", "signals", "version")
    commit.entry_ids = [b"1-%d" % (n + 1) for n in range(9000)]
    commit.rpush_trim("seen", [str(n) for n in range(9000)], 10_000)
    assert _run(client, commit) == b"ok"
    assert client.xpending("signals", "coordinator")["pending"] == 0
    assert client.llen("seen") == 9000 and client.lindex("seen", -1) == b"8999"
    client.close()


def _directive(envelope_id: str) -> bytes:
    """The data of an inbox entry as the coordinator writes it: its envelope id first."""
    return b'{"id":' + orjson.dumps(envelope_id) + b',"v":1,"kind":"directive"}'


def _inbox(client: redis.Redis, *envelope_ids: str) -> None:
    for envelope_id in envelope_ids:
        client.xadd("inbox", {"data": _directive(envelope_id)})


def _acking(*envelope_ids: str) -> Commit:
    commit = _commit()
    commit.ack_unread("inbox", "adapter", envelope_ids)
    return commit


def _next(client: redis.Redis) -> list[str]:
    """The envelope ids the inbox's readers get next, in order."""
    reply = client.xreadgroup("adapter", "adapter", {"inbox": ">"})
    return [orjson.loads(fields[b"data"])["id"] for _, fields in stream_entries(reply)]


def test_inbox_directives_a_new_prompt_carries_are_acknowledged_unread(server_url: str) -> None:
    client = redis.Redis.from_url(server_url)
    client.set("lease", "token")
    client.xgroup_create("inbox", "adapter", id="0", mkstream=True)
    _inbox(client, "read.0", "read.1", "kept.0")
    assert _next(client) == ["read.0", "read.1", "kept.0"]  # delivered, not acknowledged
    _inbox(client, "new.0", "new.1", "later.0", "new.2")
    # an id with a character JSON escapes, and one that is only the start of another's, match exactly
    _inbox(client, 'odd"id')
    assert _run(client, _acking("read.0", "read.1", "new.0", "new.1", "new.2", "kept")) == b"ok"
    # what no reader has had is read up to the last carried directive: one the prompt does not carry is
    # left pending as a dead adapter leaves one (idle, its delivery not counted), the next reader's first
    pending: Any = client.xpending_range("inbox", "adapter", "-", "+", 10)
    data = {entry_id: fields[b"data"] for entry_id, fields in cast(Any, client.xrange("inbox"))}
    left = [
        (data[p["message_id"]], p["times_delivered"], p["time_since_delivered"] > 3_600_000) for p in pending
    ]
    assert left == [(_directive("kept.0"), 1, False), (_directive("later.0"), 0, True)]
    assert _next(client) == ['odd"id']
    assert client.xlen("inbox") == 8 and client.xlen("events") == 1  # the rest of the batch written
    client.close()


def test_an_inbox_no_reader_has_read_gets_its_group(server_url: str) -> None:
    client = redis.Redis.from_url(server_url)
    client.set("lease", "token")
    _inbox(client, "carried.0", "left.0")
    assert _run(client, _acking("carried.0")) == b"ok"
    assert _next(client) == ["left.0"]
    client.delete("version")  # each run commits at version 0
    assert _run(client, _acking("left.0")) == b"ok"  # pending now
    assert client.xpending("inbox", "adapter")["pending"] == 0
    client.delete("inbox", "version")
    assert _run(client, _acking("carried.0")) == b"ok"
    assert client.exists("inbox") == 0  # no inbox is made for nothing
    client.close()


def test_acknowledging_in_an_inbox_of_another_type_or_without_permission_fails_before_any_write(
    server_url: str,
) -> None:
    admin = redis.Redis.from_url(server_url)
    admin.set("lease", "token")
    admin.set("inbox", "not a stream")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE inbox holds a string, not a stream"):
        _run(admin, _acking("carried.0"))
    assert admin.exists("events", "group", "version") == 0
    admin.delete("inbox")
    _inbox(admin, "carried.0")
    admin.xgroup_create("inbox", "adapter", id="0")
    admin.acl_setuser("limited", enabled=True, nopass=True, keys=["*"], commands=["+@all", "-xreadgroup"])
    limited = redis.Redis.from_url(server_url, username="limited", password="")
    with pytest.raises(redis.ResponseError, match="may not XREADGROUP inbox: nothing of the batch"):
        _run(limited, _acking("carried.0"))
    assert admin.exists("events", "group", "version") == 0 and _next(admin) == ["carried.0"]
    limited.close()
    admin.close()
