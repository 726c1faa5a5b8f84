"""Human commands given while no coordinator runs: they wait on the bus, `inbox` shows each item with the
command queued for it, and a second command that the first settles is refused when it is given (it
would be rejected when applied), until a coordinator applies what is queued."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from adapter_kit import open_bus
from test_human_commands import DELEGATE, agent_says, clarify, cli, coordinate, directives, ok, said, stop

from bus.consumer import stream_entries
from bus.directives import AnswerItem, HumanAnswer, HumanResolve
from bus.envelope import Payload, new_envelope
from bus.keys import ConsumerGroup
from bus.publisher import Publisher
from coordinator.queued import load_queued


@pytest.fixture(autouse=True)
def _scratch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def two_questions(agent_id: str) -> str:
    return clarify(agent_id).replace(
        "can_resume_with:", "  - question_id: Q2\n    text: Which expiry?\ncan_resume_with:"
    )


def refused(url: str, *args: str) -> str:
    published = len(said(url))
    done = cli(url, *args)
    assert done.returncode == 1, f"{args}: {done.stdout}\n{done.stderr}"
    assert len(said(url)) == published, "a refused command published nothing"
    return done.stderr


def test_answers_queued_for_every_question_refuse_another_until_applied(redis_url: str) -> None:
    agent_says(redis_url, "asker", "g", two_questions("asker"))
    assert orjson.loads(ok(redis_url, "inbox", "--json"))["queued"] == []  # a signal is not a command
    coordinate(redis_url)

    first = ok(redis_url, "answer", "asker", "Q1=JWT")
    assert "queued answer as " in first and "no coordinator runs now" in first, first
    entry = first.split("queued answer as ", 1)[1].split()[0]
    inbox = ok(redis_url, "inbox")
    assert f"queued: answer {entry}, applied when a coordinator runs" in inbox, inbox
    assert 'subagent-bus answer asker Q2="..."' in inbox and 'answer asker Q1="..."' not in inbox, inbox
    [queued] = orjson.loads(ok(redis_url, "inbox", "--json"))["queued"]
    assert "-" in queued.pop("entry_id")
    assert queued == {
        "id": entry,
        "group_id": "g",
        "agent_id": "asker",
        "command": "ANSWER",
        "question_ids": ["Q1"],
        "request_id": None,
    }

    ok(redis_url, "answer", "asker", "Q1=OAuth2")  # Q2 is still open: answering Q1 again replaces it
    last = ok(redis_url, "answer", "asker", "Q2=1h").split("queued answer as ", 1)[1].split()[0]
    error = refused(redis_url, "answer", "asker", "Q2=2h")
    assert "every open question of agent 'asker' is answered by the answer queued as " in error, error
    assert f"and the answer queued as {last}, which no coordinator has applied yet" in error, error

    coordinate(redis_url)
    [response] = directives(redis_url, "asker")
    answers = {a["question_id"]: a["answer"] for a in response["payload"]["answers"]}
    assert answers == {"Q1": "OAuth2", "Q2": "1h"}, response
    assert "nothing waits for a human" in ok(redis_url, "inbox")
    assert orjson.loads(ok(redis_url, "inbox", "--json"))["queued"] == []
    status = orjson.loads(ok(redis_url, "status", "--json"))
    assert status[0]["agents"][0]["state"] == "running", status


def test_a_blocker_resolved_in_the_queue_refuses_another_resolution(redis_url: str) -> None:
    agent_says(redis_url, "stuck", "g", stop("stuck", reason="error", kind="error"))
    coordinate(redis_url)
    entry = ok(redis_url, "resolve", "stuck", "--resolution", "fixed").split(" as ", 1)[1].split()[0]
    inbox = ok(redis_url, "inbox")
    assert f"queued: resolve {entry}" in inbox and "subagent-bus recover" not in inbox, inbox
    for again in (
        ["resolve", "stuck", "--resolution", "again"],
        ["recover", "stuck", "--option", "delegate"],
    ):
        error = refused(redis_url, *again)
        assert f"the blocker of agent 'stuck' is already resolved by the resolve queued as {entry}" in error

    # The agent stops again after the resolution: what a new resolution is about is not known before a
    # coordinator applies the queue, so it is not refused (it resolves the second blocker).
    agent_says(redis_url, "stuck", "g", stop("stuck"))
    ok(redis_url, "resolve", "stuck", "--resolution", "fixed again")
    coordinate(redis_url)
    assert "nothing waits for a human" in ok(redis_url, "inbox")


def test_a_delegation_decided_in_the_queue_refuses_another_decision(redis_url: str) -> None:
    agent_says(redis_url, "lead", "g", DELEGATE)
    coordinate(redis_url)
    [delegation] = orjson.loads(ok(redis_url, "inbox", "--json"))["delegations"]
    request = delegation["request_id"]
    entry = ok(redis_url, "approve", request).split(" as ", 1)[1].split()[0]
    assert f"queued: approve {entry}" in ok(redis_url, "inbox")
    error = refused(redis_url, "deny", request, "--reason", "too late")
    assert f"request '{request}' is already decided by the approve queued as {entry}" in error, error
    coordinate(redis_url)
    assert "nothing waits for a human" in ok(redis_url, "inbox")


def test_what_a_coordinator_took_but_did_not_commit_is_still_queued(redis_url: str) -> None:
    """An entry read by a coordinator that died before its commit is pending, not applied; one it
    committed (acknowledged) is applied; one not read yet is queued."""

    def answer(question: str) -> Payload:
        return HumanAnswer(answers=[AnswerItem(question_id=question, answer="x")])

    async def scenario() -> tuple[list[str], list[str]]:
        async with open_bus(redis_url) as bus:
            stream = bus.stream("g")
            group = ConsumerGroup.COORDINATOR.value
            await bus.client.xgroup_create(stream, group, id="0", mkstream=True)
            publisher = Publisher(bus.client, bus.keys)
            ids = []
            for payload in (answer("Q1"), answer("Q2"), HumanResolve(resolution="r"), answer("Q3")):
                envelope = new_envelope(payload, agent_id="a", group_id="g", source="answer")
                await publisher.publish(envelope)
                ids.append(envelope.id)
            taken = await bus.client.xreadgroup(group, "dead", {stream: ">"}, count=3)
            entry_ids = [i.decode() for i, _ in stream_entries(taken)]
            await bus.client.xack(stream, group, entry_ids[0])  # committed: applied
            queued = await load_queued(bus.client, bus.keys, range(bus.keys.shards))
            assert [q.id for q in queued] == ids[1:]
            return entry_ids, [q.entry_id for q in queued]

    taken, queued = asyncio.run(scenario())
    assert queued[:2] == taken[1:] and len(queued) == 3, (taken, queued)
