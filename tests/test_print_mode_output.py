"""``claude -p``'s JSON outputs: ``--output-format json`` (one ``result`` entry holding the answer) and
``stream-json`` (the session's entries, then the same ``result``), read as transcripts."""

from __future__ import annotations

from pathlib import Path

import orjson

from agents.items import TurnFailedItem
from agents.parser import Found, SignalItem
from agents.transcript import AnyParser, Format, TranscriptParser
from bus.signals import StopWork

STOP = (
    "Blocked.\n[STOP_WORK]\nagent_id: bg-1\ntimestamp: 2026-01-11T10:00:00-05:00\nstop_reason: blocker\n"
    "blocker_type: missing_info\ndetails: need the API key\n[/STOP_WORK]\n"
)


def line(**entry: object) -> bytes:
    return orjson.dumps(entry) + b"\n"


def result(text: str, session: str = "c0ffee") -> bytes:
    return line(
        type="result", subtype="success", is_error=False, num_turns=3, result=text, session_id=session
    )


def assistant(text: str, session: str = "c0ffee") -> bytes:
    message = {"id": "msg_1", "role": "assistant", "content": [{"type": "text", "text": text}]}
    return line(type="assistant", message=message, session_id=session)


def parse(data: bytes) -> tuple[list[Found], TranscriptParser]:
    parser = TranscriptParser()
    return parser.feed(data) + parser.close(), parser


def test_the_json_output_format_is_read_from_its_result_with_its_session() -> None:
    items, parser = parse(result(STOP))
    [item] = items
    assert isinstance(item, SignalItem), item
    assert isinstance(item.payload, StopWork)
    assert item.payload.details == "need the API key"
    assert item.line == 1
    assert 0 < item.offset < len(result(STOP))
    assert parser.session_id == "c0ffee"  # what a resume command's {session_id} needs


def test_json_outputs_appended_turn_after_turn_are_each_read() -> None:
    again = STOP.replace("10:00:00", "10:05:00")
    items, _ = parse(result(STOP) + result("Thanks, going on.") + result(again))
    assert [(i.line, type(i)) for i in items] == [(1, SignalItem), (3, SignalItem)]


def test_the_stream_json_result_repeating_the_last_message_is_not_read_twice() -> None:
    data = line(type="system", subtype="init", session_id="c0ffee", tools=[]) + assistant(STOP) + result(STOP)
    items, parser = parse(data)
    assert [(i.line, type(i)) for i in items] == [(2, SignalItem)]
    assert parser.session_id == "c0ffee"
    items, _ = parse(data + assistant("Resumed.") + result("Resumed.") + result(STOP))  # a turn without one
    assert [i.line for i in items] == [2, 6]


def test_auto_detection_takes_a_json_output_for_a_transcript() -> None:
    parser = AnyParser(Format.AUTO)
    items = parser.feed(result(STOP)) + parser.close()
    assert parser.format is Format.CLAUDE_JSONL
    assert [type(i) for i in items] == [SignalItem]


FAILED = (Path(__file__).parent / "data" / "claude_print_failed.jsonl").read_bytes()
"""Two `claude -p --output-format stream-json` runs: one stopped at --max-turns, one ended by an API error
(Claude Code exits 0 after that one)."""


def test_a_result_that_is_an_error_is_a_failed_turn_with_what_it_says() -> None:
    """The API error is read at the entry that says it, and the error result repeating it is not a
    second failure."""
    items, _ = parse(FAILED)
    assert [(i.line, type(i)) for i in items] == [(2, SignalItem), (5, TurnFailedItem), (7, TurnFailedItem)]
    turns = [i for i in items if isinstance(i, TurnFailedItem)]
    assert [t.message for t in turns] == [
        "Claude Code's result is an error (error_max_turns): Reached maximum number of turns (2)",
        "Claude Code's request to the API failed: API Error: 529 "
        '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":null}',
    ]
    ends = [n for n, byte in enumerate(FAILED) if byte == ord("\n")]
    assert [t.offset for t in turns] == [ends[4] - 1, ends[6] - 1]  # each line's last byte


def test_a_result_whose_text_starts_with_a_signal_keeps_it_and_its_failure_apart() -> None:
    entry = line(type="result", subtype="success", is_error=True, result=STOP.removeprefix("Blocked.\n"))
    items, _ = parse(entry)
    assert [type(i) for i in items] == [SignalItem, TurnFailedItem]
    assert items[0].offset < items[1].offset


def test_only_an_error_result_is_a_failed_turn() -> None:
    results = [
        line(type="result", subtype="error_during_execution", is_error=True, num_turns=1),
        line(type="result", subtype="error_max_budget_usd", errors=["", "Reached the budget"]),
        line(type="result", subtype="success", is_error=False, result="Done."),
        line(type="result", subtype="success", is_error="yes", result="Done."),
    ]
    items, _ = parse(b"".join(results))
    assert [(i.line, i.message) for i in items if isinstance(i, TurnFailedItem)] == [
        (1, "Claude Code's result is an error (error_during_execution)"),
        (2, "Claude Code's result is an error (error_max_budget_usd): Reached the budget"),
    ]
