"""The resume prompt an agent asks for (coordinator.rules.asked)."""

from __future__ import annotations

import pytest

from coordinator.rules.asked import asked_resume


@pytest.mark.parametrize(
    ("text", "asked"),
    [
        (
            'Then resume with: "Dependencies installed, continue with npm audit scan"',
            "Dependencies installed, continue with npm audit scan",
        ),
        (
            'Resume: When new agent completes, resume with "Infrastructure ready, continue testing"',
            "Infrastructure ready, continue testing",
        ),
        ("RESUME WITH “ Typographic quotes ”", "Typographic quotes"),
        ("Run: npm install (in parent session)", None),
        ('resume with: ""', None),
        ('resume with "   "', None),
        ('resume with "an unclosed quote\nthat goes on"', None),
        (None, None),
    ],
)
def test_the_prompt_quoted_after_resume_with(text: str | None, asked: str | None) -> None:
    assert asked_resume(text) == asked
