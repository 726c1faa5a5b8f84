"""file:line verification next to the agent: real references pass, invented or escaping ones do not."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from adapter_kit import exited, fake, open_bus, start

from agents import verify
from agents.verify import DELIVERABLES_FIELD, Verifier, deliverable_paths, split_location
from bus.envelope import EnvelopeType
from bus.findings import Finding
from bus.results import Reference, ResultReport, ResultStatus
from bus.signals import CompletionReport, CompletionStatus


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src" / "auth").mkdir(parents=True)
    (root / "src" / "auth" / "jwt.ts").write_text("line 1\nline 2\nline 3\n")
    (root / "src" / "no_newline.py").write_text("a\nb")
    (root / "SECURITY_ANALYSIS.md").write_text("# report\n")
    (root / "reports").mkdir()
    (tmp_path / "secret.txt").write_text("outside\n" * 100)
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    os.symlink(root / "loop", root / "loop")
    return root


@pytest.mark.parametrize(
    ("file", "line", "verified"),
    [
        ("src/auth/jwt.ts", 3, True),
        ("src/auth/jwt.ts", 1, True),
        ("src/auth/jwt.ts", None, True),
        ("src/auth/jwt.ts:2", None, True),
        ("`src/auth/jwt.ts`", 2, True),
        ("src/no_newline.py", 2, True),
        ("src/no_newline.py", 3, False),
        ("src/auth/jwt.ts", 4, False),  # past the end of the file
        ("src/auth/jwt.ts:" + "9" * 5_000, None, False),  # more digits than int() reads
        ("src/auth/jwt.ts", 0, False),
        ("src/auth/oauth.ts", 1, False),  # invented
        ("src/auth", None, False),  # a directory is no file:line
        ("../secret.txt", 1, False),  # escapes the workdir
        ("src/../../secret.txt", 5, False),
        ("link.txt", 1, False),  # a symlink pointing out
        ("/etc/passwd", 1, False),
        ("src/\x00evil", 1, False),
        ("loop", 1, False),  # a symlink to itself
        ("loop/x.py", 1, False),
        ("src/\ud800.py", 1, False),  # no file system name
        ("src/" + "a" * 300 + ".py", 3, False),  # a name over 255 bytes
    ],
)
def test_references(workdir: Path, file: str, line: int | None, verified: bool) -> None:
    assert Verifier(workdir).check(file, line) is verified


def test_a_workdir_that_is_no_directory_is_refused(workdir: Path) -> None:
    with pytest.raises(ValueError, match="is not a directory"):
        Verifier(workdir / "SECURITY_ANALYSIS.md")


def test_an_absolute_path_inside_the_workdir_is_fine(workdir: Path) -> None:
    assert Verifier(workdir).check(str(workdir.resolve() / "src" / "auth" / "jwt.ts"), 2) is True


def test_nothing_to_verify_stays_unknown(workdir: Path) -> None:
    verifier = Verifier(workdir)
    assert verifier.check(None, 3) is None
    finding = Finding(title="no place given")
    assert verifier.finding(finding).verified is None


def test_locations() -> None:
    assert split_location("src/a.py:12", None) == ("src/a.py", 12)
    assert split_location("src/a.py:12-20", None) == ("src/a.py", 12)
    assert split_location("src/a.py", 4) == ("src/a.py", 4)
    assert split_location("C:notaline", None) == ("C:notaline", None)


def test_findings_references_and_deliverables_are_marked(workdir: Path) -> None:
    verifier = Verifier(workdir)
    report = ResultReport(
        agent="Explorer",
        status=ResultStatus.SUCCESS,
        summary="s",
        findings=[
            Finding(title="real", file="src/auth/jwt.ts", line=2),
            Finding(title="invented", file="src/auth/session.ts", line=9),
        ],
        key_references=[
            Reference(item="jwt", location="src/auth/jwt.ts:3", file="src/auth/jwt.ts", line=3),
            Reference(item="ghost", location="src/ghost.ts:1", file="src/ghost.ts", line=1),
            Reference(item="unsplit", location="src/auth/jwt.ts:1"),
        ],
    )
    checked = verifier.result(report)
    assert [f.verified for f in checked.findings] == [True, False]
    assert [r.verified for r in checked.key_references] == [True, False, True]
    completion = CompletionReport(
        agent_id="a",
        status=CompletionStatus.SUCCESS,
        summary="done",
        deliverables="Generated files:\n  - SECURITY_ANALYSIS.md (comprehensive report)\n"
        "  - SECURITY_FINDINGS.jsonl (structured findings, 47 entries)\n  - reports/\n  - ../secret.txt\n"
        "  - https://github.com/acme/app/pull/42\n  - /etc/hostname",
    )
    extra = verifier.completion(completion).model_dump()[DELIVERABLES_FIELD]
    assert extra == [  # one outside the workdir, or a URL, is not judged: it is never looked at
        {"path": "SECURITY_ANALYSIS.md", "verified": True},
        {"path": "SECURITY_FINDINGS.jsonl", "verified": False},
        {"path": "reports/", "verified": True},
    ]


def test_deliverable_lists() -> None:
    text = (
        "Generated files:\n- `docs/API notes.md`: the API\n* REMEDIATION_PLAN.md\n"
        "1. src/fix.py (patched)\n- Updated the README\n- e.g. more\n- [x] CHANGELOG.md\n"
    )
    assert deliverable_paths(text) == [
        "docs/API notes.md",
        "REMEDIATION_PLAN.md",
        "src/fix.py",
        "CHANGELOG.md",
    ]
    assert deliverable_paths(None) == []
    # a YAML list (``deliverables:`` then ``  - a``), a flow list or one path arrive as one path a line
    assert deliverable_paths(
        CompletionReport.model_validate(
            {
                "agent_id": "a",
                "status": "success",
                "summary": "s",
                "deliverables": ["src/real.py", "src/ghost.py"],
            }
        ).deliverables
    ) == ["src/real.py", "src/ghost.py"]
    assert deliverable_paths("src/ghost.py") == ["src/ghost.py"]
    assert deliverable_paths("Done:\nnothing else") == []


async def test_the_adapter_publishes_verified_payloads(redis_url: str, workdir: Path, tmp_path: Path) -> None:
    steps = fake(
        "result:src/auth/jwt.ts:3",
        "result:src/auth/invented.ts:3",
        "complete:SECURITY_ANALYSIS.md,MISSING.md",
        agent_id="v1",
    )
    log = tmp_path / "adapter.log"
    adapter = start(
        [
            "adapter",
            "run",
            "--agent-id",
            "v1",
            "--group",
            "g-verify",
            "--workdir",
            str(workdir),
            "--quiet",
            "--",
            *steps,
        ],
        redis_url,
        log,
        stdout=subprocess.DEVNULL,
    )
    assert await exited(adapter, 30) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        results = await bus.of_type("g-verify", EnvelopeType.RESULT)
        [completion] = await bus.of_type("g-verify", EnvelopeType.COMPLETION_REPORT)
    refs = [r.payload.key_references[0].verified for r in results if isinstance(r.payload, ResultReport)]
    assert refs == [True, False]
    assert completion.payload.model_dump()[DELIVERABLES_FIELD] == [
        {"path": "SECURITY_ANALYSIS.md", "verified": True},
        {"path": "MISSING.md", "verified": False},
    ]


def test_a_name_too_long_or_a_path_that_cannot_be_looked_at_is_not_verified(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent output is no reason to stop the adapter: a name over 255 bytes (ENAMETOOLONG) or a path it
    may not look at (EACCES) is not verified, as a missing file is not."""
    verifier = Verifier(workdir)
    long_name = "src/" + "a" * 300 + ".py"
    assert verifier.check(long_name, 3) is False
    assert verifier.check("a" * 300, None) is False
    assert verifier.exists("d" * 300 + ".md") is False
    completion = CompletionReport(
        agent_id="a", status=CompletionStatus.SUCCESS, summary="s", deliverables=f"- {'d' * 300}.md"
    )
    assert verifier.completion(completion).model_dump()[DELIVERABLES_FIELD] == [
        {"path": "d" * 300 + ".md", "verified": False}
    ]
    original = Path.stat

    def refused(path: Path, **kwargs: bool) -> os.stat_result:
        if "private" in path.parts:
            raise PermissionError(13, "Permission denied", str(path))
        return original(path, **kwargs)

    (workdir / "private").mkdir()
    (workdir / "private" / "key.pem").write_text("k\n")
    monkeypatch.setattr(Path, "stat", refused)
    assert verifier.check("private/key.pem", 1) is False
    assert verifier.check("private/key.pem", None) is False
    assert verifier.exists("private/key.pem") is False
    assert verifier.check("src/auth/jwt.ts", 3) is True


async def test_the_adapter_survives_a_name_too_long(redis_url: str, workdir: Path, tmp_path: Path) -> None:
    """A finding at ``src/<300 a>.py:3`` and a deliverable ``<300 d>.md``: the report, the completion and
    the exit are published, the two marked not verified."""
    long_file, long_deliverable = "src/" + "a" * 300 + ".py", "d" * 300 + ".md"
    printed = tmp_path / "agent.out"
    printed.write_text(
        "## Explorer Result\n\n### Status\nSUCCESS\n\n### Summary\nLooked at the code.\n\n### Findings\n\n"
        "| ID | Issue | File:Line | Severity |\n|----|-------|-----------|----------|\n"
        f"| A-1 | long | `{long_file}:3` | High |\n| A-2 | real | `src/auth/jwt.ts:2` | Low |\n\n"
        "### Confidence\n60\n\n"
        "[COMPLETION_REPORT]\nagent_id: lg\nstatus: success\nsummary: done\n"
        f"deliverables: {long_deliverable}\n[/COMPLETION_REPORT]\n"
    )
    log = tmp_path / "adapter.log"
    args = ["adapter", "stdin", "--agent-id", "lg", "--group", "g-long", "--workdir", str(workdir), "--quiet"]
    with printed.open("rb") as stdin:
        adapter = start(args, redis_url, log, stdin=stdin)
        assert await exited(adapter, 30) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        [result] = await bus.of_type("g-long", EnvelopeType.RESULT)
        [completion] = await bus.of_type("g-long", EnvelopeType.COMPLETION_REPORT)
        [_] = await bus.of_type("g-long", EnvelopeType.AGENT_EXITED)
    assert isinstance(result.payload, ResultReport)
    assert [(f.file, f.verified) for f in result.payload.findings] == [
        (long_file, False),
        ("src/auth/jwt.ts", True),
    ]
    assert completion.payload.model_dump()[DELIVERABLES_FIELD] == [
        {"path": long_deliverable, "verified": False}
    ]


def test_a_file_s_lines_are_counted_once_while_it_stays_the_same(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 000 findings on one large file read it once, not 1 000 times; a file that changed is read again,
    and only the last CACHED_FILES files are kept."""
    counted: list[Path] = []

    def counting(path: Path, wanted: int) -> tuple[int, bool]:
        counted.append(path)
        return line_count(path, wanted)

    line_count = verify._line_count
    monkeypatch.setattr(verify, "_line_count", counting)
    verifier = Verifier(workdir)
    jwt = (workdir / "src" / "auth" / "jwt.ts").resolve()
    assert [verifier.check("src/auth/jwt.ts", n % 5) for n in range(1000)] == [
        n % 5 in (1, 2, 3) for n in range(1000)
    ]
    assert verifier.check(str(jwt), 2) is True
    assert counted == [jwt]
    with jwt.open("a") as stream:
        stream.write("line 4\n")
    assert verifier.check("src/auth/jwt.ts", 4) is True
    assert counted == [jwt, jwt]
    many = workdir / "many"
    many.mkdir()
    for index in range(verify.CACHED_FILES):
        (many / f"f{index}.txt").write_text("x\n")
        assert verifier.check(f"many/f{index}.txt", 1) is True
    assert verifier.check("many/f255.txt", 1) is True  # still kept
    assert len(counted) == 2 + verify.CACHED_FILES
    assert verifier.check("src/auth/jwt.ts", 4) is True  # the least recently used was dropped
    assert counted[-1] == jwt
    assert len(counted) == 3 + verify.CACHED_FILES


def test_a_key_reference_that_is_a_url_or_a_directory(workdir: Path) -> None:
    """Key References are judged as deliverables are: a URL is not checked, a directory is found when
    no line is named."""
    verifier = Verifier(workdir)
    references = [
        Reference(item="owasp", location="https://owasp.org/Top10", file="https://owasp.org/Top10"),
        Reference(
            item="blob",
            location="https://github.com/a/b/blob/main/x.py:3",
            file="https://github.com/a/b/blob/main/x.py",
            line=3,
        ),
        Reference(item="link", location="[OWASP](https://owasp.org/Top10)"),
        Reference(item="src", location="src/", file="src/"),
        Reference(item="auth", location="`src/auth`", file="src/auth"),
        Reference(item="gone", location="lib/", file="lib/"),
        Reference(item="dir line", location="src/auth:3", file="src/auth", line=3),
        Reference(item="out", location="../", file="../"),
    ]
    report = ResultReport(
        agent="Explorer", status=ResultStatus.SUCCESS, summary="s", key_references=references
    )
    checked = verifier.result(report).key_references
    assert [r.verified for r in checked] == [None, None, None, True, True, False, False, False]
    assert verifier.finding(Finding(title="a directory", file="src/auth")).verified is False


@pytest.mark.timeout(20)
def test_a_fifo_in_a_files_place_is_not_waited_on(tmp_path: Path) -> None:
    """A file checked as regular and swapped for a FIFO before its lines are counted: the open would wait
    for a writer for ever; it is refused at once (the reference is then not verified)."""
    fifo = tmp_path / "a.py"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        verify._line_count(fifo, 1)


def test_a_line_of_a_huge_file_is_found_without_reading_the_file_to_its_end(tmp_path: Path) -> None:
    """Line 1 of a file of a gigabyte is at its start: the count stops there (the whole file, which ends in
    a line of zeros without a newline, would have 2)."""
    huge = tmp_path / "huge.bin"
    huge.write_bytes(b"first line\n")
    os.truncate(huge, 1 << 30)  # sparse: no disk
    assert verify._line_count(huge, 1) == (1, False)
