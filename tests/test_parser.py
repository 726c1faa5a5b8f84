"""The incremental parser: what counts as a block, errors, and the same items however input is chunked."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import yamlfast, yamlsafe
from agents.parser import (
    DEFAULT_MAX_BLOCK_BYTES,
    MAX_TAG_LINE,
    ErrorItem,
    Found,
    Parser,
    ResultItem,
    SignalItem,
    UnreadReportItem,
    parse_text,
)
from bus.envelope import EnvelopeType, decode, encode_new
from bus.results import ResultStatus
from bus.signals import ClarificationNeeded, Progress, StopReason, StopWork


def stop(agent: str = "bg-1", **fields: str) -> str:
    body = {
        "agent_id": agent,
        "timestamp": "2026-01-11T09:15:00-05:00",
        "stop_reason": "blocker",
        "blocker_type": "missing_info",
        "details": "need the API key",
        **fields,
    }
    lines = "".join(f"{key}: {value}\n" for key, value in body.items() if value)
    return f"[STOP_WORK]\n{lines}[/STOP_WORK]\n"


def feed_split(data: bytes, cuts: list[int], max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES) -> list[Found]:
    parser = Parser(max_block_bytes=max_block_bytes)
    items: list[Found] = []
    previous = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        items += parser.feed(data[previous:cut])
        previous = cut
    return items + parser.close()


def only(items: list[Found]) -> Found:
    assert len(items) == 1, items
    return items[0]


def test_a_block_alone_on_its_lines_is_a_signal() -> None:
    item = only(parse_text(stop()))
    assert isinstance(item, SignalItem)
    assert item.type is EnvelopeType.STOP_WORK
    assert isinstance(item.payload, StopWork)
    assert item.payload.agent_id == "bg-1"
    assert item.payload.stop_reason is StopReason.BLOCKER
    assert item.payload.details == "need the API key"
    assert (item.line, item.offset) == (1, 0)


def test_a_completion_stop_needs_no_blocker_type_and_a_blocker_does() -> None:
    """None of the seed's blocker types fits ``stop_reason: completion``, which the README accepts."""
    done = only(parse_text(stop(stop_reason="completion", blocker_type="")))
    assert isinstance(done, SignalItem) and isinstance(done.payload, StopWork)
    assert (done.payload.blocker_type, done.payload.kind) == (None, "completion")
    stuck = only(parse_text(stop(blocker_type="")))
    assert isinstance(stuck, ErrorItem)
    assert stuck.message.endswith("blocker_type is required with stop_reason: blocker")
    failed = only(parse_text(stop(stop_reason="error", blocker_type="")))  # seed 003's diagram writes it so
    assert isinstance(failed, SignalItem) and isinstance(failed.payload, StopWork)
    assert failed.payload.kind == "error"


def test_inline_mentions_and_greps_are_prose() -> None:
    text = (
        "I will emit [STOP_WORK] if the key is missing, then [/STOP_WORK].\n"
        'if echo "$output" | grep -q "\\[STOP_WORK\\]"; then\n'
        "[STOP_WORK] is how I stop\n"
        "│ [CLARIFICATION_NEEDED] │\n"
        "`[DELEGATE_WORK]`\n"
    )
    assert parse_text(text) == []


def test_indented_block_in_a_list_is_dedented() -> None:
    text = (
        "Status:\n"
        "- blocked:\n"
        "    [STOP_WORK]\n"
        "    agent_id: bg-2\n"
        "    stop_reason: error\n"
        "    blocker_type: error\n"
        "    details: |\n"
        "      first line\n"
        "        indented line\n"
        "    [/STOP_WORK]\n"
    )
    item = only(parse_text(text))
    assert isinstance(item, SignalItem)
    assert isinstance(item.payload, StopWork)
    assert item.payload.details == "first line\n  indented line\n"
    assert item.line == 3
    assert text.encode()[item.offset : item.offset + 11] == b"[STOP_WORK]"


@pytest.mark.parametrize(
    ("opening", "closing"),
    [
        ("**[STOP_WORK]**", "**[/STOP_WORK]**"),
        ("__[STOP_WORK]__", "[/STOP_WORK]"),
        ("*[STOP_WORK]*", "*[/STOP_WORK]*"),
        ("\x1b[1;31m[STOP_WORK]\x1b[0m", "\x1b[31m[/STOP_WORK]\x1b[0m"),
        ("\x1b[1m**[STOP_WORK]**\x1b[0m  ", "**[/STOP_WORK]**\r"),
        ("**[STOP_WORK]**", "[/STOP_WORK] Waiting for the parent to resolve this."),
        ("\x1b[?25l\x1b[1G\x1b[0K[STOP_WORK]", "\x1b[1G\x1b[0K\x1b[?25h[/STOP_WORK]"),  # a spinner's end
        ("\x1b]0;agent\x07\x1b[2J\x1b[H[STOP_WORK]", "[/STOP_WORK]\x1b]8;;\x1b\\"),  # a title, a link's end
        ("\x1b[1m[STOP_WORK]\x1b(B\x1b[m", "\x1b[1m[/STOP_WORK]\x1b(B\x1b[m"),  # tput bold, tput sgr0
        ("\x1b7\x1b[1G[STOP_WORK]\x1b8", "\x1b=[/STOP_WORK]\x1b>"),  # cursor saved, keypad modes
    ],
)
def test_emphasis_and_colour_around_a_tag_alone_on_its_line_are_allowed(opening: str, closing: str) -> None:
    text = "Blocked.\n" + stop().replace("[STOP_WORK]", opening, 1).replace("[/STOP_WORK]", closing)
    item = only(parse_text(text))
    assert isinstance(item, SignalItem)
    assert isinstance(item.payload, StopWork)
    assert item.payload.details == "need the API key"
    assert (item.line, item.offset) == (2, len("Blocked.\n"))


@pytest.mark.parametrize(
    "line",
    [
        "`[STOP_WORK]`",
        "> [STOP_WORK]",
        "**STOP_WORK**",
        "### [STOP_WORK]",  # a protocol explained, section by section
        "- [STOP_WORK]",
        "Note: [STOP_WORK]",
    ],
)
def test_other_text_before_a_tag_is_still_prose(line: str) -> None:
    assert parse_text(stop().replace("[STOP_WORK]", line, 1)) == []  # its closing tag too


def test_block_inside_a_yaml_fence_and_crlf_line_endings() -> None:
    lf = "Blocked:\n\n```yaml\n" + stop(completed_work="|\n  ✓ scanned\n  ✗ audit") + "```\n"
    crlf = lf.replace("\n", "\r\n")
    a, b = only(parse_text(lf)), only(parse_text(crlf))
    assert isinstance(a, SignalItem)
    assert isinstance(b, SignalItem)
    assert a.payload == b.payload
    assert isinstance(a.payload, StopWork)
    assert a.payload.completed_work == "✓ scanned\n✗ audit\n"
    assert (a.line, b.line) == (4, 4)
    assert b.offset == len("Blocked:\r\n\r\n```yaml\r\n")


@pytest.mark.parametrize("erase", ["", "\x1b[K", "\x1b[2K"])
def test_a_tag_after_a_progress_line_redrawn_with_a_carriage_return_is_read(erase: str) -> None:
    before = "Scanning 10%\rScanning 20%\r" + erase
    data = (before + stop().replace("\n", "\r\n", 2)).encode()
    for cuts in [[], *([cut] for cut in range(1, len(data)))]:
        item = only(feed_split(data, cuts))
        assert isinstance(item, SignalItem), (cuts, item)
        assert isinstance(item.payload, StopWork)
        assert item.payload.details == "need the API key"
        assert (item.line, item.offset) == (3, len(before) - len(erase))


def test_a_lone_carriage_return_ends_a_line_at_the_end_of_input_too() -> None:
    text = stop().replace("\n", "\r")
    assert isinstance(only(parse_text(text)), SignalItem)
    parser = Parser()
    assert parser.feed(text.encode()) == []  # the CR after the closing tag is kept back: a LF may follow
    assert parser.settle() != []  # at a pause the closing tag ends the block all the same
    assert parser.feed(b"prose\n") + parser.close() == []


def test_offsets_count_bytes_of_unicode_prose() -> None:
    prefix = "✓ done — ünïcode\n"
    item = only(parse_text(prefix + stop()))
    assert item.offset == len(prefix.encode())
    assert item.line == 2


@pytest.mark.parametrize("cuts", [[], [1], [2], [3], [1, 2], list(range(1, 8))], ids=str)
def test_a_byte_order_mark_at_the_start_is_skipped_and_counted_in_offsets(cuts: list[int]) -> None:
    bom = b"\xef\xbb\xbf"
    data = bom + stop("a").encode() + stop("b").encode()
    items = feed_split(data, cuts)
    assert [(i.line, i.offset) for i in items] == [(1, len(bom)), (8, len(bom) + len(stop("a")))]
    assert all(isinstance(i, SignalItem) for i in items)


def test_a_byte_order_mark_elsewhere_or_cut_short_is_prose() -> None:
    assert parse_text(b"intro\n\xef\xbb\xbf" + stop().encode()) == []
    assert parse_text(b"\xef\xbb" + stop().encode()) == []
    assert feed_split(b"\xef\xbb", [1]) == []


def test_several_blocks_keep_their_order_lines_and_offsets() -> None:
    progress = "[PROGRESS]\nagent_id: bg-1\npercent: 45\nmessage: halfway\neta: 20m\n[/PROGRESS]\n"
    text = "intro\n" + stop("a") + "middle\n\n" + progress + stop("b") + "outro"
    items = parse_text(text)
    assert [type(i).__name__ for i in items] == ["SignalItem"] * 3
    assert [i.line for i in items] == [2, 11, 17]
    data = text.encode()
    assert [data[i.offset : i.offset + 2] for i in items] == [b"[S", b"[P", b"[S"]
    assert isinstance(items[1], SignalItem)
    assert isinstance(items[1].payload, Progress)
    assert items[1].payload.percent == 45
    assert items[1].payload.eta == "20m"


def test_a_bad_block_does_not_hide_its_neighbours() -> None:
    text = stop("a") + "\n" + stop("b", stop_reason="maybe") + stop("c")
    first, bad, last = parse_text(text)
    assert isinstance(first, SignalItem)
    assert isinstance(last, SignalItem)
    assert isinstance(bad, ErrorItem)
    assert bad.line == 9
    assert bad.type is EnvelopeType.STOP_WORK
    assert bad.message == (
        "STOP_WORK block at line 9: field 'stop_reason': Input should be 'blocker', 'error' or 'completion'"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"details": ""}, "field 'details': Field required"),
        ({"details": "'   '"}, "field 'details': must not be blank"),
        ({"timestamp": "2026-01-11T09:15:00"}, "field 'timestamp': Input should have timezone info"),
        ({"timestamp": "2026-01-11"}, "field 'timestamp': Input should have timezone info"),
        ({"timestamp": "yesterday"}, "field 'timestamp': Input should be a valid datetime"),
        ({"blocker_type": "no"}, "field 'blocker_type': Input should be 'missing_info'"),
    ],
)
def test_validation_errors_name_the_field(fields: dict[str, str], message: str) -> None:
    item = only(parse_text("prose\n" + stop(**fields)))
    assert isinstance(item, ErrorItem)
    assert item.line == 2
    assert item.message.startswith(f"STOP_WORK block at line 2: {message}")


def test_an_aware_timestamp_is_parsed() -> None:
    item = only(parse_text(stop(timestamp="2026-01-11T14:15:00Z")))
    assert isinstance(item, SignalItem)
    assert item.payload.timestamp == datetime(2026, 1, 11, 14, 15, tzinfo=UTC)


def test_invalid_yaml_names_the_line_in_the_output() -> None:
    text = "one\ntwo\n[STOP_WORK]\nagent_id: a\ndetails: [unclosed\n[/STOP_WORK]\n"
    item = only(parse_text(text))
    assert isinstance(item, ErrorItem)
    assert item.message.startswith("STOP_WORK block at line 3: invalid YAML at line ")
    assert item.line == 3


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("- a\n- b\n", "the body must be a YAML mapping of fields, not a list"),
        ("", "the body must be a YAML mapping of fields, not an empty body"),
        ("just words\n", "the body must be a YAML mapping of fields, not a scalar ('just words')"),
    ],
)
def test_the_body_must_be_a_mapping(body: str, message: str) -> None:
    item = only(parse_text(f"[STOP_WORK]\n{body}[/STOP_WORK]\n"))
    assert isinstance(item, ErrorItem)
    assert item.message == f"STOP_WORK block at line 1: {message}"


def test_numbers_keep_their_text_where_a_text_is_wanted() -> None:
    # An agent id of digits (a Claude Code id: 7 hex characters) is a YAML number; text fields and ids
    # take what the author wrote, extra fields a number only when it says exactly what was written.
    body = (
        "agent_id: 1234567\nstop_reason: blocker\nblocker_type: missing_info\ndetails: 1.10\n"
        "state_snapshot: 0755\ncommit: 0755\nrun: 0x1f\nratio: 1.5\ntests: 42\nhuge: 8e12345\n"
    )
    item = only(parse_text(f"[STOP_WORK]\n{body}[/STOP_WORK]\n"))
    assert isinstance(item, SignalItem) and isinstance(item.payload, StopWork)
    stop = item.payload
    assert (stop.agent_id, stop.details, stop.state_snapshot) == ("1234567", "1.10", "0755")
    extra = stop.model_dump(mode="json", exclude_none=True)
    assert {k: extra[k] for k in ("commit", "run", "ratio", "tests", "huge")} == {
        "commit": "0755",
        "run": "0x1f",
        "ratio": 1.5,
        "tests": 42,
        "huge": "8e12345",
    }
    assert [type(extra[k]) for k in ("ratio", "tests")] == [float, int]  # plain numbers on the wire
    question = "questions:\n  - question_id: 1\n    text: which?\n"
    asked = only(parse_text(f"[CLARIFICATION_NEEDED]\nagent_id: 0042\nblocked_at: x\nreason: r\n{question}"
                            "[/CLARIFICATION_NEEDED]\n"))  # fmt: skip
    assert isinstance(asked, SignalItem) and isinstance(asked.payload, ClarificationNeeded)
    assert (asked.payload.agent_id, asked.payload.questions[0].question_id) == ("0042", "1")


def test_prose_fields_with_colons_are_read_as_text() -> None:
    # YAML refuses a second ": " in a plain value; agents write fields as prose
    text = stop(
        details="The database is unreachable: connection refused",
        completed_work="step 1: done, it's fine",
        blocked_work="the migration:",
    )
    item = only(parse_text(text))
    assert isinstance(item, SignalItem)
    assert isinstance(item.payload, StopWork)
    assert item.payload.details == "The database is unreachable: connection refused"
    assert item.payload.completed_work == "step 1: done, it's fine"
    assert item.payload.blocked_work == "the migration:"
    spaced = only(parse_text(stop(details="x:  \t ", completed_work="a: b \r")))  # the spaces after it
    assert isinstance(spaced, SignalItem) and isinstance(spaced.payload, StopWork)
    assert (spaced.payload.details, spaced.payload.completed_work) == ("x:", "a: b")
    colon = only(parse_text(stop(details=": the db is down")))  # no prose field: YAML's own error
    assert isinstance(colon, ErrorItem) and "invalid YAML" in colon.message
    still = only(parse_text(stop(details="a: b", completed_work="[unclosed")))  # another error remains
    assert isinstance(still, ErrorItem)
    assert "invalid YAML at line 6" in still.message


def test_a_quote_never_closed_is_named_at_its_line() -> None:
    # libyaml meets the problem at the end of the body: the line where the quote opened was not said
    item = only(parse_text(stop(details='"The database password is missing')))
    assert isinstance(item, ErrorItem)
    assert item.message.endswith("end of stream (while scanning a quoted scalar that starts at line 6)")


def test_yaml_follows_the_1_2_core_schema() -> None:
    loaded = yamlsafe.load(
        "a: no\nb: yes\nc: on\nd: off\ne: true\nf: False\ng: 1:30\nh: 0o17\ni: 010\nj: ~\n"
    )
    assert loaded == {"a": "no", "b": "yes", "c": "on", "d": "off", "e": True, "f": False} | {
        "g": "1:30",
        "h": 15,
        "i": 10,
        "j": None,
    }
    assert yamlsafe.load("t: 2026-01-11T09:15:00-05:00\nd: 2026-01-11\n") == {
        "t": "2026-01-11T09:15:00-05:00",
        "d": "2026-01-11",
    }


def test_an_unterminated_block_is_an_error_never_a_partial_signal() -> None:
    parser = Parser()
    assert parser.feed(stop().removesuffix("[/STOP_WORK]\n").encode()) == []
    item = only(parser.close())
    assert isinstance(item, ErrorItem)
    assert item.message == "STOP_WORK block at line 1: not terminated (end of input)"


def test_an_opening_tag_inside_an_open_block_ends_it_with_an_error() -> None:
    text = "[DELEGATE_WORK]\nagent_id: a\n\n" + stop("b")
    first, second = parse_text(text)
    assert isinstance(first, ErrorItem)
    assert first.message == "DELEGATE_WORK block at line 1: not terminated before the [STOP_WORK] at line 4"
    assert isinstance(second, SignalItem)
    assert second.line == 4


def test_a_result_report_heading_inside_an_open_block_ends_it_with_an_error() -> None:
    # an agent that forgot a PROGRESS block's closing tag must not lose the report after it
    text = "[PROGRESS]\nagent_id: a\npercent: 90\n\n" + REPORT + stop("b")
    first, second, third = parse_text(text)
    assert isinstance(first, ErrorItem) and first.type is EnvelopeType.PROGRESS
    assert first.message == "PROGRESS block at line 1: not terminated before the result report at line 5"
    assert isinstance(second, ResultItem) and second.line == 5
    assert isinstance(third, SignalItem) and third.payload.agent_id == "b"


@pytest.mark.parametrize(
    "inside",
    ["  ## Auditor Result\n", "## Notes\n", "# Auditor Result\n", "### Auditor Result\n", "## Result\n"],
)
def test_other_headings_or_one_right_of_the_tag_are_part_of_the_body(inside: str) -> None:
    item = only(parse_text(stop().replace("details:", inside + "details:")))
    assert isinstance(item, SignalItem)  # a YAML comment


@pytest.mark.parametrize("indent", ["    ", "\t"])
def test_under_a_tag_indented_past_a_heading_a_report_heading_is_part_of_the_body(indent: str) -> None:
    # a line indented by a tab or four spaces is no heading: it starts no report either
    text = "".join(
        indent + line + "\n"
        for line in stop().replace("details:", "## Tester Result\ndetails:").split("\n")[:-1]
    )
    assert isinstance(only(parse_text(text)), SignalItem)


def test_a_closing_tag_of_another_type_ends_the_block_with_an_error() -> None:
    text = stop().replace("[/STOP_WORK]", "[/DELEGATE_WORK]") + stop("c")
    first, second = parse_text(text)
    assert isinstance(first, ErrorItem)
    assert first.message == "STOP_WORK block at line 1: closed by [/DELEGATE_WORK] at line 7"
    assert isinstance(second, SignalItem)


def test_stray_closing_tags_are_prose() -> None:
    assert parse_text("[/STOP_WORK]\nprose\n**[/PROGRESS]**\n") == []


def test_a_closing_tag_with_text_after_it_outside_a_block_is_prose() -> None:
    assert parse_text("[/STOP_WORK] is how a block ends\n") == []


def test_the_closing_tag_of_a_block_ended_by_an_opening_tag_is_not_a_second_error() -> None:
    text = "[DELEGATE_WORK]\nagent_id: a\n" + stop("b") + "[/DELEGATE_WORK]\n"
    first, second = parse_text(text)
    assert isinstance(first, ErrorItem) and isinstance(second, SignalItem)


def test_last_line_without_newline() -> None:
    item = only(parse_text(stop().removesuffix("\n")))
    assert isinstance(item, SignalItem)


def test_extra_fields_are_kept() -> None:
    item = only(parse_text(stop(confidence_note="mine")))
    assert isinstance(item, SignalItem)
    assert item.payload.model_extra == {"confidence_note": "mine"}


@pytest.mark.parametrize(
    ("written", "kept"),
    [
        ("!!float .nan", ".nan"),
        ("!!float 1e400", "1e400"),
        ("[!!float -.inf]", ["-.inf"]),
        ("!!float 1", 1.0),
    ],
)
def test_a_tagged_float_that_json_cannot_carry_is_kept_as_written(written: str, kept: object) -> None:
    """As an untagged ``.nan`` is: JSON would carry it as null, and the field would be lost on the wire."""
    item = only(parse_text(stop(confidence_note=written)))
    assert isinstance(item, SignalItem) and item.payload.model_extra == {"confidence_note": kept}
    envelope = decode(encode_new(item.payload, "a", "g", "adapter", "id-1", datetime.now(UTC)))
    assert envelope.payload.model_extra == {"confidence_note": kept}


def test_clarification_with_questions() -> None:
    text = (
        "[CLARIFICATION_NEEDED]\nagent_id: bg-9\nblocked_at: step 2\nreason: two choices\n"
        "questions:\n  - question_id: Q1\n    text: Which one?\n    options: [a, b]\n"
        "[/CLARIFICATION_NEEDED]\n"
    )
    item = only(parse_text(text))
    assert isinstance(item, SignalItem)
    assert isinstance(item.payload, ClarificationNeeded)
    assert item.payload.questions[0].options == ["a", "b"]
    twice = text.replace("[/CLARIFICATION", "  - question_id: Q1\n    text: Or?\n[/CLARIFICATION")
    error = only(parse_text(twice))  # an answer names its question: these could not be told apart
    assert isinstance(error, ErrorItem)
    assert error.message.endswith("question ids must differ: 'Q1' is used more than once")


def test_feed_after_close_is_refused_and_close_is_idempotent() -> None:
    parser = Parser()
    parser.feed(b"prose\n")
    assert parser.close() == []
    assert parser.close() == []
    with pytest.raises(ValueError, match="after close"):
        parser.feed(b"more")


def test_a_block_over_the_limit_is_an_error_and_the_next_block_still_parses() -> None:
    big = stop(details="|\n" + "  filler line of text\n" * 100)
    items = parse_text(big + stop("next"), max_block_bytes=512)
    error, signal = items
    assert isinstance(signal, SignalItem)
    assert isinstance(error, ErrorItem)
    assert error.message == "STOP_WORK block at line 1: larger than 512 bytes; skipped"


REPORT = (
    "## Code Explorer Result\n\n### Status\nSUCCESS\n\n### Summary\nTraced the login flow.\n\n"
    "### Confidence\n92 - all paths traced\n"
)


def test_a_report_is_emitted_only_once_its_end_is_known() -> None:
    parser = Parser()
    assert parser.feed(REPORT.encode()) == []
    item = only(parser.close())
    assert isinstance(item, ResultItem)
    assert item.report.agent == "Code Explorer"
    assert item.report.status is ResultStatus.SUCCESS
    assert (item.line, item.offset) == (1, 0)


def test_a_report_ends_at_a_signal_and_at_the_next_top_level_heading() -> None:
    parser = Parser()
    first = parser.feed((REPORT + stop()).encode())
    assert [type(i).__name__ for i in first] == ["ResultItem", "SignalItem"]
    assert isinstance(first[0], ResultItem)
    assert first[0].report.confidence is not None
    assert first[0].report.confidence.justification == "all paths traced"
    second = parser.feed((REPORT + "## Notes\nnot part of it\n### Status\nFAILED\n").encode())
    assert len(second) == 1
    assert isinstance(second[0], ResultItem)
    assert second[0].line == 18
    assert second[0].report.sections == []
    assert parser.close() == []


def test_headings_inside_code_fences_do_not_end_a_report() -> None:
    text = (
        REPORT
        + "### Findings\n#### Snippet\n```bash\n## not a heading\n# nor this\n```\n### Next Steps\n1. go\n"
    )
    item = only(parse_text(text))
    assert isinstance(item, ResultItem)
    assert item.report.next_steps == ["go"]
    assert item.report.sections[0].text == "```bash\n## not a heading\n# nor this\n```"


def test_a_report_inside_a_markdown_fence_ends_at_its_closing_fence() -> None:
    text = (
        "Example:\n```markdown\n"
        + REPORT
        + "### Findings\n#### Output\n```\nPASS all\n```\n"
        + "```\n\n## Code Architect Result\n### Status\nPARTIAL\n### Summary\nSecond.\n"
    )
    first, second = parse_text(text)
    assert isinstance(first, ResultItem)
    assert isinstance(second, ResultItem)
    assert first.report.sections[0].text == "```\nPASS all\n```"
    assert second.report.agent == "Code Architect"
    assert second.line == text.splitlines().index("## Code Architect Result") + 1


@pytest.mark.parametrize(
    "heading",
    [
        "## **Security Auditor Result**",
        "## Security Auditor RESULT:",
        "## Security Auditor result",
        "## **Security Auditor** Result",
    ],
)
def test_report_headings_agents_also_write(heading: str) -> None:
    text = f"{heading}\n\n### Status\nSUCCESS\n\n### Summary\nDone.\n\n# Afterwards\n{stop()}"
    report, signal = parse_text(text)
    assert isinstance(report, ResultItem) and isinstance(signal, SignalItem)
    assert (report.report.agent, report.report.status, report.report.summary) == (
        "Security Auditor",
        ResultStatus.SUCCESS,
        "Done.",
    )


@pytest.mark.parametrize(
    "text",
    [
        "## **Deploy Result**\n### Status\nDeployed to staging\n### Summary\nok\n",  # not as one reads
        "## Build result:\n### Status\nSUCCESS\n",  # no summary
        "## Test Results\n### Status\nall green\n### Summary\n40 of 40 pass.\n",  # not a report's, nor reads
    ],
)
def test_headings_written_otherwise_make_a_report_only_when_it_reads_as_one(text: str) -> None:
    assert parse_text(text + "prose\n") == []


UNREAD = "### Status\nFAILED\n### Summary\n2 of 40 fail; fixing them now.\n"


@pytest.mark.parametrize(
    "heading",
    [
        "## Test Results",
        "## Security Auditor Results",
        "# Security Auditor Result",
        "## Security Auditor Result ✅",
        "## Results",
        "## **Results:**",
        "# Final Test-Results 🎉",
    ],
)
def test_a_section_under_a_heading_that_is_not_a_reports_is_no_report_but_is_found(heading: str) -> None:
    """A report's sections under such a heading are no report (an agent's own ``## Test Results`` is not
    its result), but are found, for :mod:`agents.unread` to hold."""
    table = "### Findings\n| ID | Issue | File:Line |\n|--|--|--|\n| T-1 | flaky | `a.py:3` |\n"
    item = only(parse_text(f"Working.\n{heading}\n{UNREAD}{table}\n# Next\nprose\n"))
    assert isinstance(item, UnreadReportItem)
    assert (item.heading, item.findings, item.line, item.offset) == (heading, 1, 2, len("Working.\n"))


_FLAKY = "| ID | Issue | File:Line |\n|--|--|--|\n| T-1 | flaky | `a.py:3` |\n"


@pytest.mark.parametrize(
    "body",
    [
        f"## Status\nFAILED\n## Summary\n2 fail.\n## Findings\n### Flaky\n{_FLAKY}## Notes\nsee CI\n",
        f"### Status\nFAILED\n### Summary\n2 fail.\n## Findings\n{_FLAKY}",
        f"**Status:** FAILED\n**Summary:** 2 fail.\n\n## Findings\n{_FLAKY}",
        f"## Overview\n### Status\nFAILED\n### Summary\n2 fail.\n```\n## Code\n```\n## Findings\n{_FLAKY}",
    ],
)
def test_a_level_1_section_runs_over_its_level_2_headings_read_as_a_reports_sections(body: str) -> None:
    """``# Tester Result`` over ``## Status``: a report's sections, a level up; ``###`` sections under it
    are read too, and a level-2 heading after them is one more section."""
    item = only(parse_text(f"Working.\n# Tester Result\n{body}\n# Next\n## Status\nSUCCESS\n"))
    assert isinstance(item, UnreadReportItem)
    assert (item.heading, item.findings, item.line) == ("# Tester Result", 1, 2)


@pytest.mark.parametrize(
    "rest",
    [
        "## Status\nAll green\n",  # no status: it would undo the one above
        "## Details\n### Status\nsee the table\n",
        "## Summary\n\n## Appendix\n" + "log line\n" * 200,  # and past the size limit
    ],
)
def test_a_level_1_section_reads_as_far_as_its_first_level_2_heading_when_the_whole_reads_as_less(
    rest: str,
) -> None:
    text = f"# Tester Result\n**Status:** FAILED\n**Summary:** 2 fail.\n### Findings\n{_FLAKY}{rest}"
    item = only(parse_text(text, max_block_bytes=1000))
    assert isinstance(item, UnreadReportItem) and (item.heading, item.findings) == ("# Tester Result", 1)


@pytest.mark.parametrize(
    "body",
    [
        f"#### Status\nFAILED\n#### Summary\n2 fail.\n#### Findings\n##### Flaky\n{_FLAKY}### Notes\nsee CI\n",
        f"### Status\nFAILED\n### Summary\n2 fail.\n### Findings\n{_FLAKY}",
        f"**Status:** FAILED\n**Summary:** 2 fail.\n\n#### Findings\n{_FLAKY}",
    ],
)
def test_a_level_3_section_is_read_as_a_reports_a_level_down_or_as_its_siblings(body: str) -> None:
    """``### Tester Result`` over ``#### Status``, or over ``### Status``: a report written a level down."""
    item = only(parse_text(f"## Work\nWorking.\n### Tester Result\n{body}\n## Next\n### Status\nSUCCESS\n"))
    assert isinstance(item, UnreadReportItem)
    assert (item.heading, item.findings, item.line) == ("### Tester Result", 1, 3)


def test_a_level_3_heading_means_nothing_in_a_report_a_block_or_a_section_of_another_level() -> None:
    (item,) = parse_text(f"{REPORT}### Tester Result\n#### Status\nFAILED\n#### Summary\nno\n")
    assert isinstance(item, ResultItem) and item.report.agent == "Code Explorer"
    assert [s.title for s in item.report.sections][-1:] == ["Tester Result"]
    section = "## Test Results\n### Status\nFAILED\n### Summary\nno\n### QA Results\n#### Status\nSUCCESS\n"
    (item,) = parse_text(section + "#### Summary\nok\n")
    assert isinstance(item, UnreadReportItem) and item.heading == "## Test Results"
    block = "[STOP_WORK]\n### QA Result\n#### Status\nSUCCESS\n#### Summary\nok\n[/STOP_WORK]\n"
    assert [type(i) for i in parse_text(block)] == [ErrorItem]  # YAML comments, and no signal


def test_what_the_readme_leaves_uncovered_a_level_4_heading_and_a_level_3_one_in_a_level_1_section() -> None:
    """A ``####`` heading titles nothing, whatever its sections; a ``###`` one in a level-1 section that
    may title a report is part of that section (only the level-1 heading is named)."""
    assert parse_text("#### Tester Result\n##### Status\nFAILED\n##### Summary\nno\n") == []
    assert parse_text("#### Tester Result\n#### Status\nFAILED\n#### Summary\nno\n") == []
    (item,) = parse_text("# Results\n### Auditor Result\n### Status\nFAILED\n### Summary\nno\n")
    assert isinstance(item, UnreadReportItem) and (item.heading, item.line) == ("# Results", 1)
    (item,) = parse_text("# Notes\n### Auditor Result\n### Status\nFAILED\n### Summary\nno\n")
    assert isinstance(item, UnreadReportItem) and (item.heading, item.line) == ("### Auditor Result", 2)


def test_a_level_3_section_ends_at_a_heading_of_its_level_that_may_title_a_report() -> None:
    first, second = parse_text(f"### Tester Result\n{UNREAD}### Final Results\n{UNREAD}")
    assert isinstance(first, UnreadReportItem) and isinstance(second, UnreadReportItem)
    assert (first.heading, second.heading, second.line) == ("### Tester Result", "### Final Results", 6)


def test_a_level_3_heading_in_a_code_fence_starts_nothing() -> None:
    """(A section there would hand its own fences back to the prose, as it saw them.)"""
    text = "```markdown\n### Test Results\n~~~\n## Tester Result\n```\n" + REPORT
    error, item = parse_text(text)
    assert isinstance(error, ErrorItem) and isinstance(item, ResultItem) and item.line == 6


def test_a_level_3_section_ends_at_a_level_1_or_2_heading_in_its_fences_too() -> None:
    """What follows the section is read as it was before such sections were read."""
    (item,) = parse_text("### Test Results\n```\n# Tester Result\n### Status\nFAILED\n### Summary\nok\n")
    assert isinstance(item, UnreadReportItem) and (item.heading, item.line) == ("# Tester Result", 3)
    broken = REPORT.replace("SUCCESS", "")
    error, report = parse_text(f"### Results\n```python\n## Test Results\n~~~\n{broken}~~~\n{REPORT}")
    assert isinstance(error, ErrorItem) and error.line == 5
    assert isinstance(report, ResultItem) and report.report.agent == "Code Explorer"


def test_a_level_1_section_ends_at_a_report_or_a_section_that_may_be_one() -> None:
    section = "# Tester Result\n## Status\nFAILED\n## Summary\nno\n"
    first, second = parse_text(f"{section}## Test Results\n{UNREAD}")
    assert isinstance(first, UnreadReportItem) and first.heading == "# Tester Result"
    assert isinstance(second, UnreadReportItem) and (second.heading, second.line) == ("## Test Results", 6)
    first, second = parse_text(f"{section}{REPORT}")  # the report then drops the section held
    assert isinstance(first, UnreadReportItem) and isinstance(second, ResultItem) and second.line == 6
    fenced = f"{section}```markdown\n## Auditor Results\n{UNREAD}```\n"  # held, as it was when the
    first, second = parse_text(fenced)  # section ended at its first level-2 heading
    assert isinstance(second, UnreadReportItem) and (second.heading, second.line) == ("## Auditor Results", 7)


def test_a_level_1_section_in_a_fence_ends_at_its_first_level_2_heading() -> None:
    """In a fence the section does not know where the fence ends: it ends as any section does."""
    assert parse_text("```\n# Tester Result\n## Status\nSUCCESS\n## Summary\nok\n```\n") == []
    (item,) = parse_text("```\n# Tester Result\n### Status\nSUCCESS\n### Summary\nok\n## Notes\n```\n")
    assert isinstance(item, UnreadReportItem)


@pytest.mark.parametrize(
    "heading",
    ["#### Security Auditor Results", "## Subresult", "## Results are in", "## Resultset", "Results"],
)
def test_other_headings_and_lines_find_nothing(heading: str) -> None:
    assert parse_text(f"{heading}\n{UNREAD}") == []


def test_a_section_that_does_not_read_as_a_report_is_not_found_and_ends_where_a_report_would() -> None:
    text = "# Security Audit Results\n\nHere is what I found.\n\n" + REPORT
    (item,) = parse_text(text)
    assert isinstance(item, ResultItem) and item.report.agent == "Code Explorer"


def test_the_contracts_own_heading_is_a_report_and_an_error_when_it_does_not_read_as_one() -> None:
    (error,) = parse_text("## QA Result\n### Summary\nok\n")
    assert isinstance(error, ErrorItem)
    assert error.message == "result report 'QA' at line 1: missing '### Status' section"


def test_a_name_filled_in_the_templates_brackets_is_a_report() -> None:
    (item,) = parse_text("## [Security Auditor] Result\n### Status\nSUCCESS\n### Summary\nDone.\n")
    assert isinstance(item, ResultItem) and item.report.agent == "[Security Auditor]"


def test_a_title_like_a_report_heading_does_not_swallow_the_report_below_it() -> None:
    text = "# Security Audit Results\n\nHere is what I found.\n\n" + REPORT
    (item,) = parse_text(text)
    assert isinstance(item, ResultItem) and item.report.agent == "Code Explorer"
    assert item.line == 5


@pytest.mark.parametrize("name", ["[Agent Name]", "<agent name>", "**[Agent Name]**", "[agent]"])
def test_a_report_template_quoted_or_echoed_is_nothing(name: str) -> None:
    """(A name filled in brackets, ``[Security Auditor]``, is a name: see the next test.)"""
    text = f"## {name} Result\n\n### Status\nFAILED\n\n### Summary\nUnable due to [error category].\n"
    (item,) = parse_text(text + stop())
    assert isinstance(item, SignalItem) and item.line == 8


@pytest.mark.parametrize("name", ["[Agent Name]", "**[Agent Name]**", "<agent>"])
def test_a_report_template_filled_in_is_found_as_a_section_to_hold(name: str) -> None:
    """Filled in but for the name: no report (it names no agent), but not to be lost without a word."""
    text = f"## {name} Result\n### Status\nPARTIAL\n### Summary\nHalf of [the docs](d.md) done.\n"
    item = only(parse_text(text + "### Findings\n" + _FLAKY))
    assert isinstance(item, UnreadReportItem) and item.template and item.findings == 1
    assert item.heading == f"## {name} Result"


def test_a_template_in_a_fence_ends_with_it_and_over_the_size_limit_is_nothing() -> None:
    template = "## [Agent Name] Result\n### Status\nSUCCESS\n### Summary\nDone.\n"
    first, second = parse_text(f"```markdown\n{template}```\n{REPORT}")
    assert isinstance(first, UnreadReportItem) and isinstance(second, ResultItem)
    assert parse_text(template + "x\n" * 600, max_block_bytes=1000) == []


def test_an_invalid_status_is_an_error_item() -> None:
    item = only(parse_text(REPORT.replace("SUCCESS", "DONE")))
    assert isinstance(item, ErrorItem)
    assert item.type is EnvelopeType.RESULT
    assert (
        item.message
        == "result report 'Code Explorer' at line 1: status 'DONE' is not SUCCESS, PARTIAL or FAILED (line 3)"
    )


def test_a_line_too_long_to_be_a_tag_line_is_never_one() -> None:
    text = " " * (MAX_TAG_LINE + 1) + stop()
    assert parse_text(text) == []
    assert feed_split(text.encode(), list(range(0, len(text), 1000))) == []


# A document of several blocks, prose, CRLF, fences, unicode, errors and reports: the items must be
# the same for every way of cutting it.
FRAGMENTS = [
    b"Working on it \xe2\x9c\x93 \xe2\x80\x94 na\xc3\xafve caf\xc3\xa9\n",
    b"I will emit [STOP_WORK] if blocked.\n",
    stop("a").encode(),
    stop("b").replace("\n", "\r\n").encode(),
    ("```yaml\n" + stop("c", completed_work="|\n  \u2713 one\n  \u2717 two") + "```\n").encode(),
    b"  [PROGRESS]\n  agent_id: p\n  percent: 10\n  [/PROGRESS]\n",
    b"**[PROGRESS]**\nagent_id: q\npercent: 20\n\x1b[2m[/PROGRESS]\x1b[0m\n",
    stop("bad", stop_reason="later").encode(),
    b"\xff\xfe not utf-8 prose \x80\n",
    REPORT.encode(),
    b"## Heading\n",
    ("```markdown\n" + REPORT + "```\nPASS\n```\n```\n").encode(),
    b" " * (MAX_TAG_LINE + 10) + b"[STOP_WORK]\n",
    b"no newline at all",
    b"\n",
    b"[DELEGATE_WORK]\nagent_id: x\n",  # unterminated
    b"**[PROGRESS]**\nagent_id: r\npercent: 30\n[/PROGRESS] done for now\n",
    b"[/STOP_WORK]\n",  # closes no block: prose
    b"## **Auditor Result:**\n### Status\nPARTIAL\n### Summary\nhalf\n#### Deeper\n",
    b"## Test Results\nall passed\n",
    b"## [Agent Name] Result\n### Status\n[SUCCESS]\n",
    b"[PROGRESS] - on my way\nagent_id: t\npercent: 40\n[/PROGRESS]\n",  # tentative, then confirmed
    b"[STOP_WORK] is what I print when blocked.\n",  # tentative, then prose
    b"## [Agent Name] Result\n### Status\nSUCCESS\n### Summary\nDone.\n",  # filled in
    b"# Tester Result\n## Status\nFAILED\n## Summary\nno\n",
    b"# Notes\n### QA Result\n#### Status\nSUCCESS\n### Summary\nok\n",
    # as a terminal shows output: colour inside a tag and a body, a coloured heading, CR CR LF, full width
    b"[\x1b[1mPROGRESS\x1b[0m]\n\x1b[34magent_id\x1b[0m: u\npercent: 50\n[\x1b[1m/PROGRESS\x1b[0m]\n",
    b"\x1b[1m## Coloured Result\x1b[0m\n### Status\nSUCCESS\n### Summary\nok\n",
    stop("d").replace("\n", "\r\r\n").encode(),
    "\uff3bPROGRESS\uff3d\nagent_id: v\npercent: 60\n\uff3b\uff0fPROGRESS\uff3d\n".encode(),
]


@st.composite
def documents(draw: st.DrawFn, fragments: list[bytes] = FRAGMENTS) -> tuple[bytes, list[int]]:
    """A document of up to 12 ``fragments`` and the points at which to cut it."""
    data = b"".join(draw(st.lists(st.sampled_from(fragments), min_size=1, max_size=12)))
    cuts = draw(st.lists(st.integers(0, len(data)), max_size=30))
    return data, cuts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_chunking_never_changes_the_items(document: tuple[bytes, list[int]]) -> None:
    data, cuts = document
    assert feed_split(data, cuts) == feed_split(data, [])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_chunking_with_a_small_block_limit(data: st.DataObject) -> None:
    document = b"".join(data.draw(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=10)))
    cuts = data.draw(st.lists(st.integers(0, len(document)), max_size=30))
    assert feed_split(document, cuts, max_block_bytes=96) == feed_split(document, [], max_block_bytes=96)


def test_byte_by_byte_feeding_of_a_mixed_document() -> None:
    data = b"".join(FRAGMENTS)
    whole = feed_split(data, [])
    assert feed_split(data, list(range(len(data)))) == whole
    assert [(type(i).__name__, i.line) for i in whole] == [
        ("SignalItem", 3),
        ("SignalItem", 10),
        ("SignalItem", 18),
        ("SignalItem", 29),
        ("SignalItem", 33),
        ("ErrorItem", 37),
        ("ResultItem", 45),
        ("ResultItem", 57),
        ("ErrorItem", 73),
        ("SignalItem", 75),
        ("ResultItem", 80),
        ("SignalItem", 91),
        ("UnreadReportItem", 96),
        ("UnreadReportItem", 101),
        ("UnreadReportItem", 107),
        ("SignalItem", 112),
        ("ResultItem", 116),
        ("SignalItem", 121),
        ("SignalItem", 128),
    ]


# The loader reads the common shape of a body (``key: value`` lines, ``key: |`` blocks) without the YAML
# event stream; on every body that shape accepts, the result must be the event stream's.
_SAFE = "abcxyz ABC0123456789.✓→é"
_TRICKY = ":#-|>'\"[]{},!&*?%@`~\\/ \t\r\x85\ufeff"
_SPECIAL = ["true", "no", "on", "~", "null", "12", "-3", "0o17", "0x1F", "1e3", ".inf", ".nan", "1:30", "5."]


def _chars(size: int) -> st.SearchStrategy[str]:
    pick = st.one_of(*[st.sampled_from(_SAFE)] * 3, st.sampled_from(_TRICKY))
    return st.lists(pick, max_size=size).map("".join)


@st.composite
def simple_bodies(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(1, 5))):
        key = draw(st.sampled_from(["agent_id", "details", "true", "null", "x1", "a"]))
        if draw(st.booleans()):
            lines.append(f"{key}: " + draw(st.one_of(_chars(14), st.sampled_from(_SPECIAL))))
            continue
        lines.append(f"{key}: |")
        indent = draw(st.sampled_from([1, 2, 2, 4]))
        for _ in range(draw(st.integers(0, 5))):
            shape = draw(st.integers(0, 9))
            if shape == 0:
                lines.append(" " * draw(st.integers(0, 6)))
            elif shape == 1:
                lines.append(" " * draw(st.integers(0, indent + 2)) + draw(_chars(8)))
            else:
                lines.append(" " * indent + draw(_chars(10)))
    return "\n".join(lines) + "\n"


@settings(max_examples=400, deadline=None)
@given(simple_bodies())
def test_the_fast_path_of_the_loader_agrees_with_the_yaml_event_stream(body: str) -> None:
    try:
        expected = yamlsafe.load_events(body)
    except yamlsafe.YamlError:
        with pytest.raises(yamlsafe.YamlError):
            yamlsafe.load(body)
        return
    assert repr(yamlsafe.load(body)) == repr(expected)  # repr: nan == nan


def test_the_fast_path_takes_the_usual_signal_bodies() -> None:
    body = "agent_id: bg-1\ntimestamp: 2026-01-11T09:15:00-05:00\ndetails: |\n  ✓ one\n\n  ✗ two: x\n"
    fast = yamlfast.read(body)  # the shortcut itself, so the property above is not vacuous
    assert fast == {
        "agent_id": "bg-1",
        "timestamp": "2026-01-11T09:15:00-05:00",
        "details": "✓ one\n\n✗ two: x\n",
    }
    assert fast == yamlsafe.load_events(body)


def test_a_report_in_a_fence_after_a_results_title_is_read() -> None:
    text = "# Results\nHere is my report:\n```markdown\n" + REPORT + "```\nThat is all.\n"
    (item,) = parse_text(text)
    assert isinstance(item, ResultItem) and item.report.agent == "Code Explorer" and item.line == 4


def test_a_results_comment_in_a_code_block_starts_nothing() -> None:
    code = "```python\n# Results\nprint(1)\n## Results\n```\n"
    assert parse_text(code + "### Status\nSUCCESS\n### Summary\nok\n") == []
    (item,) = parse_text(code + REPORT)
    assert isinstance(item, ResultItem)


_DIAGRAM = """Here is the plan I will follow (seed 003, Pattern 2):

```
                  AGENT A
              (setup infrastructure)
                      │
                      ▼
              [DELEGATE_WORK]
           (blocks_current_work)
                      │
                      ▼
                  AGENT B
                      │
                      ▼
              [COMPLETION_REPORT]
                      │
                      ▼
            (resumes AGENT A with B's results)
                      │
                      ▼
              [COMPLETION_REPORT]
```

[COMPLETION_REPORT]
agent_id: d1
timestamp: 2026-01-11T12:00:00-05:00
status: success
summary: Wrote the plan.
[/COMPLETION_REPORT]
"""


def test_a_drawing_of_the_protocol_whose_tags_stand_alone_is_prose() -> None:
    """Seed 003's diagrams put bare tags on lines of their own: each opens a block that the next tag ends,
    with nothing in it a signal holds (no `key:`). Prose, not three unreadable signals that would block the
    agent; a body with a field in it is still an error."""
    [item] = parse_text(_DIAGRAM.encode())
    assert isinstance(item, SignalItem) and item.type is EnvelopeType.COMPLETION_REPORT
    garbled = _DIAGRAM.replace("(blocks_current_work)", "independence: blocks_current_work")
    errors = [i.message for i in parse_text(garbled.encode()) if isinstance(i, ErrorItem)]
    assert errors == [
        "DELEGATE_WORK block at line 8: not terminated before the [COMPLETION_REPORT] at line 15"
    ]
    crlf = garbled.replace(": blocks_current_work", ":").replace("\n", "\r\n")  # `independence:` alone
    assert [i.line for i in parse_text(crlf.encode()) if isinstance(i, ErrorItem)] == [8]


def test_the_code_fence_a_drawing_closes_is_closed() -> None:
    """The drawing's tags opened blocks that took its closing fence in: the prose after it is no code."""
    drawing = "```\n  [DELEGATE_WORK]\n        |\n  [COMPLETION_REPORT]\n```\n\n"
    progress = "[PROGRESS]\nagent_id: a1\npercent: 10\n[/PROGRESS]\n"
    after = "# Notes\n### QA Result\n#### Status\nSUCCESS\n#### Summary\nok\n"  # a report a level down
    items = parse_text((drawing + progress + after).encode())
    assert [type(i).__name__ for i in items] == ["SignalItem", "UnreadReportItem"]


def test_a_completion_report_needs_no_summary() -> None:
    text = (
        "[COMPLETION_REPORT]\nagent_id: a1\nstatus: success\ndeliverables: [SECURITY_ANALYSIS.md]\n"
        "metrics_achieved: all criteria met\nrecommendations: [rotate the JWT secret]\n[/COMPLETION_REPORT]\n"
    )
    [item] = parse_text(text.encode())
    assert isinstance(item, SignalItem) and item.type is EnvelopeType.COMPLETION_REPORT
