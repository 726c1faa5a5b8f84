"""Opening tags with text after them on their line: a block when its own closing tag and a body of the
signal's fields follow, prose otherwise, and nothing after such a line is lost either way."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parser import documents, feed_split

from agents.parser import ErrorItem, Found, Parser, ResultItem, SignalItem, parse_text
from bus.envelope import EnvelopeType
from bus.signals import ClarificationNeeded, StopWork

BODY = "agent_id: bg-1\nstop_reason: blocker\nblocker_type: missing_info\ndetails: npm registry unreachable\n"
STOP = f"[STOP_WORK]\n{BODY}[/STOP_WORK]\n"
REPORT = "## Code Explorer Result\n\n### Status\nSUCCESS\n\n### Summary\nTraced the login flow.\n"


def tentative(line: str, body: str = BODY, closing: str = "[/STOP_WORK]") -> str:
    return f"{line}\n{body}{closing}\n"


def kinds(items: list[Found]) -> list[tuple[str, int]]:
    return [(type(i).__name__, i.line) for i in items]


@pytest.mark.parametrize(
    "line",
    [
        "[STOP_WORK] - blocked on npm",
        "[STOP_WORK]: the registry is down",
        "**[STOP_WORK]** blocked",
        "**[STOP_WORK] now**",
        "\x1b[1m[STOP_WORK]\x1b[0m x",
        "[STOP_WORK] [/STOP_WORK] is not a body",
    ],
)
def test_an_opening_tag_with_text_after_it_opens_a_block_that_its_closing_tag_confirms(line: str) -> None:
    text = "Blocked.\n" + tentative(line)
    (item,) = parse_text(text)
    assert isinstance(item, SignalItem) and isinstance(item.payload, StopWork)
    assert item.payload.details == "npm registry unreachable"  # the text after the tag is not the body
    assert item.payload.model_extra == {}
    assert (item.line, item.offset) == (2, len("Blocked.\n"))


def test_a_tentative_block_is_read_as_any_block_indented_or_fenced() -> None:
    asked = (
        "  [CLARIFICATION_NEEDED] Need input on the schema\n  ```yaml\n  agent_id: bg-2\n  blocked_at: db/\n"
        "  reason: two schemas\n  questions:\n    - Which one?\n  ```\n  **[/CLARIFICATION_NEEDED]**\n"
    )
    (item,) = parse_text("- status:\n" + asked.replace("\n", "\r\n"))
    assert isinstance(item, SignalItem) and isinstance(item.payload, ClarificationNeeded)
    assert [q.text for q in item.payload.questions] == ["Which one?"]
    assert (item.line, item.offset) == (2, len("- status:\n  "))


def test_a_tentative_block_whose_closing_tag_has_text_after_it_is_prose() -> None:
    """Text after both tags is how prose names them; the closing tag of a signal stands alone."""
    assert parse_text(tentative("[STOP_WORK] - blocked on npm", closing="[/STOP_WORK] closes it.")) == []
    cheat_sheet = (
        "**[STOP_WORK]** - cannot proceed. Example:\n```yaml\n" + BODY + "```\n"
        "**[/STOP_WORK]** ends it; the parent resumes me.\n"
    )
    assert parse_text(cheat_sheet) == []


@pytest.mark.parametrize(
    "body",
    [
        "agent_id: bg-1\ndetails: npm\n",  # fields, but not a valid signal
        "agent_id: a\ndetails: [unclosed\n",
        '{"signal_type": "STOP_WORK", "payload": []}\n',
        "agent_id: <your agent id>\ndetails: <why you stopped>\n",
    ],
)
def test_a_closed_tentative_block_that_is_no_valid_signal_is_prose(body: str) -> None:
    """An error would block the agent, for what may be prose explaining the protocol with made-up fields;
    the same body after a tag alone on its line is an error."""
    assert parse_text("To stop, I print this:\n" + tentative("[STOP_WORK] opens the block, then", body)) == []
    (error,) = parse_text(tentative("[STOP_WORK]", body))
    assert isinstance(error, ErrorItem) and error.type is EnvelopeType.STOP_WORK


@pytest.mark.parametrize(
    "body",
    [
        "",
        "and a closing tag ends it:\n",
        "Fields:\n- agent_id: who you are\n- details: why\n",  # a list of them, not the fields
        "Agent_ID: bg-1\n",
        "agent_id: <agent-id>\ntimestamp: <ISO-8601>\ndetails: <why>\n",  # the template, quoted
    ],
)
def test_a_closed_tentative_block_of_prose_or_a_template_is_nothing(body: str) -> None:
    text = "[STOP_WORK] opens a block\n" + body + "[/STOP_WORK] closes it.\n" + STOP
    assert kinds(parse_text(text)) == [("SignalItem", text.count("\n") - 5)]


@pytest.mark.parametrize(
    ("mention", "what"),
    [
        ("[STOP_WORK] is what I print when blocked.\n", "nothing else"),
        ("[STOP_WORK] blocks look like this:\nprose\n```\ncode\n```\n", "a fence"),
        ("[STOP_WORK] is printed\nand [/STOP_WORK] ends it\n", "an inline closing tag"),
        ("[PROGRESS] is sent on the way\n[/STOP_WORK] ends a stop\n", "a closing tag of another type"),
        ("[STOP_WORK] is printed\n" + "## Notes\n# Title\n", "headings that start no report"),
    ],
)
def test_a_prose_mention_hides_no_signal_after_it(mention: str, what: str) -> None:
    for signal in (STOP, tentative("[STOP_WORK] - blocked on npm")):
        items = parse_text("Plan:\n" + mention + signal)
        assert kinds(items) == [("SignalItem", 2 + mention.count("\n"))], what


def test_a_prose_mention_hides_no_report_after_it() -> None:
    text = "[STOP_WORK] is printed when blocked;\nI was not.\n" + REPORT + STOP
    assert kinds(parse_text(text)) == [("ResultItem", 3), ("SignalItem", 10)]


@pytest.mark.parametrize(
    "after",
    [
        "[/PROGRESS]\n",  # a closing tag of another type
        "[PROGRESS] also\n",  # another opening tag
        "[PROGRESS]\nagent_id: p\npercent: 5\n[/PROGRESS]\n",
        "## Code Explorer Result\n### Status\nFAILED\n### Summary\nNo.\n",  # a report's heading
    ],
)
def test_anything_else_before_its_closing_tag_makes_it_prose_and_is_read_itself(after: str) -> None:
    text = tentative("[STOP_WORK] x", BODY + after)
    items = parse_text(text)
    assert all(not isinstance(i, SignalItem) or i.type is EnvelopeType.PROGRESS for i in items)
    expected = parse_text(after)  # what comes after the mention, read on its own
    assert [(type(i), i.line - 5, i.offset - len("[STOP_WORK] x\n" + BODY)) for i in items] == [
        (type(i), i.line, i.offset) for i in expected
    ]


def test_a_tentative_block_still_open_at_the_end_of_input_is_prose() -> None:
    parser = Parser()
    assert parser.feed(tentative("[STOP_WORK] - blocked", BODY, "").encode()) == []
    assert parser.close() == []


def test_a_tentative_block_over_the_size_limit_is_prose_and_what_follows_is_read() -> None:
    filler = "  line of filler text\n" * 40
    text = tentative("[STOP_WORK] x", BODY + "details_more: |\n" + filler) + STOP
    items = parse_text(text, max_block_bytes=512)
    assert kinds(items) == [("SignalItem", text.count("\n") - 5)]  # no error, unlike a block over it
    assert feed_split(text.encode(), list(range(0, len(text), 37)), max_block_bytes=512) == items
    exact = tentative("[STOP_WORK] x")
    for limit, expected in ((len(BODY), "SignalItem"), (len(BODY) - 1, None)):
        assert [type(i).__name__ for i in parse_text(exact, max_block_bytes=limit)] == [expected] * bool(
            expected
        )


def test_inside_a_report_a_tentative_signal_ends_it_and_a_mention_is_part_of_it() -> None:
    report, signal = parse_text(REPORT + tentative("[STOP_WORK] - blocked on npm"))
    assert isinstance(report, ResultItem) and report.report.summary == "Traced the login flow."
    assert isinstance(signal, SignalItem) and signal.line == 8
    mention = REPORT + "[STOP_WORK] was not needed.\nAll paths traced.\n\n### Next Steps\n1. ship\n"
    (item,) = parse_text(mention)
    assert isinstance(item, ResultItem)
    assert item.report.summary == "Traced the login flow.\n[STOP_WORK] was not needed.\nAll paths traced."
    assert item.report.next_steps == ["ship"]


def test_inside_a_block_a_tag_with_text_after_it_is_a_line_of_the_body() -> None:
    body = "agent_id: bg-1\nstop_reason: error\nblocker_type: error\ndetails: |\n  [STOP_WORK] earlier\n"
    (item,) = parse_text(f"[STOP_WORK]\n{body}[/STOP_WORK]\n")
    assert isinstance(item, SignalItem) and isinstance(item.payload, StopWork)
    assert item.payload.details == "[STOP_WORK] earlier\n"


def test_inline_mentions_quotes_code_and_headings_stay_prose() -> None:
    for line in (
        "I will emit [STOP_WORK] if blocked",
        "> [STOP_WORK] x",
        "`[STOP_WORK]` x",
        "## [STOP_WORK] x",
    ):
        assert parse_text(tentative(line)) == [], line


def test_a_report_in_a_markdown_fence_and_tentative_lines_after_its_ambiguous_fence() -> None:
    # the bare fence after the report may close the outer fence or open code inside the report: the
    # tentative signal that follows shows it closed it, a mention leaves it undecided
    fenced = "```markdown\n" + REPORT + "```\n"
    report, signal = parse_text(fenced + tentative("[STOP_WORK] - blocked"))
    assert isinstance(report, ResultItem) and isinstance(signal, SignalItem)
    (alone,) = parse_text(fenced + "[STOP_WORK] is printed\nwhen blocked\n```\n")
    assert isinstance(alone, ResultItem) and "when blocked" in alone.report.summary


# Fragments of agent output around tentative blocks; the items must be the same for every way of cutting a
# document made of them (the rescans of a tentative block's lines included).
FRAGMENTS = [
    b"Working on it.\n",
    b"[STOP_WORK] - blocked on npm\n" + BODY.encode() + b"[/STOP_WORK]\n",
    b"[STOP_WORK] is what I print when blocked.\n",
    b"**[PROGRESS]** halfway\nagent_id: p\npercent: 50\n[/PROGRESS]\n",
    b"[PROGRESS] x\nagent_id: p\npercent: 5\n[/PROGRESS] more soon\n",  # prose: text after both tags
    b"[STOP_WORK] x\nagent_id: a\n[/STOP_WORK]\n",  # prose: no valid signal
    b"[STOP_WORK] opens\n[/STOP_WORK] closes\n",
    b"[/PROGRESS] stray\n",
    STOP.encode(),
    STOP.replace("\n", "\r\n").encode(),
    REPORT.encode(),
    ("```markdown\n" + REPORT + "```\n").encode(),
    b"```\n",
    b"## Notes\n",
    b"  [STOP_WORK] indented text\n  agent_id: i\n  stop_reason: error\n  blocker_type: error\n  details: d\n",
    b"filler line of text\n" * 6,
    b"no newline",
    b"[STOP_WORK]\nagent_id: a\n",  # unterminated: a block that ignores the tentative lines after it
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(FRAGMENTS), st.sampled_from([64, 160, 1 << 20]))
def test_chunking_never_changes_the_items_of_tentative_blocks(
    document: tuple[bytes, list[int]], max_block_bytes: int
) -> None:
    data, cuts = document
    assert feed_split(data, cuts, max_block_bytes) == feed_split(data, [], max_block_bytes)


def test_byte_by_byte_feeding_of_tentative_blocks() -> None:
    data = b"".join(FRAGMENTS)
    whole = feed_split(data, [])
    assert feed_split(data, list(range(len(data)))) == whole
    assert kinds(whole) == [
        ("SignalItem", 2), ("SignalItem", 9), ("SignalItem", 23), ("SignalItem", 29), ("ResultItem", 35),
    ]  # fmt: skip


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "unit",
    [
        b"[STOP_WORK] x\n",  # each line ends the one before it
        b"[STOP_WORK] x\nprose\n[/STOP_WORK] y\n",  # each closed, prose
        b"[STOP_WORK] x\nagent_id: a\n[/PROGRESS] y\n",  # each ended by another type
        b"## A Result\n### Status\nSUCCESS\n### Summary\ns\n[STOP_WORK] x\n",  # each in a report
    ],
)
def test_a_flood_of_tentative_lines_is_read_in_linear_time(unit: bytes) -> None:
    # Each is decided by a line after it and its lines are scanned again: neither they nor the long output
    # after them may be scanned or copied again for every one.
    items = parse_text(unit * 20_000 + b"filler prose line\n" * 600_000 + STOP.encode())
    assert isinstance(items[-1], SignalItem)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("unit", [b"```\n", b"  ```\n", b"  ## h\n"])  # fences; a heading in a block scalar
def test_lines_of_a_tentative_body_that_decide_nothing_are_read_in_linear_time(unit: bytes) -> None:
    # Each looked at whether it decides the block: the lines since those kept were copied for each (2 MB
    # of fences took 15 s, 3.2 MB 33 s).
    items = parse_text(b"[STOP_WORK] - blocked\n" + unit * (2_000_000 // len(unit)) + STOP.encode())
    assert isinstance(items[-1], SignalItem)


@pytest.mark.timeout(10)
def test_a_flood_of_tentative_lines_fed_byte_by_byte_is_read_in_linear_time() -> None:
    data = b"[STOP_WORK] x\nagent_id: a\n" * 2_000 + STOP.encode()
    parser = Parser()
    items: list[Found] = []
    for index in range(len(data)):
        items += parser.feed(data[index : index + 1])
    assert kinds(items + parser.close()) == [("SignalItem", 4_001)]


@pytest.mark.parametrize("fenced", [False, True])
def test_a_tentative_line_in_a_report_does_not_hold_the_report_back(fenced: bool) -> None:
    """A heading of level 1 or 2 as far left as the tag line cannot be in a YAML body: it decides the
    tentative block as prose, and the report is published when its end is read, not when the agent ends."""
    report = (
        "## Security Auditor Result\n\n### Status\nSUCCESS\n\n### Summary\nNo issues found.\n\n### Issues\n"
        "[STOP_WORK] was not needed: all dependencies were present.\n\n## Notes for the parent\nWatching.\n"
    )
    in_fence = (
        "```markdown\n## Security Auditor Result\n\n### Status\nSUCCESS\n\n### Summary\nNo issues found.\n```\n"
        "[COMPLETION_REPORT] comes next, once the parent confirms.\n\n# Waiting\nIdle until resumed.\n"
    )
    parser = Parser()
    items = parser.feed((in_fence if fenced else report).encode())
    assert [type(i).__name__ for i in items] == ["ResultItem"]
    assert parser.close() == []


@pytest.mark.parametrize(
    "scalar",
    ["  ## Security Audit Result\n", "  # Notes\n"],
)
def test_headings_inside_a_block_scalar_are_its_body(scalar: str) -> None:
    body = BODY.replace(
        "details: npm registry unreachable\n", "details: |\n" + scalar + "  node_modules is missing\n"
    )
    assert body != BODY
    (item,) = parse_text(tentative("[STOP_WORK] - blocked on npm", body))
    assert isinstance(item, SignalItem) and isinstance(item.payload, StopWork)
    assert item.payload.details.startswith(scalar.strip())


@pytest.mark.timeout(10)
def test_tag_lines_deeper_and_deeper_are_read_in_linear_time() -> None:
    """Were a deeper tag line a line of the body before it, each would keep all the ones after it, and
    each would be scanned again for every one before it (2 MB: 47 s)."""
    deeper = b"".join(b" " * i + b"[STOP_WORK] x\n" for i in range(2000))
    assert kinds(parse_text(deeper + STOP.encode())) == [("SignalItem", 2001)]
