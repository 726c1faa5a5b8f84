"""The launch marks (agents.launch_marks): made and locked before the start, the lock held by the adapter
that inherited it, written once the start returned; with real processes and real locks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agents.launch_marks import hold, says_started, written


def test_a_mark_says_started_while_the_process_it_was_passed_to_runs_and_once_written(tmp_path: Path) -> None:
    mark = tmp_path / "r.started"
    held = hold(mark)
    assert held is not None and mark.exists()
    adapter = subprocess.Popen(  # as the launcher starts one: the descriptor passed on
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, pass_fds=(held,)
    )
    os.close(held)  # the launcher, killed before it wrote the mark
    try:
        assert says_started(mark)  # the adapter runs: started
    finally:
        adapter.communicate(b"", timeout=30)
    assert not says_started(mark)  # empty, and nobody holds it
    written(mark)
    assert says_started(mark)


def test_a_mark_made_before_a_start_that_never_came_says_not_started(tmp_path: Path) -> None:
    mark = tmp_path / "r.started"
    held = hold(mark)
    assert held is not None
    assert says_started(mark)  # the launcher itself holds it while it starts the adapter
    os.close(held)  # killed before the start
    assert not says_started(mark)
    assert not says_started(tmp_path / "missing.started")
