"""Protocol 1: the identity statement is seed 000's, verbatim, and the templates never parse as signals."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from adapter_kit import CLI
from click.testing import CliRunner

from agents.cli import prompt
from agents.identity import IDENTITY_STATEMENT, RESULT_TEMPLATE, SIGNAL_TEMPLATES, build_prompt
from agents.parser import SIGNAL_TYPES, ErrorItem, ResultItem, SignalItem, parse_text
from bus.findings import Severity
from bus.results import ResultStatus

SEED = (Path(__file__).parent / "data" / "seed_000_signals.md").read_text()


def test_identity_statement_is_the_seeds_text() -> None:
    block = re.search(r"```markdown\n(## EXECUTION CONTEXT: BACKGROUND SUBAGENT\n.*?)```", SEED, re.S)
    assert block is not None
    assert block.group(1) == IDENTITY_STATEMENT


def test_the_four_templates_are_the_seeds_signal_formats() -> None:
    formats = re.findall(r"### Signal Format\n\n```yaml\n(.*?)\n```", SEED, re.S)
    assert len(formats) == 4
    assert list(SIGNAL_TEMPLATES[:4]) == formats
    assert SIGNAL_TEMPLATES[4].startswith(
        "[PROGRESS]\nagent_id: <agent-id>\ntimestamp: <ISO-8601-timestamp>\n"
    )


def test_prompt_layout() -> None:
    text = build_prompt("  Analyze the codebase for security issues\n- Scan for secrets\n", "bg-task-abc123")
    assert text.startswith(IDENTITY_STATEMENT)
    assert "Use `agent_id: bg-task-abc123` in every signal you emit." in text
    for template in SIGNAL_TEMPLATES:
        assert template in text
    assert f"```markdown\n{RESULT_TEMPLATE}\n```" in text
    # the merge key: a finding's category is its ID's prefix when it names none
    assert "merged only when their categories agree" in " ".join(text.split())
    assert text.index("## PROTOCOL SIGNALS") < text.index("## RESULT REPORT") < text.index("## YOUR TASK")
    assert text.endswith("## YOUR TASK\nAnalyze the codebase for security issues\n- Scan for secrets\n")
    assert text.index("## PROTOCOL SIGNALS") < text.index("## YOUR TASK")


def test_an_echoed_prompt_or_a_quoted_template_yields_nothing() -> None:
    assert parse_text(build_prompt("Do it", "a1")) == []
    quoted = "".join(
        f"- The format:\n\n    {t.replace(chr(10), chr(10) + '    ')}\n" for t in SIGNAL_TEMPLATES
    )
    assert parse_text(quoted.replace("\n", "\r\n")) == []
    # a signal the agent began to fill in is one it sends: it is an error, which the adapter reports
    for template, kind in zip(SIGNAL_TEMPLATES, SIGNAL_TYPES, strict=True):
        [item] = parse_text(template.replace("<agent-id>", "a1").replace("<requesting-agent-id>", "a1"))
        assert isinstance(item, ErrorItem)
        assert item.type is kind


def test_the_result_template_filled_in_is_a_report_whose_findings_reach_the_parent() -> None:
    filled = RESULT_TEMPLATE
    for placeholder, value in [
        ("[Agent Name]", "Security Auditor"),
        ("[SUCCESS | PARTIAL | FAILED]", "SUCCESS"),
        ("[2-3 sentence summary of what was accomplished or found]", "Reviewed the auth module."),
        ("[SEC-001]", "SEC-001"),
        ("[What is wrong]", "Hardcoded JWT secret"),
        ("[file:line]", "src/config/jwt.ts:8"),
        ("[critical/important/minor]", "critical"),
        ("[0-100]", "90"),
    ]:
        assert placeholder in filled
        filled = filled.replace(placeholder, value)
    [item] = parse_text(filled)
    assert isinstance(item, ResultItem)
    report = item.report
    assert (report.agent, report.status, report.summary) == (
        "Security Auditor",
        ResultStatus.SUCCESS,
        "Reviewed the auth module.",
    )
    [finding] = report.findings
    assert (finding.id, finding.file, finding.line, finding.severity, finding.confidence) == (
        "SEC-001",
        "src/config/jwt.ts",
        8,
        Severity.CRITICAL,
        90,
    )
    assert report.confidence is not None and report.confidence.verified == 90
    assert report.confidence.detailed is not None and report.confidence.detailed.score == 90
    assert report.violations == []


def test_prompt_command_reads_a_file_or_stdin(tmp_path: Path) -> None:
    task = tmp_path / "task.md"
    task.write_text("Scan for TODO comments, generate TODO_LIST.md\n")
    done = subprocess.run([CLI, "prompt", "--agent-id", "a7", str(task)], capture_output=True, check=True)
    assert done.stdout.decode() == build_prompt(task.read_text(), "a7")
    piped = subprocess.run(
        [CLI, "prompt", "--agent-id", "a7"], input=task.read_bytes(), capture_output=True, check=True
    )
    assert piped.stdout == done.stdout


def test_prompt_command_errors() -> None:
    runner = CliRunner()
    empty = runner.invoke(prompt, ["--agent-id", "a1", "-"], input="  \n")
    assert empty.exit_code == 2
    assert "the task is empty" in empty.output
    missing = runner.invoke(prompt, ["--agent-id", "a1", "/no/such/task.md"])
    assert missing.exit_code == 2
    assert "cannot read /no/such/task.md" in missing.output
    assert runner.invoke(prompt, ["task.md"]).exit_code == 2  # --agent-id is required


def test_the_prompt_writes_an_agent_id_that_yaml_would_read_otherwise_quoted() -> None:
    """An id such as ``*star`` is an alias in YAML, ``a #1`` a comment, ``1234`` a number: a signal
    written as the prompt says must name the agent all the same."""
    for agent_id in ["*star", "- dash", "a #1", "{c}", "1234", "true", "a: b", "bg-task-1"]:
        line = next(line for line in build_prompt("Task.", agent_id).splitlines() if line.startswith("Use `"))
        written = line.split("`agent_id: ", 1)[1].split("` in every signal", 1)[0]
        assert (written == agent_id) is (agent_id == "bg-task-1"), written
        signal = (
            f"[PROGRESS]\nagent_id: {written}\ntimestamp: 2026-01-11T08:45:00Z\npercent: 5\n[/PROGRESS]\n"
        )
        [item] = parse_text(signal)
        assert isinstance(item, SignalItem) and item.payload.agent_id == agent_id, item
