"""``findings add`` and ``adapter import-findings`` against a real Redis."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from adapter_kit import CLI
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from agents.adapter import MARK_TTL_S
from agents.findings_add import MAX_INPUT_BYTES, add
from agents.findings_import import MAX_BAD_SHOWN, MAX_LINE_BYTES, import_findings, parse_findings
from agents.findings_parse import finding_of
from agents.json_keys import keys_given_twice, may_give_twice
from bus.embedded import RedisProcess
from bus.envelope import MAX_ENVELOPE_BYTES, Envelope, EnvelopeType, decode, deterministic_id
from bus.findings import MAX_LINE, Finding, Severity
from bus.keys import Keys, StreamKind

GROUP = "g-findings"
STREAM = Keys("sbus", 8).stream(Keys("sbus", 8).shard_of(GROUP), StreamKind.SIGNALS)


def published(url: str) -> list[Envelope]:
    client = redis.Redis.from_url(url)
    try:
        reply: Any = client.xrange(STREAM)
        return [decode(fields[b"data"]) for _, fields in reply]
    finally:
        client.close()


def run_add(url: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(
        add, ["--redis-url", url, "--agent-id", "sec-1", "--group", GROUP, *args], input=input
    )


def run_import(url: str, path: Path, *args: str) -> Result:
    return CliRunner().invoke(import_findings, ["--redis-url", url, str(path), "--group", GROUP, *args])


def line(**fields: Any) -> str:
    return orjson.dumps(fields).decode()


def test_parse_findings_forms() -> None:
    one = line(id="SEC-001", title="Hardcoded key", file="a.py", line=3, severity="HIGH")
    assert [f.severity for f in parse_findings(one, "x")[0]] == [Severity.HIGH]
    array = "[" + one + "," + line(title="second") + "]"
    findings, errors = parse_findings(array, "x")
    assert errors == []
    assert [f.agent for f in findings] == ["x", "x"]
    assert findings[0].category == "SEC"
    pretty = orjson.dumps({"title": "pretty", "agent": "other"}, option=orjson.OPT_INDENT_2).decode()
    assert [f.agent for f in parse_findings(pretty, "x")[0]] == ["other"]
    _, errors = parse_findings(f"{one}\n\n{line(file='b.py')}\nnot json\n[1]\n", "x")
    assert errors[0] == "line 3: field 'title': Field required"
    assert (
        errors[1] == "line 4: not JSON (invalid literal, expected 'null' at column 1)"
    )  # not the decoder's "line 1"
    assert errors[2] == "line 5: not a JSON object but list"


def test_a_location_and_a_description_stand_for_file_line_and_title() -> None:
    text = "\n".join(
        [
            line(id="SEC-001", title="Hardcoded secret", location="src/config/jwt.ts:8"),
            line(id="SEC-002", description="Verbose errors", location="`src/a.ts:12:5`", line=14),
            line(id="SEC-003", title="Whole file", location="src/b.ts"),
            line(id="SEC-004", title="Title", description="More words"),
            line(id="SEC-005", title="Both", file="c.ts", location="d.ts:1"),
            line(id="SEC-006", title="Prose", location="the login handler"),
            line(id="SEC-007", title="Blank file", file=" ", location="src/e.ts:3"),  # a blank one is none
            line(id="SEC-008", title="Same file", file="f.ts", location="f.ts:9"),
            line(id="SEC-009", title="Spelt otherwise", file="./g.ts", location="g.ts:2"),  # one file
        ]
    )
    findings, errors = parse_findings(text, "x")
    assert [(f.id, f.title, f.file, f.line) for f in findings] == [
        ("SEC-001", "Hardcoded secret", "src/config/jwt.ts", 8),
        ("SEC-002", "Verbose errors", "src/a.ts", 14),  # a line of its own wins
        ("SEC-003", "Whole file", "src/b.ts", None),
        ("SEC-007", "Blank file", "src/e.ts", 3),
        ("SEC-008", "Same file", "f.ts", 9),
        ("SEC-009", "Spelt otherwise", "g.ts", 2),
    ]
    assert errors == [  # `findings add` refuses what is no finding's field
        "line 4: field 'description': Extra inputs are not permitted",
        "line 5: location: 'd.ts:1' is not in the file 'c.ts': give one of them",
        "line 6: location: 'the login handler' names no file (a path, and its line: src/a.ts:8)",
    ]


def test_a_blank_agent_or_category_is_none_given() -> None:
    (finding,), errors = parse_findings(line(id="SEC-9", title="t", agent="   ", category=" \t"), "auditor")
    assert errors == []
    assert (finding.agent, finding.category) == ("auditor", "SEC")
    assert Finding(title="t", agent="  ", category="  ").model_dump(include={"agent", "category"}) == {
        "agent": "",
        "category": "general",
    }


@pytest.mark.parametrize("place", ["src/a.py:0", "src/a.py:99999999999999999999", "src/a.py#L0"])
def test_a_location_whose_line_no_file_has_is_an_error_not_a_line_dropped(place: str) -> None:
    findings, errors = parse_findings(line(title="t", location=place), "x")
    assert findings == []
    assert errors == [f"finding 1: location: '{place}' names no line (lines are 1 to {MAX_LINE})"]


def test_fields_that_are_no_findings_can_be_left_out_and_named() -> None:
    ignored: list[str] = []
    value = {"id": "SEC-002", "title": "No rate limit", "location": "src/api/auth.ts:45", "cwe": "CWE-307"}
    finding = finding_of({**value, "severity": "Critical", "confidence": "95", "group_id": "g"}, "x", ignored)
    assert (finding.file, finding.line, finding.severity, finding.confidence) == (
        "src/api/auth.ts",
        45,
        Severity.CRITICAL,
        95,
    )
    assert ignored == ["cwe"]
    with pytest.raises(ValueError, match="field 'cwe': Extra inputs are not permitted"):
        finding_of(value, "x")


def test_import_reads_the_findings_agents_write_and_names_what_it_left_out(
    redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "SECURITY_FINDINGS.jsonl"
    rows = [
        line(id="SEC-001", title="Hardcoded JWT secret", file="src/config/jwt.ts", line=8, agent="security-auditor"),
        line(id="SEC-001", title="Hardcoded JWT secret", location="src/config/jwt.ts:8", agent="qa-engineer"),
        line(id="SEC-002", title="No rate limit", file="src/api/auth.ts", line=45, severity="Critical",
             confidence="95", agent="security-auditor", cwe="CWE-307"),
        line(id="SEC-003", description="Verbose error messages", file="src/services/auth.ts", line=89,
             agent="security-auditor", cwe="CWE-209", references=["https://cwe.mitre.org"]),
    ]  # fmt: skip
    path.write_text("\n".join(rows) + "\n")
    result = run_import(redis_url, path)
    assert result.exit_code == 0, result.output
    assert "imported 4 finding(s); 0 bad line(s)" in result.output
    assert "left out fields that are not a finding's: 'cwe' (2 lines), 'references' (1 line)" in result.output
    findings = [e.payload for e in published(redis_url) if isinstance(e.payload, Finding)]
    assert [(f.id, f.title, f.file, f.line, f.agent) for f in findings] == [
        ("SEC-001", "Hardcoded JWT secret", "src/config/jwt.ts", 8, "security-auditor"),
        ("SEC-001", "Hardcoded JWT secret", "src/config/jwt.ts", 8, "qa-engineer"),
        ("SEC-002", "No rate limit", "src/api/auth.ts", 45, "security-auditor"),
        ("SEC-003", "Verbose error messages", "src/services/auth.ts", 89, "security-auditor"),
    ]


def test_import_names_the_agent_by_another_field_without_taking_it_for_a_finding_field(
    redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "findings.jsonl"
    path.write_text(
        line(reporter="bg-1", title="one") + "\n" + line(reporter="bg-2", title="two", agent="QA") + "\n"
    )
    result = run_import(redis_url, path, "--agent-id-field", "reporter")
    assert result.exit_code == 0, result.output
    assert "left out" not in result.output
    envelopes = published(redis_url)
    assert [(e.agent_id, e.payload.agent) for e in envelopes if isinstance(e.payload, Finding)] == [
        ("bg-1", "bg-1"),
        ("bg-2", "QA"),
    ]


def test_the_fields_an_import_left_out_are_named_twenty_at_most(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    rows = [line(agent="a", title=f"t{n}", **{f"x{n}": 1, f"y{n}" + "z" * 200: 2}) for n in range(30)]
    path.write_text("\n".join(rows) + "\n")
    result = run_import(redis_url, path)
    assert result.exit_code == 0, result.output
    [note] = [text for text in result.output.splitlines() if text.startswith("left out")]
    assert note.count("(1 line)") == 20
    assert note.endswith(", others (40 lines)")
    assert "'y0" + "z" * 78 + "' (1 line)" in note  # a name cut to 80 characters


def test_add_publishes_findings(redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "auth.py").write_text("x = 1\ny = 2\n")
    text = "\n".join(
        [
            line(
                id="SEC-001",
                title="Token in code",
                file="auth.py",
                line=2,
                severity="critical",
                confidence=90,
            ),
            line(id="SEC-002", title="Invented place", file="nowhere.py", line=1),
        ]
    )
    result = run_add(redis_url, "--workdir", str(tmp_path), input=text)
    assert result.exit_code == 0, result.output
    assert "published 2 finding(s)" in result.output
    envelopes = published(redis_url)
    assert [e.type for e in envelopes] == [EnvelopeType.FINDING] * 2
    findings = [e.payload for e in envelopes]
    assert all(isinstance(f, Finding) for f in findings)
    assert [(f.agent, f.verified) for f in findings if isinstance(f, Finding)] == [
        ("sec-1", True),
        ("sec-1", False),
    ]
    assert all(e.agent_id == "sec-1" and e.group_id == GROUP for e in envelopes)
    # run again (after a kill, say, however long the group's idempotency window): nothing is published
    again = run_add(redis_url, "--workdir", str(tmp_path), input=text)
    assert (again.exit_code, again.output) == (
        0,
        "these 2 finding(s) of sec-1 in group g-findings were published before\n",
    )
    assert len(published(redis_url)) == 2
    more = run_add(redis_url, "--workdir", str(tmp_path), input=text + "\n" + line(title="third"))
    assert "published 3 finding(s)" in more.output  # the repeats keep their ids: known duplicates
    assert [e.id for e in published(redis_url)[2:4]] == [e.id for e in envelopes]


def test_the_mark_of_an_add_expires_long_after_any_retry(redis_url: str) -> None:
    """One key per run would otherwise stay for ever; within its time a run again publishes nothing."""
    text = line(id="SEC-001", title="Token in code", file="auth.py", line=2)
    assert run_add(redis_url, input=text).output == f"published 1 finding(s) of sec-1 in group {GROUP}\n"
    client = redis.Redis.from_url(redis_url)
    try:
        [mark] = client.keys("*:import:add:*")
        assert MARK_TTL_S - 600 < client.ttl(mark) <= MARK_TTL_S
        again = run_add(redis_url, input=text)
        assert again.output == f"these 1 finding(s) of sec-1 in group {GROUP} were published before\n"
        assert len(published(redis_url)) == 1
        assert client.expire(mark, 0) and not client.exists(mark)  # expired, as after its 30 days
        later = run_add(redis_url, input=text)  # its ids known only while the group's window holds them
        assert later.output == f"published 1 finding(s) of sec-1 in group {GROUP}\n"
    finally:
        client.close()


def test_the_same_findings_go_into_another_group_of_the_shard(redis_url: str, tmp_path: Path) -> None:
    keys = Keys("sbus", 8)
    other = next(g for g in (f"copy-{n}" for n in range(100)) if keys.shard_of(g) == keys.shard_of(GROUP))
    text = line(id="SEC-001", title="Token in code", file="auth.py", line=2)
    path = tmp_path / "findings.jsonl"
    path.write_text(line(agent="bg-1", title="imported") + "\n")
    for group in (GROUP, other):
        added = run_add(redis_url, "--group", group, input=text)
        assert added.output == f"published 1 finding(s) of sec-1 in group {group}\n"
        imported = CliRunner().invoke(
            import_findings, ["--redis-url", redis_url, str(path), "--group", group]
        )
        assert "imported 1 finding(s)" in imported.output, imported.output
    assert [
        (e.group_id, e.payload.title) for e in published(redis_url) if isinstance(e.payload, Finding)
    ] == [(group, title) for group in (GROUP, other) for title in ("Token in code", "imported")]


def test_add_validates_everything_before_publishing(redis_url: str) -> None:
    good = line(title="fine")
    result = run_add(redis_url, input=f"{good}\n{line(file='a.py', line=0, title='bad line')}\n{{nope\n")
    assert result.exit_code == 2
    assert "line 2: field 'line': Input should be greater than or equal to 1" in result.output
    assert "line 3: not JSON" in result.output
    assert published(redis_url) == []
    blank = run_add(redis_url, input=f"{good}\n{line(title='   ')}\n")
    assert blank.exit_code == 2
    assert "line 2: field 'title': must not be blank" in blank.output
    assert published(redis_url) == []
    assert run_add(redis_url, line(title="inline JSON argument")).exit_code == 0
    assert run_add(redis_url, input="").exit_code == 2
    assert "no findings" in run_add(redis_url, input="\n").output
    for empty in ("", "  "):  # no file's name (an unset shell variable): it was looked for as one
        said = run_add(redis_url, empty)
        assert said.exit_code == 2 and "Invalid value for '[JSON|FILE|-]': must not be blank" in said.output


def test_add_refuses_a_key_given_twice_and_publishes_nothing(redis_url: str) -> None:
    """A JSON parser keeps one of the values without a word: which one was meant is not known."""
    twice = '{"title": "t", "confidence": 90, "confidence": 10}'
    lines = run_add(redis_url, input=f"{line(title='fine')}\n{twice}\n")
    assert lines.exit_code == 2
    assert lines.output == (
        "Error: line 2: the key 'confidence' is given more than once in one object: give it once\n"
    )
    array = run_add(redis_url, f'[{line(title="fine")}, {{"title": "a", "evidence": {{"x": 1, "x": 2}}}}]')
    assert array.exit_code == 2
    assert "Error: finding 2: the key 'x' is given more than once in one object" in array.output
    escaped = run_add(
        redis_url, '{"title": "t", "\\u0073everity": "low", "severity": "critical", "title": "u"}'
    )
    assert escaped.exit_code == 2
    assert "finding 1: the keys 'severity', 'title' are each given more than once" in escaped.output
    hidden = run_add(redis_url, '{"title": "x", "evidence": {"b": 1, "b": 2}, "evidence": "y"}')
    assert hidden.exit_code == 2, hidden.output  # the object repeating 'b' is the value replaced
    assert "finding 1: the keys 'b', 'evidence' are each given more than once" in hidden.output
    assert published(redis_url) == []
    assert run_add(redis_url, '{"title": "t", "evidence": {"title": "not the same object"}}').exit_code == 0


def test_a_field_nested_too_deeply_to_fold_into_text_is_an_error_of_its_line() -> None:
    deep = '{"title": ' + '{"a": ' * 600 + "1" + "}" * 600 + "}"
    findings, errors = parse_findings(f"{deep}\n{line(title='after')}\n", "x")
    assert [f.title for f in findings] == ["after"]
    assert errors == ["line 1: a field nests arrays and objects too deeply to read"]


def test_true_and_false_are_no_line_or_confidence() -> None:
    """pydantic would read true as 1: a made-up place and confidence, stored without a word."""
    for field in ("line", "confidence"):
        for value in (True, False):
            with pytest.raises(ValueError, match=f"{field}: a number, not {str(value).lower()}"):
                finding_of({"title": "t", "file": "a.py", field: value}, "a")


def test_a_byte_order_mark_is_no_content(redis_url: str, tmp_path: Path) -> None:
    """Windows tools write one at the start of a file; the first finding is read all the same."""
    path = tmp_path / "findings.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + f"{line(title='first')}\n{line(title='second')}\n".encode())
    imported = run_import(redis_url, path, "--agent-id", "win")
    assert "imported 2 finding(s); 0 bad line(s)" in imported.output, imported.output
    added = run_add(redis_url, str(path))
    assert added.exit_code == 0, added.output
    titles = [e.payload.title for e in published(redis_url) if isinstance(e.payload, Finding)]
    assert titles == ["first", "second", "first", "second"]
    alone = tmp_path / "one.jsonl"  # one finding, no line end yet: complete all the same
    alone.write_bytes(b"\xef\xbb\xbf" + line(title="alone").encode())
    assert "imported 1 finding(s)" in run_import(redis_url, alone, "--agent-id", "win").output


def test_add_counts_a_finding_repeated_in_its_input_once(redis_url: str) -> None:
    """A repeat has the same id: one envelope, and the count says so."""
    result = run_add(redis_url, input=f"{line(title='same')}\n{line(title='same')}\n{line(title='other')}\n")
    assert result.output == (
        f"published 2 finding(s) of sec-1 in group {GROUP} (1 repeated in the input, published once)\n"
    )
    assert len(published(redis_url)) == 2


def test_add_refuses_unreadable_oversized_and_non_utf8_input(redis_url: str, tmp_path: Path) -> None:
    missing = run_add(redis_url, str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 2
    assert f"Error: cannot read {tmp_path / 'nope.jsonl'}: No such file or directory" in missing.output
    number = run_add(redis_url, "42")  # a file name: only { or [ starts inline JSON
    assert number.exit_code == 2
    assert (
        "Error: cannot read 42: No such file or directory (SOURCE is a file name unless it is - for stdin "
        "or starts with { or [ for JSON)"
    ) in number.output
    huge = tmp_path / "huge.jsonl"
    huge.write_bytes(b" " * (MAX_INPUT_BYTES + 1))
    too_large = run_add(redis_url, str(huge))
    assert too_large.exit_code == 2
    assert f"Error: the input is larger than {MAX_INPUT_BYTES} bytes" in too_large.output
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(line(title="caf").encode()[:-2] + b"\xe9" + b'"}')
    not_utf8 = run_add(redis_url, str(latin))
    assert not_utf8.exit_code == 2
    assert "Error: the input is not UTF-8 (byte 13)" in not_utf8.output
    assert published(redis_url) == []


def test_add_refuses_a_finding_too_large_to_publish_and_publishes_none(
    redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "o.json"
    path.write_bytes(orjson.dumps([{"title": "small"}, {"title": "x" * (MAX_ENVELOPE_BYTES + 1)}]))
    result = run_add(redis_url, str(path))
    assert result.exit_code == 2, result.output
    assert "Error: finding 2: " in result.output
    assert f"bytes encoded, over the {MAX_ENVELOPE_BYTES}-byte limit" in result.output
    assert result.stdout == ""
    assert published(redis_url) == []


def test_import_names_the_first_bad_lines_and_counts_the_rest(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    bad = MAX_BAD_SHOWN + 50
    path.write_text("{nope\n" * bad + line(agent="a", title="good") + "\n")
    result = run_import(redis_url, path)
    assert result.exit_code == 2
    named = [text for text in result.stderr.splitlines() if text.startswith(f"{path}:")]
    assert named[0].startswith(f"{path}:1: not JSON") and len(named) == MAX_BAD_SHOWN
    assert "... and 50 more bad line(s)" in result.stderr
    assert f"imported 1 finding(s); {bad} bad line(s)" in result.stdout


_KEY = st.text(alphabet='ab":\\ ', max_size=3)
_SPACE = st.sampled_from(["", " ", "\t", "\r\n", "  "])


@given(
    pairs=st.lists(st.tuples(_KEY, st.one_of(st.integers(), _KEY)), max_size=6),
    spaces=st.lists(_SPACE, min_size=30, max_size=30),
)
def test_a_text_that_gives_a_key_twice_is_always_asked_about(
    pairs: list[tuple[str, int | str]], spaces: list[str]
) -> None:
    # an object written member by member, with white space around every colon and comma
    members = [
        f"{json.dumps(key)}{spaces[i % 30]}:{spaces[(i + 7) % 30]}{json.dumps(value)}"
        for i, (key, value) in enumerate(pairs)
    ]
    text = ("{" + ("," + spaces[3]).join(members) + "}").encode()
    value = orjson.loads(text)
    if keys_given_twice(text.decode()).keys:
        assert may_give_twice(text, value)
    if len({key for key, _ in pairs}) == len(pairs) and all(
        str(text).strip("ab") == "" for pair in pairs for text in pair
    ):
        assert not may_give_twice(text, value)  # nothing that looks like a key's end but the keys


def test_import_refuses_a_line_that_gives_a_key_twice_as_add_does(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    lines = [
        '{"agent": "a", "title": "first", "confidence": 90, "confidence": 10}',
        '{"agent" : "a", "title": "spaced", "title"\t: "again"}',
        '{"agent": "a", "title": "nested", "x": {"k": 1, "k": 2}}',
        # nested as deep as orjson reads, deeper than the standard library's parser did with its limit
        '{"agent": "a", "title": "deep", "confidence": 90, "confidence": 10, "x": '
        + "[" * 1020
        + "]" * 1020
        + "}",
        '{"agent": "a", "title": "fine", "evidence": "\\"a\\": \\"b\\":"}',
        '{"agent": "a", "title": "flat"}',
    ]
    path.write_text("\n".join(lines) + "\n")
    result = run_import(redis_url, path)
    assert result.exit_code == 2
    assert f"{path}:1: the key 'confidence' is given more than once in one object" in result.stderr
    assert f"{path}:2: the key 'title' is given more than once" in result.stderr
    assert f"{path}:3: the key 'k' is given more than once" in result.stderr
    assert f"{path}:4: the key 'confidence' is given more than once" in result.stderr
    assert "imported 2 finding(s); 4 bad line(s)" in result.stdout
    titles = [e.payload.title for e in published(redis_url) if isinstance(e.payload, Finding)]
    assert titles == ["fine", "flat"]


def test_import_counts_a_line_too_large_to_publish_as_bad(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    huge = line(agent="a", title="x" * (MAX_LINE_BYTES - 100))  # only its envelope is over a limit
    path.write_text("\n".join([line(agent="a", title="before"), huge, line(agent="a", title="after")]) + "\n")
    result = run_import(redis_url, path)
    assert result.exit_code == 2
    assert f"{path}:2: " in result.output and "bytes encoded, over the" in result.output
    assert "imported 2 finding(s); 1 bad line(s)" in result.output
    titles = [e.payload.title for e in published(redis_url) if isinstance(e.payload, Finding)]
    assert titles == ["before", "after"]
    assert (
        "imported 0 finding(s); 0 bad line(s); 3 line(s) imported before"
        in run_import(redis_url, path).output
    )


def test_lines_before_an_overlong_line_are_published_as_counted(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    path.write_text(line(agent="a", title="before") + "\n" + line(agent="a", title="x" * (6 << 20)))
    result = run_import(redis_url, path)
    assert result.exit_code == 2
    assert f"{path}:2: longer than" in result.output
    assert "imported 1 finding(s); 1 bad line(s)" in result.output
    assert [e.payload.title for e in published(redis_url) if isinstance(e.payload, Finding)] == ["before"]


@pytest.mark.parametrize("extra", [0, 3 << 20], ids=["just-over", "read-past-the-limit"])
def test_an_overlong_line_is_skipped_once_and_the_lines_after_it_are_imported(
    redis_url: str, tmp_path: Path, extra: int
) -> None:
    path = tmp_path / "findings.jsonl"
    overlong = line(agent="a", title="x" * (MAX_LINE_BYTES + extra))
    path.write_text(
        "\n".join([line(agent="a", title="before"), overlong, line(agent="a", title="after")]) + "\n"
    )
    result = run_import(redis_url, path)
    assert result.exit_code == 2
    assert f"{path}:2: longer than {MAX_LINE_BYTES} bytes; skipped" in result.output
    assert "imported 2 finding(s); 1 bad line(s); 0 line(s) imported before" in result.output
    assert [e.payload.title for e in published(redis_url) if isinstance(e.payload, Finding)] == [
        "before",
        "after",
    ]
    again = run_import(redis_url, path)
    assert again.exit_code == 0, again.output
    assert again.output == "imported 0 finding(s); 0 bad line(s); 3 line(s) imported before\n"


def test_an_overlong_line_still_being_written_is_reported_once(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    path.write_text(
        line(agent="a", title="before") + "\n" + '{"agent": "a", "title": "' + "x" * MAX_LINE_BYTES
    )
    first = run_import(redis_url, path)
    assert first.exit_code == 2
    assert f"{path}:2: longer than {MAX_LINE_BYTES} bytes; skipped" in first.output
    with path.open("a") as stream:
        stream.write("x" * 1000)
    second = run_import(redis_url, path)
    assert (second.exit_code, second.output) == (
        0,
        "imported 0 finding(s); 0 bad line(s); 1 line(s) imported before\n",
    )
    with path.open("a") as stream:
        stream.write('"}\n' + line(agent="a", title="after") + "\n")
    third = run_import(redis_url, path)
    assert third.exit_code == 0, third.output
    assert "imported 1 finding(s); 0 bad line(s); 1 line(s) imported before" in third.output
    titles = [e.payload.title for e in published(redis_url) if isinstance(e.payload, Finding)]
    assert titles == ["before", "after"]
    offset = path.stat().st_size - len(line(agent="a", title="after")) - 1
    assert published(redis_url)[-1].id == deterministic_id("a", f"findings:{path}", offset)


def test_import_streams_a_jsonl_file_resumably(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "SECURITY_FINDINGS.jsonl"
    rows = [
        line(agent="bg-task-abc123", id="SEC-001", title="one", file="a.py", line=1),
        line(agent="bg-task-def456", id="SEC-002", title="two"),
        line(agent="bg-task-abc123", severity="nope", title="bad severity"),
        "{broken",
        line(title="no agent"),
        line(agent="bg-task-def456", id="SEC-003", title="three"),
        "[1, 2]",
        line(agent=123, title="numbered"),
        '{"title": "latin-1 \xff"}',
    ]
    path.write_bytes("\n".join(rows).encode().replace(b"\xc3\xbf", b"\xff") + b"\n")
    first = run_import(redis_url, path)
    assert first.exit_code == 2
    assert f"{path}:3: field 'severity'" in first.output
    assert f"{path}:4: not JSON" in first.output
    assert f"{path}:5: no 'agent' field and no default agent id" in first.output
    assert f"{path}:7: not a JSON object but list" in first.output
    assert f"{path}:8: field 'agent' is not an agent id: 123" in first.output
    assert f"{path}:9: not UTF-8" in first.output
    assert "imported 3 finding(s); 6 bad line(s)" in first.output
    envelopes = published(redis_url)
    offsets = [0, len(rows[0]) + 1, sum(len(r) + 1 for r in rows[:5])]
    assert [e.id for e in envelopes] == [
        deterministic_id(agent, f"findings:{path}", offset)
        for agent, offset in zip(["bg-task-abc123", "bg-task-def456", "bg-task-def456"], offsets, strict=True)
    ]
    assert [e.agent_id for e in envelopes] == ["bg-task-abc123", "bg-task-def456", "bg-task-def456"]

    again = run_import(redis_url, path)
    assert again.exit_code == 0, again.output
    assert "imported 0 finding(s); 0 bad line(s); 9 line(s) imported before" in again.output
    with path.open("a") as stream:
        stream.write(line(agent="bg-task-ghi789", title="appended") + "\n" + line(agent="x", title="half"))
    third = run_import(redis_url, path, "--agent-id", "fallback")
    assert third.exit_code == 0, third.output
    assert [e.agent_id for e in published(redis_url)[3:]] == ["bg-task-ghi789", "x"]


def test_a_line_is_ended_by_its_line_feed_only(redis_url: str) -> None:
    """As `findings --jsonl` writes them: U+2028, U+2029 and U+0085 are a string's, not line ends."""
    titles = ["first\u2028second", "third\u2029fourth", "nel\x85here"]
    result = run_add(redis_url, input="\r\n".join(line(title=title) for title in titles) + "\r\n")
    assert result.exit_code == 0, result.output
    assert [e.payload.title for e in published(redis_url) if isinstance(e.payload, Finding)] == titles


def test_a_last_line_imported_without_its_newline_is_counted_once(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + line(title="a").encode() + b"\r\n" + line(title="b").encode())
    assert "imported 2 finding(s)" in run_import(redis_url, path, "--agent-id", "x").output
    with path.open("ab") as stream:  # its line feed, then a line, then a bad one: line 4
        stream.write(b"\r\n" + line(title="c").encode() + b"\r\nBAD LINE\r\n")
    second = run_import(redis_url, path, "--agent-id", "x")
    assert f"{path}:4: not JSON" in second.output
    assert "imported 1 finding(s); 1 bad line(s); 2 line(s) imported before" in second.output
    third = run_import(redis_url, path, "--agent-id", "x")
    assert third.output == "imported 0 finding(s); 0 bad line(s); 4 line(s) imported before\n"
    titles = [e.payload.title for e in published(redis_url) if isinstance(e.payload, Finding)]
    assert titles == ["a", "b", "c"]


def test_import_leaves_an_incomplete_last_line(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    path.write_text(line(agent="a", title="done") + '\n{"agent": "a", "title": "being wri')
    result = run_import(redis_url, path)
    assert result.exit_code == 0  # not a bad line: its writer may be writing it
    assert "line 2: incomplete last line (no newline); left for the next run" in result.output
    assert "imported 1 finding(s); 0 bad line(s)" in result.output
    with path.open("a") as stream:
        stream.write('tten"}\n')
    assert run_import(redis_url, path).exit_code == 0
    titles = [e.payload.title for e in published(redis_url) if isinstance(e.payload, Finding)]
    assert titles == ["done", "being written"]


@pytest.mark.parametrize("change", ["truncate", "rewrite"])
def test_a_changed_file_is_imported_as_a_new_generation(redis_url: str, tmp_path: Path, change: str) -> None:
    path = tmp_path / "findings.jsonl"
    path.write_text(line(agent="a", title="first") + "\n" + line(agent="a", title="second") + "\n")
    assert run_import(redis_url, path).exit_code == 0
    if change == "truncate":
        path.write_text(line(agent="a", title="new") + "\n")
    else:
        path.write_text(line(agent="a", title="other") + "\n" + line(agent="a", title="rows!!") + "\n")
    result = run_import(redis_url, path)
    assert result.exit_code == 0
    assert "new generation" in result.output
    envelopes = published(redis_url)
    assert envelopes[2].source == f"findings:{path}#1"
    assert envelopes[2].id != envelopes[0].id


def test_an_import_killed_mid_way_and_run_again_publishes_each_line_once(
    redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "SECURITY_FINDINGS.jsonl"
    rows = [line(agent=f"agent-{n % 5}", id=f"SEC-{n}", title=f"finding {n}", file="a.py", line=1 + n) for n in
            range(40_000)]  # fmt: skip
    path.write_text("\n".join(rows) + "\n")
    expected, offset = [], 0
    for n, row in enumerate(rows):
        expected.append(deterministic_id(f"agent-{n % 5}", f"findings:{path}", offset))
        offset += len(row) + 1
    client = redis.Redis.from_url(redis_url)
    command = [CLI, "adapter", "import-findings", str(path), "--group", GROUP, "--redis-url", redis_url]
    try:
        first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while client.exists(STREAM) == 0 or client.xlen(STREAM) < 2_000:
            assert time.monotonic() < deadline and first.poll() is None, "the import made no progress"
            time.sleep(0.01)  # polling another process's progress: it has no other signal
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        assert client.xlen(STREAM) < len(rows), "killed too late to prove anything"
        again = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
    finally:
        client.close()
    assert [e.id for e in published(redis_url)] == expected  # every line once, in the file's order


def test_findings_add_gives_up_after_its_socket_timeout_when_the_server_refuses_writes(
    fresh_redis: RedisProcess,
) -> None:
    """Out of memory (or a replica's URL: READONLY) refuses writes "for now": an adapter retries for as
    long as it takes, and `findings add` did too, for ever. It gives up after --socket-timeout."""
    url = fresh_redis.url
    assert run_add(url, input='{"title": "first"}').exit_code == 0
    client = redis.Redis.from_url(url)
    try:
        client.config_set("maxmemory", 1)  # every write refused: OOM
        started = time.monotonic()
        done = run_add(
            url, "--agent-id", "a1", "--group", "g", "--socket-timeout", "2", input='{"title": "t"}'
        )
        assert done.exit_code == 1, done.output
        assert time.monotonic() - started < 30
        assert "the server did not take the batch within 2s" in done.output
        assert "run the command again once the server takes writes" in done.output
        client.config_set("maxmemory", 0)
        assert run_add(url, input='{"title": "t"}').exit_code == 0
        assert [e.payload.title for e in published(url)] == ["first", "t"]  # type: ignore[union-attr]
    finally:
        client.close()


def test_import_findings_gives_up_after_its_socket_timeout_and_a_second_run_goes_on(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    """import-findings retried a server that refuses writes for ever; like `findings add`, it gives up
    after --socket-timeout, and running it again once the server takes writes imports every line once."""
    url = fresh_redis.url
    path = tmp_path / "findings.jsonl"
    path.write_text(line(agent="a1", title="first", file="a.py", line=1) + "\n")
    assert run_import(url, path).exit_code == 0
    with path.open("a") as out:
        out.write(line(agent="a1", title="second", file="a.py", line=2) + "\n")
    client = redis.Redis.from_url(url)
    try:
        client.config_set("maxmemory", 1)  # every write refused: OOM
        started = time.monotonic()
        done = run_import(url, path, "--socket-timeout", "2")
        assert done.exit_code == 1, done.output
        assert time.monotonic() - started < 30
        assert "the server did not take the batch within 2s" in done.output
        assert "run the command again once the server takes writes" in done.output
        client.config_set("maxmemory", 0)
        again = run_import(url, path)
        assert again.exit_code == 0, again.output
        assert "imported 1 finding(s)" in again.output
    finally:
        client.close()
    assert [e.payload.title for e in published(url)] == ["first", "second"]  # type: ignore[union-attr]
