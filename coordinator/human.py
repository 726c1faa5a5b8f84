"""The human-in-the-loop commands: answer, resolve, recover, approve, deny.

Each one checks what it can against the committed state with the rules' own checks (so a typo is an
immediate, clear error, worded as the coordinator would refuse it), then publishes a ``human`` envelope
onto the group's shard stream (:mod:`coordinator.human_publish`): the coordinator applies it in order
and exactly once, like any signal, and the directive it produces reaches the agent's inbox. A command
that raced another one (say a second answer) is rejected there: exit status 1.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any

import click

from bus.cli_connection import redis_options
from bus.directives import (
    AnswerItem,
    HumanAnswer,
    HumanApprove,
    HumanDeny,
    HumanDismiss,
    HumanRecover,
    HumanResolve,
    RecoveryOption,
)
from bus.display import cut, one_line
from bus.envelope import Payload
from bus.errors import BusError
from bus.params import FiniteFloatRange, an_id, not_blank
from bus.settings import Settings
from bus.signals import Question
from coordinator.human_publish import Build, How, agent_group, group_of, only, publish_command
from coordinator.policy import Policy
from coordinator.rules.aggregation import open_escalation
from coordinator.rules.blockers import open_blocker, recoverable_stop
from coordinator.rules.clarification import answerable
from coordinator.rules.delegation import pending
from coordinator.state import AgentRecord, GroupState
from coordinator.view import find_request
from coordinator.views_cli import HUMAN_KEY_OPTION, POLICY_OPTION

__all__ = ["commands"]

_GROUP = click.option(
    "--group",
    "group_id",
    callback=an_id,
    help="The task group (needed only when the id is known in several groups; `inbox` then names it).",
)


_WAIT = click.option(
    "--wait",
    "wait_s",
    type=FiniteFloatRange(0, 3600),
    default=10.0,
    show_default=True,
    help="Seconds to wait for a running coordinator's decision on it (0: publish and return); exit status "
    "1 when it rejects or dead-letters the command. With no coordinator running, the command waits on the bus until one "
    "applies it (`inbox` shows it queued).",
)


def _how(command: Callable[..., None]) -> Callable[..., None]:
    """``--group``, ``--wait``, ``--policy`` and ``--human-key-file``, given to ``command`` as one
    :class:`How`."""

    @functools.wraps(command)
    def given(
        *args: Any,
        group_id: str | None,
        wait_s: float,
        policy: Policy,
        human_key: bytes | None,
        **kwargs: Any,
    ) -> None:
        command(*args, how=How(group_id, wait_s, policy, human_key), **kwargs)

    return _GROUP(_WAIT(POLICY_OPTION(HUMAN_KEY_OPTION(given))))


def _text(*names: str, **kwargs: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    return click.option(*names, callback=not_blank, **kwargs)


def _split_answers(pairs: tuple[str, ...], known: Collection[str]) -> list[tuple[str, str]]:
    """``QUESTION_ID=answer`` arguments as (id, answer). An id may hold ``=`` itself, or start or end with
    spaces, when it is one of the ``known`` ids, taken as it is: the longest that the argument starts
    with, followed by ``=``."""
    out: dict[str, str] = {}
    for pair in pairs:
        qid = max((q for q in known if pair.startswith(f"{q}=")), key=len, default=None)
        if qid is not None:
            answer = pair[len(qid) + 1 :]
        else:
            written, _, answer = pair.partition("=")
            qid = written.strip()
            if not qid:
                raise click.BadParameter(
                    f"{cut(repr(pair), 80)} is not QUESTION_ID=answer", param_hint="ANSWERS"
                )
        if not answer.strip():
            raise click.BadParameter(f"the answer to {one_line(cut(qid, 80))} is blank", param_hint="ANSWERS")
        if qid in out:
            raise click.BadParameter(f"{one_line(cut(qid, 80))} is answered twice", param_hint="ANSWERS")
        out[qid] = answer.strip()
    return list(out.items())


def _with_equals(_ctx: click.Context, _param: click.Parameter, pairs: tuple[str, ...]) -> tuple[str, ...]:
    """Each answer written ``QUESTION_ID=answer``, checked while the arguments are parsed: a usage error
    before the connection options start a local server (which ids hold "=" is known only once connected)."""
    for pair in pairs:
        if "=" not in pair:
            raise click.BadParameter(f"{cut(repr(pair), 80)} is not QUESTION_ID=answer", param_hint="ANSWERS")
    return pairs


@click.command()
@click.argument("agent_id", callback=an_id)
@click.argument("answers", nargs=-1, required=True, callback=_with_equals)
@_text("--next-step", help="What the agent should do next (default: continue with the answers).")
@_how
@redis_options
def answer(
    settings: Settings,
    agent_id: str,
    answers: tuple[str, ...],
    next_step: str | None,
    how: How,
) -> None:
    """Answer an agent's CLARIFICATION_NEEDED: `answer AGENT_ID Q1="..." Q2="..."`.

    Questions may be answered all at once or a few at a time; answering one again replaces the earlier
    answer until the agent has them all. An id that starts with - goes after `--`; one that holds = is
    written as it is (`a=b="..."`: the agent's longest question id the argument starts with).
    """

    def build(groups: list[GroupState]) -> tuple[Payload, str, str]:
        records = [g.agents[agent_id] for g in groups if agent_id in g.agents]
        pairs = _split_answers(answers, {q.question_id for r in records for q in _questions(r)})
        group = agent_group(groups, agent_id, how.group_id, lambda r: answerable(r, [q for q, _ in pairs]))
        items = [AnswerItem(question_id=qid, answer=text) for qid, text in pairs]
        return HumanAnswer(answers=items, next_step=next_step), agent_id, group.group_id

    publish_command(settings, how, build, "answer", agent_id)


def _questions(record: AgentRecord) -> list[Question]:
    return record.questions.questions if record.questions is not None else []


@click.command()
@click.argument("agent_id", callback=an_id)
@_text("--resolution", required=True, help="What was done about the blocker.")
@_text(
    "--instructions",
    help="Resume instructions (default: continue with the work the stop names as blocked, else from its "
    "checkpoint).",
)
@_how
@redis_options
def resolve(
    settings: Settings,
    agent_id: str,
    resolution: str,
    instructions: str | None,
    how: How,
) -> None:
    """Resolve the blocker of an agent that sent STOP_WORK."""

    def build(groups: list[GroupState]) -> tuple[Payload, str, str]:
        group = agent_group(groups, agent_id, how.group_id, open_blocker)
        return HumanResolve(resolution=resolution, instructions=instructions), agent_id, group.group_id

    publish_command(settings, how, build, "resolve", agent_id)


@click.command()
@click.argument("agent_id", callback=an_id)
@click.option(
    "--option",
    "option",
    required=True,
    type=click.Choice([o.value for o in RecoveryOption]),
    help="The recovery pattern (seed 003); retry_from_checkpoint only for a stop on an error.",
)
@_text(
    "--instructions",
    help="What the agent is told, instead of the option's default (with delegate, {agent} in it becomes "
    "the id of the agent that takes the failing work over).",
)
@_how
@redis_options
def recover(
    settings: Settings,
    agent_id: str,
    option: str,
    instructions: str | None,
    how: How,
) -> None:
    """Choose how an agent that stopped on an error (or any blocker: the last two options) recovers.

    \b
    retry_from_checkpoint: the cause is fixed; retry the failed step from the checkpoint
    skip_and_continue: skip the failing item (logged for review), do the rest
    delegate: a new agent takes the work it stopped on over; this one does the rest
    """

    def build(groups: list[GroupState]) -> tuple[Payload, str, str]:
        chosen = RecoveryOption(option)
        group = agent_group(groups, agent_id, how.group_id, lambda record: recoverable_stop(record, chosen))
        payload = HumanRecover(option=chosen, instructions=instructions)
        return payload, agent_id, group.group_id

    publish_command(settings, how, build, "recover", agent_id)


def _delegation_command(approve: bool) -> Callable[..., None]:
    def build_for(
        request_id: str,
        reason: str | None,
        alternative: str | None,
        instructions: str | None,
        group_id: str | None,
    ) -> Build:
        def build(groups: list[GroupState]) -> tuple[Payload, str, str]:
            holding = [g for g in groups if request_id in g.delegations]
            if not holding and group_id is not None:
                raise BusError(f"no delegation request {cut(repr(request_id), 80)} in group {group_id!r}")
            if not holding:
                find_request(groups, request_id)  # raises
            group = only(
                holding, f"delegation request {cut(repr(request_id), 80)}", lambda g: pending(g, request_id)
            )
            delegation = pending(group, request_id)
            requester = delegation.requester_id
            payload: Payload = (
                HumanApprove(request_id=request_id, reason=reason, instructions=instructions)
                if approve
                else HumanDeny(
                    request_id=request_id,
                    reason=reason or "denied",
                    alternative=alternative,
                    instructions=instructions,
                )
            )
            return payload, requester, group.group_id

        return build

    def command(
        settings: Settings,
        request_id: str,
        reason: str | None,
        instructions: str | None,
        how: How,
        alternative: str | None = None,
    ) -> None:
        source = "approve" if approve else "deny"
        build = build_for(request_id, reason, alternative, instructions, how.group_id)
        publish_command(settings, how, build, source, request_id)

    return command


@click.command()
@click.argument("request_id", callback=not_blank)
@_text("--reason", help="Why it is approved (kept in the decision event).")
@_text(
    "--instructions",
    help="The requester's resume instructions (default: go on with its own task while the delegate works; "
    "for a blocking request, wait for the delegate's results, then these).",
)
@_how
@redis_options
def approve(
    settings: Settings, request_id: str, reason: str | None, instructions: str | None, how: How
) -> None:
    """Approve a pending delegation request (ids are listed by `inbox`)."""
    _delegation_command(True)(settings, request_id, reason, instructions, how)


@click.command()
@click.argument("request_id", callback=not_blank)
@_text("--reason", required=True, help="Why it is denied (sent to the requesting agent).")
@_text("--alternative", help="What the agent should do instead.")
@_text(
    "--instructions",
    help="The requester's resume instructions (default: continue the task without the delegated work).",
)
@_how
@redis_options
def deny(
    settings: Settings,
    request_id: str,
    reason: str,
    alternative: str | None,
    instructions: str | None,
    how: How,
) -> None:
    """Deny a pending delegation request (ids are listed by `inbox`)."""
    _delegation_command(False)(settings, request_id, reason, instructions, how, alternative)


@click.command()
@click.argument("agent_id", callback=an_id)
@_text("--note", help="What the human does about it (kept in the decision event).")
@_how
@redis_options
def dismiss(settings: Settings, agent_id: str, note: str | None, how: How) -> None:
    """Take an agent's escalation (failed after its retries) off the inbox: a human has it now.

    The agent stays failed and the group's status is unchanged; the events stream keeps the escalation
    and its dismissal.
    """

    def build(groups: list[GroupState]) -> tuple[Payload, str, str]:
        group = group_of(groups, agent_id, how.group_id, lambda g: open_escalation(g, agent_id))
        return HumanDismiss(note=note), agent_id, group.group_id

    publish_command(settings, how, build, "dismiss", agent_id)


commands: list[click.Command] = [answer, resolve, recover, approve, deny, dismiss]
