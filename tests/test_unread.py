"""A report written under another heading is held until the agent finishes, then named if nothing
replaced it (:mod:`agents.unread`), in either output format, however the output is chunked."""

from __future__ import annotations

import orjson
import pytest

from agents.parser import ErrorItem, Item, ResultItem, SignalItem
from agents.transcript import AnyParser, Format
from bus.envelope import EnvelopeType

UNREAD = (
    "## Security Auditor Results\n\n### Status\nSUCCESS\n\n### Summary\nReviewed auth.\n\n### Findings\n"
    "| ID | Issue | File:Line | Severity |\n|--|--|--|--|\n| SEC-001 | JWT secret | `src/jwt.ts:8` | Critical |\n"
    "| SEC-002 | No rate limit | `src/login.ts:40` | High |\n"
)
REPORT = "## Security Auditor Result\n\n### Status\nSUCCESS\n\n### Summary\nReviewed auth.\n"
COMPLETION = """[COMPLETION_REPORT]
agent_id: auditor
timestamp: 2026-01-11T12:00:00-05:00
status: success
summary: Reviewed the authentication module
[/COMPLETION_REPORT]
"""
NAMED = (
    "the section '## Security Auditor Results' reads as a result report (2 findings) but was not read as "
    "one: only a '## <Agent Name> Result' heading starts a report"
)


def parse(data: bytes, size: int | None = None, fmt: Format = Format.TEXT) -> list[Item]:
    parser = AnyParser(fmt)
    size = size or len(data) or 1
    items = [item for at in range(0, len(data), size) for item in parser.feed(data[at : at + size])]
    return items + parser.close()


def kinds(items: list[Item]) -> list[str]:
    return [type(item).__name__ for item in items]


@pytest.mark.parametrize("size", [None, 1, 7, 64])
def test_a_completion_names_the_section_held_before_it(size: int | None) -> None:
    text = f"Working.\n{UNREAD}\nDone.\n{COMPLETION}"
    error, signal = parse(text.encode(), size)
    assert isinstance(error, ErrorItem) and isinstance(signal, SignalItem)
    assert signal.type is EnvelopeType.COMPLETION_REPORT
    assert (error.type, error.message, error.line) == (EnvelopeType.RESULT, NAMED, 2)
    assert error.offset == signal.offset - 1 == text.index("[COMPLETION_REPORT]") - 1
    assert text[error.offset] == "\n"  # no item starts there: its envelope id is its own


def test_a_section_in_a_fence_is_held_too() -> None:
    error, _ = parse(f"```markdown\n{UNREAD}```\n{COMPLETION}".encode())
    assert isinstance(error, ErrorItem) and error.message == NAMED and error.line == 2


def test_a_report_after_the_section_drops_it() -> None:
    items = parse(f"{UNREAD}\n# Then\n{REPORT}\n{COMPLETION}".encode())
    assert kinds(items) == ["ResultItem", "SignalItem"]


def test_a_report_that_does_not_read_drops_it_too_since_it_is_named_already() -> None:
    broken = REPORT.replace("### Summary\n", "### Sumary\n")
    error, _ = parse(f"{UNREAD}\n{broken}\n{COMPLETION}".encode())
    assert isinstance(error, ErrorItem) and "missing or empty '### Summary' section" in error.message


def test_the_end_of_the_output_names_it_when_no_completion_came() -> None:
    data = f"{UNREAD}\nbye".encode()
    [error] = parse(data)
    assert isinstance(error, ErrorItem) and error.message == NAMED
    assert error.offset == len(data)  # past every item, a transcript's error on a cut last line too


def test_a_section_after_a_report_is_a_recap() -> None:
    for text in (f"{REPORT}\n{UNREAD}\n{COMPLETION}", f"{REPORT}\n{COMPLETION}\n{UNREAD}"):
        assert kinds(parse(text.encode())) == ["ResultItem", "SignalItem"]


def test_a_cut_last_transcript_line_does_not_share_the_named_errors_offset() -> None:
    entry = {
        "type": "assistant",
        "sessionId": "s1",
        "message": {"content": [{"type": "text", "text": UNREAD}]},
    }
    data = orjson.dumps(entry) + b"\n{"
    items = parse(data, None, Format.CLAUDE_JSONL)
    assert [i.offset for i in items] == sorted({i.offset for i in items}) and items[-1].offset == len(data)


def test_the_last_section_is_named_once() -> None:
    second = UNREAD.replace("Security Auditor", "Final").replace("| SEC-002 |", "| SEC-003 |")
    items = parse(f"{UNREAD}\n{second}\n{COMPLETION}\n{COMPLETION}".encode())
    assert kinds(items) == ["ErrorItem", "SignalItem", "SignalItem"]
    assert isinstance(items[0], ErrorItem) and "'## Final Results'" in items[0].message


def test_a_completion_with_nothing_held_and_a_report_are_as_before() -> None:
    items = parse(f"{REPORT}\n{COMPLETION}".encode())
    assert kinds(items) == ["ResultItem", "SignalItem"]
    assert isinstance(items[0], ResultItem)


@pytest.mark.parametrize("size", [None, 13])
def test_a_transcript_holds_it_from_one_message_to_the_completion_in_a_later_one(size: int | None) -> None:
    def line(text: str) -> bytes:
        entry = {
            "type": "assistant",
            "sessionId": "s1",
            "message": {"content": [{"type": "text", "text": text}]},
        }
        return orjson.dumps(entry) + b"\n"

    data = line(UNREAD) + line("Working on the rest.") + line(COMPLETION)
    error, signal = parse(data, size, Format.CLAUDE_JSONL)
    assert isinstance(error, ErrorItem) and isinstance(signal, SignalItem)
    assert (error.message, error.line, error.offset) == (NAMED, 1, signal.offset - 1)
    assert data[error.offset : error.offset + 1] == b"\n"  # the end of the JSONL line before
    [end] = parse(line(UNREAD) + line("bye"), size, Format.CLAUDE_JSONL)
    assert isinstance(end, ErrorItem) and end.message == NAMED


@pytest.mark.parametrize("size", [None, 1, 7, 64])
def test_a_level_1_heading_over_level_2_sections_is_named_too(size: int | None) -> None:
    section = UNREAD.replace("## Security", "# Security").replace("\n### ", "\n## ")
    assert section.startswith("# Security Auditor Results\n\n## Status\n")
    error, signal = parse(f"Working.\n{section}\n## Next steps\nnone\n{COMPLETION}".encode(), size)
    assert isinstance(error, ErrorItem) and isinstance(signal, SignalItem)
    assert error.message == NAMED.replace("'## Security", "'# Security") and error.line == 2


def test_a_template_filled_in_is_named_for_its_placeholder() -> None:
    section = UNREAD.replace("## Security Auditor Results", "## [Agent Name] Result")
    error, _ = parse(f"{section}\n{COMPLETION}".encode())
    assert isinstance(error, ErrorItem) and error.message == (
        "the section '## [Agent Name] Result' reads as a result report (2 findings) but was not read as "
        "one: its heading has the template's placeholder where the agent's name goes"
    )
