"""A scripted stand-in for a real agent: it knows nothing of the bus, it only prints.

    fake_agent.py [--out PATH] [--format text|jsonl] [--agent-id ID] [--resumed PROMPT]
                  [--record PATH] [--pace SECONDS] STEP...

It prints prose and protocol blocks over time (each block in two writes, so readers see it split),
waits for a directive by watching a response file, or is re-run with a resume prompt, and can crash.
Steps: say:TEXT  progress:N  many:N  burst:N  clarify  stop  delegate[:INDEPENDENCE]  complete[:FILE,FILE]
result:FILE:LINE  await:PATH  wait-file:PATH  sleep:SECONDS  crash:CODE
save-on-term:PATH (from then on SIGTERM is noted in PATH, and the agent saves its work, notes that too
and exits 0)  loud-save-on-term:PATH (the same, and it prints 1 MiB as it saves)
ignore-term:PATH (SIGTERM is noted in PATH, and ignored)
unless-prompt:TEXT=STEP and if-prompt:TEXT=STEP (STEP only when the --prompt-file and the --resumed
prompt do not contain TEXT, or when one does).
Only the standard library is used, like any program that was never written for this project.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

SESSION = "5d1c7e0a-9a0b-4f5e-8f0d-3c2b1a090807"
END = "<!-- end of directive"
LOUD_SAVE = 1 << 20
"""What ``loud-save-on-term`` prints as it saves its work, in bytes."""


def now() -> str:
    return datetime.now(UTC).isoformat()


class Output:
    def __init__(self, out: BinaryIO, fmt: str, agent_id: str, pace: float) -> None:
        self.out, self.fmt, self.agent_id, self.pace = out, fmt, agent_id, pace

    def raw(self, data: bytes) -> None:
        self.out.write(data)
        self.out.flush()

    def text(self, text: str, split: bool = False) -> None:
        """One message: a text (plain) or one assistant line (jsonl); ``split`` writes it in two parts."""
        if self.fmt == "jsonl":
            entry = {
                "parentUuid": None,
                "isSidechain": True,
                "sessionId": SESSION,
                "agentId": self.agent_id,
                "type": "assistant",
                "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
            }
            data = (json.dumps(entry) + "\n").encode()
        else:
            data = (text + "\n").encode()
        if split:
            half = len(data) // 2
            self.raw(data[:half])
            time.sleep(0.05)
            self.raw(data[half:])
        else:
            self.raw(data)
        if self.pace:
            time.sleep(self.pace)

    def prompt(self, text: str) -> None:
        """The user prompt line of a transcript (templates included); plain text prints nothing."""
        if self.fmt == "jsonl":
            entry = {
                "type": "user",
                "sessionId": SESSION,
                "agentId": self.agent_id,
                "isSidechain": True,
                "message": {"role": "user", "content": text},
            }
            self.raw((json.dumps(entry) + "\n").encode())


def block(tag: str, body: str) -> str:
    return f"```yaml\n[{tag}]\n{body.strip()}\n[/{tag}]\n```"


def step(out: Output, agent: str, name: str, arg: str, prompt: str = "") -> None:
    if name in ("unless-prompt", "if-prompt"):
        text, _, then = arg.partition("=")
        if (text in prompt) is (name == "if-prompt"):
            then_name, _, then_arg = then.partition(":")
            step(out, agent, then_name, then_arg, prompt)
    elif name == "say":
        out.text(arg)
    elif name == "progress":
        out.text(
            block("PROGRESS", f"agent_id: {agent}\ntimestamp: {now()}\npercent: {arg}\nmessage: step {arg}"),
            split=True,
        )
    elif name == "many":
        for i in range(int(arg)):
            out.text(f"Working on item {i}; nothing to report yet.")
            out.text(
                block(
                    "PROGRESS",
                    f"agent_id: {agent}\ntimestamp: {now()}\npercent: {i % 100}\nmessage: item {i}",
                ),
                split=True,
            )
    elif name == "burst":  # N blocks in one write: more than a reader takes in at once
        blocks = (
            block("PROGRESS", f"agent_id: {agent}\npercent: {i % 100}\nmessage: item {i} {'.' * 100}")
            for i in range(int(arg))
        )
        out.text("\n".join(blocks))
    elif name == "clarify":
        out.text(
            block(
                "CLARIFICATION_NEEDED",
                f"""
agent_id: {agent}
timestamp: {now()}
blocked_at: Analyzing authentication patterns in src/auth/
reason: Multiple authentication strategies found
questions:
  - question_id: Q1
    text: Should I analyze OAuth2, JWT, or both?
    context: Both are present
can_resume_with: Which strategies to analyze
current_state: Secret scanning done""",
            ),
            split=True,
        )
    elif name == "stop":
        fields = (  # `stop:completion`: the seed's stop that reports the work done
            "stop_reason: completion\ndetails: All done\ncompleted_work: Scanned every module"
            if arg == "completion"
            else "stop_reason: blocker\nblocker_type: external_dependency\ndetails: node_modules is missing\n"
            "resume_requirements: Run npm install"
        )
        out.text(block("STOP_WORK", f"\nagent_id: {agent}\ntimestamp: {now()}\n{fields}"), split=True)
    elif name == "delegate":
        out.text(
            block(
                "DELEGATE_WORK",
                f"""
agent_id: {agent}
timestamp: {now()}
delegation_reason: Discovered a refactoring that should run in parallel with the analysis
new_task_description: Refactor the authentication module to one AuthProvider interface and update every consumer
independence: {arg or "can_proceed_parallel"}
priority: P1
coordination: This agent continues the analysis""",
            ),
            split=True,
        )
    elif name == "complete":
        files = "".join(f"\n  - {f} (generated)" for f in arg.split(",") if f)
        out.text(
            block(
                "COMPLETION_REPORT",
                f"""
agent_id: {agent}
timestamp: {now()}
status: success
deliverables: |
  Generated files:{files or chr(10) + "  - (none)"}
summary: Finished the task
total_duration: 1m""",
            ),
            split=True,
        )
    elif name == "result":
        file, _, line = arg.rpartition(":")
        out.text(
            f"""## Explorer Result

### Status
SUCCESS

### Summary
Looked at the code.

### Key References
| Item | Location | Relevance |
|------|----------|-----------|
| main entry | {file}:{line} | where it starts |

### Confidence
60
""",
            split=True,
        )
    elif name == "await":
        await_directive(out, Path(arg))
    elif name == "wait-file":
        deadline = time.monotonic() + 60
        while not Path(arg).exists():
            if time.monotonic() > deadline:
                sys.exit(4)
            time.sleep(0.02)
    elif name == "sleep":
        time.sleep(float(arg))
    elif name == "save-on-term":
        signal.signal(signal.SIGTERM, lambda *_: save_and_exit(Path(arg)))
    elif name == "loud-save-on-term":  # more than a pipe holds: it blocks unless its output is read
        signal.signal(signal.SIGTERM, lambda *_: save_and_exit(Path(arg), out, LOUD_SAVE))
    elif name == "ignore-term":
        signal.signal(signal.SIGTERM, lambda *_: note(Path(arg), "SIGTERM"))
    elif name == "crash":
        print(
            "Traceback (most recent call last):\n  File \"analyze.py\", line 142\nTypeError: cannot read 'length'",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(int(arg))
    else:
        raise SystemExit(f"unknown step {name!r}")


def note(path: Path, text: str) -> None:
    with path.open("a") as record:
        record.write(text + "\n")


def save_and_exit(path: Path, out: Output | None = None, printed: int = 0) -> None:
    note(path, "SIGTERM")
    time.sleep(0.3)  # the work an agent does to save its session
    if out is not None:
        for _ in range(printed // 1024):
            out.raw(b"saving " + b"." * 1016 + b"\n")
    note(path, "saved")
    sys.exit(0)


def await_directive(out: Output, path: Path) -> None:
    """Wait for the next directive in a response file (one more end marker than already consumed)."""
    seen = getattr(await_directive, "seen", 0)
    deadline = time.monotonic() + 60
    while True:
        text = path.read_text() if path.exists() else ""
        if text.count(END) > seen:
            break
        if time.monotonic() > deadline:
            sys.exit(4)
        time.sleep(0.02)
    await_directive.seen = seen + 1  # type: ignore[attr-defined]
    directive = text.split(END)[seen].strip()
    acknowledge(out, directive)


def acknowledge(out: Output, prompt: str) -> None:
    heading = next((line for line in prompt.splitlines() if line.startswith("## ")), "## (no heading)")
    answers = [line for line in prompt.splitlines() if line.startswith("A")]
    out.text(f"## CLARIFICATION RECEIVED\n\nGot: {heading[3:]}\n" + "\n".join(f"- {a}" for a in answers))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="-")
    parser.add_argument("--format", default="text", choices=["text", "jsonl"])
    parser.add_argument("--agent-id", default="fake-agent")
    parser.add_argument("--resumed")
    parser.add_argument("--prompt-file")
    parser.add_argument("--record")
    parser.add_argument("--pace", type=float, default=0.0)
    parser.add_argument("steps", nargs="*")
    args = parser.parse_args()
    stream = sys.stdout.buffer if args.out == "-" else open(args.out, "ab")  # noqa: SIM115
    out = Output(stream, args.format, args.agent_id, args.pace)
    if args.record:
        with open(args.record, "a") as record:
            record.write(f"start {time.time()} {args.agent_id}\n")
    try:
        task = ""
        if args.prompt_file:
            task = Path(args.prompt_file).read_text()
            out.prompt(task)
            out.text(f"Read my task ({len(task)} characters).")
        if args.resumed is not None:
            acknowledge(out, args.resumed)
        for item in args.steps:
            name, _, arg = item.partition(":")
            step(out, args.agent_id, name, arg, task + (args.resumed or ""))
    finally:
        if args.record:
            with open(args.record, "a") as record:
                record.write(f"end {time.time()} {args.agent_id}\n")


if __name__ == "__main__":
    main()
