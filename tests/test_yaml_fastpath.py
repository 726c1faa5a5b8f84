"""The fast path of the body loader (``agents.yamlfast``) against the YAML event stream.

Whatever :func:`agents.yamlfast.read` accepts must load to exactly what the safe loader's event stream
builds; what it refuses goes to that loader. The bodies are generated in the shapes the fast path takes
(flat keys, scalars, ``|`` blocks, lists of scalars and of mappings, nested mappings), with the near
misses around them (odd indentation, blank lines, comments, tabs, quotes, flow collections, duplicate
keys), and taken from every signal example of the protocol's specification.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents import yamlfast, yamlsafe

DATA = Path(__file__).parent / "data"

_SAFE = "abcxyz ABC0123456789.✓→é/()"
_TRICKY = ":#-|>'\"[]{},!&*?%@`~\\/ \t\r\x85\ufeff"
# plain scalars the core schema reads as something else than text, or only just as text
_SPECIAL = ["true", "no", "on", "~", "null", "NULL", "12", "+4", "0o17", "0x1F", "1e3", ".5", "5.", ".inf"]
_SPECIAL += [".nan", "1:30", "2026-01-11", "2026-01-11T09:15:00-05:00", "007", "1_000", "0b11", "1e400"]
_SPECIAL += ["9" * 5000]
_NEAR = ["-3", "-.INF", "x: y", "x #y", "x:", "-", "- x", "|-", ">", "'q'", "[a]", "&a x", "*a", "!!str 3"]
_KEYS = ["agent_id", "details", "text", "questions", "options", "context", "x1", "a", "_k", "B_2"]
_NOT_TEXT_KEYS = ["true", "null", "False"]
_LONG_KEYS = ["k" * 1024, "k" * 1025]  # the longest simple key the loader reads, and one over

# A body is drawn either ``clean``, in the shapes the fast path reads and nothing else, or with near
# misses anywhere (the loader's business, or its errors).


def _text(clean: bool, size: int = 14) -> st.SearchStrategy[str]:
    plain = st.text(st.sampled_from(_SAFE), min_size=1, max_size=size)
    if clean:
        return plain.map(lambda t: t.strip(" ")).filter(bool)
    pick = st.one_of(*[st.sampled_from(_SAFE)] * 4, st.sampled_from(_TRICKY))
    return st.one_of(plain, plain, st.lists(pick, max_size=size).map("".join))


def _scalar(clean: bool) -> st.SearchStrategy[str]:
    if clean:
        return st.one_of(_text(clean), _text(clean), st.sampled_from(_SPECIAL))
    return st.one_of(_text(clean), _text(clean), st.sampled_from(_SPECIAL + _NEAR))


@st.composite
def _literal(draw: st.DrawFn, column: int, clean: bool) -> list[str]:
    """The lines of a ``|`` block of a key at ``column`` (``clean``: indented right)."""
    indent = column + draw(st.sampled_from([1, 2, 2, 4]))
    lines = [" " * indent + draw(_text(clean=True))] if clean else []
    for _ in range(draw(st.integers(0, 4))):
        shape = draw(st.integers(0, 9))
        if shape == 0:
            lines.append(" " * draw(st.integers(0, indent if clean else indent + 2)))
        elif shape == 1 and not clean:
            lines.append(" " * draw(st.integers(0, indent + 2)) + draw(_text(clean, 8)))
        else:
            lines.append(" " * (indent + draw(st.sampled_from([0, 0, 0, 2]))) + draw(_text(clean, 10)))
    return lines


@st.composite
def _mapping(draw: st.DrawFn, column: int, depth: int, clean: bool) -> list[str]:
    """The lines of a block mapping whose keys sit at ``column``."""
    names = st.sampled_from(_KEYS) if clean else st.sampled_from(_KEYS * 3 + _NOT_TEXT_KEYS + _LONG_KEYS)
    keys = draw(st.lists(names, min_size=1, max_size=4, unique=clean or draw(st.integers(0, 5)) > 0))
    lines: list[str] = []
    for key in keys:
        lines += draw(_entry(key, column, depth, clean))
    return lines


@st.composite
def _entry(draw: st.DrawFn, key: str, column: int, depth: int, clean: bool) -> list[str]:
    pad = " " * column
    shape = draw(st.integers(0, 9 if depth < 4 else 5))
    if shape <= 3:
        gap = draw(st.sampled_from([" "] * 8 + ["  "] + ([] if clean else [""])))
        trail = draw(st.sampled_from(["", "", "", " ", "  "]))
        return [f"{pad}{key}:{gap}{draw(_scalar(clean))}{trail}"]
    if shape <= 5:
        return [f"{pad}{key}: |", *draw(_literal(column, clean))]
    if shape == 6:
        return [f"{pad}{key}:"]
    if shape == 7:
        inner = column + draw(st.sampled_from([1, 2, 4]))
        return [f"{pad}{key}:", *draw(_mapping(inner, depth + 1, clean))]
    inner = column + draw(st.sampled_from([0, 0, 1, 2, 2, 4]))
    return [f"{pad}{key}:", *draw(_sequence(inner, depth + 1, clean))]


@st.composite
def _sequence(draw: st.DrawFn, column: int, depth: int, clean: bool) -> list[str]:
    """The lines of a block sequence whose ``-`` sit at ``column``: scalars, mappings, or both."""
    pad = " " * column
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            dash = "- " if clean else draw(st.sampled_from(["- ", "- ", "- ", "-  ", "-"]))
            lines.append(f"{pad}{dash}{draw(_scalar(clean))}")
            continue
        first, *rest = draw(_mapping(column + 2, depth + 1, clean))
        lines += [f"{pad}- {first[column + 2 :]}", *rest]
    return lines


_NOISE = ["", "   ", "# a comment", "---", "...", "\t", "key: 'quoted'", 'key: "quoted"', "key: [a, b]"]
_NOISE += ["key: {a: 1}", "key: &anchor x", "key: *anchor", "key: !!str 3", "  stray", "- stray", "key: |-"]


@st.composite
def bodies(draw: st.DrawFn, clean: bool = False) -> str:
    """A body in the shapes of the fast path; unless ``clean``, now and then with a line that leaves
    them."""
    lines = draw(_mapping(0, 1, clean))
    if not clean and draw(st.integers(0, 5)) == 0:
        at = draw(st.integers(0, len(lines)))
        lines.insert(at, draw(st.one_of(st.sampled_from(_NOISE), _text(clean, 12))))
    return "\n".join(lines) + "\n"


def _agrees(body: str) -> bool:
    """The fast path agrees with the event stream on ``body``; whether it took it."""
    fast = yamlfast.read(body)
    try:
        expected = yamlsafe.load_events(body)
    except yamlsafe.YamlError:
        assert fast is None, f"the fast path read {fast!r} where the loader refuses"
        with pytest.raises(yamlsafe.YamlError):
            yamlsafe.load(body)
        return False
    if fast is not None:
        assert repr(fast) == repr(expected)  # repr: nan == nan, and 1 != True
    assert repr(yamlsafe.load(body)) == repr(expected)
    return fast is not None


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
def test_the_fast_path_agrees_with_the_yaml_event_stream(body: str) -> None:
    _agrees(body)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies(clean=True))
def test_the_fast_path_reads_every_body_of_its_shapes(body: str) -> None:
    """So the property above is not vacuous: the bodies it draws cleanly all take the fast path."""
    assert _agrees(body), body


_TAGS = "CLARIFICATION_NEEDED|STOP_WORK|DELEGATE_WORK|COMPLETION_REPORT|PROGRESS"
_BLOCK = re.compile(rf"^([ \t]*)\[({_TAGS})\][ \t]*\n(.*?)^\1\[/\2\]", re.MULTILINE | re.DOTALL)


def _seed_bodies() -> list[tuple[int, str]]:
    """(line, dedented body) of every signal block of seed 000 (a verbatim copy in tests/data)."""
    text = (DATA / "seed_000_signals.md").read_text()
    found = []
    for m in _BLOCK.finditer(text):
        indent = len(m.group(1))
        body = re.sub(rf"(?m)^[ \t]{{1,{indent}}}", "", m.group(3)) if indent else m.group(3)
        found.append((text.count("\n", 0, m.start()) + 1, body))
    return found


def test_every_signal_of_the_specification_loads_the_same_and_the_usual_ones_fast() -> None:
    bodies = _seed_bodies()
    assert len(bodies) == 12
    slow = {line for line, body in bodies if not _agrees(body)}
    # the only two the fast path leaves to the loader hold flow sequences: ``completed_work: [...]``
    assert slow == {642, 698}
    assert all("[" in body for line, body in bodies if line in slow)


def test_a_list_of_questions_is_read_by_the_fast_path() -> None:
    body = (
        "agent_id: bg-1\n"
        "questions:\n"
        "  - question_id: Q1\n"
        "    text: OAuth2, JWT, or both?\n"
        "    options:\n"
        "    - OAuth2\n"
        "    - 2\n"
        "  - question_id: Q2\n"
        "    context: |\n"
        "      one\n"
        "\n"
        "      two\n"
        "files:\n"
        "- a.py\n"
        "- b.py\n"
        "empty:\n"
        "nested:\n"
        "   k: v\n"
    )
    fast = yamlfast.read(body)
    assert fast == {
        "agent_id": "bg-1",
        "questions": [
            {"question_id": "Q1", "text": "OAuth2, JWT, or both?", "options": ["OAuth2", 2]},
            {"question_id": "Q2", "context": "one\n\ntwo\n"},
        ],
        "files": ["a.py", "b.py"],
        "empty": None,
        "nested": {"k": "v"},
    }
    assert fast == yamlsafe.load_events(body)


@pytest.mark.parametrize(
    "body",
    [
        "a: 1\na: 2\n",  # duplicate key: the loader's error
        "q:\n  - k: 1\n    k: 2\n",
        "a: b: c\n",
        "a:\n  b\n  c\n",  # a multi-line plain scalar
        "a: x\n  y\n",
        "a:\n  - x\n   - y\n",
        "true: 1\n",  # not a text key
        "a: 1",  # no final newline
        "a: 1\n\nb: 2\n",
        "a: 1 # comment\n",
        "a: |\n\n  x\n",
        "a: |\nb: 1\n",
        "k" * 1025 + ": x\n",  # a key longer than the loader's simple keys
        "a: b\n" + "k" * 1025 + ": |\n  text\n",
        "q:\n  - " + "k" * 1025 + ": x\n",
    ],
)
def test_the_fast_path_leaves_other_shapes_to_the_loader(body: str) -> None:
    assert yamlfast.read(body) is None
    _agrees(body)


def test_the_fast_path_reads_a_key_as_long_as_the_loaders() -> None:
    body = "k" * 1024 + ": x\n"
    assert yamlfast.read(body) == {"k" * 1024: "x"}
    _agrees(body)


def test_the_fast_path_keeps_the_depth_limit() -> None:
    body = "a:\n  b:\n    c:\n      - 1\n"
    assert yamlfast.read(body) == {"a": {"b": {"c": [1]}}}
    assert yamlfast.read(body, max_depth=3) is None
    with pytest.raises(yamlsafe.YamlError, match="nested deeper than 3"):
        yamlsafe.load(body, max_depth=3)


def test_the_printable_check_refuses_what_the_pattern_refuses() -> None:
    """ASCII text is checked with ``str.isprintable``: it must refuse exactly the characters the pattern
    refuses, in ASCII text and in any other."""
    for code in [*range(0x3000), 0x2028, 0x2029, 0xFEFF, 0xFFFE, 0xFFFF, 0x1F600]:
        for text in (f"a: {chr(code)}\n", f"a: é{chr(code)}\n"):
            assert yamlfast._printable(text) == (yamlfast._NOT_SIMPLE.search(text) is None), hex(code)
