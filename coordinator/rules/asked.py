"""The resume prompt an agent asks its parent for, in its own words.

Seed 000's examples end what the parent must do with the prompt to resume the agent with: a stop's
``resume_requirements`` (``Then resume with: "Dependencies installed, continue with npm audit scan"``) and a
blocking delegation's ``coordination`` (``Resume: When new agent completes, resume with "Infrastructure
ready, continue testing"``). That text, quoted after "resume with", becomes the directive's RESUME
INSTRUCTIONS when nothing else is given (a human's ``--instructions``, to ``resolve`` the stop or to
``approve`` the request, still come first).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["asked_resume"]

_ASKED: Final = re.compile(r"""resume\s+with\s*:?\s*["“]([^"”\n]{1,2000})["”]""", re.IGNORECASE)


def asked_resume(text: str | None) -> str | None:
    """The first quoted prompt after "resume with" in ``text``, if there is one that is not blank."""
    found = _ASKED.search(text) if text else None
    return found.group(1).strip() or None if found else None
