"""``claude -p``'s JSON outputs: ``--output-format json`` (one ``result`` entry holding the answer) and
``stream-json`` (the session's entries, then the same ``result``), read as transcripts."""

from __future__ import annotations

import orjson

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
