"""What agents print around and inside a signal's body besides the seed's exact form: values of a closed
set in another case or spacing, questions without ids, a code fence inside the tags, ``50%``, the seed's
JSON form of a signal."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from agents.parser import ErrorItem, Found, SignalItem, parse_text
from bus.envelope import EnvelopeType
from bus.results import ResultReport, ResultStatus
from bus.signals import (
    BlockerType,
    ClarificationNeeded,
    CompletionReport,
    CompletionStatus,
    DelegateWork,
    Independence,
    Priority,
    Progress,
    QuestionType,
    StopReason,
    StopWork,
)

STAMP = "2026-01-11T10:00:00-05:00"
DELEGATE = (
    "[DELEGATE_WORK]\nagent_id: bg-1\ntimestamp: {stamp}\ndelegation_reason: Large refactoring in parallel\n"
    "new_task_description: Refactor the authentication module to one AuthProvider pattern\n"
    "independence: {independence}\npriority: {priority}\n[/DELEGATE_WORK]\n"
)
COMPLETION = "[COMPLETION_REPORT]\nagent_id: bg-2\nstatus: {status}\nsummary: Scanned for TODOs\n[/COMPLETION_REPORT]\n"
STOP = "[STOP_WORK]\nagent_id: bg-3\nstop_reason: {reason}\nblocker_type: {blocker}\ndetails: no key\n[/STOP_WORK]\n"


def only(items: list[Found]) -> Found:
    assert len(items) == 1, items
    return items[0]


def signal(text: str) -> SignalItem:
    item = only(parse_text(text))
    assert isinstance(item, SignalItem), item
    return item


def error(text: str) -> str:
    item = only(parse_text(text))
    assert isinstance(item, ErrorItem), item
    return item.message


def clarification(questions: str) -> str:
    return (
        f"[CLARIFICATION_NEEDED]\nagent_id: bg-4\ntimestamp: {STAMP}\nblocked_at: src/auth/\n"
        f"reason: two strategies\nquestions:\n{questions}[/CLARIFICATION_NEEDED]\n"
    )


def questions_of(text: str) -> list[tuple[str, str]]:
    payload = signal(text).payload
    assert isinstance(payload, ClarificationNeeded)
    return [(q.question_id, q.text) for q in payload.questions]


@pytest.mark.parametrize(
    ("independence", "priority", "expected"),
    [
        ("can proceed parallel", "p1", (Independence.CAN_PROCEED_PARALLEL, Priority.P1)),
        ("Blocks-Current-Work", " P0 ", (Independence.BLOCKS_CURRENT_WORK, Priority.P0)),
        ("CAN_PROCEED  PARALLEL", "p2", (Independence.CAN_PROCEED_PARALLEL, Priority.P2)),
        ("OPTIONAL", "P1", (Independence.OPTIONAL, Priority.P1)),
    ],
)
def test_values_of_a_closed_set_match_in_any_case_and_spacing(
    independence: str, priority: str, expected: tuple[Independence, Priority]
) -> None:
    payload = signal(DELEGATE.format(stamp=STAMP, independence=independence, priority=priority)).payload
    assert isinstance(payload, DelegateWork)
    assert (payload.independence, payload.priority) == expected
    wire = payload.model_dump(mode="json")  # the payload holds the seed's value
    assert (wire["independence"], wire["priority"]) == (expected[0].value, expected[1].value)


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("SUCCESS", CompletionStatus.SUCCESS),
        ("Partial Success", CompletionStatus.PARTIAL_SUCCESS),
        ("partial-success", CompletionStatus.PARTIAL_SUCCESS),
        ("partial", CompletionStatus.PARTIAL_SUCCESS),  # the result contract's PARTIAL
        ("PARTIAL", CompletionStatus.PARTIAL_SUCCESS),
        ("Failed", CompletionStatus.FAILED),
    ],
)
def test_a_completion_status_in_the_result_contracts_words(written: str, expected: CompletionStatus) -> None:
    payload = signal(COMPLETION.format(status=written)).payload
    assert isinstance(payload, CompletionReport)
    assert payload.status is expected


def test_stop_reasons_blocker_types_and_question_types_are_lenient_too() -> None:
    payload = signal(STOP.format(reason="BLOCKER", blocker="External Dependency")).payload
    assert isinstance(payload, StopWork)
    assert (payload.stop_reason, payload.blocker_type) == (
        StopReason.BLOCKER,
        BlockerType.EXTERNAL_DEPENDENCY,
    )
    asked = signal(clarification("  - question_id: Q1\n    text: Which?\n    type: Blocking\n")).payload
    assert isinstance(asked, ClarificationNeeded)
    assert asked.questions[0].type is QuestionType.BLOCKING


def test_an_unknown_value_is_still_an_error_that_lists_the_values() -> None:
    assert signal(DELEGATE.format(stamp=STAMP, independence="optional", priority="p2"))
    message = error(DELEGATE.format(stamp=STAMP, independence="whenever", priority="P 9"))
    assert message == (
        "DELEGATE_WORK block at line 1: field 'independence': Input should be 'can_proceed_parallel', "
        "'blocks_current_work' or 'optional'; field 'priority': Input should be 'P0', 'P1' or 'P2'"
    )
    assert signal(COMPLETION.format(status="PARTIAL"))
    for status in ("done", "partially", "succes", "<success|partial_success|failed>", "1"):
        assert error(COMPLETION.format(status=status)).endswith(
            "field 'status': Input should be 'success', 'partial_success' or 'failed'"
        ), status


def test_questions_written_as_plain_text_are_numbered_by_position() -> None:
    text = clarification('  - Should I analyze OAuth2, JWT, or both?\n  - "Which version: 2.0 or 3.0?"\n')
    assert questions_of(text) == [
        ("Q1", "Should I analyze OAuth2, JWT, or both?"),
        ("Q2", "Which version: 2.0 or 3.0?"),
    ]
    assert questions_of(clarification("  [OAuth2 or JWT?, Which version?]\n")) == [
        ("Q1", "OAuth2 or JWT?"),
        ("Q2", "Which version?"),
    ]


def test_questions_without_an_id_are_numbered_and_keep_their_fields() -> None:
    text = clarification(
        "  - text: OAuth2 or JWT?\n    context: both exist\n  - text: Version?\n    question_id: null\n"
    )
    payload = signal(text).payload
    assert isinstance(payload, ClarificationNeeded)
    first, second = payload.questions
    assert (first.question_id, first.text, first.context) == ("Q1", "OAuth2 or JWT?", "both exist")
    assert (second.question_id, second.text) == ("Q2", "Version?")
    blank = clarification("  - question_id: ''\n    text: a\n  - question_id: ' '\n    text: b\n")
    assert questions_of(blank) == [("Q1", "a"), ("Q2", "b")]  # no answer could name a blank id


@pytest.mark.parametrize(
    ("questions", "expected"),
    [
        (
            "  Q1: OAuth2 or JWT?\n  Q2:\n    text: Which version?\n    context: both in use\n",
            [("Q1", "OAuth2 or JWT?", None), ("Q2", "Which version?", "both in use")],
        ),
        (
            "  A: one?\n  B:\n    question_id: Q9\n    text: two?\n",
            [("A", "one?", None), ("Q9", "two?", None)],
        ),
        ("  text: Which strategy?\n  context: two found\n", [("Q1", "Which strategy?", "two found")]),
        ("  question_id: Q2\n  text: Which strategy?\n", [("Q2", "Which strategy?", None)]),
    ],
)
def test_questions_written_as_a_mapping_are_the_seeds_list(
    questions: str, expected: list[tuple[str, str, str | None]]
) -> None:
    payload = signal(clarification(questions)).payload
    assert isinstance(payload, ClarificationNeeded)
    assert [(q.question_id, q.text, q.context) for q in payload.questions] == expected


def test_one_question_written_as_text_is_a_list_of_it() -> None:
    text = clarification("").replace("questions:\n", "questions: OAuth2 or JWT?\n")
    payload = signal(text).payload
    assert isinstance(payload, ClarificationNeeded)
    assert [(q.question_id, q.text) for q in payload.questions] == [("Q1", "OAuth2 or JWT?")]
    assert "questions[0].text" in error(clarification("  Q1:\n"))  # a question with no text is still one
    # a question's fields, its text misnamed, are one question without a text, not questions named by them
    assert "questions[0].text" in error(clarification("  question: OAuth2 or JWT?\n  type: blocking\n"))


def test_a_numbered_question_skips_the_ids_other_questions_have() -> None:
    text = clarification(
        "  - first\n  - question_id: Q1\n    text: second\n  - text: third\n  - fourth\n"
        "  - question_id: q6\n    text: fifth\n  - sixth\n"
    )
    assert questions_of(text) == [
        ("Q2", "first"),  # Q1 is the second question's
        ("Q1", "second"),
        ("Q3", "third"),
        ("Q4", "fourth"),
        ("q6", "fifth"),
        ("Q7", "sixth"),  # q6 is taken, in any case
    ]
    twice = clarification("  - question_id: Q1\n    text: a\n  - b\n  - question_id: Q1\n    text: c\n")
    assert error(twice).endswith("question ids must differ: 'Q1' is used more than once")
    blank = clarification("  - ''\n")
    assert "field 'questions[0].text': must not be blank" in error(blank)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("shape", ["ids", "text", "text then ids"])
def test_a_block_full_of_questions_is_read_in_linear_time(shape: str) -> None:
    # ~1 MiB of questions: the check for distinct ids and the numbering must not be quadratic
    def ids(count: int) -> str:
        return "".join(f"  - question_id: Q{i}\n    text: t\n" for i in range(1, count + 1))

    body = {
        "ids": ids(28_000),
        "text": "  - t\n" * 120_000,
        "text then ids": "  - t\n" * 60_000 + ids(14_000),
    }[shape]
    started = time.monotonic()
    payload = signal(clarification(body)).payload
    assert time.monotonic() - started < 5
    assert isinstance(payload, ClarificationNeeded)
    assert len({q.question_id for q in payload.questions}) == len(payload.questions)


@pytest.mark.parametrize(
    ("opening", "closing"),
    [("```yaml", "```"), ("```", "```"), ("~~~", "~~~"), ("````yml", "`````"), ("``` yaml ", "```  ")],
)
def test_a_code_fence_around_the_whole_body_is_taken_off(opening: str, closing: str) -> None:
    body = "agent_id: bg-5\nstop_reason: error\nblocker_type: error\ndetails: |\n  npm audit failed\n"
    payload = signal(f"[STOP_WORK]\n{opening}\n{body}{closing}\n[/STOP_WORK]\n").payload
    assert isinstance(payload, StopWork)
    assert payload.details == "npm audit failed\n"
    crlf = (
        f"  [STOP_WORK]\n\n  {opening}\n  {body.replace(chr(10), chr(10) + '  ')}{closing}\n  [/STOP_WORK]\n"
    )
    assert signal(crlf.replace("\n", "\r\n")).payload == payload  # indented, blank lines, CRLF


def test_errors_inside_a_fenced_body_name_the_lines_of_the_output() -> None:
    text = "prose\n[STOP_WORK]\n```yaml\nagent_id: bg-6\nagent_id: bg-7\n```\n[/STOP_WORK]\n"
    assert error(text) == "STOP_WORK block at line 2: invalid YAML at line 5: duplicate key 'agent_id'"
    assert error(text.replace("agent_id: bg-7", "details: x\nstop_reason: later")).startswith(
        "STOP_WORK block at line 2: field 'stop_reason': Input should be"
    )


@pytest.mark.parametrize(
    "body",
    [
        "```yaml\nagent_id: a\ndetails: x\n```\nmore prose\n",  # the fence does not wrap the whole body
        "```yaml\nagent_id: a\ndetails: x\n~~~\n",  # closed by another marker
        "````\nagent_id: a\ndetails: x\n```\n",  # closed by a shorter one
        "```\nagent_id: a\ndetails: x\n```yaml\n",  # a closing fence has no info string
    ],
)
def test_a_fence_that_does_not_wrap_the_body_is_still_an_error(body: str) -> None:
    wrapped = "```yaml\nagent_id: a\nstop_reason: error\nblocker_type: error\ndetails: x\n```\n"
    assert signal(f"[STOP_WORK]\n{wrapped}[/STOP_WORK]\n")
    assert "invalid YAML" in error(f"[STOP_WORK]\n{body}[/STOP_WORK]\n")


@pytest.mark.parametrize(
    ("written", "percent"), [("50%", 50.0), ("12.5 %", 12.5), ("100%", 100.0), ("0%", 0)]
)
def test_a_percent_may_carry_its_sign(written: str, percent: float) -> None:
    payload = signal(f"[PROGRESS]\nagent_id: a\npercent: {written}\n[/PROGRESS]\n").payload
    assert isinstance(payload, Progress)
    assert payload.percent == percent


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("101%", "less than or equal to 100"),
        ("half%", "valid number"),
        ("'%'", "valid number"),
        ("true", "a number, not true"),  # pydantic reads it as 1: 1 %
        ("false", "a number, not false"),
    ],
)
def test_a_percent_with_its_sign_is_still_checked(written: str, message: str) -> None:
    assert signal("[PROGRESS]\nagent_id: a\npercent: 7%\n[/PROGRESS]\n")
    assert message in error(f"[PROGRESS]\nagent_id: a\npercent: {written}\n[/PROGRESS]\n")


@pytest.mark.parametrize(
    ("written", "instant"),
    [
        ("20260111T150000Z", "2026-01-11T15:00:00+00:00"),
        ("20260111T1000-0500", "2026-01-11T10:00:00-05:00"),
        ("20260111T100000,25+01:00", "2026-01-11T10:00:00.250000+01:00"),
        ("'20260111T100000-05'", "2026-01-11T10:00:00-05:00"),
    ],
)
def test_a_timestamp_may_be_in_the_basic_format(written: str, instant: str) -> None:
    payload = signal(DELEGATE.format(stamp=written, independence="optional", priority="P2")).payload
    assert isinstance(payload, DelegateWork)
    assert payload.timestamp is not None and payload.timestamp.isoformat() == instant


@pytest.mark.parametrize("written", ["20260111T100000", "20261311T100000Z", "20260111T10Z"])
def test_a_basic_timestamp_without_a_zone_or_with_an_impossible_date_is_still_an_error(written: str) -> None:
    assert "field 'timestamp'" in error(
        DELEGATE.format(stamp=written, independence="optional", priority="P2")
    )


@pytest.mark.parametrize(
    "written", ["20261129", "'20261129'", "1764417000", "1764417000.5", "-5", "'.5'", "'1.7e9'", "'0.5E1'"]
)
def test_a_timestamp_that_is_a_number_is_an_error_not_unix_time(written: str) -> None:
    # pydantic reads a number as Unix time: the date 20261129 would have been an instant of 1970
    assert "is a number, not an ISO 8601 timestamp" in error(
        DELEGATE.format(stamp=written, independence="optional", priority="P2")
    )


JSON_FORM = (
    '{"signal_type": "CLARIFICATION_NEEDED", "agent_id": "bg-task-abc123", "timestamp": "2026-01-11T08:45:00-05:00", '
    '"payload": {"blocked_at": "src/auth/", "reason": "Multiple strategies", '
    '"questions": [{"question_id": "Q1", "text": "OAuth2 or JWT?", "context": "both exist"}], "can_resume_with": "answer"}}'
)  # fmt: skip


@pytest.mark.parametrize("fence", ["", "```json\n"])
def test_the_seeds_json_form_between_the_tags_is_read(fence: str) -> None:
    closing = "```\n" if fence else ""
    item = signal(f"[CLARIFICATION_NEEDED]\n{fence}{JSON_FORM}\n{closing}[/CLARIFICATION_NEEDED]\n")
    assert item.type is EnvelopeType.CLARIFICATION_NEEDED
    payload = item.payload
    assert isinstance(payload, ClarificationNeeded)
    assert (payload.agent_id, payload.blocked_at, payload.can_resume_with) == (
        "bg-task-abc123",
        "src/auth/",
        "answer",
    )
    assert payload.timestamp is not None and payload.timestamp.isoformat() == "2026-01-11T08:45:00-05:00"
    assert [q.text for q in payload.questions] == ["OAuth2 or JWT?"]
    assert payload.model_extra == {}
    assert parse_text(f"Emitting signal:\n{JSON_FORM}\n") == []  # without tags: prose (see the README)


def _form(**changes: Any) -> str:
    form = orjson.loads(JSON_FORM)
    form["payload"] = {key: value for key, value in form["payload"].items() if key not in changes}
    for key, value in changes.items():
        if key in ("signal_type", "payload"):
            form[key] = value
        elif value is not None:
            form["payload"][key] = value
    return orjson.dumps(form).decode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            _form(signal_type="STOP_WORK"),
            "field 'signal_type': 'STOP_WORK' in a [CLARIFICATION_NEEDED] block",
        ),
        (
            _form(signal_type=["CLARIFICATION_NEEDED"]),
            "field 'signal_type': \"['CLARIFICATION_NEEDED']\" in a",
        ),
        (
            _form(agent_id="bg-other"),
            "field 'payload.agent_id': differs from the agent_id beside the payload",
        ),
        (_form(payload=["src/auth/"]), "field 'payload': the signal's fields must be a mapping, not a list"),
        (_form(payload=None), "field 'payload': the signal's fields must be a mapping, not null"),
        (_form(reason=None), "field 'reason': Field required"),
    ],
)
def test_a_json_form_that_does_not_fit_its_block_says_why(body: str, message: str) -> None:
    assert message in error(f"[CLARIFICATION_NEEDED]\n{body}\n[/CLARIFICATION_NEEDED]\n")
    same = _form(agent_id="bg-task-abc123", signal_type="[clarification_needed]")
    assert signal(f"[CLARIFICATION_NEEDED]\n{same}\n[/CLARIFICATION_NEEDED]\n")


def test_a_yaml_signal_with_a_signal_type_field_keeps_it_as_an_extra_field() -> None:
    text = STOP.format(reason="blocker", blocker="missing_info").replace(
        "details:", "signal_type: STOP_WORK\ndetails:"
    )
    assert signal(text).payload.model_extra == {"signal_type": "STOP_WORK"}
    fields = '{"agent_id": "bg-7", "stop_reason": "error", "blocker_type": "error", "details": "x"}'
    payload = signal(
        f'[STOP_WORK]\n{{"signal_type": "stop_work", "payload": {fields}}}\n[/STOP_WORK]\n'
    ).payload
    assert isinstance(payload, StopWork) and payload.details == "x"


@pytest.mark.parametrize("written", ["success", "Success", " SUCCESS "])
def test_a_result_status_matches_in_any_case_as_a_signal_s_values_do(written: str) -> None:
    # the result contract writes SUCCESS; an MCP submit_result or another publisher may not
    report = ResultReport.model_validate({"agent": "Tester", "status": written, "summary": "Done."})
    assert report.status is ResultStatus.SUCCESS


@pytest.mark.parametrize(
    ("written", "text"),
    [
        ("  - Scanned secrets\n  -\n  - Reviewed auth\n", "Scanned secrets\nReviewed auth"),
        ("  - Scanned secrets\n  - ~\n", "Scanned secrets"),
        ("  auth review:\n  sql review: done\n", "auth review:\nsql review: done"),
    ],
)
def test_a_null_in_a_text_field_written_as_a_list_or_mapping_is_no_text(written: str, text: str) -> None:
    body = (
        "agent_id: a1\ntimestamp: 2026-01-11T09:15:00-05:00\nstop_reason: blocker\n"
        f"blocker_type: external_dependency\ndetails: npm missing\ncompleted_work:\n{written}"
    )
    (item,) = parse_text(f"[STOP_WORK]\n{body}[/STOP_WORK]\n")
    assert isinstance(item, SignalItem) and isinstance(item.payload, StopWork)
    assert item.payload.completed_work == text
