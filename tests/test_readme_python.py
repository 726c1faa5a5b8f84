"""The README's Python example runs as written: a finding published, a coordinator applies it, a
consumer group of the script's own follows the findings stream."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bus.cli import main

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def test_the_readme_python_example_publishes_and_follows(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    [code] = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    example: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(code, "README.md", "exec"), example)
    asyncio.run(example["publish"](redis_url))
    applied = CliRunner().invoke(main, ["coordinator", "--burst", "--redis-url", redis_url])
    assert applied.exit_code == 0, applied.output
    capsys.readouterr()
    asyncio.run(example["follow"](redis_url))
    assert capsys.readouterr().out == "SQL built from input\n"
