"""A retired group's stored state is deleted in the tick's commit, and a later entry starts it anew."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from adapter_kit import CLI, run, run_ok
from workers.kit import connected, entries

from bus.connection import Client
from bus.envelope import Envelope, Payload, decode, encode, new_envelope
from bus.events import AgentStarted, Decision, DecisionType, Heartbeat, Tick
from bus.findings import Finding
from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher
from bus.signals import ClarificationNeeded, CompletionReport, CompletionStatus, Question
from coordinator.policy import Policy
from coordinator.service import TICK_GROUP, Coordinator, CoordinatorOptions
from coordinator.store import group_key, merged_key, seen_key
from coordinator.view import load_shard

DONE, BUSY = "done", "busy"
POLICY = Policy(retire_after_seconds=7 * 86_400)
AGENT = "bg-1"


def _envelope(payload: Payload, group: str, agent: str = AGENT) -> Envelope:
    return new_envelope(payload, agent_id=agent, group_id=group, source="test")


async def _finished_group(client: Client, keys: Keys) -> None:
    """Group DONE: one agent that reported a finding and completed; group BUSY: one running agent."""
    completed = CompletionReport(
        agent_id=AGENT, status=CompletionStatus.SUCCESS, summary="Done.", timestamp=datetime.now(UTC)
    )
    await Publisher(client, keys).publish_many(
        [
            _envelope(AgentStarted(task="scan"), DONE),
            _envelope(Finding(title="t", file="a.py", line=1, agent="scanner"), DONE),
            _envelope(completed, DONE),
            _envelope(AgentStarted(task="scan"), BUSY, "bg-2"),
        ]
    )


async def _tick(client: Client, keys: Keys, days: float) -> None:
    """A coordinator's tick of a server whose clock went ``days`` on (the entry's id tells that time too)."""
    now = datetime.now(UTC) + timedelta(days=days)
    tick = new_envelope(Tick(now=now), agent_id="test", group_id=TICK_GROUP, source="tick")
    stream_id = f"{round(now.timestamp() * 1000)}-*"
    await client.xadd(keys.stream(0, StreamKind.SIGNALS), {"data": encode(tick)}, id=stream_id)


async def _stored_keys(client: Client, keys: Keys, group: str) -> list[int]:
    return [await client.exists(key(keys, 0, group)) for key in (group_key, merged_key, seen_key)]


async def _applied(client: Client, namespace: str) -> Keys:
    """A namespace of one shard with the two groups applied and stored."""
    keys = await open_namespace(client, namespace, 1)
    await _finished_group(client, keys)
    assert await _coordinator(client, keys, "c").run(burst=True) == 4
    assert await _stored_keys(client, keys, DONE) == [1, 1, 1]
    return keys


def _coordinator(client: Client, keys: Keys, name: str, batch: int = 100) -> Coordinator:
    return Coordinator(client, keys, POLICY, CoordinatorOptions(name=name, batch=batch, tick_interval_s=3600))


async def test_a_tick_deletes_the_state_of_a_quiet_settled_group(redis_url: str) -> None:
    async with connected(redis_url) as client:
        keys = await _applied(client, "retire")
        await _tick(client, keys, 6)  # not quiet long enough yet
        assert await _coordinator(client, keys, "d").run(burst=True) == 1
        assert set(await load_shard(client, keys, 0)) == {DONE, BUSY}

        await _tick(client, keys, 8)
        assert await _coordinator(client, keys, "e").run(burst=True) == 1
        assert await _stored_keys(client, keys, DONE) == [0, 0, 0]
        assert await client.smembers(keys.groups(0)) == {BUSY.encode()}
        assert set(await load_shard(client, keys, 0)) == {BUSY}
        events = await entries(client, keys.stream(0, StreamKind.EVENTS))
        retired = [
            envelope.group_id
            for envelope in (decode(fields[b"data"]) for _, fields in events)
            if isinstance(envelope.payload, Decision)
            and envelope.payload.decision is DecisionType.GROUP_RETIRED
        ]
        assert retired == [DONE]

        said = "group 'done' was retired: nothing was applied to it for the policy's retire_after_seconds"
        where = ["--redis-url", redis_url, "--namespace", "retire"]
        status = await run_ok([CLI, "status", "--group", DONE, *where])
        assert status.decode().startswith(said), status
        code, _, err = await run([CLI, "answer", AGENT, "Q1=yes", "--group", DONE, *where])
        assert code == 1 and said in err.decode(), err
        code, _, err = await run([CLI, "answer", AGENT, "Q1=yes", *where])  # the group found by the agent
        assert code == 1 and f"agent {AGENT!r} was in group 'done': {said}" in err.decode(), err
        code, out, err = await run([CLI, "findings", "--merged", "--group", DONE, *where])
        assert (code, out.decode(), err.decode().startswith(said)) == (0, "0 merged findings\n", True), err
        assert "(`subagent-bus replay --group done --namespace retire` recomputes" in err.decode()
        code, out, err = await run([CLI, "replay", "--group", DONE, *where])
        assert (code, out.decode().splitlines()[-1]) == (0, "1 merged finding recomputed for group 'done'")
        assert (
            "group 'done' was retired: this view holds the reports of each of its lives since id 0"
            in err.decode()
        )


async def test_a_later_entry_starts_the_group_anew_in_the_next_batch_or_the_same(redis_url: str) -> None:
    async with connected(redis_url) as client:
        for batch in (1, 100):  # the tick and the entry in two batches (the process forgot it), or one
            keys = await _applied(client, f"retire-{batch}")
            await _tick(client, keys, 8)
            await Publisher(client, keys).publish_many([_envelope(Heartbeat(pid=1), DONE, "bg-3")])
            assert await _coordinator(client, keys, "d", batch).run(burst=True) == 2
            again = (await load_shard(client, keys, 0))[DONE]
            assert (again.applied, list(again.agents), again.findings) == (1, ["bg-3"], {}), batch
            assert await client.hlen(merged_key(keys, 0, DONE)) == 0
            assert await client.hkeys(group_key(keys, 0, DONE)) == [b"meta", b"a:bg-3"]


async def test_a_group_with_entries_in_the_tick_s_batch_before_it_is_retired(redis_url: str) -> None:
    async with connected(redis_url) as client:
        keys = await _applied(client, "retire-after")
        await Publisher(client, keys).publish_many([_envelope(Heartbeat(pid=1), DONE)])
        await _tick(client, keys, 8)
        assert await _coordinator(client, keys, "d").run(burst=True) == 2
        assert await _stored_keys(client, keys, DONE) == [0, 0, 0]
        assert set(await load_shard(client, keys, 0)) == {BUSY}


async def test_a_retired_group_s_own_agents_do_not_start_it_again(redis_url: str) -> None:
    """Its tombstone: an agent's heartbeat is dropped, its other entries dead-lettered with the reason,
    and only its AGENT_STARTED starts the group anew (in the tick's batch or a later one)."""
    async with connected(redis_url) as client:
        for batch in (100, 1):
            keys = await _applied(client, f"tomb-{batch}")
            await _tick(client, keys, 8)
            late = CompletionReport(agent_id=AGENT, status=CompletionStatus.SUCCESS, summary="Again.")
            await Publisher(client, keys).publish_many(
                [_envelope(Heartbeat(pid=1), DONE), _envelope(late, DONE)]
            )
            assert await _coordinator(client, keys, "d", batch).run(burst=True) == 3
            assert set(await load_shard(client, keys, 0)) == {BUSY}, batch
            assert await client.hkeys(keys.state(0, "retired")) == [DONE.encode()]
            dead = [fields for _, fields in await entries(client, keys.stream(0, StreamKind.DEAD))]
            assert [f[b"reason"].decode() for f in dead] == [
                f"group 'done' was retired, with agent {AGENT!r} in it: its COMPLETION_REPORT came after "
                "(an AGENT_STARTED of the agent brings it back)"
            ]

            await Publisher(client, keys).publish_many([_envelope(AgentStarted(task="again"), DONE)])
            assert await _coordinator(client, keys, "e", batch).run(burst=True) == 1
            again = (await load_shard(client, keys, 0))[DONE]
            assert (again.applied, list(again.agents)) == (1, [AGENT])
            assert await client.hlen(keys.state(0, "retired")) == 0


async def test_a_group_started_anew_keeps_out_the_old_agents_until_they_start_again(redis_url: str) -> None:
    """A new agent starts a retired group anew; an old agent's adapter still running must not register
    it there (it would be declared lost and retried): its tombstone stays until its AGENT_STARTED."""
    async with connected(redis_url) as client:
        for batch in (
            100,
            1,
        ):  # the retirement, the new agent and the old agent's entries in one batch or not
            keys = await _applied(client, f"anew-{batch}")
            await _tick(client, keys, 8)
            late = CompletionReport(agent_id=AGENT, status=CompletionStatus.SUCCESS, summary="Again.")
            await Publisher(client, keys).publish_many(
                [
                    _envelope(AgentStarted(task="next"), DONE, "bg-3"),
                    _envelope(Heartbeat(pid=1), DONE),
                    _envelope(late, DONE),
                ]
            )
            assert await _coordinator(client, keys, "d", batch).run(burst=True) == 4
            again = (await load_shard(client, keys, 0))[DONE]
            assert list(again.agents) == ["bg-3"], batch
            assert await client.hget(keys.state(0, "retired"), DONE) == f'["{AGENT}"]'.encode()
            dead = [fields for _, fields in await entries(client, keys.stream(0, StreamKind.DEAD))]
            assert [f[b"reason"].decode() for f in dead] == [
                f"group 'done' was retired, with agent {AGENT!r} in it: its COMPLETION_REPORT came after "
                "(an AGENT_STARTED of the agent brings it back)"
            ]

            if batch == 1:  # the human side, once
                where = ["--redis-url", redis_url, "--namespace", f"anew-{batch}"]
                code, _, err = await run([CLI, "answer", AGENT, "Q1=yes", *where])
                said = f"agent {AGENT!r} was in group 'done' before it was retired; the group started anew without"
                assert code == 1 and said in err.decode(), err

            done = CompletionReport(agent_id="bg-3", status=CompletionStatus.SUCCESS, summary="Done.")
            await Publisher(client, keys).publish_many([_envelope(done, DONE, "bg-3")])
            await _tick(client, keys, 16)  # retired again: the tombstone names the agents of both
            assert await _coordinator(client, keys, "e", batch).run(burst=True) == 2
            assert DONE not in await load_shard(client, keys, 0)
            assert await client.hget(keys.state(0, "retired"), DONE) == f'["{AGENT}","bg-3"]'.encode()

            await Publisher(client, keys).publish_many(
                [
                    _envelope(AgentStarted(task="again"), DONE),
                    _envelope(AgentStarted(task="too"), DONE, "bg-3"),
                ]
            )
            assert await _coordinator(client, keys, "f", batch).run(burst=True) == 2
            assert sorted((await load_shard(client, keys, 0))[DONE].agents) == [AGENT, "bg-3"]
            assert await client.hlen(keys.state(0, "retired")) == 0


def _asks(agent: str) -> Envelope:
    question = Question(question_id="Q1", text="Keep going?")
    asked = ClarificationNeeded(agent_id=agent, blocked_at="scan", reason="unsure", questions=[question])
    return _envelope(asked, DONE, agent)


async def test_a_command_s_check_starts_a_retired_group_anew_as_the_coordinator_will(redis_url: str) -> None:
    """With no coordinator running, a retired group's new agent asks a question: the answer is accepted
    before any coordinator applied the question, and the coordinator then applies both."""
    async with connected(redis_url) as client:
        keys = await _applied(client, "check-anew")
        await _tick(client, keys, 8)
        assert await _coordinator(client, keys, "d").run(burst=True) == 1
        await Publisher(client, keys).publish_many([_envelope(AgentStarted(task="next"), DONE, "bg-3")])
        await Publisher(client, keys).publish_many([_asks("bg-3")])

        where = ["--redis-url", redis_url, "--namespace", "check-anew"]
        out = await run_ok([CLI, "answer", "bg-3", "Q1=yes", *where])
        assert b"queued " in out, out
        assert await _coordinator(client, keys, "e").run(burst=True) == 3
        events = [
            decode(fields[b"data"]) for _, fields in await entries(client, keys.stream(0, StreamKind.EVENTS))
        ]
        decided = [e.payload for e in events if isinstance(e.payload, Decision) and e.agent_id == "bg-3"]
        assert DecisionType.QUESTION_ANSWERED in [d.decision for d in decided], decided
        assert DecisionType.REJECTED not in [d.decision for d in decided], decided
        assert await client.xlen(keys.inbox(0, "bg-3")) == 1  # the CLARIFICATION RESPONSE


async def test_a_command_s_check_keeps_an_old_agent_s_late_entries_out_as_the_coordinator_does(
    redis_url: str,
) -> None:
    """A group started anew by a new agent keeps its old agent's re-published question out (the
    coordinator dead-letters it): an answer to it is refused, not published to be dead-lettered too."""
    async with connected(redis_url) as client:
        keys = await _applied(client, "check-late")
        await _tick(client, keys, 8)
        await Publisher(client, keys).publish_many([_envelope(AgentStarted(task="next"), DONE, "bg-3")])
        assert await _coordinator(client, keys, "d").run(burst=True) == 2
        await Publisher(client, keys).publish_many([_asks(AGENT)])
        published = await client.xlen(keys.stream(0, StreamKind.SIGNALS))

        where = ["--redis-url", redis_url, "--namespace", "check-late"]
        code, _, err = await run([CLI, "answer", AGENT, "Q1=yes", "--group", DONE, *where])
        assert (code, err.decode().strip()) == (1, f"Error: no agent {AGENT!r} in group {DONE!r}"), err
        code, _, err = await run([CLI, "answer", AGENT, "Q1=yes", *where])
        said = f"agent {AGENT!r} was in group 'done' before it was retired; the group started anew without"
        assert code == 1 and said in err.decode(), err
        assert await client.xlen(keys.stream(0, StreamKind.SIGNALS)) == published
