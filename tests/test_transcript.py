"""Claude Code JSONL transcripts: only the assistant's own text is output; positions are stable."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.codex_output import CodexReader
from agents.items import TurnFailedItem
from agents.jsonl_reader import MAX_FAILURE_CHARS
from agents.parser import ErrorItem, Found, Item, ResultItem, SignalItem, parse_text
from agents.transcript import (
    DETECT_LIMIT,
    AnyParser,
    AssistantText,
    Format,
    TranscriptParser,
    TranscriptReader,
    detect_format,
)
from bus.envelope import EnvelopeType
from bus.results import ResultStatus
from bus.signals import ClarificationNeeded, CompletionReport, Progress

TRANSCRIPT = (Path(__file__).parent / "data" / "claude_transcript.jsonl").read_bytes()
LINES = TRANSCRIPT.splitlines(keepends=True)


def line_start(number: int) -> int:
    return sum(len(line) for line in LINES[: number - 1])


def parse(data: bytes, cuts: list[int] | None = None) -> tuple[list[Found], TranscriptParser]:
    parser = TranscriptParser()
    items: list[Found] = []
    previous = 0
    for cut in [*sorted(set(cuts or [])), len(data)]:
        items += parser.feed(data[previous:cut])
        previous = cut
    return items + parser.close(), parser


def format_of(parser: AnyParser) -> Format:
    return parser.format


def assistant_line(*texts: str, agent: str = "a1") -> bytes:
    content = [{"type": "text", "text": text} for text in texts]
    entry = {
        "type": "assistant",
        "agentId": agent,
        "sessionId": "s1",
        "message": {"role": "assistant", "content": content},
    }
    return orjson.dumps(entry) + b"\n"


def test_the_data_file_holds_signal_templates_outside_the_assistant_text() -> None:
    prompt = orjson.loads(LINES[0])
    assert prompt["type"] == "user"
    assert "[CLARIFICATION_NEEDED]\nagent_id: <agent-id>" in prompt["message"]["content"]
    assert "agent_id: bg-task-abc123" in prompt["message"]["content"]  # a valid example, too
    # as plain text, the prompt's example would be taken for a signal (its templates are nothing)
    [example] = parse_text(prompt["message"]["content"])
    assert isinstance(example, SignalItem)
    assert b"[STOP_WORK]" in LINES[3]  # a tool result
    assert b"[DELEGATE_WORK]" in LINES[4]  # a tool input


def test_only_the_assistant_text_is_parsed() -> None:
    items, parser = parse(TRANSCRIPT)
    assert [(type(i).__name__, i.line) for i in items] == [
        ("SignalItem", 7),
        ("SignalItem", 10),
        ("ResultItem", 10),
        ("SignalItem", 10),
    ]
    clarification, progress, result, completion = items
    assert isinstance(clarification, SignalItem)
    assert isinstance(clarification.payload, ClarificationNeeded)
    assert clarification.payload.agent_id == "a3f9c21"
    assert clarification.payload.current_state is not None
    assert "✗" in clarification.payload.current_state
    assert isinstance(progress, SignalItem)
    assert isinstance(progress.payload, Progress)
    assert progress.payload.percent == 60
    assert progress.payload.message == "Both strategies read"  # CRLF inside the JSON string
    assert isinstance(result, ResultItem)
    assert result.report.agent == "Security Auditor"
    assert result.report.status is ResultStatus.PARTIAL
    assert [(f.id, f.file, f.line) for f in result.report.findings] == [("SEC-001", "src/config/jwt.ts", 8)]
    assert result.report.confidence is not None
    assert (result.report.confidence.verified, result.report.confidence.inferred) == (95, 85)
    assert isinstance(completion, SignalItem)
    assert isinstance(completion.payload, CompletionReport)
    assert completion.type is EnvelopeType.COMPLETION_REPORT
    assert parser.session_id == "7c1e9a52-4b3d-4f0e-9d6a-2f8b5c3e1a90"
    assert parser.agent_id == "a3f9c21"


def test_offsets_stay_inside_the_jsonl_line_and_are_distinct() -> None:
    items, _ = parse(TRANSCRIPT)
    for item in items:
        assert line_start(item.line) <= item.offset < line_start(item.line + 1)
    assert len({i.offset for i in items}) == len(items)
    message = orjson.loads(LINES[9])["message"]["content"]
    first, second = message[0]["text"], message[2]["text"]
    _, progress, result, completion = items
    base = line_start(10)
    assert progress.offset == base + len("Resuming.\r\n\r\n")
    assert result.offset == base + len(first.encode())
    assert completion.offset == base + len(first.encode()) + len(
        second[: second.index("[COMPLETION_REPORT]")].encode()
    )


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, len(TRANSCRIPT)), max_size=25))
def test_chunking_never_changes_the_items(cuts: list[int]) -> None:
    assert parse(TRANSCRIPT, cuts)[0] == parse(TRANSCRIPT)[0]


def test_a_malformed_line_is_an_error_item_and_reading_goes_on() -> None:
    data = b"".join(
        [*LINES[:7], b'{"type": "assistant", "message": {"content": [\n', b"[1, 2]\n", b"\n", *LINES[7:]]
    )
    items, _ = parse(data)
    errors = [i for i in items if isinstance(i, ErrorItem)]
    assert [(e.line, e.offset) for e in errors] == [(8, line_start(8)), (9, data.index(b"[1, 2]\n"))]
    assert errors[0].message.startswith("JSONL line 8: not JSON (")
    assert errors[1].message == "JSONL line 9: not a JSON object"
    signals = [i for i in items if not isinstance(i, ErrorItem)]
    assert [i.line for i in signals] == [7, 13, 13, 13]


def test_a_lone_surrogate_escape_is_replaced_not_the_line_lost() -> None:
    # Node's JSON.stringify writes one for a string cut inside a character pair; orjson refuses it
    stop = "[STOP_WORK]\nagent_id: a1\nstop_reason: blocker\nblocker_type: missing_info\ndetails: d\n[/STOP_WORK]\n"
    line = assistant_line("cut here: X\n" + stop).replace(b"cut here: X", b"cut here: \\ud83d")
    items, _ = parse(line)
    assert [type(i) for i in items] == [SignalItem]
    parser = AnyParser()  # and the line still says it is a transcript
    auto = parser.feed(line) + parser.close()
    assert format_of(parser) is Format.CLAUDE_JSONL and [type(i) for i in auto] == [SignalItem]
    reader = TranscriptReader()
    (text,) = reader.feed(line) + reader.close()
    assert isinstance(text, AssistantText) and text.text.startswith("cut here: \ufffd\n")


def test_a_line_with_invalid_utf8_and_a_lone_surrogate_escape_is_read_with_both_replaced() -> None:
    stop = "[STOP_WORK]\nagent_id: a1\nstop_reason: blocker\nblocker_type: missing_info\ndetails: d\n[/STOP_WORK]\n"
    line = assistant_line("cut: X\n" + stop).replace(b"cut: X", b"caf\xe9 \\ud83d")
    items, _ = parse(line)
    assert [type(i) for i in items] == [SignalItem]
    parser = AnyParser()
    auto = parser.feed(line) + parser.close()
    assert format_of(parser) is Format.CLAUDE_JSONL and [type(i) for i in auto] == [SignalItem]
    reader = TranscriptReader()
    (text,) = reader.feed(line) + reader.close()
    assert isinstance(text, AssistantText) and text.text.startswith("caf? \ufffd\n")


def test_a_lone_surrogate_escape_in_a_deeply_nested_line_is_an_error_not_a_crash() -> None:
    # within the JSON parser's nesting limit, beyond what replacing the surrogate could walk
    nested = b'"sessionId":"s1","x":' + b"[" * 600 + b"]" * 600
    deep = assistant_line("cut here: X").replace(b"cut here: X", b"cut here: \\ud83d")
    deep = deep.replace(b'"sessionId":"s1"', nested)
    assert nested in deep
    after = assistant_line("[PROGRESS]\nagent_id: a\npercent: 5\n[/PROGRESS]\n")
    for parser in (AnyParser(Format.CLAUDE_JSONL), AnyParser()):
        items = parser.feed(deep + after) + parser.close()
        assert parser.format is Format.CLAUDE_JSONL
        error, signal = items
        assert isinstance(error, ErrorItem) and isinstance(signal, SignalItem)
        assert error.line == 1 and "not JSON" in error.message


def test_a_line_that_is_not_utf8_says_so() -> None:
    (error,) = parse(b'{"type": "assistant", "x": \xff}\n')[0]
    assert isinstance(error, ErrorItem) and error.message == "JSONL line 1: not valid UTF-8 (byte 27)"


def test_invalid_utf8_in_an_assistant_text_is_read_as_question_marks_not_the_signal_lost() -> None:
    """As text output is read with U+FFFD: the agent's COMPLETION_REPORT was skipped with the line."""
    done = "[COMPLETION_REPORT]\nagent_id: a1\nstatus: success\nsummary: all done XX\n[/COMPLETION_REPORT]\n"
    line = assistant_line("Finished.\n" + done).replace(b"XX", b"\xff\xfe")
    (item,) = parse(line)[0]
    assert isinstance(item, SignalItem) and isinstance(item.payload, CompletionReport)
    assert item.payload.summary == "all done ??"  # one byte for one: offsets stay inside the line
    assert item.offset < len(line)


def test_errors_inside_an_assistant_text_name_the_jsonl_line() -> None:
    data = assistant_line("ok") + assistant_line("prose\n[STOP_WORK]\nagent_id: a1\n")
    items, _ = parse(data)
    item = items[0]
    assert isinstance(item, ErrorItem)
    assert item.line == 2
    assert item.offset == len(assistant_line("ok")) + len("prose\n")
    assert item.message == (
        "STOP_WORK block at line 2 of the text on JSONL line 2: "
        "not terminated (end of its text: a signal does not span two of the agent's texts)"
    )


def test_a_block_does_not_span_two_messages() -> None:
    data = assistant_line("[PROGRESS]\nagent_id: a1\n") + assistant_line("percent: 5\n[/PROGRESS]\n")
    items, _ = parse(data)
    [error] = items
    assert isinstance(error, ErrorItem)
    assert "end of its text" in error.message  # not "end of input": the transcript goes on


def test_string_content_and_other_entry_types() -> None:
    data = b"".join(
        [
            b'{"type": "summary", "summary": "Auth audit", "leafUuid": "x"}\n',
            orjson.dumps(
                {
                    "type": "assistant",
                    "message": {"content": "[PROGRESS]\nagent_id: a\npercent: 1\n[/PROGRESS]"},
                }
            ),
            b"\n",
            orjson.dumps({"type": "assistant", "message": {}}),
        ]
    )
    items, parser = parse(data)
    signal, error = items
    assert isinstance(signal, SignalItem)
    assert isinstance(error, ErrorItem)
    assert error.message == "JSONL line 3: assistant message without content"
    assert parser.session_id is None


@pytest.mark.parametrize("hostile", ["--dangerously-skip-permissions", "a b", "x\ny", "", "é", "x" * 129])
def test_a_session_id_a_resume_command_could_take_for_an_option_is_none(hostile: str) -> None:
    """It goes into `--resume {session_id}`: the agent's output must not choose its next turn's options."""
    first = {"type": "result", "subtype": "success", "is_error": False, "result": "ok", "session_id": hostile}
    reader = TranscriptReader()
    reader.feed(orjson.dumps(first) + b"\n")
    assert reader.session_id is None
    codex = CodexReader()
    codex.feed(orjson.dumps({"type": "thread.started", "thread_id": hostile}) + b"\n")
    assert codex.session_id is None
    reader.feed(orjson.dumps({**first, "session_id": "7c1e9a52-4b3d-4f0e"}) + b"\n")  # the next, valid
    assert reader.session_id == "7c1e9a52-4b3d-4f0e"


def test_the_reader_yields_assistant_texts() -> None:
    reader = TranscriptReader()
    texts = reader.feed(TRANSCRIPT) + reader.close()
    assert all(isinstance(t, AssistantText) for t in texts)
    assert [t.line for t in texts] == [2, 7, 10, 10]
    assert isinstance(texts[0], AssistantText)
    assert texts[0].text == "I'll start by reading the protocol notes and the auth module."
    assert reader.session_id == "7c1e9a52-4b3d-4f0e-9d6a-2f8b5c3e1a90"


@pytest.mark.parametrize(
    ("head", "final", "expected"),
    [
        (b"", False, Format.AUTO),
        (b"", True, Format.TEXT),
        (b"\n\n  ", False, Format.AUTO),
        (b"Working on it\n", False, Format.TEXT),
        (b"## Code Explorer Result", False, Format.TEXT),
        (b'{"type": "user", "message"', False, Format.AUTO),
        (b'{"type": "user", "message"', True, Format.CLAUDE_JSONL),
        (b'\n{"type": "user"}\n', False, Format.CLAUDE_JSONL),
        (b'\xef\xbb\xbf{"type": "assistant"}', True, Format.CLAUDE_JSONL),
        (b"\xef\xbb", False, Format.AUTO),  # a byte order mark cut short
        (b"\xef\xbb", True, Format.TEXT),
        (b"\xef\xbbx", False, Format.TEXT),
        (b'{"kind": "user"}\n', False, Format.AUTO),
        (b'{"kind": "user"}\n', True, Format.TEXT),
        (b"{not json}\n", False, Format.AUTO),
        (b"{not json}\n", True, Format.TEXT),
        (b"[1, 2]\n", False, Format.TEXT),
        # a first line that is not an entry: the next lines decide, two of three
        (b'{"type": "user", "mess\n{"type": "user"}\n{"type": "assistant"}\n', False, Format.CLAUDE_JSONL),
        (b'{"type": "user", "mess\n\n{"type": "user"}\n', False, Format.AUTO),
        (b'{"type": "user", "mess\n\n{"type": "user"}\n', True, Format.CLAUDE_JSONL),
        (b"{not json}\nWorking on it\n", False, Format.TEXT),
        (b'{"kind": "log"}\n{"type": "x"}\nthen prose\n', False, Format.TEXT),
        # a structured log line has a type, but is no entry: the prose after it decides
        (b'{"type": "log", "msg": "starting"}\n[STOP_WORK]\nagent_id: a\n', False, Format.TEXT),
        (b'{"type": ["user"]}\nprose\nmore prose\n', False, Format.TEXT),
        (b'{"type": "queue-operation", "sessionId": "s"}\n', False, Format.CLAUDE_JSONL),
        (b'{"level": "info", "message": "cut by the limit', True, Format.TEXT),  # no type: no entry
        # a byte of invalid UTF-8 in an entry's text (read as ?): still an entry
        (b'{"type": "assistant", "message": "a\xff\xc3("}\n', False, Format.CLAUDE_JSONL),
    ],
)
def test_detect_format(head: bytes, final: bool, expected: Format) -> None:
    assert detect_format(head, final=final) is expected


def test_any_parser_detects_a_transcript_split_across_feeds() -> None:
    parser = AnyParser()
    items = parser.feed(TRANSCRIPT[:100])
    assert items == []
    assert format_of(parser) is Format.AUTO
    items += parser.feed(TRANSCRIPT[100:]) + parser.close()
    assert format_of(parser) is Format.CLAUDE_JSONL
    assert items == parse(TRANSCRIPT)[0]
    assert parser.agent_id == "a3f9c21"


def fed_in_pieces(data: bytes, chunk: int) -> tuple[AnyParser, list[Item]]:
    """An :class:`AnyParser` fed ``data`` ``chunk`` bytes at a time, then closed, and its items."""
    parser = AnyParser()
    items: list[Item] = []
    for start in range(0, len(data), chunk):
        items += parser.feed(data[start : start + chunk])
    return parser, items + parser.close()


@pytest.mark.parametrize("chunk", [7, 64 * 1024])
def test_any_parser_detects_a_transcript_whose_first_line_is_damaged(chunk: int) -> None:
    damaged = LINES[0][: len(LINES[0]) // 2] + b"\n" + b"".join(LINES[1:])  # cut short, then the rest
    parser, items = fed_in_pieces(damaged, chunk)
    assert parser.format is Format.CLAUDE_JSONL
    assert items == parse(damaged)[0]
    assert isinstance(items[0], ErrorItem) and items[0].line == 1  # the damaged line, reported
    assert any(isinstance(item, SignalItem) for item in items)


@pytest.mark.parametrize("chunk", [1 << 16, 1 << 24])
def test_the_format_at_the_detection_limit_does_not_depend_on_the_reads(chunk: int) -> None:
    """A first line that is no entry, then one longer than the limit: its first bytes decide, whether
    the limit was passed in the middle of it or the lines after it came in the same read."""
    log = b'{"type": "log", "msg": "starting"}\n'
    signal = "[STOP_WORK]\nagent_id: a\nstop_reason: blocker\nblocker_type: missing_info\ndetails: key\n[/STOP_WORK]\n"
    text = "x" * DETECT_LIMIT + "\n" + signal
    big = orjson.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}})
    data = log + big + b"\n" + log + log
    parser, items = fed_in_pieces(data, chunk)
    assert parser.format is Format.CLAUDE_JSONL
    assert [type(item) for item in items if not isinstance(item, ErrorItem)] == [SignalItem]


def test_any_parser_detects_a_transcript_after_a_byte_order_mark_fed_a_byte_at_a_time() -> None:
    data = b"\xef\xbb\xbf" + TRANSCRIPT
    parser = AnyParser()
    items: list[Item] = []
    for index in range(len(data)):
        items += parser.feed(data[index : index + 1])
    items += parser.close()
    assert parser.format is Format.CLAUDE_JSONL
    whole = AnyParser()
    assert items == whole.feed(data) + whole.close()
    assert any(isinstance(item, SignalItem) for item in items)


def test_any_parser_on_text_and_forced_formats() -> None:
    text = b"\n\n[PROGRESS]\nagent_id: a\npercent: 3\n[/PROGRESS]\n"
    auto = AnyParser()
    assert auto.feed(text[:1]) == []
    items = auto.feed(text[1:]) + auto.close()
    assert auto.format is Format.TEXT
    assert items == parse_text(text)
    assert auto.session_id is None
    forced = AnyParser(Format.TEXT)
    assert forced.feed(TRANSCRIPT) + forced.close() == []
    short = AnyParser()
    assert short.close() == []
    assert short.format is Format.TEXT


def test_a_reading_resumed_mid_transcript_names_the_transcripts_lines() -> None:
    """An adapter resumed from a checkpoint feeds the transcript from a line's start: its items and its
    messages name the transcript's line numbers, as a reading from the start would."""
    later = b"".join(LINES[2:])
    whole, _ = parse(TRANSCRIPT + b'{"type": "assistant", "message": {"content": 7}}\n')
    resumed = AnyParser(Format.CLAUDE_JSONL, first_line=3)
    part = resumed.feed(later + b'{"type": "assistant", "message": {"content": 7}}\n') + resumed.close()
    [error] = [i for i in part if isinstance(i, ErrorItem)]
    assert len(part) > 2 and error.line == len(LINES) + 1 and f"JSONL line {len(LINES) + 1}:" in error.message
    assert [(i.line, i.offset + line_start(3)) for i in part] == [
        (i.line, i.offset) for i in whole if i.offset >= line_start(3)
    ]


OVERLOADED = 'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'


def api_error_line(text: str = OVERLOADED) -> bytes:
    """The entry an interactive session writes for an API error (it has no ``result`` entries)."""
    entry = {
        "type": "assistant",
        "sessionId": "s1",
        "isApiErrorMessage": True,
        "error": "unknown",
        "message": {"role": "assistant", "model": "<synthetic>", "content": [{"type": "text", "text": text}]},
    }
    return orjson.dumps(entry) + b"\n"


def user_line(text: str) -> bytes:
    return (
        orjson.dumps({"type": "user", "sessionId": "s1", "message": {"role": "user", "content": text}})
        + b"\n"
    )


def test_an_api_error_in_an_interactive_transcript_is_a_failed_turn_on_its_line_s_last_byte() -> None:
    data = assistant_line("Reading src/auth first.") + api_error_line()
    items, _ = parse(data)
    [failed] = items
    assert isinstance(failed, TurnFailedItem)
    assert failed.message == f"Claude Code's request to the API failed: {OVERLOADED}"
    assert (failed.line, failed.offset) == (2, len(data) - 2)  # the id of its envelope is its own


@pytest.mark.parametrize("cuts", [[], [5], [len(assistant_line("x")) + 3, 200]])
def test_an_api_error_is_read_once_however_the_transcript_is_chunked(cuts: list[int]) -> None:
    data = assistant_line("x") + api_error_line()
    items, _ = parse(data, cuts)
    assert [(type(i), i.line) for i in items] == [(TurnFailedItem, 2)]


def test_only_an_entry_flagged_as_an_api_error_is_a_failed_turn() -> None:
    """The agent quoting an API error is not one; a flagged entry's text says what failed, cut."""
    quoted = assistant_line(f"The log says: {OVERLOADED}")
    flagged_false = orjson.loads(api_error_line())
    flagged_false["isApiErrorMessage"] = "true"
    items, _ = parse(quoted + orjson.dumps(flagged_false) + b"\n")
    assert items == []
    items, _ = parse(api_error_line("API Error: " + "x" * 100_000) + api_error_line("  "))
    long, blank = items
    assert isinstance(long, TurnFailedItem) and len(long.message) == MAX_FAILURE_CHARS
    assert isinstance(blank, TurnFailedItem) and blank.message.endswith("failed: no text")


def test_an_api_error_followed_by_a_new_turn_is_still_its_turn_s_failure() -> None:
    """Output after it is the session prompted again; each API error is its turn's failure."""
    data = (
        api_error_line()
        + user_line("Go on.")
        + assistant_line("[PROGRESS]\nagent_id: a1\npercent: 50\n[/PROGRESS]")
        + api_error_line("API Error: Connection error.")
    )
    items, _ = parse(data)
    assert [(type(i), i.line) for i in items] == [(TurnFailedItem, 1), (SignalItem, 3), (TurnFailedItem, 4)]


def test_a_stream_json_result_repeating_an_api_error_is_not_a_second_failure() -> None:
    """``stream-json`` writes the flagged entry, then an error result that repeats it; a later turn's
    error result is its own failure."""
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "result": OVERLOADED,
        "session_id": "s1",
    }
    data = (
        api_error_line() + orjson.dumps(result) + b"\n" + user_line("Again.") + orjson.dumps(result) + b"\n"
    )
    items, _ = parse(data)
    assert [(type(i), i.line) for i in items] == [(TurnFailedItem, 1), (TurnFailedItem, 4)]
