"""Agent output as a terminal shows it: colour and other escape sequences inside signal bodies and reports,
not only around tags (syntax-highlighted YAML, a coloured status word)."""

from __future__ import annotations

import pytest

from agents.parser import ErrorItem, Found, Parser, ResultItem, SignalItem, UnreadReportItem, parse_text
from bus.results import ResultStatus
from bus.signals import StopWork

BODY = (
    "agent_id: bg-1\n"
    "timestamp: 2026-01-11T09:15:00-05:00\n"
    "stop_reason: blocker\n"
    "blocker_type: missing_info\n"
    "details: need the API key\n"
)


def coloured_keys(body: str) -> str:
    """Each key blue and each value green, as a YAML highlighter colours them."""
    return "".join(
        f"\x1b[34m{key}\x1b[0m: \x1b[32m{value}\x1b[39m\n"
        for key, value in (line.split(": ", 1) for line in body.splitlines())
    )


@pytest.mark.parametrize(
    "body",
    [
        coloured_keys(BODY),
        "".join(f"\x1b[2m{line}\x1b[0m\r\n" for line in BODY.splitlines()),  # dimmed lines, CRLF
        "```yaml\n\x1b]8;;file:///tmp\x1b\\" + BODY + "\x1b(B\x1b[m```\n",  # a link's start, tput sgr0
    ],
)
def test_escape_sequences_inside_a_body_are_taken_off(body: str) -> None:
    text = "Blocked.\n\x1b[1m[STOP_WORK]\x1b[0m\n" + body + "\x1b[1m[/STOP_WORK]\x1b[0m\n"
    [item] = parse_text(text)
    assert isinstance(item, SignalItem), item
    assert isinstance(item.payload, StopWork)
    assert item.payload.details == "need the API key"
    assert item.payload.agent_id == "bg-1"
    assert (item.line, item.offset) == (2, len("Blocked.\n"))


def test_a_coloured_tentative_block_is_a_signal_too() -> None:
    text = "[STOP_WORK] - blocked on the key\n" + coloured_keys(BODY) + "[/STOP_WORK]\n"
    [item] = parse_text(text)
    assert isinstance(item, SignalItem), item


def test_a_coloured_template_is_still_nothing() -> None:
    body = "agent_id: \x1b[33m<agent-id>\x1b[0m\ntimestamp: \x1b[33m<ISO-8601>\x1b[0m\nstop_reason: blocker\n"
    assert parse_text("[STOP_WORK]\n" + body + "[/STOP_WORK]\n") == []


def test_a_coloured_body_that_is_no_signal_is_an_error_about_its_fields() -> None:
    [item] = parse_text("[STOP_WORK]\n\x1b[31magent_id\x1b[0m: a\n\x1b[31mdetails: x\x1b[0m\n[/STOP_WORK]\n")
    assert isinstance(item, ErrorItem), item
    assert "field 'stop_reason'" in item.message  # not the escape character


def test_escape_sequences_inside_a_report_are_taken_off() -> None:
    text = (
        "## Auditor Result\n\n\x1b[1m### Status\x1b[0m\n\x1b[1;32mSUCCESS\x1b[0m\n\n"
        "### Summary\nAll \x1b[1mgood\x1b[22m.\n"
    )
    [item] = parse_text(text)
    assert isinstance(item, ResultItem), item
    assert item.report.status is ResultStatus.SUCCESS
    assert item.report.summary == "All good."


REPORT = (
    "\x1b[1;36m## Auditor Result\x1b[0m\n\n\x1b[1m### Status\x1b[0m\nPARTIAL\n\n### Summary\nHalf done.\n"
)


def feed_split(data: bytes, cut: int) -> list[Found]:
    parser = Parser()
    return parser.feed(data[:cut]) + parser.feed(data[cut:]) + parser.close()


def test_a_coloured_report_heading_starts_a_report_however_the_output_is_cut() -> None:
    data = ("Done.\n" + REPORT).encode()
    for cut in range(len(data) + 1):
        [item] = feed_split(data, cut)
        assert isinstance(item, ResultItem), (cut, item)
        assert item.report.agent == "Auditor"
        assert item.report.status is ResultStatus.PARTIAL
        assert (item.line, item.offset) == (2, len("Done.\n"))


def test_a_coloured_report_heading_ends_a_block_left_open() -> None:
    data = ("[PROGRESS]\nagent_id: bg-1\npercent: 90\n" + REPORT).encode()
    for cut in range(len(data) + 1):
        error, report = feed_split(data, cut)
        assert isinstance(error, ErrorItem), (cut, error)
        assert "not terminated" in error.message
        assert isinstance(report, ResultItem), (cut, report)


def test_a_coloured_heading_that_is_no_reports_is_kept_in_mind() -> None:
    text = REPORT.replace("## Auditor Result", "## Auditor Results")
    [item] = parse_text(text)
    assert isinstance(item, UnreadReportItem), item
    assert item.heading == "## Auditor Results"


@pytest.mark.parametrize(
    ("opening", "closing"),
    [
        ("[\x1b[1;31mSTOP_WORK\x1b[0m]", "[\x1b[1m/STOP_WORK\x1b[0m]"),  # the word coloured
        ("\x1b[1m[\x1b[0;33mSTOP_WORK\x1b[1m]\x1b[0m", "[/\x1b[33mSTOP_WORK\x1b[39m] waiting"),
        ("[\x1b[33mSTOP_WORK\x1b[0m] - blocked on the key", "[/STOP_WORK\x1b[0m]"),  # a tentative block
    ],
)
def test_escape_sequences_inside_a_tags_brackets_are_allowed(opening: str, closing: str) -> None:
    _one_signal_on_line_2_however_cut(opening, closing)


def _one_signal_on_line_2_however_cut(opening: str, closing: str) -> None:
    """A block between these tags, after a line of prose, is one signal however the output is cut."""
    data = ("Blocked.\n" + opening + "\n" + BODY + closing + "\n").encode()
    for cut in range(len(data) + 1):
        [item] = feed_split(data, cut)
        assert isinstance(item, SignalItem), (cut, item)
        assert (item.line, item.offset) == (2, len("Blocked.\n"))


def test_a_coloured_tag_in_the_middle_of_prose_is_still_prose() -> None:
    assert parse_text("I print [\x1b[1mSTOP_WORK\x1b[0m] when blocked\n" + BODY + "[/STOP_WORK]\n") == []
    assert (
        parse_text("[\x1b[1mSTOP_WORK\x1b[0m] is what I print when blocked.\n[/STOP_WORK] ends it.\n") == []
    )


def test_a_closing_tag_coloured_inside_its_brackets_ends_the_block_at_a_pause() -> None:
    parser = Parser()
    assert parser.feed(("[STOP_WORK]\n" + BODY + "[\x1b[1m/STOP_WORK\x1b[0m]").encode()) == []
    [item] = parser.settle()
    assert isinstance(item, SignalItem), item


TABLE_REPORT = (
    "## Auditor Result\n\n### Status\nSUCCESS\n\n### Summary\nAll checked.\n\n### Findings\n"
    "| ID | Issue | File:Line | Severity |\n|----|-------|-----------|----------|\n"
    "| SEC-1 | SQL injection | src/a.py:10 | critical |\n| SEC-2 | XSS | src/b.py:20 | minor |\n"
)


@pytest.mark.parametrize("end", ["\r\r\n", "\r\r\r\n"])
def test_crlf_through_a_terminal_ends_one_line_however_the_output_is_cut(end: str) -> None:
    """A CRLF written to a terminal becomes CR CR LF (the terminal adds a CR to each LF): one line end, not
    a blank line after each line, which would cut the table and lose its findings."""
    body = "agent_id: bg-1\nstop_reason: blocker\nblocker_type: error\ndetails: |\n  npm ERR\n    at line 3\n"
    text = "Blocked.\n[STOP_WORK]\n" + body + "[/STOP_WORK]\n" + TABLE_REPORT
    data = text.replace("\n", end).encode()
    for cut in range(len(data) + 1):
        signal, report = feed_split(data, cut)
        assert isinstance(signal, SignalItem), (cut, signal)
        assert isinstance(signal.payload, StopWork)
        assert signal.payload.details == "npm ERR\n  at line 3\n"
        assert signal.line == 2
        assert isinstance(report, ResultItem), (cut, report)
        assert report.report.summary == "All checked."
        assert [f.file for f in report.report.findings] == ["src/a.py", "src/b.py"], cut


@pytest.mark.parametrize(
    ("opening", "closing"),
    [
        ("［STOP_WORK］", "［/STOP_WORK］"),  # full-width brackets, as a CJK input method writes them
        ("**［STOP_WORK］**", "［／STOP_WORK］"),  # and a full-width slash
        ("［STOP_WORK］ 被阻止了", "[/STOP_WORK]"),  # a tentative block
    ],
)
def test_full_width_brackets_make_a_tag(opening: str, closing: str) -> None:
    _one_signal_on_line_2_however_cut(opening, closing)


def test_a_full_width_tag_in_prose_or_a_closing_one_alone_is_prose() -> None:
    assert parse_text("我会打印［STOP_WORK］\n" + BODY + "［/STOP_WORK］\n") == []
    assert parse_text("［／STOP_WORK］\n") == []


@pytest.mark.parametrize(("on", "off"), [("", ""), ("\x1b[36m", "\x1b[0m"), ("", "\x1b[0m")])
def test_a_coloured_code_fence_is_a_fence_to_the_scanner_as_to_the_report(on: str, off: str) -> None:
    """A `## ` line in a highlighted code block ends nothing, and its closing fence closes it: a report
    after it is read, however the output is cut."""
    data = (
        "## Auditor Result\n### Status\nSUCCESS\n### Summary\nDone.\n### Details\n"
        f"{on}```bash{off}\n## build step\nmake\n{on}```{off}\n### Confidence\n90 - verified by running make\n"
        "## Reviewer Result\n### Status\nFAILED\n### Summary\nBroken.\n"
    ).encode()
    for cut in range(0, len(data) + 1, 7):
        auditor, reviewer = feed_split(data, cut)
        assert isinstance(auditor, ResultItem) and isinstance(reviewer, ResultItem), (cut, auditor)
        assert auditor.report.confidence is not None and auditor.report.confidence.score == 90
        assert (reviewer.report.agent, reviewer.report.status) == ("Reviewer", ResultStatus.FAILED)
