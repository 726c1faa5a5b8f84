"""The coordinator's rules: pure functions from (group state, envelope, policy) to an outcome.

The service loop loads a group's state, calls :func:`apply` for each entry of the group in stream order
(the entries of one batch in one :class:`~coordinator.rules.run.Run`), and commits the final state,
every emitted envelope and the acknowledgement together.
"""

from __future__ import annotations

from coordinator.rules.apply import apply
from coordinator.rules.contract import check_result, estimate_tokens
from coordinator.rules.delegation import Evaluation, Verdict, evaluate
from coordinator.rules.findings import MergedFinding, merge_findings, merged_view
from coordinator.rules.outcome import Emit, Outcome, Target
from coordinator.rules.summary import GroupSummary, summarize

__all__ = [
    "Emit",
    "Evaluation",
    "GroupSummary",
    "MergedFinding",
    "Outcome",
    "Target",
    "Verdict",
    "apply",
    "check_result",
    "estimate_tokens",
    "evaluate",
    "merge_findings",
    "merged_view",
    "summarize",
]
