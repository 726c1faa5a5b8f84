"""The human-readable views: `status [--watch]` (one block per group, with progress bars), `inbox` and
the findings (`findings [--merged]`, `replay`).

Every item is one line, and an inbox item's details (a question's context, what a blocker needs, a
delegation's reason...) one indented line each: ids and texts are what agents sent, and a newline or
another control character in them is shown escaped (ids) or as a space (texts) rather than breaking the
table; ids in the suggested commands are shell-quoted so that they can be pasted as they are.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Sequence
from typing import Final, NamedTuple

from bus.directives import RecoveryOption
from bus.display import counted, cut, one_line
from bus.envelope import EnvelopeType
from bus.findings import Finding
from bus.settings import DEFAULT_NAMESPACE
from bus.signals import QuestionType
from coordinator.queued import QueuedCommand, listed
from coordinator.rules import GroupSummary, MergedFinding
from coordinator.rules.summary import AgentSummary, PendingDelegation, ResumePath
from coordinator.state import ViolationRule

__all__ = [
    "NOTHING_WAITS",
    "bar",
    "finding_line",
    "group_heading",
    "grouped_lines",
    "inbox_lines",
    "merged_command",
    "merged_lines",
    "render",
    "unresolved_blockers",
]

NOTHING_WAITS: Final = "nothing waits for a human"
_WIDTH = 20
_SPACES = re.compile(r"\s+")


def _text(text: str) -> str:
    """A text as one line: runs of white space (newlines too) become one space, other controls escaped."""
    return one_line(_SPACES.sub(" ", text).strip())


_DETAIL = 200
"""Characters of an agent's text shown on an inbox line (the seeds' examples fit)."""


def _cut(text: str) -> str:
    """An agent's text on an inbox line: as one line, cut to :data:`_DETAIL` characters."""
    return cut(_text(text), _DETAIL)


def _detail(label: str, text: str | None, suffix: str = "") -> list[str]:
    """An indented line of detail under an inbox item: ``text`` as one line, cut to :data:`_DETAIL`
    characters; no line when there is no text."""
    if text is None or not text.strip():
        return []
    return [f"          {label}: {_cut(text)}{suffix}"]


def merged_command(group_id: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The command that lists a group's merged findings, its conflicts marked."""
    return _suggest("findings", [], ["--merged"], ["--group", _arg(group_id), *_in(namespace)])


def replay_command(group_id: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The command that recomputes a group's merged findings from the findings stream."""
    return _suggest("replay", [], [], ["--group", _arg(group_id), *_in(namespace)])


def _in(namespace: str) -> list[str]:
    """The option a suggested command needs to reach ``namespace``."""
    return [] if namespace == DEFAULT_NAMESPACE else ["--namespace", _arg(namespace)]


def _arg(text: str) -> str:
    """An id as a shell argument; one with control characters in bash's ``$'...'`` quoting."""
    if one_line(text) == text:
        return shlex.quote(text)
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"$'{one_line(escaped)}'"


def bar(percent: float | None, width: int = _WIDTH) -> str:
    """``[#########...........]  45%`` (blank when the agent never reported progress)."""
    if percent is None:
        return " " * (width + 7)
    filled = round(max(0.0, min(100.0, percent)) / 100 * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {percent:3.0f}%"


def _agent(agent: AgentSummary) -> str:
    status = f" [{agent.status.value}]" if agent.status else ""
    flags = f"  violations: {_text(', '.join(agent.violations))}" if agent.violations else ""
    message = f"  {_text(agent.progress_message)}" if agent.progress_message else ""
    state = agent.state.value if agent.watched else "findings only"
    return (
        f"  {one_line(agent.agent_id):28} {state:22} {bar(agent.percent)}{status}"
        f"  applied {agent.applied} (last {one_line(agent.last_applied_id or '-')}){flags}{message}"
    )


def render(summary: GroupSummary, namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    """The lines describing one group (of ``namespace``, which its suggested command names)."""
    p = summary.progress
    verdict = ""
    if summary.status:  # the group status of when the group last settled: old news while agents work
        verdict = f", {'last ' if p.active else ''}verdict {summary.status.value}"
    lines = [
        f"group {one_line(summary.group_id)}: {p.completed}/{p.total} completed, {p.failed} failed, "
        f"{p.active} active{verdict}; {counted(summary.findings, 'merged finding')}"
    ]
    lines += [_agent(agent) for agent in summary.agents]
    lines += [
        f"  ? {one_line(q.agent_id)} {one_line(q.question_id)}: {_text(q.text)}"
        for q in summary.open_questions
        if not q.answered
    ]
    for b in summary.blockers:
        lines.append(f"  ! {one_line(b.agent_id)} blocked ({one_line(b.blocker_type)}): {_text(b.details)}")
        lines += [f"  ! {one_line(b.agent_id)} also blocked on {_text(earlier)}" for earlier in b.earlier]
    lines += [
        f"  > delegation {one_line(d.request_id)} from {one_line(d.requester_id)} ({d.priority.value}) "
        "awaits approval"
        for d in summary.pending_delegations
    ]
    lines += [f"  ^ escalated {one_line(e.agent_id)}: {_text(e.reason)}" for e in summary.escalations]
    if summary.severity_conflicts:
        review = merged_command(summary.group_id, namespace)
        lines.append(f"  * {summary.severity_conflicts} severity conflict(s): review with `{review}`")
    return lines


def _suggest(verb: str, ids: list[str], words: list[str], options: list[str]) -> str:
    """``subagent-bus VERB WORDS OPTIONS``; when an id starts with ``-``, the options first and the words
    after ``--``, so that the id is not read as an option."""
    if any(i.startswith("-") for i in ids):
        return " ".join(["subagent-bus", verb, *options, "--", *words])
    return " ".join(["subagent-bus", verb, *words, *options])


def inbox_lines(
    summaries: list[GroupSummary], namespace: str = DEFAULT_NAMESPACE, queued: Sequence[QueuedCommand] = ()
) -> list[str]:
    """What waits for a human, each item with the command that acts on it, or the one ``queued`` for it
    that no coordinator has applied yet.

    An agent or request id known in several groups gets ``--group`` in its commands, which need it then;
    every command names ``namespace`` unless it is the default.
    """
    queued_lines, shown = _queued(queued), set[tuple[str, ...]]()
    agent_ids = Counter(a.agent_id for s in summaries for a in s.agents)
    agents = _Ids(agent_ids, _in(namespace), queued_lines, shown)
    request_ids = Counter(d.request_id for s in summaries for d in s.pending_delegations)
    requests = _Ids(request_ids, _in(namespace), queued_lines, shown)
    lines: list[str] = []
    for s in summaries:
        lines += _questions(s, agents)
    for s in summaries:
        lines += _blockers(s, agents)
    for s in summaries:
        lines += _delegations(s, requests)
    for s in summaries:
        lines += _escalations(s, agents)
    for s in summaries:
        lines += _reviews(s, namespace)
    for s in summaries:
        lines += _unresolved(s, namespace)
    lines += [  # what it acts on is not applied yet either (no coordinator ran since it was signalled)
        f"queued    {q.command.value.lower()} {one_line(q.id)} ({one_line(q.agent_id)}, group "
        f"{one_line(q.group_id)}), not applied yet"
        for q in queued
        if not shown.intersection(_keys(q))
    ]
    return lines or [NOTHING_WAITS]


class _Ids(NamedTuple):
    counts: Counter[str]
    """How many groups know each id."""
    where: list[str]
    """The options of every command (the namespace)."""
    queued: dict[tuple[str, ...], list[str]]
    """The human commands queued for each item (see :func:`_queued`)."""
    shown: set[tuple[str, ...]]
    """The items shown so far (by the key of :func:`_queued`)."""

    def queued_line(self, s: GroupSummary, item_id: str, *key: str) -> str | None:
        """The line naming the commands queued for an item (with its group when several know its id)."""
        self.shown.add((s.group_id, *key))
        commands = self.queued.get((s.group_id, *key))
        if not commands:
            return None
        where = f" (group {one_line(s.group_id)})" if self.counts[item_id] > 1 else ""
        return f"          queued: {listed(commands)}{where}, not applied yet"


def _queued(queued: Sequence[QueuedCommand]) -> dict[tuple[str, ...], list[str]]:
    """By ``(group, what, id)``: the human commands queued for a question (``answer``, agent, question),
    a blocker (``blocker``, agent), a delegation (``request``, id) or an escalation (``dismiss``, agent).
    The item stays in the inbox until a coordinator applies them."""
    found: dict[tuple[str, ...], list[str]] = {}
    for q in queued:
        for key in _keys(q):
            found.setdefault(key, []).append(f"{q.command.value.lower()} {one_line(q.id)}")
    return found


def _keys(q: QueuedCommand) -> list[tuple[str, ...]]:
    """The keys of the items a queued command acts on (see :func:`_queued`)."""
    if q.command is EnvelopeType.ANSWER:
        return [(q.group_id, "answer", q.agent_id, qid) for qid in q.question_ids]
    if q.request_id is not None:
        return [(q.group_id, "request", q.request_id)]
    return [(q.group_id, "dismiss" if q.command is EnvelopeType.DISMISS else "blocker", q.agent_id)]


def _group(s: GroupSummary, ids: _Ids, item_id: str) -> list[str]:
    """``--group G`` when ``item_id`` is known in several groups, and the namespace."""
    return (["--group", _arg(s.group_id)] if ids.counts[item_id] > 1 else []) + ids.where


def _questions(s: GroupSummary, agents: _Ids) -> list[str]:
    """Each open question with its context; the agent's reason and what would unblock it under its
    first open one (they are the clarification's, shared by its questions)."""
    lines = []
    explained: set[str] = set()
    for q in (q for q in s.open_questions if not q.answered):
        words = [_arg(q.agent_id), f'{_arg(q.question_id)}="..."']
        command = _suggest("answer", [q.agent_id, q.question_id], words, _group(s, agents, q.agent_id))
        optional = " (optional)" if q.type is QuestionType.OPTIONAL else ""
        lines.append(f"question  {one_line(q.agent_id)} {one_line(q.question_id)}{optional}: {_cut(q.text)}")
        lines += _detail("context", q.context) + _detail("options", " | ".join(map(one_line, q.options)))
        lines += _detail("assumes", q.current_assumption)
        if q.agent_id not in explained:
            explained.add(q.agent_id)
            lines += _detail("reason", q.reason) + _detail("can resume with", q.can_resume_with)
        queued = agents.queued_line(s, q.agent_id, "answer", q.agent_id, q.question_id)
        lines.append(queued or f"          answer: {command}")
        lines += _note(q.resume)
    return lines


_RECOVERIES: Final = {
    True: tuple(RecoveryOption),
    False: (RecoveryOption.DELEGATE, RecoveryOption.SKIP_AND_CONTINUE),
}
"""The recoveries ``inbox`` suggests for an error's stop, and for another blocker's."""


def _blockers(s: GroupSummary, agents: _Ids) -> list[str]:
    lines = []
    for b in s.blockers:
        options = _group(s, agents, b.agent_id)
        resolve = _suggest("resolve", [b.agent_id], [_arg(b.agent_id)], ['--resolution "..."', *options])
        lines.append(f"blocker   {one_line(b.agent_id)} ({one_line(b.blocker_type)}): {_cut(b.details)}")
        lines += _detail("needs", b.resume_requirements) + _detail("recovery", b.error_recovery)
        lines += [line for earlier in b.earlier for line in _detail("also open", earlier)]
        queued = agents.queued_line(s, b.agent_id, "blocker", b.agent_id)
        lines.append(queued or f"          resolve: {resolve}")
        if not queued:  # seed 003's recovery patterns; a blocker's cause is not an error to retry past
            first, *others = (o.value for o in _RECOVERIES["error" in (b.stop_reason, b.blocker_type)])
            # a line that runs when pasted: no `|`
            recover = _suggest("recover", [b.agent_id], [_arg(b.agent_id)], [f"--option {first}", *options])
            lines.append(f"          or recover: {recover}  # or --option {' / '.join(others)}")
        lines += _note(b.resume)
    return lines


_NOTES: Final = {
    ResumePath.RELAUNCH: "its adapter ended with it: a launcher starts it again with the directive",
    ResumePath.UNREAD: "its adapter ended with it: the directive waits in its inbox until an adapter "
    "(--deliver) or `listen` runs for it",
}


def _note(path: ResumePath) -> list[str]:
    """A note when a directive does not simply go to an adapter that reads it."""
    return [f"          note: {_NOTES[path]}"] if path in _NOTES else []


def _delegations(s: GroupSummary, requests: _Ids) -> list[str]:
    lines = []
    for d in s.pending_delegations:
        options = _group(s, requests, d.request_id)
        ids, words = [d.request_id], [_arg(d.request_id)]
        approve = _suggest("approve", ids, words, options)
        deny = _suggest("deny", ids, words, ["--reason ...", *options])
        lines.append(
            f"delegate  {one_line(d.request_id)} from {one_line(d.requester_id)} "
            f"({d.priority.value}, {d.independence.value}): {_cut(d.task)}"
        )
        lines += _checklist(d)
        queued = requests.queued_line(s, d.request_id, "request", d.request_id)
        lines.append(queued or f"          {approve}  |  {deny}")
        lines += _note(d.resume)
    return lines


def _checklist(d: PendingDelegation) -> list[str]:
    """What seed 003's delegation checklist weighs: why delegate (and for how long), the context the new
    agent needs, how the two agents coordinate."""
    estimate = f" (estimated {cut(_text(d.estimated_duration), 40)})" if d.estimated_duration else ""
    if d.delegation_reason:
        reason = _detail("reason", d.delegation_reason, estimate)
    else:
        reason = _detail("estimated", d.estimated_duration)
    return reason + _detail("context", d.context_required) + _detail("coordination", d.coordination)


def _escalations(s: GroupSummary, agents: _Ids) -> list[str]:
    lines = []
    for e in s.escalations:
        dismiss = _suggest("dismiss", [e.agent_id], [_arg(e.agent_id)], _group(s, agents, e.agent_id))
        lines.append(f"escalated {one_line(e.agent_id)}: {_cut(e.reason)}")
        queued = agents.queued_line(s, e.agent_id, "dismiss", e.agent_id)
        lines.append(queued or f"          when handled: {dismiss}")
    return lines


def _reviews(s: GroupSummary, namespace: str) -> list[str]:
    """Seed 001: conflicting findings are flagged for human review."""
    if not s.severity_conflicts:
        return []
    return [
        f"review    group {one_line(s.group_id)}: {s.severity_conflicts} merged finding(s) whose agents "
        "disagree on severity",
        f"          review: {merged_command(s.group_id, namespace)}",
    ]


_UNRESOLVED: Final = f"{ViolationRule.UNRESOLVED_BLOCKER.value}: "


def unresolved_blockers(summary: GroupSummary) -> list[tuple[str, str]]:
    """The agents that finished with a blocker of theirs unresolved, each with the blocker (the group's
    status is ``review`` for them): an ``unresolved_blocker`` violation of an agent whose outcome counts."""
    return [
        (a.agent_id, v.removeprefix(_UNRESOLVED))
        for a in summary.agents
        if a.counted
        for v in a.violations
        if v.startswith(_UNRESOLVED)
    ]


def _unresolved(s: GroupSummary, namespace: str) -> list[str]:
    """Agents that finished with a blocker unresolved: no command undoes that, but a human should look."""
    lines = []
    for agent_id, blocker in unresolved_blockers(s):
        lines.append(f"review    {one_line(agent_id)} finished with a blocker unresolved: {_cut(blocker)}")
        status = _suggest("status", [], [], ["--group", _arg(s.group_id), *_in(namespace)])
        lines.append(f"          see: {status}")
    return lines


def grouped_lines(rows: dict[str, list[str]]) -> list[str]:
    """The rows of each group, under a ``group G:`` heading (:func:`group_heading`) when there are several
    groups."""
    if len(rows) < 2:
        return [row for group_rows in rows.values() for row in group_rows]
    return [line for g, group_rows in rows.items() for line in (group_heading(g), *group_rows)]


def group_heading(group: str) -> str:
    """The line a group's rows come under in a listing of several groups."""
    return f"group {one_line(group)}:"


def finding_line(f: Finding) -> str:
    """One line of a raw finding: ``file:line severity title (agent)``."""
    return (
        f"{one_line(f.file or '-')}:{f.line if f.line is not None else '-'} "
        f"{f.severity.value if f.severity else '-'} {_text(f.title)} ({one_line(f.agent)})"
    )


def merged_lines(merged: dict[str, list[MergedFinding]]) -> list[str]:
    """One line per merged finding: location, category, severities, confidence, agents, title; a group's
    columns as wide as their longest cell (the location's up to 60 characters, the category's up to 24:
    a longer one pushes its own line's columns out rather than every line's)."""
    rows: dict[str, list[str]] = {}
    for group, items in merged.items():
        cells = [
            (
                one_line(m.location or "-"),
                one_line(m.category),
                "/".join(s.value for s in m.severities) or "-",
                f"{m.confidence:.1f}" if m.confidence is not None else "-",
                f"{one_line(', '.join(m.agents))}  {_text(m.finding.title)}"
                + ("  CONFLICT" if m.severity_conflict else ""),
            )
            for m in items
        ]
        where, what, sevs = (
            min(cap, max((len(c[n]) for c in cells), default=0)) for n, cap in ((0, 60), (1, 24), (2, 60))
        )
        rows[group] = [
            f"{loc:{where}} {cat:{what}} {sev:{sevs}} {conf:>5}  {rest}"
            for loc, cat, sev, conf, rest in cells
        ]
    return grouped_lines(rows)
