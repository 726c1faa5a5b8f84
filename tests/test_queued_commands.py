"""Human commands given while no coordinator runs: they wait on the bus, `inbox` shows each item with the
command queued for it, and a second command that the first settles is refused when it is given (it
would be rejected when applied), until a coordinator applies what is queued."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from adapter_kit import open_bus
from test_human_commands import DELEGATE, agent_says, clarify, cli, coordinate, directives, ok, said, stop

from bus.directives import AnswerItem, HumanAnswer, HumanResolve
from bus.envelope import Envelope, Payload, new_envelope
from bus.events import AgentStarted
from bus.findings import Finding
from bus.keys import DEFAULT_SHARDS, ConsumerGroup, Keys, StreamKind
from bus.publisher import Publisher
from bus.settings import DEFAULT_NAMESPACE
from bus.signals import DelegateWork
from bus.stream_replies import stream_entries
from coordinator import queued as queued_module
from coordinator.policy import Policy
from coordinator.queued import Queued, load_queued, project, projected, queued_before
from coordinator.rules import Outcome, apply
from coordinator.rules.run import Run
from coordinator.state import GroupState
from coordinator.view import load_groups


@pytest.fixture(autouse=True)
def _scratch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


_ASKED = itertools.count()


def asks(agent_id: str, *questions: str) -> str:
    """A CLARIFICATION_NEEDED of these questions (``Q2?``: an optional one), each dated a minute after
    the one before (the same dated block again would be a recap of it)."""
    listed = "".join(
        f"  - question_id: {q.rstrip('?')}\n    text: What about {q.rstrip('?')}?\n"
        + ("    type: optional\n" if q.endswith("?") else "")
        for q in questions
    )
    at = f"2026-01-11T10:{next(_ASKED) % 60:02}:00Z"
    start, _, rest = clarify(agent_id, at).partition("questions:\n")
    return start + "questions:\n" + listed + "can_resume_with:" + rest.split("can_resume_with:", 1)[1]


def queued_as(out: str) -> str:
    assert "queued " in out and " (no coordinator runs now)" in out, out
    return out.split(" as ", 1)[1].split(maxsplit=1)[0]


def refused(url: str, *args: str) -> str:
    published = len(said(url))
    done = cli(url, *args)
    assert done.returncode == 1, f"{args}: {done.stdout}\n{done.stderr}"
    assert len(said(url)) == published, "a refused command published nothing"
    return done.stderr


def rejections(url: str) -> list[str]:
    out = ok(url, "tail", "--stream", "events", "--from", "0", "--timeout", "0.5", "--json")
    decisions = [orjson.loads(line)["payload"] for line in out.splitlines()]
    return [d["detail"] for d in decisions if d.get("decision") == "rejected"]


def test_answers_queued_for_every_question_refuse_another_until_applied(redis_url: str) -> None:
    agent_says(redis_url, "asker", "g", asks("asker", "Q1", "Q2"))
    assert orjson.loads(ok(redis_url, "inbox", "--json"))["queued"] == []  # a signal is not a command
    coordinate(redis_url)

    entry = queued_as(ok(redis_url, "answer", "asker", "Q1=JWT"))
    inbox = ok(redis_url, "inbox")
    assert f"queued: answer {entry}, not applied yet" in inbox, inbox
    assert 'subagent-bus answer asker Q2="..."' in inbox and 'answer asker Q1="..."' not in inbox, inbox
    assert "(1 signal(s) not applied yet: no coordinator is running" in inbox, inbox
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

    again = queued_as(ok(redis_url, "answer", "asker", "Q1=OAuth2"))  # Q2 still open: Q1's answer replaced
    assert f"queued: answer {entry}, answer {again}, not applied yet" in ok(redis_url, "inbox")
    last = queued_as(ok(redis_url, "answer", "asker", "Q2=1h"))
    error = refused(redis_url, "answer", "asker", "Q2=2h")
    assert "agent 'asker' has no open questions (counting what is queued before it, which no " in error
    assert f"applied yet: answer {entry}, answer {again}, answer {last})" in error, error

    coordinate(redis_url)
    [response] = directives(redis_url, "asker")
    answers = {a["question_id"]: a["answer"] for a in response["payload"]["answers"]}
    assert answers == {"Q1": "OAuth2", "Q2": "1h"}, response
    assert "nothing waits for a human" in ok(redis_url, "inbox")
    assert orjson.loads(ok(redis_url, "inbox", "--json"))["queued"] == []
    assert rejections(redis_url) == []


@pytest.mark.parametrize(
    ("steps", "refused_answer"),
    [
        # asked again after an answer: the question asked again may be answered, once
        (["Q1", "answer Q1=one", "Q1", "answer Q1=two"], "Q1=three"),
        # asked again with one more question before the answer: that one may be answered too
        (["Q1", "Q1 Q2", "answer Q1=one", "answer Q1=again", "answer Q2=two"], "Q2=three"),
        # asked again with fewer questions: the one left out is not asked any more
        (["Q1 Q2", "Q1", "answer Q1=one"], "Q2=two"),
        # an optional question: the agent resumes without its answer
        (["Q1 Q2?", "answer Q1=one"], "Q2=two"),
    ],
)
def test_answers_are_checked_against_what_the_queue_leaves_open(
    redis_url: str, steps: list[str], refused_answer: str
) -> None:
    """The first step is applied; the others wait in the queue: questions the agent asks, answers."""
    agent_says(redis_url, "a", "g", asks("a", *steps[0].split()))
    coordinate(redis_url)
    for step in steps[1:]:
        verb, _, answer = step.partition(" ")
        if verb == "answer":
            queued_as(ok(redis_url, "answer", "a", answer))
        else:
            agent_says(redis_url, "a", "g", asks("a", *step.split()))
    error = refused(redis_url, "answer", "a", refused_answer)
    assert "agent 'a' has no open questions (counting what is queued before it" in error, error
    coordinate(redis_url)
    assert rejections(redis_url) == []
    assert "nothing waits for a human" in ok(redis_url, "inbox")


def test_a_blocker_resolved_in_the_queue_refuses_another_resolution(redis_url: str) -> None:
    agent_says(redis_url, "stuck", "g", stop("stuck", reason="error", kind="error"))
    coordinate(redis_url)
    entry = queued_as(ok(redis_url, "resolve", "stuck", "--resolution", "fixed"))
    inbox = ok(redis_url, "inbox")
    assert f"queued: resolve {entry}, not applied yet" in inbox and "subagent-bus recover" not in inbox
    for again in (
        ["resolve", "stuck", "--resolution", "again"],
        ["recover", "stuck", "--option", "delegate"],
    ):
        error = refused(redis_url, *again)
        assert "agent 'stuck' has no open blocker" in error and f"applied yet: resolve {entry})" in error

    # The agent stops again after the resolution: a new resolution is for that blocker, once.
    agent_says(redis_url, "stuck", "g", stop("stuck"))
    queued_as(ok(redis_url, "resolve", "stuck", "--resolution", "fixed again"))
    error = refused(redis_url, "resolve", "stuck", "--resolution", "a third time")
    assert "agent 'stuck' has no open blocker" in error, error
    coordinate(redis_url)
    assert rejections(redis_url) == []
    assert "nothing waits for a human" in ok(redis_url, "inbox")


def test_a_delegation_decided_in_the_queue_refuses_another_decision(redis_url: str) -> None:
    agent_says(redis_url, "lead", "g", DELEGATE)
    coordinate(redis_url)
    [delegation] = orjson.loads(ok(redis_url, "inbox", "--json"))["delegations"]
    request = delegation["request_id"]
    entry = queued_as(ok(redis_url, "approve", request))
    assert f"queued: approve {entry}, not applied yet" in ok(redis_url, "inbox")
    error = refused(redis_url, "deny", request, "--reason", "too late")
    assert f"request '{request}' is already approved" in error and f"yet: approve {entry})" in error, error
    coordinate(redis_url)
    assert rejections(redis_url) == []
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
            assert [q.envelope.id for q in queued] == ids[1:]
            return entry_ids, [q.entry_id for q in queued]

    taken, queued = asyncio.run(scenario())
    assert queued[:2] == taken[1:] and len(queued) == 3, (taken, queued)


def test_the_queue_is_applied_in_one_run_as_a_coordinator_applies_a_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Applied one by one, each queued finding copied the group's map of merged findings: a command
    checked against 200 000 queued findings took eight minutes."""
    runs: list[Run | None] = []

    def recorded(
        state: GroupState, envelope: Envelope, policy: Policy, run: Run | None = None, arrived: Any = None
    ) -> Outcome:
        runs.append(run)
        return apply(state, envelope, policy, run, arrived)

    monkeypatch.setattr(queued_module, "apply", recorded)
    started = new_envelope(AgentStarted(task="review"), agent_id="a", group_id="g")
    found = [
        new_envelope(Finding(title=f"f{n}", file=f"m{n}.py", line=1), agent_id="a", group_id="g")
        for n in range(50)
    ]
    entries = [Queued(f"{n + 1}-0", e) for n, e in enumerate([started, *found, found[3]])]  # one again
    state, applied = project(None, "g", frozenset(), entries, Policy())
    assert state is not None and len(state.findings) == 50
    assert [q.envelope for q in applied] == [started, *found]  # the copy is dropped
    assert len({id(run) for run in runs}) == 1 and runs[0] is not None
    assert all(e.id in state.window for e in [started, *found])


def test_a_refusal_names_what_is_queued_for_that_agent_in_that_group_only() -> None:
    def resolve(group_id: str, n: int) -> Queued:
        envelope = new_envelope(HumanResolve(resolution="done"), agent_id="twin", group_id=group_id)
        return Queued(f"{n}-0", envelope)

    queued = [resolve("g1", 1), resolve("g2", 2)]
    assert queued[0].envelope.id in queued_before(queued, "twin", "g1")
    assert queued[1].envelope.id not in queued_before(queued, "twin", "g1")
    assert all(q.envelope.id in queued_before(queued, "twin", None) for q in queued)
    assert queued_before(queued, "twin", "g3") == ""
    copied = [queued[0], Queued("3-0", queued[0].envelope)]  # published again: applied once
    assert queued_before(copied, "twin", "g1").count(queued[0].envelope.id) == 1


def test_a_command_is_checked_under_the_policy_it_is_given(redis_url: str) -> None:
    agent_says(redis_url, "lead", "g", DELEGATE)
    coordinate(redis_url)  # the group is known; the next request is queued
    agent_says(redis_url, "lead", "g", DELEGATE.replace("Document every", "Document all"))
    [_, queued] = [e for e in said(redis_url) if e["type"] == "DELEGATE_WORK"]
    request = DelegateWork.model_validate(queued["payload"]).request_id()
    Path("policy.toml").write_text('auto_approve = ["P0", "P1", "P2"]\nhuman_approval = []\n')
    error = refused(redis_url, "approve", request, "--policy", "policy.toml")
    assert f"request '{request}' is already approved" in error, error
    queued_as(ok(redis_url, "approve", request))  # the default policy leaves a P2 request to a human


def test_a_signal_published_again_after_it_was_applied_is_not_counted_again(redis_url: str) -> None:
    agent_says(redis_url, "stuck", "g", stop("stuck"))
    coordinate(redis_url)
    queued_as(ok(redis_url, "resolve", "stuck", "--resolution", "fixed"))
    coordinate(redis_url)  # resolved: the agent resumes

    async def publish_again() -> None:  # as an adapter does that died before its checkpoint
        async with open_bus(redis_url) as bus:
            stream = bus.stream("g")
            entries = stream_entries([[stream, await bus.client.xrange(stream)]])
            [data] = [f[b"data"] for _, f in entries if b'"STOP_WORK"' in f[b"data"]]
            await bus.client.xadd(stream, {b"data": data})

    asyncio.run(publish_again())
    error = refused(redis_url, "resolve", "stuck", "--resolution", "again")
    assert "agent 'stuck' has no open blocker" in error, error
    coordinate(redis_url)
    assert rejections(redis_url) == []


def test_a_group_only_the_queue_knows_takes_commands_that_are_applied_later(redis_url: str) -> None:
    agent_says(redis_url, "w", "alpha", stop("w"))  # no coordinator has run
    queued_as(ok(redis_url, "resolve", "w", "--resolution", "fixed"))
    error = refused(redis_url, "resolve", "w", "--resolution", "again")
    assert "agent 'w' has no open blocker" in error and "applied yet: stop_work " in error, error
    agent_says(redis_url, "w", "beta", asks("w", "Q1"))
    queued_as(ok(redis_url, "answer", "w", "Q1=x", "--group", "beta"))
    agent_says(redis_url, "lead", "gamma", DELEGATE)
    [delegate] = [e for e in said(redis_url) if e["type"] == "DELEGATE_WORK"]
    request = DelegateWork.model_validate(delegate["payload"]).request_id()
    queued_as(ok(redis_url, "approve", request))
    error = refused(redis_url, "deny", request, "--reason", "no")
    queue = "(counting what is queued before it, which no coordinator has applied yet: "
    queue += f"delegate_work {delegate['id']}, "
    assert f"is already approved {queue}approve " in error, error
    assert "no group 'delta' is known" in refused(
        redis_url, "resolve", "w", "--resolution", "x", "--group", "delta"
    )
    coordinate(redis_url)
    assert rejections(redis_url) == []
    assert "nothing waits for a human" in ok(redis_url, "inbox")


def test_an_entry_on_another_shard_than_its_group_is_not_counted(redis_url: str) -> None:
    agent_says(redis_url, "w", "gm", stop("w"))

    async def move() -> None:  # as a raw publisher that computed the wrong shard
        async with open_bus(redis_url) as bus:
            stream = bus.stream("gm")
            other = bus.keys.stream((bus.keys.shard_of("gm") + 1) % bus.keys.shards, StreamKind.SIGNALS)
            for entry_id, fields in stream_entries([[stream, await bus.client.xrange(stream)]]):
                await bus.client.xadd(other, {b"data": fields[b"data"]})
                await bus.client.xdel(stream, entry_id)

    asyncio.run(move())
    assert "no agent 'w' is known" in refused(redis_url, "resolve", "w", "--resolution", "fixed")


def test_a_command_a_coordinator_commits_while_the_state_is_read_is_counted_once(redis_url: str) -> None:
    """The queue is read before the committed state: an entry committed in between is in both (and
    applied once), not in neither (the state read first, the command would be checked against the
    question it answered still open)."""
    agent_says(redis_url, "racer", "g", asks("racer", "Q1"))
    coordinate(redis_url)
    queued_as(ok(redis_url, "answer", "racer", "Q1=JWT"))

    async def check() -> tuple[list[GroupState], list[Queued]]:
        async with open_bus(redis_url) as bus:

            async def load() -> list[GroupState]:
                before = await load_groups(bus.client, bus.keys, "g", findings=False)
                assert before[0].agents["racer"].questions is not None
                await asyncio.to_thread(coordinate, redis_url)  # the answer is committed meanwhile
                return before

            return await projected(bus.client, bus.keys, load, "g", Policy())

    [state], counted = asyncio.run(check())
    assert state.agents["racer"].questions is None  # answered: the committed answer counted
    assert counted == []  # and not as queued too


def test_group_is_honoured_while_another_group_of_its_shard_has_entries_queued(redis_url: str) -> None:
    """The queue is read by shard: another group's queued entries there are not the command's groups."""
    keys = Keys(DEFAULT_NAMESPACE, DEFAULT_SHARDS)
    assert keys.shard_of("g1") == keys.shard_of("gc")
    agent_says(redis_url, "someone", "g1", stop("someone"))
    agent_says(redis_url, "w", "gc", stop("w"))
    coordinate(redis_url)
    agent_says(redis_url, "other", "gc", stop("other"))  # queued in gc
    error = refused(redis_url, "resolve", "w", "--group", "g1", "--resolution", "fixed")
    assert "no agent 'w' in group 'g1'" in error, error
