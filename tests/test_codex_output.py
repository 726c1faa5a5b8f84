"""Codex CLI's ``codex exec --json`` output: only the agent's completed messages are output; positions
are stable; the thread id is the session id."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.cli import parse as parse_command
from agents.codex_output import CodexReader
from agents.items import TurnFailedItem
from agents.jsonl_reader import MAX_FAILURE_CHARS, AssistantText
from agents.parser import ErrorItem, Found, Item, ResultItem, SignalItem, parse_text
from agents.transcript import AnyParser, Format, TranscriptParser, detect_format
from bus.results import ResultStatus
from bus.signals import ClarificationNeeded, CompletionReport, Progress

OUTPUT = (Path(__file__).parent / "data" / "codex_exec.jsonl").read_bytes()
LINES = OUTPUT.splitlines(keepends=True)
THREAD = "0199a213-81c0-7800-8aa1-bbab2a035a53"
PROGRESS = "[PROGRESS]\nagent_id: cx-1\npercent: 5\n[/PROGRESS]\n"


def line_start(number: int) -> int:
    return sum(len(line) for line in LINES[: number - 1])


def parse(data: bytes, cuts: list[int] | None = None) -> tuple[list[Found], TranscriptParser]:
    parser = TranscriptParser(fmt=Format.CODEX_JSONL)
    items: list[Found] = []
    previous = 0
    for cut in [*sorted(set(cuts or [])), len(data)]:
        items += parser.feed(data[previous:cut])
        previous = cut
    return items + parser.close(), parser


def event(kind: str, **fields: object) -> bytes:
    return orjson.dumps({"type": kind, **fields}) + b"\n"


def message(text: str, *, kind: str = "agent_message", key: str = "type", done: bool = True) -> bytes:
    item = {"id": "item_9", key: kind, "text": text}
    return event("item.completed" if done else "item.updated", item=item)


def test_the_data_file_holds_signals_outside_the_agent_messages() -> None:
    """Reasoning, a command's output and a tool call quote valid signals: read as text they would count."""
    for number in (3, 5, 12):
        item = orjson.loads(LINES[number - 1])["item"]
        quoted = str(item.get("text") or item.get("aggregated_output") or item["arguments"]["query"])
        assert any(isinstance(i, SignalItem) for i in parse_text(quoted)), number
    assert b"[COMPLETION_REPORT]" in LINES[9]  # a todo list's item


FAILED = (Path(__file__).parent / "data" / "codex_exec_failed.jsonl").read_bytes()
"""A turn that ends at a usage limit: a message, a retry's error event, the error that ends it, turn.failed."""


def test_a_failed_turn_is_an_item_of_its_own_on_its_lines_last_byte() -> None:
    items, parser = parse(FAILED)
    assert [type(i) for i in items] == [SignalItem, TurnFailedItem]
    failed = items[1]
    assert isinstance(failed, TurnFailedItem)
    assert failed.message == (
        "Codex CLI reported turn.failed: You've hit your usage limit. Upgrade to Pro "
        "(https://openai.com/chatgpt/pricing), or try again in 2 days 4 hours 11 minutes."
    )
    lines = FAILED.splitlines(keepends=True)
    assert failed.line == len(lines)
    assert failed.offset == len(FAILED) - 2  # the line's `}`: no text of a line is placed there
    assert parser.session_id == "0199b7c2-5d1e-7a30-9f4b-6c2e8d1a7f35"
    assert all(parse(FAILED, cuts)[0] == items for cuts in ([1], [len(FAILED) - 1], list(range(0, 900, 7))))


def test_error_events_alone_are_no_failed_turn() -> None:
    # Codex CLI prints them for what it retries, and goes on
    items, _ = parse(
        event("error", message="Reconnecting... 1/5") + message(PROGRESS) + event("turn.completed")
    )
    assert [type(i) for i in items] == [SignalItem]


@pytest.mark.parametrize(
    ("error", "said"),
    [
        ({}, "Codex CLI reported turn.failed"),
        ({"error": {"message": "  "}}, "Codex CLI reported turn.failed"),
        ({"error": "not an object"}, "Codex CLI reported turn.failed"),
        ({"error": {"message": "x" * 10_000}}, "Codex CLI reported turn.failed: " + "x" * 10_000),
    ],
    ids=["no error", "blank", "not an object", "long"],
)
def test_a_failed_turn_without_a_usable_message_says_what_it_can(error: dict[str, object], said: str) -> None:
    items, _ = parse(event("turn.failed", **error))
    assert [i.message for i in items if isinstance(i, TurnFailedItem)] == [
        said if len(said) <= MAX_FAILURE_CHARS else said[: MAX_FAILURE_CHARS - 1] + "…"
    ]


def test_parse_shows_a_failed_turn_and_counts_it_apart_from_errors(tmp_path: Path) -> None:
    path = tmp_path / "codex.jsonl"
    path.write_bytes(FAILED)
    result = CliRunner().invoke(parse_command, [str(path)])
    assert result.exit_code == 0, result.output  # what the program said of its turn is no parse error
    assert (
        "     9  TURN_FAILED          Codex CLI reported turn.failed: You've hit your usage limit."
        in result.output
    )
    assert "1 signal, 0 results, 0 errors, 1 failed turn" in result.output
    result = CliRunner().invoke(parse_command, [str(path), "--json"])
    failed = orjson.loads(result.output.splitlines()[-1])
    assert (failed["kind"], failed["line"]) == ("turn_failed", 9)


def test_only_the_completed_agent_messages_are_parsed() -> None:
    items, parser = parse(OUTPUT)
    assert [(type(i).__name__, i.line) for i in items] == [
        ("SignalItem", 6),
        ("SignalItem", 16),
        ("ResultItem", 16),
        ("SignalItem", 16),
    ]
    clarification, progress, result, completion = items
    assert isinstance(clarification, SignalItem) and isinstance(clarification.payload, ClarificationNeeded)
    assert clarification.payload.current_state is not None and "✗" in clarification.payload.current_state
    assert isinstance(progress, SignalItem) and isinstance(progress.payload, Progress)
    assert isinstance(result, ResultItem) and result.report.status is ResultStatus.PARTIAL
    assert [(f.file, f.line) for f in result.report.findings] == [("src/config/jwt.ts", 8)]
    assert isinstance(completion, SignalItem) and isinstance(completion.payload, CompletionReport)
    assert parser.session_id == THREAD  # what `codex exec resume {session_id}` takes
    assert parser.agent_id is None


def test_offsets_stay_inside_the_jsonl_line_and_are_distinct() -> None:
    items, _ = parse(OUTPUT)
    for item in items:
        assert line_start(item.line) <= item.offset < line_start(item.line + 1)
    assert len({i.offset for i in items}) == len(items)
    text = orjson.loads(LINES[15])["item"]["text"]
    assert items[1].offset == line_start(16) + len(text[: text.index("[PROGRESS]")].encode())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, len(OUTPUT)), max_size=25))
def test_chunking_never_changes_the_items(cuts: list[int]) -> None:
    assert parse(OUTPUT, cuts)[0] == parse(OUTPUT)[0]


def test_fed_a_byte_at_a_time_with_detection_the_items_are_the_same() -> None:
    parser = AnyParser()
    items: list[Item] = []
    for index in range(len(OUTPUT)):
        items += parser.feed(OUTPUT[index : index + 1])
    items += parser.close()
    assert parser.format is Format.CODEX_JSONL
    assert items == parse(OUTPUT)[0]
    assert parser.session_id == THREAD


def test_read_as_text_its_signals_would_be_lost() -> None:
    """What --format auto did before it knew the format: JSON strings hold no line that starts a tag."""
    assert parse_text(OUTPUT) == []


def test_the_first_versions_item_type_and_assistant_message_are_read() -> None:
    early = message(PROGRESS, kind="assistant_message", key="item_type")
    later = message(PROGRESS.replace("5", "6"), kind="assistant_message")
    items, _ = parse(event("thread.started", thread_id="t1") + early + later)
    assert [(type(i), i.line) for i in items] == [(SignalItem, 2), (SignalItem, 3)]


def test_an_item_is_read_once_when_completed() -> None:
    started = event("item.started", item={"id": "item_9", "type": "agent_message", "text": PROGRESS})
    data = started + message(PROGRESS, done=False) + message(PROGRESS)
    items, _ = parse(data)
    assert [i.line for i in items] == [3]


@pytest.mark.parametrize("kind", ["reasoning", "command_execution", "mcp_tool_call", "error", "todo_list"])
def test_other_items_text_is_not_output(kind: str) -> None:
    assert parse(message(PROGRESS, kind=kind))[0] == []


def test_a_block_does_not_span_two_messages() -> None:
    [error] = parse(message("[PROGRESS]\nagent_id: a\n") + message("percent: 5\n[/PROGRESS]\n"))[0]
    assert isinstance(error, ErrorItem) and error.line == 1 and "end of its text" in error.message


def test_a_last_line_cut_short_waits_and_counts_at_the_end() -> None:
    data = event("thread.started", thread_id="t1") + message(PROGRESS)
    parser = TranscriptParser(fmt=Format.CODEX_JSONL)
    assert parser.feed(data[:-1]) == []  # no newline yet: the line may go on
    [item] = parser.close()
    assert isinstance(item, SignalItem) and item.line == 2


def test_a_reading_resumed_at_a_line_start_yields_the_rest() -> None:
    whole, _ = parse(OUTPUT)
    resumed = AnyParser(Format.CODEX_JSONL, first_line=8)
    part = resumed.feed(b"".join(LINES[7:])) + resumed.close()
    assert [(i.line, i.offset + line_start(8)) for i in part] == [
        (i.line, i.offset) for i in whole if i.line >= 8
    ]
    assert resumed.session_id == THREAD  # a resumed turn names its thread again


def test_hostile_lines_are_errors_naming_their_line_and_reading_goes_on() -> None:
    surrogate = message("cut here: X\n" + PROGRESS).replace(b"cut here: X", b"cut here: \\ud83d")
    data = b"".join(
        [
            event("thread.started", thread_id=["not", "text"]),
            b'{"type": "item.completed", "item": {"type": "agent_message", "text": "cut\n',
            b"[1, 2]\n",
            event("item.completed", item="agent_message"),
            event("item.completed", item={"type": ["agent_message"], "text": PROGRESS}),
            event("item.completed", item={"type": "agent_message", "text": 7}),
            event("item.completed", item={"type": {"nested": 1}, "item_type": "agent_message"}),
            message("done \xff\xfe\n" + PROGRESS).replace("\xff\xfe".encode(), b"\xff\xfe"),
            surrogate,
            b'{"type": "item.completed", "item": "' + b"x" * 300 + b'"}\n',
            message(PROGRESS),
        ]
    )
    parser = TranscriptParser(fmt=Format.CODEX_JSONL, max_line_bytes=200)
    items = parser.feed(data) + parser.close()
    errors = [(i.line, i.message) for i in items if isinstance(i, ErrorItem)]
    assert [line for line, _ in errors] == [2, 3, 4, 6, 7, 10]
    assert errors[0][1].startswith("JSONL line 2: not JSON (")
    assert errors[1][1] == "JSONL line 3: not a JSON object"
    assert errors[2][1] == "JSONL line 4: item.completed without an item"
    assert errors[3][1] == errors[4][1].replace("7", "6") == "JSONL line 6: agent message without text"
    assert errors[5][1] == "JSONL line 10: longer than 200 bytes; skipped"
    assert [i.line for i in items if isinstance(i, SignalItem)] == [8, 9, 11]
    assert parser.session_id is None  # a thread id that is no text is none


def test_invalid_utf8_in_a_message_is_read_as_question_marks() -> None:
    reader = CodexReader()
    line = message("all done XX").replace(b"XX", b"\xff\xfe")
    [text] = reader.feed(line) + reader.close()
    assert isinstance(text, AssistantText) and text.text == "all done ??"


@pytest.mark.parametrize(
    ("head", "final", "expected"),
    [
        (LINES[0], False, Format.CODEX_JSONL),
        (LINES[0][:30], False, Format.AUTO),
        (LINES[0][:30], True, Format.CODEX_JSONL),  # cut by the buffering limit: judged by its start
        (b'{"type": "turn.started"}\n', False, Format.CODEX_JSONL),
        (b"\xef\xbb\xbf" + LINES[0], False, Format.CODEX_JSONL),
        # an error event first (a transcript entry's message is an object, not a text)
        (b'{"type": "error", "message": "Reconnecting... 1/5"}\n', False, Format.CODEX_JSONL),
        (b'{"type": "error", "message": {"role": "user"}}\n', False, Format.CLAUDE_JSONL),
        # a first line of something else: the next lines decide, the format most of them are
        (b'{"kind": "header"}\n' + LINES[1] + LINES[2], False, Format.CODEX_JSONL),
        (b'{"kind": "header"}\n' + LINES[1] + b'{"type": "user"}\n', False, Format.CODEX_JSONL),
        (b'{"kind": "header"}\n{"type": "user"}\n' + LINES[1], False, Format.CLAUDE_JSONL),
        (b'{"kind": "header"}\n' + LINES[1], False, Format.AUTO),
        (b'{"kind": "header"}\n' + LINES[1], True, Format.CODEX_JSONL),  # a tie: entries win
        (b'{"kind": "header"}\n' + LINES[1] + b"prose\n", False, Format.TEXT),
        (b'{"kind": "header"}\nprose\n' + LINES[1], False, Format.TEXT),
        (b'{"type": "thread.started.x"}\n', True, Format.TEXT),
    ],
)
def test_detect_format(head: bytes, final: bool, expected: Format) -> None:
    assert detect_format(head, final=final) is expected


def test_a_forced_format_reads_what_it_is_told() -> None:
    claude = AnyParser(Format.CLAUDE_JSONL)  # no assistant entries: nothing
    assert claude.feed(OUTPUT) + claude.close() == []
    codex = AnyParser(Format.CODEX_JSONL)
    assert [type(i) for i in codex.feed(OUTPUT) + codex.close()] == [
        SignalItem,
        SignalItem,
        ResultItem,
        SignalItem,
    ]


def test_parse_names_the_thread_and_takes_the_format_by_name() -> None:
    path = str(Path(__file__).parent / "data" / "codex_exec.jsonl")
    auto = CliRunner().invoke(parse_command, [path])
    assert auto.exit_code == 0, auto.output
    assert auto.stdout.splitlines()[-2:] == [
        f"codex exec output: thread {THREAD}",
        "3 signals, 1 result, 0 errors",
    ]
    named = CliRunner().invoke(parse_command, [path, "--format", "codex-jsonl", "--json"])
    assert [orjson.loads(line)["line"] for line in named.stdout.splitlines()] == [6, 16, 16, 16]
