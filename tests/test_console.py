"""The text views keep one item per line, whatever the agents put in their ids and texts."""

from __future__ import annotations

import subprocess

import pytest
from rules_kit import Feed, clarification, delegate, finding, stop_error

from bus.errors import BusError
from coordinator.console import inbox_lines, render
from coordinator.rules import summarize
from coordinator.view import find_agent

AGENT = "evil\nagent\x1b[31m"


def _feed() -> Feed:
    feed = Feed()
    asked = clarification(AGENT)
    asked = asked.model_copy(
        update={"questions": [asked.questions[0].model_copy(update={"text": "Which\none?"})]}
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
    assert any(line.endswith(": Which one?") and "evil\\nagent" in line for line in lines)
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
