"""``subagent-bus parse``: readable and JSON output, formats, and exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from agents.cli import parse
from bus.cli import main

DATA = Path(__file__).parent / "data"
STOP = (
    "[STOP_WORK]\nagent_id: bg-task-def456\ntimestamp: 2026-01-11T09:15:00-05:00\nstop_reason: blocker\n"
    "blocker_type: external_dependency\ndetails: node_modules is missing\n[/STOP_WORK]\n"
)
REPORT = (
    "## Code Explorer Result\n### Status\nSUCCESS\n### Summary\nTraced login.\n### Confidence\n92 - traced\n"
)
BAD = "[DELEGATE_WORK]\nagent_id: a\npriority: P9\n[/DELEGATE_WORK]\n"


def run(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(parse, list(args), input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def output(tmp_path: Path) -> Path:
    path = tmp_path / "agent.log"
    path.write_text("Working…\n" + STOP + "\n" + REPORT + "\n" + BAD)
    return path


def test_readable_summary_and_exit_2_on_errors(output: Path) -> None:
    code, out, _ = run(str(output))
    assert code == 2
    lines = out.splitlines()
    assert lines[0].split() == [
        "2",
        "STOP_WORK",
        "bg-task-def456",
        "stop_reason=blocker",
        "blocker_type=external_dependency",
    ]
    assert lines[1].split()[:4] == ["10", "RESULT", "Code", "Explorer"]
    assert "status=SUCCESS confidence=92 findings=0 issues=0" in lines[1]
    assert lines[2].split()[:2] == ["18", "ERROR"]
    assert "DELEGATE_WORK block at line 18: field 'delegation_reason': Field required;" in lines[2]
    assert lines[2].endswith("(and 1 more)")
    assert lines[-1] == "1 signal, 1 result, 1 error"


def test_a_report_under_another_heading_is_an_error_at_the_end_when_no_report_replaced_it() -> None:
    unread = REPORT.replace("## Code Explorer Result", "## Code Explorer Results")
    code, out, _ = run("-", stdin=("Working.\n" + unread).encode())
    assert code == 2
    [error, totals] = out.splitlines()
    assert error.split()[:2] == ["2", "ERROR"]
    assert "the section '## Code Explorer Results' reads as a result report (0 findings)" in error
    assert totals == "0 signals, 0 results, 1 error"
    code, out, _ = run("-", stdin=(unread + REPORT).encode())
    assert code == 0 and out.splitlines()[-1] == "0 signals, 1 result, 0 errors"


def test_a_field_that_is_not_set_is_left_out_of_the_line() -> None:
    progress = b"[PROGRESS]\nagent_id: a\ntimestamp: 2026-01-01T00:00:00Z\npercent: 5\n[/PROGRESS]\n"
    code, out, _ = run("-", stdin=progress)
    assert code == 0
    assert out.splitlines()[0].split() == ["1", "PROGRESS", "a", "percent=5.0"]


def test_what_the_agent_wrote_reaches_the_terminal_escaped() -> None:
    body = 'agent_id: "x\\e[31m"\nstop_reason: blocker\nblocker_type: missing_info\ndetails: "a\\e]0;T\\a"\n'
    code, out, _ = run("-", stdin=f"[STOP_WORK]\n{body}[/STOP_WORK]\n".encode())
    assert code == 0
    assert "x\\x1b[31m" in out.splitlines()[0]
    assert not [c for c in out if ord(c) < 32 and c != "\n"], out


def test_json_lines(output: Path) -> None:
    code, out, _ = run(str(output), "--json")
    assert code == 2
    signal, result, error = (orjson.loads(line) for line in out.splitlines())
    assert signal == {
        "kind": "signal",
        "type": "STOP_WORK",
        "agent_id": "bg-task-def456",
        "payload": {
            "agent_id": "bg-task-def456",
            "timestamp": "2026-01-11T09:15:00-05:00",
            "stop_reason": "blocker",
            "blocker_type": "external_dependency",
            "details": "node_modules is missing",
        },
        "line": 2,
        "offset": len("Working…\n".encode()),
    }
    assert result["kind"] == "result"
    assert (result["agent"], result["status"], result["summary"], result["line"]) == (
        "Code Explorer",
        "SUCCESS",
        "Traced login.",
        10,
    )
    assert result["confidence"] == {"score": 92.0, "justification": "traced"}
    assert error["kind"] == "error"
    assert error["line"] == 18
    assert error["type"] == "DELEGATE_WORK"
    assert error["message"].startswith("DELEGATE_WORK block at line 18: ")


def test_exit_0_without_error_items(tmp_path: Path) -> None:
    path = tmp_path / "clean.log"
    path.write_text(STOP)
    code, out, _ = run(str(path))
    assert code == 0
    assert out.splitlines()[-1] == "1 signal, 0 results, 0 errors"


def test_stdin_as_dash_and_by_default() -> None:
    for args in (["-"], []):
        code, out, _ = run(*args, "--json", stdin=(REPORT + STOP).encode())
        assert code == 0
        assert [orjson.loads(line)["kind"] for line in out.splitlines()] == ["result", "signal"]


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    code, out, err = run(str(missing))
    assert code == 1
    assert out == ""
    assert err == f"Error: cannot read {missing}: No such file or directory\n"


def test_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run(str(tmp_path))
    assert code == 1
    assert err.startswith(f"Error: cannot read {tmp_path}: ")


@pytest.mark.parametrize(
    "args", [["--format", "xml"], ["--max-block-bytes", "0"], ["--bogus"], ["a", "b"]], ids=str
)
def test_bad_usage_exits_1(args: list[str]) -> None:
    code, _, err = run(*args)
    assert code == 1
    assert "Error:" in err


def test_help_documents_the_exit_statuses() -> None:
    code, out, _ = run("--help")
    assert code == 0
    assert "0  the output parsed without any error item" in out
    assert "1  an error: a usage error" in out
    assert "2  the output holds at least one error item" in out


def test_transcripts_are_detected_and_report_their_session() -> None:
    transcript = str(DATA / "claude_transcript.jsonl")
    code, out, _ = run(transcript)
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[1] for line in lines[:4]] == [
        "CLARIFICATION_NEEDED",
        "PROGRESS",
        "RESULT",
        "COMPLETION_REPORT",
    ]
    assert lines[4] == "transcript: session 7c1e9a52-4b3d-4f0e-9d6a-2f8b5c3e1a90, agent a3f9c21"
    assert lines[5] == "3 signals, 1 result, 0 errors"
    forced, out_json, _ = run(transcript, "--format", "claude-jsonl", "--json")
    assert forced == 0
    assert [orjson.loads(line)["line"] for line in out_json.splitlines()] == [7, 10, 10, 10]
    as_text = run(transcript, "--format", "text")
    assert as_text == (0, "0 signals, 0 results, 0 errors\n", "")


@pytest.mark.parametrize("first", [b'{"type": "user", "message": {"role": "us', b'{"kind": "header"}'])
def test_a_transcript_whose_first_line_is_not_an_entry_is_still_detected(
    tmp_path: Path, first: bytes
) -> None:
    entries = (DATA / "claude_transcript.jsonl").read_bytes().splitlines(keepends=True)
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(first + b"\n" + b"".join(entries[1:]))  # a line cut short, or of something else
    code, out, _ = run(str(path))
    lines = out.splitlines()
    assert lines[-2] == "transcript: session 7c1e9a52-4b3d-4f0e-9d6a-2f8b5c3e1a90, agent a3f9c21"
    types = [line.split()[1] for line in lines[:-2]]
    signals = ["CLARIFICATION_NEEDED", "PROGRESS", "RESULT", "COMPLETION_REPORT"]
    if first.startswith(b'{"type"'):  # not JSON: reported as an error item
        assert (code, types) == (2, ["ERROR", *signals])
    else:  # a JSON object of something else: not agent output
        assert (code, types) == (0, signals)


def test_a_leading_byte_order_mark_is_ignored_in_text_and_in_transcripts(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    text = tmp_path / "bom.log"
    text.write_bytes(bom + STOP.encode())
    code, out, _ = run(str(text), "--json")
    assert code == 0
    assert [(item["type"], item["offset"]) for item in map(orjson.loads, out.splitlines())] == [
        ("STOP_WORK", len(bom))
    ]
    transcript = tmp_path / "bom.jsonl"
    entry = {"type": "assistant", "sessionId": "s-1", "message": {"content": STOP}}
    transcript.write_bytes(bom + orjson.dumps(entry) + b"\n")
    assert run(str(transcript)) == (
        0,
        f"{1:>6}  {'STOP_WORK':<20} {'bg-task-def456':<20} stop_reason=blocker blocker_type=external_dependency\n"
        "transcript: session s-1, agent -\n1 signal, 0 results, 0 errors\n",
        "",
    )


def test_json_output_of_an_integer_beyond_64_bits(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    big = 10**200
    path.write_text(STOP.replace("[/STOP_WORK]", f"big: {big}\n[/STOP_WORK]"))
    code, out, _ = run(str(path), "--json")
    assert code == 0
    assert json.loads(out)["payload"]["big"] == big  # orjson would read it as a float


def test_max_block_bytes(output: Path) -> None:
    code, out, _ = run(str(output), "--max-block-bytes", "64", "--json")
    assert code == 2
    messages = [orjson.loads(line).get("message") for line in out.splitlines()]
    assert "STOP_WORK block at line 2: larger than 64 bytes; skipped" in messages


def test_blocks_across_read_boundaries(tmp_path: Path) -> None:
    filler = "prose line that pads the file past one read\n" * 3000
    path = tmp_path / "big.log"
    path.write_text((filler + STOP) * 3)
    code, out, _ = run(str(path), "--json")
    assert code == 0
    assert [orjson.loads(line)["line"] for line in out.splitlines()] == [3001, 6008, 9015]


def test_usage_errors_exit_1_through_the_root_command() -> None:
    result = CliRunner().invoke(main, ["parse", "--format", "xml"])
    assert result.exit_code == 1
