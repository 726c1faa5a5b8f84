"""The text views keep one item per line, whatever the agents put in their ids and texts."""

from __future__ import annotations

import itertools
import subprocess
import unicodedata

import pytest
from rules_kit import Feed, clarification, completion, delegate, finding, stop_error

from bus.display import one_line
from bus.envelope import EnvelopeType
from bus.errors import BusError
from bus.events import AgentStarted
from bus.findings import Finding, Severity
from bus.signals import QuestionType, StopWork
from coordinator.console import inbox_lines, merged_lines, render
from coordinator.policy import Policy
from coordinator.queued import QueuedCommand
from coordinator.rules import summarize
from coordinator.rules.findings import merge_findings
from coordinator.view import find_agent

AGENT = "evil\nagent\x1b[31m"


def _feed() -> Feed:
    feed = Feed()
    asked = clarification(AGENT)
    asked = asked.model_copy(
        update={"questions": [asked.questions[0].model_copy(update={"text": "Which\none? \u202eevil"})]}
    )
    feed.send(asked, AGENT)
    stop = stop_error("it's\tbad").model_copy(update={"details": "line one\nline two"})
    feed.send(stop, "it's\tbad")
    feed.send(delegate("plain-agent", priority="P2"), "plain-agent")
    return feed


def test_status_lines_escape_control_characters_in_ids_and_flatten_texts() -> None:
    lines = render(summarize(_feed().state))
    assert all("\n" not in line and "\x1b" not in line and "\t" not in line for line in lines)
    assert any(line.startswith("  evil\\nagent\\x1b[31m ") for line in lines)
    # a bidirectional override would show the rest of the line reversed
    assert any(line.endswith(": Which one? \\u202eevil") and "evil\\nagent" in line for line in lines)
    assert any(line.endswith("(error): line one line two") for line in lines)


def _words(command: str) -> list[str]:
    """How bash splits ``command`` into arguments."""
    done = subprocess.run(
        ["bash", "-c", f'set -- {command}; printf "%s\\0" "$@"'], capture_output=True, check=True
    )
    return done.stdout.decode().split("\0")[:-1]


def test_inbox_commands_can_be_pasted_into_a_shell() -> None:
    lines = inbox_lines([summarize(_feed().state)])
    assert all("\n" not in line and "\x1b" not in line for line in lines)
    commands = [line.split(": ", 1)[1] for line in lines if "answer:" in line or "resolve:" in line]
    assert [_words(command)[:3] for command in commands] == [
        ["subagent-bus", "answer", AGENT],
        ["subagent-bus", "resolve", "it's\tbad"],
    ]
    [approve] = [line for line in lines if "subagent-bus approve" in line]
    assert _words(approve.split("|")[0])[:2] == ["subagent-bus", "approve"]


def test_an_empty_inbox_says_so() -> None:
    assert inbox_lines([]) == ["nothing waits for a human"]


def test_a_sender_of_findings_only_is_not_shown_running() -> None:
    feed = Feed()
    feed.send(finding("scanner", id="SEC-001"), "scanner-script")
    summary = summarize(feed.state)
    assert [(a.agent_id, a.watched) for a in summary.agents] == [("scanner-script", False)]
    [group, agent] = render(summary)
    assert group.startswith("group group-1: 0/0 completed")
    assert agent.split()[:3] == ["scanner-script", "findings", "only"]


def test_an_unknown_agent_is_refused_naming_each_known_one_once() -> None:
    groups = []
    for group in ("g1", "g2"):
        feed = Feed(group=group)
        feed.send(clarification("agent-0"), "agent-0")
        groups.append(feed.state)
    with pytest.raises(BusError) as refused:
        find_agent(groups, "nobody")
    assert str(refused.value) == "no agent 'nobody' is known to the coordinators (known: agent-0)"


RESOURCE_LIMIT = StopWork.model_validate(  # seed 000's resource-limit example
    {
        "agent_id": "bg-task-ghi789",
        "stop_reason": "blocker",
        "blocker_type": "resource_limit",
        "details": "Analysis of 10,000+ files will exceed reasonable task duration",
        "resume_requirements": "Option 1: Reduce scope (specify file patterns to exclude)\n"
        "Option 2: Delegate to multiple agents (see DELEGATE_WORK protocol)\n"
        "Option 3: Continue with single agent (accept 6+ hour runtime)\n",
    }
)


def _item(lines: list[str], start: str) -> list[str]:
    """The lines of the inbox item whose first line starts with ``start``: it and its indented ones."""
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    rest = lines[first + 1 :]
    return [lines[first], *itertools.takewhile(lambda line: line.startswith(" "), rest)]


def test_the_inbox_shows_what_a_human_needs_to_answer_resolve_or_approve() -> None:
    feed = Feed()
    feed.send(clarification(), "bg-task-abc123")
    feed.send(RESOURCE_LIMIT, "bg-task-ghi789")
    feed.send(stop_error(), "bg-task-stu901")
    feed.send(delegate(priority="P2"), "bg-task-jkl012")
    lines = inbox_lines([summarize(feed.state)])
    assert _item(lines, "question  bg-task-abc123 Q1") == [
        "question  bg-task-abc123 Q1: Should I analyze OAuth2, JWT, or both authentication strategies?",
        "          context: Found separate implementations in src/auth/oauth.ts and src/auth/jwt.ts",
        "          reason: Multiple authentication strategies found, unclear which to analyze",
        "          can resume with: Answers specifying which auth strategies to analyze and framework "
        "version assumptions",
        '          answer: subagent-bus answer bg-task-abc123 Q1="..."',
    ]
    # the reason and what would unblock the agent are its clarification's: once, under its first question
    assert _item(lines, "question  bg-task-abc123 Q2") == [
        "question  bg-task-abc123 Q2: What security framework version should I assume (2.0 or 3.0)?",
        "          context: Dependencies show both @auth/core@2.x and @auth/core@3.x-beta",
        '          answer: subagent-bus answer bg-task-abc123 Q2="..."',
    ]
    assert _item(lines, "blocker   bg-task-ghi789") == [
        "blocker   bg-task-ghi789 (resource_limit): Analysis of 10,000+ files will exceed reasonable task "
        "duration",
        "          needs: Option 1: Reduce scope (specify file patterns to exclude) Option 2: Delegate to "
        "multiple agents (see DELEGATE_WORK protocol) Option 3: Continue with single agent (accept 6+ hour "
        "runtime)",
        '          resolve: subagent-bus resolve bg-task-ghi789 --resolution "..."',
        "          or recover: subagent-bus recover bg-task-ghi789 --option delegate  # or --option skip_and_continue",
    ]
    assert _item(lines, "blocker   bg-task-stu901")[1:3] == [
        "          recovery: 1. Skip problematic file and continue",
        '          resolve: subagent-bus resolve bg-task-stu901 --resolution "..."',
    ]
    [request] = feed.state.delegations
    assert _item(lines, "delegate") == [
        f"delegate  {request} from bg-task-jkl012 (P2, can_proceed_parallel): Refactor authentication "
        "module to use unified AuthProvider pattern - Consolidate OAuth2 and JWT implementations - Create "
        "single AuthProvider interface - Update all auth consumers to use new interface",
        "          reason: Discovered large-scale refactoring opportunity that should run in parallel "
        "(estimated 2-3 hours)",
        "          context: - Current authentication analysis (see AUTH_ANALYSIS.md)",
        "          coordination: This agent: Continue security analysis of remaining modules New agent: "
        "Refactor auth module (separate work, no conflicts)",
        f"          subagent-bus approve {request}  |  subagent-bus deny {request} --reason ...",
    ]


def test_a_question_s_options_assumption_and_optional_type_are_shown() -> None:
    asked = clarification()
    first, second = asked.questions
    choices = first.model_copy(update={"options": ["OAuth2", "JWT", "both"], "current_assumption": "both"})
    optional = second.model_copy(update={"type": QuestionType.OPTIONAL})
    feed = Feed()
    feed.send(asked.model_copy(update={"questions": [choices, optional]}), "bg-task-abc123")
    lines = inbox_lines([summarize(feed.state)])
    q1 = _item(lines, "question  bg-task-abc123 Q1")
    assert q1[2:4] == ["          options: OAuth2 | JWT | both", "          assumes: both"], q1
    assert _item(lines, "question  bg-task-abc123 Q2")[0].startswith(
        "question  bg-task-abc123 Q2 (optional): "
    )
    [open_question, _] = summarize(feed.state).open_questions
    assert (open_question.options, open_question.current_assumption) == (("OAuth2", "JWT", "both"), "both")


def test_long_texts_in_the_inbox_are_cut_and_absent_ones_leave_no_line() -> None:
    feed = Feed()
    long = "word " * 100
    stop = RESOURCE_LIMIT.model_copy(update={"resume_requirements": long})
    feed.send(stop, "bg-task-ghi789")
    feed.send(delegate(priority="P2", task=long).model_copy(update={"context_required": None}), "lead")
    lines = inbox_lines([summarize(feed.state)])
    needs = _item(lines, "blocker")[1]
    assert needs.startswith("          needs: word word") and needs.endswith("…")
    assert len(needs) == len("          needs: ") + 200
    delegation = _item(lines, "delegate")
    assert delegation[0].endswith("…") and len(delegation[0].split(": ", 1)[1]) == 200
    asked = clarification("asker")
    feed.send(
        asked.model_copy(update={"questions": [asked.questions[0].model_copy(update={"text": long})]}),
        "asker",
    )
    feed.send(RESOURCE_LIMIT.model_copy(update={"agent_id": "stuck", "details": long}), "stuck")
    lines = inbox_lines([summarize(feed.state)])
    for first in (_item(lines, "question")[0], _item(lines, "blocker   stuck")[0]):
        assert first.endswith("…") and len(first.split(": ", 1)[1]) == 200, first
    assert [line.split(":")[0].strip() for line in delegation[1:3]] == ["reason", "coordination"]
    assert delegation[3].startswith("          subagent-bus approve ") and len(delegation) == 4


def test_a_group_with_a_severity_conflict_waits_for_a_review() -> None:
    feed = Feed(group="-g 1")
    feed.send(finding("security-auditor", severity="critical"), "auditor")
    feed.send(finding("qa-engineer", severity="minor", line=8), "qa")
    summary = summarize(feed.state)
    assert summary.severity_conflicts == 1
    assert render(summary)[-1] == (
        "  * 1 severity conflict(s): review with `subagent-bus findings --merged --group '-g 1'`"
    )
    lines = inbox_lines([summary])
    assert lines == [
        "review    group -g 1: 1 merged finding(s) whose agents disagree on severity",
        "          review: subagent-bus findings --merged --group '-g 1'",
    ]
    assert _words(lines[1].split(": ", 1)[1]) == ["subagent-bus", "findings", "--merged", "--group", "-g 1"]


def test_every_suggested_command_names_a_namespace_other_than_the_default() -> None:
    feed = _feed()
    feed.send(finding("security-auditor", severity="critical"), "auditor")
    feed.send(finding("qa-engineer", severity="minor"), "qa")
    summary = summarize(feed.state)
    lines = inbox_lines([summary], "demo x")
    tails = [line[line.index("subagent-bus") :] for line in lines if "subagent-bus" in line]
    commands = [part.strip("`") for tail in tails for part in tail.split("  |  ")]
    assert len(commands) == 6  # answer, resolve, recover, approve, deny, findings --merged
    for command in commands:
        words = _words(command.split("  #")[0])
        assert words[words.index("--namespace") + 1] == "demo x", command
    assert "--namespace 'demo x'" in render(summary, "demo x")[-1]
    assert not any("--namespace" in line for line in inbox_lines([summary]) + render(summary))


def test_a_verdict_is_the_last_one_while_agents_work() -> None:
    feed = Feed()
    feed.send(completion("a"), "a")
    assert ", 0 active, verdict continue;" in render(summarize(feed.state))[0]
    feed.send(AgentStarted(task="more"), "b")
    assert ", 1 active, last verdict continue;" in render(summarize(feed.state))[0]


def test_an_agent_that_finished_with_a_blocker_unresolved_waits_for_a_review() -> None:
    feed = Feed(group="g 1")
    feed.send(stop_error("a"), "a")
    feed.send(completion("a"), "a")
    lines = inbox_lines([summarize(feed.state)], "ns")
    assert lines[0].startswith("review    a finished with a blocker unresolved: error: ")
    assert lines[1:] == ["          see: subagent-bus status --group 'g 1' --namespace ns"]


def _asked_and_answered(agents: list[str]) -> tuple[Feed, list[QueuedCommand]]:
    """A group where ``asker`` asks a question, and one answer to it queued from each of ``agents``."""
    feed = Feed()
    feed.send(clarification("asker"), "asker")
    question = summarize(feed.state).open_questions[0]
    queued = [
        QueuedCommand(
            id=f"answer-{n}",
            entry_id=f"{n}-0",
            group_id=feed.state.group_id,
            agent_id=agent,
            command=EnvelopeType.ANSWER,
            question_ids=(question.question_id,),
        )
        for n, agent in enumerate(agents)
    ]
    return feed, queued


def test_many_commands_queued_for_one_item_are_counted_not_listed() -> None:
    feed, queued = _asked_and_answered(["asker"] * 100)
    [line] = [line for line in inbox_lines([summarize(feed.state)], queued=queued) if "queued: " in line]
    assert (
        line.strip()
        == "queued: 97 more, then answer answer-97, answer answer-98, answer answer-99, not applied yet"
    )


def test_a_command_queued_for_an_item_not_applied_yet_is_listed_on_its_own() -> None:
    feed, queued = _asked_and_answered(["asker", "new\nagent"])
    lines = inbox_lines([summarize(feed.state)], queued=queued)
    assert "          queued: answer answer-0, not applied yet" in lines
    assert (
        lines[-1] == f"queued    answer answer-1 (new\\nagent, group {feed.state.group_id}), not applied yet"
    )
    assert inbox_lines([], queued=queued[1:]) == [lines[-1]]


def test_text_that_shows_nothing_or_breaks_lines_is_escaped_on_one_line() -> None:
    # a zero-width space hides in a name; a line separator breaks the line for some tools
    assert one_line("a\u200bb\u2028c\u2029d\ufeffe\u2060f") == "a\\u200bb\\u2028c\\u2029d\\ufeffe\\u2060f"


def test_every_format_character_and_separator_is_escaped() -> None:
    unseen = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp")]
    assert [c for c in unseen if one_line(c) == c] == []


def test_status_lists_agents_and_requests_in_registration_order_whatever_the_maps_order() -> None:
    # a state read back from a large Redis hash holds its agents in the hash's order, not registration's
    feed = Feed()
    for n, agent in enumerate(["c-first", "a-second", "b-third"]):
        feed.send(delegate(agent, priority="P2"), agent, at=n + 1)
    state = feed.state
    shuffled = state.model_copy(
        update={
            "agents": dict(reversed(state.agents.items())),
            "delegations": dict(reversed(state.delegations.items())),
        }
    )
    summary = summarize(shuffled)
    assert [a.agent_id for a in summary.agents] == ["c-first", "a-second", "b-third"]
    assert [d.requester_id for d in summary.pending_delegations] == ["c-first", "a-second", "b-third"]


def test_an_agent_blocked_twice_shows_the_earlier_blocker_under_the_open_one() -> None:
    feed = Feed()
    feed.send(stop_error("a"), "a")
    no_network = {"agent_id": "a", "blocker_type": "external_dependency", "details": "no network"}
    feed.send(StopWork.model_validate({"stop_reason": "blocker", **no_network}), "a")
    lines = inbox_lines([summarize(feed.state)], "sbus")
    assert _item(lines, "blocker   a")[:2] == [
        "blocker   a (external_dependency): no network",
        "          also open: error: Unexpected error during analysis: TypeError: Cannot read property "
        "'length' of undefined",
    ]
    status = render(summarize(feed.state))
    assert "  ! a blocked (external_dependency): no network" in status
    assert (
        "  ! a also blocked on error: Unexpected error during analysis: TypeError: Cannot read property "
        "'length' of undefined"
    ) in status


def test_the_merged_columns_line_up_whatever_the_width_of_a_location_or_category() -> None:
    reports = [
        Finding(title="short", file="a.py", line=1, category="SEC", severity=Severity.HIGH, confidence=90,
                agent="a"),
        Finding(title="long", file="src/some/deeper/module.py", line=120, category="AUTHENTICATION",
                severity=Severity.LOW, agent="b"),
        Finding(title="both", file="a.py", line=1, category="SEC", severity=Severity.CRITICAL, agent="c"),
    ]  # fmt: skip
    first, second = merged_lines({"g": merge_findings(reports, Policy())})
    for one, other in [("SEC", "AUTHENTICATION"), ("critical/high", "low"), ("a, c  short", "b  long")]:
        assert f"{first} ".index(f" {one} ") == f"{second} ".index(f" {other} "), (first, second)
    assert first.index("100.0 ") + len("100.0") == second.index("-  b") + 1  # right-aligned
