"""The human-in-the-loop commands: answer, resolve, recover, approve, deny.

Each one checks what it can against the committed state with the rules' own checks (so a typo is an
immediate, clear error, worded as the coordinator would refuse it), then publishes a ``human`` envelope
onto the group's shard stream: the coordinator applies it in order and exactly once, like any signal,
and the directive it produces reaches the agent's inbox.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from bus.connection import connect, redis_options, run_command
from bus.directives import (
    AnswerItem,
    HumanAnswer,
    HumanApprove,
    HumanDeny,
    HumanRecover,
    HumanResolve,
    RecoveryOption,
)
from bus.envelope import Payload, new_envelope
from bus.keys import open_namespace
from bus.publisher import Publisher
from bus.settings import Settings
from coordinator.rules.blockers import error_stop, open_blocker
from coordinator.rules.clarification import answerable
from coordinator.rules.delegation import pending
from coordinator.state import GroupState
from coordinator.view import find_agent, find_request, load_groups

__all__ = ["commands"]

Build = Callable[[list[GroupState]], tuple[Payload, str, str]]
"""From the committed groups: the payload, the target agent id and its group id."""


async def _publish(settings: Settings, build: Build, source: str) -> str:
    client = await connect(settings)
    try:
        keys = await open_namespace(client, settings.namespace, settings.shards, create=False)
        payload, agent_id, group_id = build(await load_groups(client, keys))
        envelope = new_envelope(payload, agent_id=agent_id, group_id=group_id, source=source)
        await Publisher(client, keys).publish(envelope)
        return envelope.id
    finally:
        await client.aclose()


def _run(settings: Settings, build: Build, source: str) -> None:
    envelope_id = run_command(_publish(settings, build, source))
    click.echo(f"queued {source} as {envelope_id}; the coordinator applies it in order")


def _split_answers(pairs: tuple[str, ...]) -> list[tuple[str, str]]:
    out: dict[str, str] = {}
    for pair in pairs:
        qid, sep, answer = pair.partition("=")
        if not sep or not qid.strip() or not answer.strip():
            raise click.BadParameter(f"{pair!r} is not QUESTION_ID=answer", param_hint="ANSWERS")
        if qid.strip() in out:
            raise click.BadParameter(f"{qid.strip()} is answered twice", param_hint="ANSWERS")
        out[qid.strip()] = answer.strip()
    return list(out.items())


@click.command()
@click.argument("agent_id")
@click.argument("answers", nargs=-1, required=True)
@click.option("--next-step", help="What the agent should do next (default: continue with the answers).")
@redis_options
def answer(settings: Settings, agent_id: str, answers: tuple[str, ...], next_step: str | None) -> None:
    """Answer an agent's CLARIFICATION_NEEDED: `answer AGENT_ID Q1="..." Q2="..."`."""
    pairs = _split_answers(answers)

    def build(groups: list[GroupState]) -> tuple[Payload, str, str]:
        group = find_agent(groups, agent_id)
        answerable(group.agents[agent_id], [qid for qid, _ in pairs])
        items = [AnswerItem(question_id=qid, answer=text) for qid, text in pairs]
        return HumanAnswer(answers=items, next_step=next_step), agent_id, group.group_id

    _run(settings, build, "answer")


@click.command()
@click.argument("agent_id")
@click.option("--resolution", required=True, help="What was done about the blocker.")
@click.option("--instructions", help="Resume instructions (default: the agent's own resume requirements).")
@redis_options
def resolve(settings: Settings, agent_id: str, resolution: str, instructions: str | None) -> None:
    """Resolve the blocker of an agent that sent STOP_WORK."""

    def build(groups: list[GroupState]) -> tuple[Payload, str, str]:
        group = find_agent(groups, agent_id)
        open_blocker(group.agents[agent_id])
        return HumanResolve(resolution=resolution, instructions=instructions), agent_id, group.group_id

    _run(settings, build, "resolve")


@click.command()
@click.argument("agent_id")
@click.option(
    "--option",
    "option",
    required=True,
    type=click.Choice([o.value for o in RecoveryOption]),
    help="The recovery pattern for an agent stopped with stop_reason: error.",
)
@click.option("--instructions", help="Extra instructions for the agent.")
@redis_options
def recover(settings: Settings, agent_id: str, option: str, instructions: str | None) -> None:
    """Choose how an agent that stopped on an error recovers."""

    def build(groups: list[GroupState]) -> tuple[Payload, str, str]:
        group = find_agent(groups, agent_id)
        error_stop(group.agents[agent_id])
        payload = HumanRecover(option=RecoveryOption(option), instructions=instructions)
        return payload, agent_id, group.group_id

    _run(settings, build, "recover")


def _delegation_command(approve: bool) -> Callable[..., None]:
    def build_for(request_id: str, reason: str | None, alternative: str | None) -> Build:
        def build(groups: list[GroupState]) -> tuple[Payload, str, str]:
            group = find_request(groups, request_id)
            delegation = pending(group, request_id)
            requester = delegation.requester_id
            payload: Payload = (
                HumanApprove(request_id=request_id, reason=reason)
                if approve
                else HumanDeny(request_id=request_id, reason=reason or "denied", alternative=alternative)
            )
            return payload, requester, group.group_id

        return build

    def command(
        settings: Settings, request_id: str, reason: str | None, alternative: str | None = None
    ) -> None:
        _run(settings, build_for(request_id, reason, alternative), "approve" if approve else "deny")

    return command


@click.command()
@click.argument("request_id")
@click.option("--reason", help="Why it is approved (kept in the decision event).")
@redis_options
def approve(settings: Settings, request_id: str, reason: str | None) -> None:
    """Approve a pending delegation request (ids are listed by `inbox`)."""
    _delegation_command(True)(settings, request_id, reason)


@click.command()
@click.argument("request_id")
@click.option("--reason", required=True, help="Why it is denied (sent to the requesting agent).")
@click.option("--alternative", help="What the agent should do instead.")
@redis_options
def deny(settings: Settings, request_id: str, reason: str, alternative: str | None) -> None:
    """Deny a pending delegation request."""
    _delegation_command(False)(settings, request_id, reason, alternative)


commands: list[click.Command] = [answer, resolve, recover, approve, deny]
