"""A signal body indented with tabs, which YAML refuses: read as a terminal shows it (tab stops every 8
columns) when that makes it YAML, otherwise an error that says a tab is the trouble."""

from __future__ import annotations

import pytest

from agents.parser import ErrorItem, SignalItem, parse_text
from bus.signals import ClarificationNeeded, StopWork

HEAD = "[CLARIFICATION_NEEDED]\nagent_id: bg-1\ntimestamp: 2026-01-11T10:00:00-05:00\nblocked_at: auth\nreason: unclear\n"


@pytest.mark.parametrize(
    "questions",
    [
        "questions:\n\t- question_id: Q1\n\t  text: OAuth2 or JWT?\n",  # a tab, then spaces under the item
        "questions:\n\t- question_id: Q1\n\t  text: OAuth2 or JWT?\n\t  options:\n\t\t- OAuth2\n\t\t- JWT\n",
        "questions:\n      - question_id: Q1\n\ttext: OAuth2 or JWT?\n",  # spaces, then a tab that shows as 8
        "questions:\n  - question_id: Q1\n    text: 'OAuth2 or JWT?'\n\ndetails: prose: with a colon\n\t\n",
    ],
)
def test_a_body_indented_with_tabs_is_read_as_it_shows(questions: str) -> None:
    [item] = parse_text(HEAD + questions + "[/CLARIFICATION_NEEDED]\n")
    assert isinstance(item, SignalItem), item
    assert isinstance(item.payload, ClarificationNeeded)
    assert [(q.question_id, q.text) for q in item.payload.questions] == [("Q1", "OAuth2 or JWT?")]


def test_a_literal_block_indented_with_tabs_keeps_its_inner_indentation() -> None:
    body = "agent_id: a\nstop_reason: blocker\nblocker_type: error\ndetails: |\n\tnpm ERR: failed\n\t\tat line 3\n"
    [item] = parse_text("[STOP_WORK]\n" + body + "[/STOP_WORK]\n")
    assert isinstance(item, SignalItem), item
    assert isinstance(item.payload, StopWork)
    assert item.payload.details == "npm ERR: failed\n\tat line 3\n"  # the tab after its indentation is text


@pytest.mark.parametrize("makefile", ["  all:\n  \tgcc -o app main.c\n", "\tall:\n\t\tgcc -o app main.c\n"])
def test_the_tabs_of_a_literal_block_s_text_are_kept_when_the_body_is_read_as_shown(makefile: str) -> None:
    questions = "questions:\n\t- question_id: Q1\n\t  text: gcc or clang?\n"  # tab-indented: read as shown
    body = (
        f"agent_id: a1\nblocked_at: Makefile\nreason: which compiler\ncurrent_state: |\n{makefile}{questions}"
    )
    [item] = parse_text(f"[CLARIFICATION_NEEDED]\n{body}[/CLARIFICATION_NEEDED]\n")
    assert isinstance(item, SignalItem), item
    assert isinstance(item.payload, ClarificationNeeded)
    assert item.payload.current_state == "all:\n\tgcc -o app main.c\n"


def test_the_text_of_a_literal_block_is_not_quoted_with_the_prose_fields() -> None:
    details = "details: |\n  npm audit failed:\n  Error: ENOENT: no such file, open 'package.json'\n"
    body = (
        f"agent_id: a\nstop_reason: blocker\nblocker_type: error\n{details}resume_requirements: Run: npm i\n"
    )
    [item] = parse_text("[STOP_WORK]\n" + body + "[/STOP_WORK]\n")
    assert isinstance(item, SignalItem), item
    assert isinstance(item.payload, StopWork)
    assert item.payload.details == "npm audit failed:\nError: ENOENT: no such file, open 'package.json'\n"
    assert item.payload.resume_requirements == "Run: npm i"


def test_a_tab_inside_a_valid_body_is_kept() -> None:
    body = "agent_id: a\nstop_reason: blocker\nblocker_type: error\ndetails: |\n  col1\tcol2\n  \tindented\n"
    [item] = parse_text("[STOP_WORK]\n" + body + "[/STOP_WORK]\n")
    assert isinstance(item, SignalItem), item
    assert isinstance(item.payload, StopWork)
    assert item.payload.details == "col1\tcol2\n\tindented\n"


def test_tabs_that_do_not_line_up_are_an_error_naming_the_tab() -> None:
    questions = "questions:\n  - question_id: Q1\n  \ttext: OAuth2 or JWT?\n"  # column 8, not 4
    [item] = parse_text("Blocked.\n" + HEAD + questions + "[/CLARIFICATION_NEEDED]\n")
    assert isinstance(item, ErrorItem), item
    assert "line 9 is indented with a tab, which YAML refuses" in item.message


def test_a_tab_yaml_takes_is_not_named_for_an_error_elsewhere() -> None:
    # the tab is in a literal block's text, which YAML takes; the error is the unclosed list two lines on
    body = "agent_id: a\nstop_reason: blocker\nblocker_type: error\ndetails: |\n  col1\n  \tindented\nextra: [a\n"
    [item] = parse_text("[STOP_WORK]\n" + body + "[/STOP_WORK]\n")
    assert isinstance(item, ErrorItem), item
    assert item.message.startswith("STOP_WORK block at line 1: invalid YAML at line 9: "), item.message
    assert "tab" not in item.message
