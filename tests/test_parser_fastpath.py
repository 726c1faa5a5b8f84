"""The parser's shortcut for a whole block against its line-by-line way.

A block whose opening tag, body and closing tag arrive in one piece is taken at once, from its opening
tag straight to its closing tag; fed one byte at a time, the same block goes line by line through the
general scan (each piece holds one line at most, so the shortcut never applies). Both must yield the
same items for any document: blocks with fences, headings and other tags inside, closing tags too long
to be tag lines, bodies at the size limit, errors, reports and prose around them.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.parser import MAX_TAG_LINE, Found, Parser, SignalItem


def _feed(data: bytes, size: int | None, max_block_bytes: int) -> list[Found]:
    parser = Parser(max_block_bytes=max_block_bytes)
    if size is None:
        return parser.feed(data) + parser.close()
    items: list[Found] = []
    for start in range(0, len(data), size):
        items += parser.feed(data[start : start + size])
    return items + parser.close()


_BODY = b"agent_id: p\npercent: 10\n"
FRAGMENTS = [
    b"[PROGRESS]\n" + _BODY + b"[/PROGRESS]\n",
    b"  [PROGRESS]\r\n  agent_id: p\r\n  percent: 20\r\n  [/PROGRESS]  \r\n",
    b"[PROGRESS]\n" + _BODY + b"```\n## Not a heading here\n[/PROGRESS]\n",
    b"[PROGRESS]\n" + _BODY + b"[/STOP_WORK]\n",
    b"[PROGRESS]\n" + _BODY + b"[STOP_WORK]\n",
    b"[PROGRESS]\n" + _BODY,  # unterminated: the next opening tag ends it
    b"[PROGRESS]\n" + _BODY + b"[/PROGRESS]" + b" " * (MAX_TAG_LINE + 1) + b"\n",
    b"[PROGRESS]\n" + _BODY + b"[/PROGRESS]" + b" " * (MAX_TAG_LINE - 12) + b"\n",
    b"[PROGRESS]\n" + _BODY + b"x" * 40 + b"\n[/PROGRESS]\n",
    b"[PROGRESS]\n" + _BODY + b"[STOP_WORK] in the body\n[/PROGRESS]\n",
    b"[PROGRESS] - halfway\n" + _BODY + b"[/PROGRESS]\n",
    b"[PROGRESS] in prose\n",
    b"[PROGRESS]\n" + _BODY + b"## Auditor Result\n### Status\nSUCCESS\n### Summary\nok\n[/PROGRESS]\n",
    b"  [PROGRESS]\n  " + _BODY + b"  ## Auditor Result\n  [/PROGRESS]\n",
    b"[PROGRESS]\n" + _BODY + b"##\tTester Result\n[/PROGRESS]\n",
    b"    [PROGRESS]\n    " + _BODY + b"    ## Tester Result\n    [/PROGRESS]\n",
    b"\t[PROGRESS]\n\t" + _BODY + b"\t## Tester Result\n\t[/PROGRESS]\n",
    b"[PROGRESS]\nagent_id: p\npercent: 500\n[/PROGRESS]\n",
    b"[PROGRESS]\n\xff\xfe\n[/PROGRESS]\n",
    b"[/PROGRESS]\n",
    b"Prose with [PROGRESS] inline.\n",
    b"```\n[PROGRESS]\n" + _BODY + b"[/PROGRESS]\n```\n",
    b"## Explorer Result\n### Status\nSUCCESS\n### Summary\nDone.\n",
    b"## Next\n",
    b"no newline",
    b"\n",
]


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    return b"".join(draw(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), st.sampled_from([24, 60, 64, 80, 1 << 20]))
def test_a_whole_block_gives_what_it_gives_line_by_line(document: bytes, max_block_bytes: int) -> None:
    whole = _feed(document, None, max_block_bytes)
    assert whole == _feed(document, 1, max_block_bytes)
    assert whole == _feed(document, 7, max_block_bytes)


def test_the_shortcut_is_taken_and_agrees_at_the_size_limit() -> None:
    """The limit counts the body from the byte after the opening tag line to its closing tag line."""
    block = b"[PROGRESS]\n" + _BODY + b"[/PROGRESS]\n"
    for limit, signal in ((len(_BODY), True), (len(_BODY) - 1, False)):
        whole = _feed(block * 3, None, limit)
        assert whole == _feed(block * 3, 1, limit)
        assert [isinstance(item, SignalItem) for item in whole] == [signal] * 3
