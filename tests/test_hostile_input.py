"""Hostile output: a clear error item, never a crash, a hang, unbounded memory or a lost neighbour."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents import yamlsafe
from agents.parser import ErrorItem, Found, Parser, ResultItem, SignalItem, parse_text
from agents.report import ReportError, parse_report
from agents.transcript import AnyParser, Format, TranscriptParser
from agents.yamlsafe import DEFAULT_MAX_DEPTH
from bus.envelope import decode, encode, new_envelope
from bus.quoting import quoted

MIB = 1 << 20
CHUNK = 64 * 1024
VALID = b"[PROGRESS]\nagent_id: after\npercent: 50\n[/PROGRESS]\n"


def repeated(line: bytes, total: int) -> Iterator[bytes]:
    """About ``total`` bytes of whole ``line`` copies, as chunks of up to 64 KiB that are all one object."""
    chunk = line * (CHUNK // len(line))
    for _ in range(total // len(chunk)):
        yield chunk


def measure(parser: Parser | TranscriptParser, *parts: Iterable[bytes]) -> tuple[list[Found], int]:
    """Feed every chunk, close, and return the items with the peak of memory allocated meanwhile."""
    items: list[Found] = []
    tracemalloc.start()
    try:
        for part in parts:
            for chunk in part:
                items += parser.feed(chunk)
        items += parser.close()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return items, peak


def message(item: Found) -> str:
    assert isinstance(item, ErrorItem), item
    return item.message


def only_item(items: list[Found]) -> Found:
    assert len(items) == 1, items
    return items[0]


def kinds(items: list[Found]) -> list[str]:
    return [type(i).__name__ for i in items]


@pytest.mark.timeout(10)
def test_a_10_mb_block_is_skipped_as_it_streams() -> None:
    head = [b"prose\n[STOP_WORK]\nagent_id: a\ndetails: |\n"]
    items, peak = measure(
        Parser(), head, repeated(b"  filler text of a runaway block\n", 10 * MIB), [b"[/STOP_WORK]\n" + VALID]
    )
    assert kinds(items) == ["ErrorItem", "SignalItem"]
    assert message(items[0]) == "STOP_WORK block at line 2: larger than 1048576 bytes; skipped"
    assert peak < 3 * MIB


@pytest.mark.timeout(10)
@pytest.mark.parametrize("filler", [b"  filler text of a runaway block\n", b"x" * 1000])
def test_a_10_mb_tentative_block_is_prose_kept_no_further_than_the_limit(filler: bytes) -> None:
    head = [b"[STOP_WORK] - blocked\nagent_id: a\ndetails: "]
    items, peak = measure(Parser(), head, repeated(filler, 10 * MIB), [b"\n[/STOP_WORK]\n" + VALID])
    assert kinds(items) == ["SignalItem"]  # prose: no error, unlike a block that large
    assert peak < 4 * MIB


@pytest.mark.timeout(10)
def test_a_10_mb_line_without_newline_outside_blocks() -> None:
    items, peak = measure(Parser(), [b"start\n"], repeated(b"no newline ever ", 10 * MIB), [b"\n" + VALID])
    assert kinds(items) == ["SignalItem"]
    assert items[0].line == 3
    assert peak < MIB // 2


@pytest.mark.timeout(10)
def test_a_10_mb_line_inside_a_block() -> None:
    head = [b"[STOP_WORK]\nagent_id: a\ndetails: "]
    items, peak = measure(Parser(), head, repeated(b"x", 10 * MIB), [b"\n[/STOP_WORK]\n" + VALID])
    assert kinds(items) == ["ErrorItem", "SignalItem"]
    assert "larger than 1048576 bytes" in message(items[0])
    assert peak < 3 * MIB


@pytest.mark.timeout(10)
def test_a_10_mb_report() -> None:
    head = [b"## Flood Result\n### Status\nSUCCESS\n### Summary\nx\n### Findings\n"]
    body = repeated(b"- a finding line\n#### sub\n| a | b |\n", 10 * MIB)
    items, peak = measure(Parser(), head, body, [VALID])
    assert kinds(items) == ["ErrorItem", "SignalItem"]
    assert message(items[0]) == "result report 'Flood' at line 1: larger than 1048576 bytes; skipped"
    assert peak < 3 * MIB


@pytest.mark.timeout(10)
def test_a_10_mb_jsonl_line() -> None:
    head = orjson.dumps({"type": "user", "message": {"content": [{"type": "tool_result", "content": ""}]}})
    tail = orjson.dumps(
        {"type": "assistant", "message": {"content": [{"type": "text", "text": VALID.decode()}]}}
    )
    items, peak = measure(
        TranscriptParser(max_line_bytes=MIB),
        [head[:-4]],
        repeated(b"x", 10 * MIB),
        [head[-4:] + b"\n" + tail],
    )
    assert kinds(items) == ["ErrorItem", "SignalItem"]
    assert message(items[0]) == "JSONL line 1: longer than 1048576 bytes; skipped"
    assert items[1].line == 2
    assert peak < 3 * MIB


def block(body: str) -> bytes:
    return f"[STOP_WORK]\n{body}\n[/STOP_WORK]\n".encode() + VALID


BILLION_LAUGHS = "\n".join(
    [
        "agent_id: a",
        "stop_reason: error",
        "blocker_type: error",
        'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
        *(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)),
        "details: *l8",
    ]
)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (BILLION_LAUGHS, "aliases expand to more than 1048576 units"),
        ("a: &a [1, *a]", "alias *a refers to no complete anchor (undefined or recursive)"),
        ("a: &a x\n" + "\n".join(f"k{i}: *a" for i in range(60)), "more than 50 aliases"),
        ("a: " + "[" * 200 + "]" * 200, "nested deeper than 32 levels"),
        # libyaml stops at its own limit first; PyYAML's pure-Python parser would reach ours
        (
            "a: " + "[" * 100_000 + "]" * 100_000,
            "exceeded maximum nesting depth|nested deeper than 32 levels",
        ),
        ("".join(f"{'  ' * i}k{i}:\n" for i in range(40)), "nested deeper than 32 levels"),
        ("a: &a " + "[" * 30 + "]" * 30 + "\nb: [[[[*a]]]]", "alias *a nests deeper than 32 levels"),
        ("a: !!python/object/apply:os.system ['touch /tmp/subagent-bus-pwned']", "unsupported tag"),
        ("a: !!binary aGVsbG8=", "unsupported tag"),
        ("agent_id: a\x00b", "unacceptable character U+0000"),
        ("a: 1\na: 2", "duplicate key 'a'"),
        # an integer no envelope could carry: JSON writes it in decimal, over the 4300 digits Python reads
        ("a: !!int 0x" + "f" * 4_000, "is not a valid 'tag:yaml.org,2002:int'"),
        ("a: !!int 0o" + "7" * 5_000, "is not a valid 'tag:yaml.org,2002:int'"),
    ],
)
def test_hostile_yaml_is_an_error_and_the_next_block_parses(body: str, message: str) -> None:
    first, second = parse_text(block(body))
    assert isinstance(first, ErrorItem)
    assert any(part in first.message for part in message.split("|")), first.message
    assert first.message.startswith("STOP_WORK block at line 1: invalid YAML")
    assert isinstance(second, SignalItem)
    assert not Path("/tmp/subagent-bus-pwned").exists()


def test_a_key_yaml_reads_as_no_text_names_a_field_as_written() -> None:
    """``1:``, ``true:`` and ``~:`` are fields "1", "true" and "~" (JSON keys are texts), so ``1:`` beside
    ``"1":`` is a duplicate, and ``1:`` beside ``true:`` (equal in Python) is not."""

    def progress(fields: str) -> bytes:
        return f"[PROGRESS]\nagent_id: a\npercent: 5\n{fields}\n[/PROGRESS]\n".encode()

    [item] = parse_text(progress("1: x\ntrue: y\n~: z\nmeta: {1: a, 1.0: b}"))
    assert isinstance(item, SignalItem)
    extra = item.payload.model_dump(include={"1", "true", "~", "meta"})
    assert extra == {"1": "x", "true": "y", "~": "z", "meta": {"1": "a", "1.0": "b"}}
    first, second = parse_text(progress('meta: {1: a, "1": b}') + VALID)
    assert isinstance(first, ErrorItem) and isinstance(second, SignalItem)
    assert first.message.endswith("duplicate key '1'"), first.message


@pytest.mark.parametrize("number", ["0x" + "f" * 4_000, "0o" + "7" * 5_000])
def test_a_hexadecimal_or_octal_number_too_long_for_decimal_is_text_as_a_decimal_one_is(number: str) -> None:
    for written in (number, "9" * 5_000):
        signal = f"[COMPLETION_REPORT]\nagent_id: a\nstatus: SUCCESS\nsummary: done\nref: {written}\n"
        [item] = parse_text(signal + "[/COMPLETION_REPORT]\n")
        assert isinstance(item, SignalItem), item
        assert item.payload.model_dump()["ref"] == written
        envelope = new_envelope(item.payload, agent_id="a", group_id="g")
        assert decode(encode(envelope)) == envelope


def test_aliases_within_the_limits_are_fine() -> None:
    loaded = yamlsafe.load("base: &b {text: shared}\nquestions: [*b, *b]\n")
    assert loaded == {"base": {"text": "shared"}, "questions": [{"text": "shared"}, {"text": "shared"}]}


def test_invalid_utf8_in_a_block_names_its_line() -> None:
    data = b"prose\n[STOP_WORK]\nagent_id: a\ndetails: caf\xc3\n[/STOP_WORK]\n" + VALID
    first, second = parse_text(data)
    assert isinstance(first, ErrorItem)
    assert first.message == "STOP_WORK block at line 2: invalid UTF-8 at line 4"
    assert isinstance(second, SignalItem)


def test_invalid_utf8_in_prose_is_ignored() -> None:
    data = b"\xff\xfe\x00garbage \x80\x81\n" + VALID + b"more \xc0\xaf prose\n"
    assert kinds(parse_text(data)) == ["SignalItem"]


def test_invalid_utf8_in_a_report_is_replaced_and_named_in_its_violations() -> None:
    data = b"## Broken Result\n### Status\nSUCCESS\n### Summary\nbad \xe2\x28\xa1\n" + VALID
    first, second = parse_text(data)
    assert isinstance(first, ResultItem)  # the rest of the report is worth more than a byte
    assert first.report.summary == "bad \ufffd(\ufffd"
    assert first.report.violations == ["invalid UTF-8 at line 5 (read as U+FFFD)"]
    assert isinstance(second, SignalItem)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "line",
    [
        b"*" * 60,  # a separator: a run the emphasis around a tag could split in exponentially many ways
        b"_" * 60 + b"[STOP_WORK]",
        b"## " + b"*" * 60 + b" " * 4000 + b"x Result",  # a heading tried at every split of its spaces
        b"## " + b" " * 4000 + b"Result",
        b"## Results " + "\u2705".encode() * 1300,  # a heading that may title a report, read back over emoji
        b"# " + b"x" * 4000 + b" Results",
        b"### " + b"x" * 4000 + b" Results",
    ],
)
def test_lines_built_to_make_the_expressions_backtrack_are_read_in_linear_time(line: bytes) -> None:
    assert parse_text((line + b"\n") * 200 + VALID)[-1:] != []


@pytest.mark.timeout(10)
@pytest.mark.parametrize("line_end", [b"\r\r\n", b" \r\n"])
def test_a_long_run_of_spaces_in_a_body_with_crlf_lines_is_read_in_linear_time(line_end: bytes) -> None:
    # the spaces before each CRLF are taken off: an expression that tried every space of the run again
    # took minutes for a body of a megabyte
    body = b"agent_id: a1" + line_end + b" " * 1_000_000 + b"x\n"
    [item] = parse_text(b"[STOP_WORK]\n" + body + b"[/STOP_WORK]\n")
    assert isinstance(item, ErrorItem)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "fields",
    [
        b"x:\n" + b"  - |\n" * 150_000,  # a block scalar's header on every line
        b"details: |\n" + b"\t\t x: y\n" * 100_000 + b"q:\n\t- a\n",  # tabs in and out of a block
        b"details: " + b"- " * 400_000 + b"|\n",
        b"details: a: " + b" " * 200_000 + b"x\n",  # a prose field's spaces, tried from every position
        b"details: a:" + b" " * 200_000 + b"\n",
    ],
)
def test_a_body_the_repairs_read_again_is_read_in_linear_time(fields: bytes) -> None:
    # a prose field makes the body no YAML: it is read again with its prose fields quoted and its tabs
    # made spaces, block scalars' text left as it is
    head = b"agent_id: a\nstop_reason: blocker\nblocker_type: error\nresume_requirements: Run: npm i\n"
    assert parse_text(b"[STOP_WORK]\n" + head + fields + b"[/STOP_WORK]\n") != []


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "extra", ['"a\\nX\\e[31m": 1\n"a\\nX\\e[31m": 2', "x: !x%0AX%1B%5B31m v", "x: !x%0AX%1B%5B31m [1]"]
)
def test_an_error_shows_a_key_or_tag_escaped(extra: str) -> None:
    """A line break or a terminal's escape sequence in a key or a tag reached the error as it was: on the
    terminal, in the log, and in the STOP_WORK details the adapter publishes for the lost signal."""
    first, _ = parse_text(block(f"agent_id: a\nstop_reason: error\n{extra}"))
    assert isinstance(first, ErrorItem)
    assert "\n" not in first.message and "\x1b" not in first.message, first.message
    assert "\\n" in first.message or "\\x1b" in first.message, first.message


def test_duplicate_question_ids_are_named_short() -> None:
    twice = "".join(f"  - question_id: {i}{LONG}\n    text: a\n" * 2 for i in range(5))
    [item] = parse_text(
        f"[CLARIFICATION_NEEDED]\nagent_id: a\nblocked_at: b\nreason: r\nquestions:\n{twice}[/CLARIFICATION_NEEDED]\n"
    )
    assert isinstance(item, ErrorItem)
    assert (
        "question ids must differ: '0999" in item.message
        and "and 2 more are used more than once" in item.message
    )
    assert len(item.message) < 400, item.message[:400]


@pytest.mark.parametrize(
    "section",
    [
        b"- " + b"*" * 100_000 + b"status" + b" " * 100_000,  # a label tried at every split of its spaces
        b"**Summary" + b" " * 200_000 + b"x",
        b"**Status:** " + "\u2705".encode() * 200_000 + b" x",  # a status read past its emoji
        b"- " + "\u2705".encode() * 200_000 + b" **status" + b" " * 200_000 + b"x",  # a label's emoji
        b"### **summary" + b" " * 200_000 + b"** x:",  # a heading's title, its spaces and its label
        b"### " + b"(" * 200_000,  # a section title's parentheses
        b"### Confidence\n85" + b" " * 200_000 + b"x",
        b"### Confidence Justification\n" + b" " * 200_000 + b"x",
        b"### Findings\n| ID | Issue | File:Line | Severity |\n|---|---|---|---|\n| A-1 | x | [a]("
        + b" " * 200_000
        + b"x | high |",  # a location's link
    ],
)
def test_report_lines_built_to_make_the_expressions_backtrack_are_read_in_linear_time(section: bytes) -> None:
    report = b"## QA Result\n" + section + b"\n### Status\nSUCCESS\n### Summary\nok\n"
    [item] = parse_text(report)
    assert isinstance(item, ResultItem)


def test_a_line_number_of_more_digits_than_python_reads_is_no_line() -> None:
    row = "| A-1 | x | a.py:" + "9" * 5_000 + " | high |"
    table = "### Findings\n| ID | Issue | File:Line | Severity |\n|---|---|---|---|\n" + row + "\n"
    [item] = parse_text("## QA Result\n### Status\nSUCCESS\n### Summary\nok\n" + table)
    assert isinstance(item, ResultItem)
    [finding] = item.report.findings
    assert (finding.file, finding.line) == ("a.py", None)


@pytest.mark.timeout(30)  # about 5 s on an idle machine: 10 s was hit on a starved one
def test_a_long_evidence_paragraph_is_read_in_linear_time() -> None:
    # a paragraph grown a line at a time was copied whole for each line: minutes for two million lines
    table = "### Findings\n| ID | Issue | File:Line | Severity |\n|---|---|---|---|\n| SEC-1 | x | a.py:1 | high |\n"
    evidence = "### Evidence\n**SEC-1** found\n" + "\n" * 2_000_000 + "the end\n"
    report = parse_report("## QA Result\n### Status\nSUCCESS\n### Summary\nok\n" + table + evidence)
    [finding] = report.findings
    assert finding.evidence is not None
    assert finding.evidence.startswith("**SEC-1** found\n\n") and finding.evidence.endswith("\nthe end")


@pytest.mark.timeout(10)
def test_an_issue_table_of_many_columns_and_many_short_rows_is_read_in_linear_time() -> None:
    # each row looked its columns up among all the headers again: hours for a megabyte of this
    header = "| Issue | Location | Severity |" + " x |" * 30_000 + "\n|-|\n"
    rows = "| t | a.py:1 | high |\n" * 30_000
    report = parse_report(
        "## QA Result\n### Status\nSUCCESS\n### Summary\nok\n### Findings\n" + header + rows
    )
    assert len(report.findings) == 30_000


@pytest.mark.timeout(10)
def test_a_flood_of_opening_tags() -> None:
    items = parse_text(b"[STOP_WORK]\n" * 20_000)
    assert [message(i) for i in items] == ["STOP_WORK block at line 20000: not terminated (end of input)"]
    # each one before it ends at the next with nothing a signal holds (a tag drawn, not a block): prose
    items = parse_text(b"[STOP_WORK]\nagent_id: a\n" * 20_000)
    assert len(items) == 20_000
    assert all(isinstance(i, ErrorItem) for i in items)
    assert message(items[0]) == "STOP_WORK block at line 1: not terminated before the [STOP_WORK] at line 3"


@pytest.mark.timeout(10)
def test_a_flood_of_fences_and_headings() -> None:
    data = b"```\n## A Result\n### Status\nSUCCESS\n### Summary\ns\n```\n# h\n~~~\n" * 5_000
    items = parse_text(data)
    assert len(items) == 5_000
    assert all(isinstance(i, ResultItem) for i in items)


@pytest.mark.timeout(10)
def test_a_flood_of_sections_that_may_be_reports() -> None:
    data = b"## Results\n### Status\nSUCCESS\n### Summary\nok\n" * 20_000 + b"# Test Results\n" * 50_000
    items = parse_text(data + VALID)
    assert kinds(items) == ["UnreadReportItem"] * 20_000 + ["SignalItem"]


@pytest.mark.timeout(10)
def test_level_1_sections_over_level_2_headings_are_read_in_linear_time() -> None:
    sections = b"# Results\n## Status\nSUCCESS\n## Summary\nok\n" * 5_000
    one = b"# Results\n## Status\nSUCCESS\n## Summary\nok\n" + b"## a\n" * 50_000
    fenced = b"# Results\n## a\n" + b"```\n## X Results\n### Status\nSUCCESS\n### Summary\nok\n```\n" * 5_000
    assert kinds(parse_text(sections + VALID)) == ["UnreadReportItem"] * 5_000 + ["SignalItem"]
    assert kinds(parse_text(one + VALID)) == ["UnreadReportItem", "SignalItem"]
    assert kinds(parse_text(fenced + VALID)) == ["UnreadReportItem"] * 5_000 + ["SignalItem"]


@pytest.mark.timeout(10)
def test_level_3_sections_are_read_in_linear_time() -> None:
    sections = b"### Results\n#### Status\nSUCCESS\n#### Summary\nok\n" * 5_000
    one = b"### Results\n#### Status\nSUCCESS\n#### Summary\nok\n" + b"### a\n" * 50_000
    prose = b"### A heading\ntext\n" * 100_000
    assert kinds(parse_text(sections + VALID)) == ["UnreadReportItem"] * 5_000 + ["SignalItem"]
    assert kinds(parse_text(one + VALID)) == ["UnreadReportItem", "SignalItem"]
    assert kinds(parse_text(prose + VALID)) == ["SignalItem"]


@pytest.mark.timeout(10)
def test_reports_in_fences_before_a_long_output_are_read_in_linear_time() -> None:
    # A report's closing fence is known to close it only at the line after it that shows it; the lines
    # after the fence are then scanned again, which must not copy the rest of the output each time.
    report = b"```markdown\n## A Result\n### Status\nSUCCESS\n### Summary\ns\n```\n"
    items = parse_text(report * 20_000 + b"filler prose line\n" * 300_000 + VALID)
    assert kinds(items) == ["ResultItem"] * 20_000 + ["SignalItem"]


@pytest.mark.timeout(10)
def test_byte_at_a_time_feeding_stays_linear() -> None:
    data = (b"prose line with [STOP_WORK] inside\n" * 2_000) + VALID
    parser = Parser()
    items: list[Found] = []
    for index in range(len(data)):
        items += parser.feed(data[index : index + 1])
    assert kinds(items + parser.close()) == ["SignalItem"]


@pytest.mark.timeout(10)
def test_format_detection_of_a_long_first_line_fed_byte_by_byte() -> None:
    first = orjson.dumps({"type": "user", "message": {"content": "x" * 200_000}}) + b"\n"
    parser = AnyParser()
    for index in range(len(first)):
        assert parser.feed(first[index : index + 1]) == []
    assert parser.format is Format.CLAUDE_JSONL
    blank = AnyParser()
    for _ in range(200_000):
        blank.feed(b" ")
    assert blank.feed(b"[PROGRESS]\n") == []
    assert blank.format is Format.TEXT


_MARKDOWN = st.lists(
    st.sampled_from(
        [
            "### Status", "SUCCESS", "fAiLeD", "### Summary", "text", "### Findings", "#### T", "```", "~~~",
            "```x`", "| ID | Issue | File:Line | Severity | Confidence |", "|---|---|---|---|---|",
            "| a | b | `c:0` | Critical | 1e9 |", "| | |", "|", "- x | Severity: huge", "1. step",
            "  Resolution: r", "### Confidence", "nan - x", "- verified_confidence: 101", "### Error Details",
            "| Recoverable | maybe |", "### Key References", "| Item | Location |", "|--|--|", "| a |",
            "### Confidence Justification", "**Score**: inf", "**SEC-1**", "### Blockers", "- none", "",
            "### Issues", "- : | Severity:", "### Next Steps", "\t", "✓ ✗ \u2028",
        ]
    ),
    max_size=40,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_MARKDOWN)
def test_any_report_text_is_a_report_or_a_report_error(lines: list[str]) -> None:
    text = "## Fuzz Result\n" + "\n".join(lines)
    try:
        report = parse_report(text)
    except ReportError:
        return
    assert report.agent == "Fuzz"
    assert isinstance(only_item(parse_text(text)), ResultItem)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000), st.lists(st.integers(0, 2000), max_size=10))
def test_arbitrary_bytes_never_break_the_parser(data: bytes, cuts: list[int]) -> None:
    tagged = (
        data.replace(b"a", b"\n[STOP_WORK]\n")
        .replace(b"b", b"\n[/STOP_WORK]\n")
        .replace(b"c", b"\n## X Result\n")
        .replace(b"d", b"\n[STOP_WORK] d\n")
    )
    for document in (data, tagged):
        parser = Parser(max_block_bytes=300)
        items: list[Found] = []
        previous = 0
        for cut in [*sorted(c for c in set(cuts) if c <= len(document)), len(document)]:
            items += parser.feed(document[previous:cut])
            previous = cut
        items += parser.close()
        assert items == parse_text(document, max_block_bytes=300)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_percent_or_confidence_that_is_no_finite_number_says_so(value: str) -> None:
    progress = f"[PROGRESS]\nagent_id: a\ntimestamp: 2026-01-01T00:00:00Z\npercent: {value}\n[/PROGRESS]\n"
    [error] = parse_text(progress)
    assert isinstance(error, ErrorItem) and "finite number" in error.message


LONG = "9" * 100_000
"""A value a hundred thousand characters long, where a short one is expected."""
DEEP, DEEP_END = "[" * (DEFAULT_MAX_DEPTH // 2 + 1), "]" * (DEFAULT_MAX_DEPTH // 2 + 1)
"""Two of these nested in each other are deeper than the parser allows."""


@pytest.mark.parametrize(
    "section",
    [
        f"### Confidence\n{LONG}\n",
        f"### Confidence Justification\n**Score**: {LONG}\n",
        f"### Issues (if any)\n- Naming {LONG}: x | Severity: {LONG}\n",
        f"### Findings\n| ID | File | Line | Issue | Severity | Confidence |\n|---|---|---|---|---|---|\n"
        f"| {LONG} | a.py | L{LONG} | {LONG} | {LONG} | {LONG} |\n",
        f"### Error Details\n- Type: x\n- Recoverable: {LONG}\n",
    ],
)
def test_a_violation_repeats_no_long_value(section: str) -> None:
    """What an agent wrote may be a megabyte: a violation that repeated it all (kept on the result, shown
    in `status`) would say no more than its first characters."""
    text = f"## QA Result\n\n### Status\nSUCCESS\n\n### Summary\nDone.\n\n{section}"
    violations = parse_report(text).violations
    assert violations
    assert all(len(v) < 300 for v in violations), [v[:300] for v in violations]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (f"agent_id: a\nstop_reason: error\ntimestamp: {LONG}", "… is a number, not an ISO 8601 timestamp"),
        (f"agent_id: a\nstop_reason: !!int x{LONG}", "… is not a valid 'tag:yaml.org,2002:int'"),
        (f"agent_id: a\nstop_reason: error\n? x{LONG}\n: 1\n? x{LONG}\n: 2", "duplicate key 'x999"),
        (f"agent_id: a\nstop_reason: error\nx: !x{LONG} v", "unsupported tag '!x999"),
        (f"agent_id: a\nstop_reason: error\nx: !x{LONG} [v]", "unsupported tag '!x999"),
        (f"agent_id: a\nstop_reason: error\nx: *x{LONG}", "alias *x999"),
        (
            f"agent_id: a\nstop_reason: error\nx: &x{LONG} {DEEP}1{DEEP_END}\ny: {DEEP}*x{LONG}{DEEP_END}",
            "alias *x999",
        ),
    ],
)
def test_an_error_repeats_no_long_value(body: str, said: str) -> None:
    first, second = parse_text(block(body))
    assert isinstance(first, ErrorItem)
    assert said in first.message
    assert len(first.message) < 400, first.message[:400]
    assert isinstance(second, SignalItem)


def test_a_quoted_value_escapes_what_is_not_printable_and_keeps_a_backslash() -> None:
    assert quoted("a\nb\x1b[31m\u2028") == "'a\\nb\\x1b[31m\\u2028'"
    assert quoted("src\\auth\\login.ts:0") == "'src\\auth\\login.ts:0'"  # a Windows path as written
    assert quoted("é" * 100) == "'" + "é" * 59 + "…'"
