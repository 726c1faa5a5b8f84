"""Findings: the append-only stream and the merged (deduplicated) view (seed 001, aggregation protocol).

Deduplication. Two reports are the same finding when they have the same ``file:line`` and category
(:func:`slot_key`: the path normalised, the category compared without case; the category comes from the
id prefix when a report names none).
A report without a line number names no place precisely enough to merge on, so it is only merged with
reports of the same location, category *and* id (or title, when it has no id).

Per finding, each reporting agent (by normalised agent name, see :func:`coordinator.policy.agent_key`)
counts once, with its highest-confidence report. The merged finding shows the highest-confidence report
of all, and:

- ``confidence`` = the average of the agents' confidences weighted by their expertise weights
  (``Policy.expertise``, default 1.0), plus ``Policy.agreement_bonus`` when two or more distinct agents
  report it, capped at 100. The bonus is added **once**, not per extra agent: agreement is evidence that
  the finding is real, and stacking it would let three weak reports outrank one verified one. The seed's
  example: security-auditor 95 and qa-engineer 78 with equal weights -> (95 + 78) / 2 + 10 = 96.5.
- ``severity_conflict`` is set when the agents' reports name different severities; the coordinator
  announces it once per merged finding for human review (seed 001: conflicting findings are flagged for
  human review), and counts the group's merged findings in conflict (``GroupState.severity_conflicts``):
  while any is, a settled group's status is ``review`` rather than ``continue``. A conflict that a
  report's replacement ended is forgotten (and uncounted), so a later one is announced again.

Everything here is independent of the order in which reports arrive: ties are broken on the report's
canonical JSON and sums run in agent-name order, so the merged view of a set of reports is one value.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from functools import lru_cache
from typing import Final

import orjson

from bus.events import DecisionType
from bus.fields import Model
from bus.findings import Finding, Severity
from coordinator.policy import Policy, agent_key
from coordinator.rules.aggregation import report_group
from coordinator.rules.outcome import Target
from coordinator.rules.step import Step
from coordinator.rules.trusted import compact, construct, evolve
from coordinator.state import FindingSlot, GroupState

__all__ = [
    "MergedFinding",
    "fold",
    "merge_findings",
    "merged",
    "merged_view",
    "record_finding",
    "reporter_key",
    "slot_key",
]

_agent_key = lru_cache(maxsize=4096)(agent_key)
"""Agent names repeat on every report; normalising one is a regular expression substitution."""


def reporter_key(name: str) -> str:
    """A report's agent as its slot knows it: the normalised name, or the name as written when nothing is
    left of it (an agent id of punctuation alone, ``[]``, which :func:`record_finding` names so)."""
    return _agent_key(name) or name


class MergedFinding(Model):
    """One deduplicated finding of the merged view."""

    location: str
    category: str
    finding: Finding
    """The highest-confidence report."""
    agents: tuple[str, ...]
    """The distinct agents that reported it, sorted."""
    confidence: float | None
    """Combined confidence (weighted average plus the agreement bonus); none when no report has one."""
    agreement: bool
    severities: tuple[Severity, ...]
    """The distinct severities reported, most severe first."""
    severity_conflict: bool


def slot_key(finding: Finding) -> tuple[str, str, str]:
    """``(location, category, discriminator)``: reports with equal keys are one finding. The path is
    normalised (``./src/a.ts``, ``src\\a.ts`` and ``src/a.ts `` are ``src/a.ts``) and the category compared
    without case or surrounding spaces (``SEC``, ``sec ``): agents write all of these for one place."""
    return _keys(finding)[1]


def _path(file: str) -> str:
    file = file.strip().replace("\\", "/")  # a Windows agent's separators
    normal = posixpath.normpath(file)
    return file if normal == "." else normal


def _place(file: str | None, line: int | None) -> str:
    if file is None:
        return ""
    return f"{_path(file)}:{line}" if line is not None else _path(file)


def _stored_key(key: tuple[str, str, str]) -> str:
    return orjson.dumps(list(key)).decode()


def _keys(finding: Finding) -> tuple[str, tuple[str, str, str]]:
    """The stored key of the finding's slot (the field of the merged hash) and its :func:`slot_key`."""
    fields = finding.__dict__  # one attribute read of the model rather than three or five
    file, line = fields["file"], fields["line"]
    discriminator = "" if file is not None and line is not None else fields["id"] or fields["title"]
    return _keys_of(file, line, fields["category"], discriminator)


@lru_cache(maxsize=4096)
def _keys_of(
    file: str | None, line: int | None, category: str, discriminator: str
) -> tuple[str, tuple[str, str, str]]:
    # Reports come back to the same few places: normalising the path, folding the category's case and
    # writing the key's JSON are done once per place, not once per report.
    key = (_place(file, line), category.strip().casefold(), discriminator)
    return _stored_key(key), key


_SEVERITY_RANK: Final = {severity: -severity.rank for severity in Severity}
_NO_SEVERITY: Final = -len(Severity)


def _rank(finding: Finding) -> tuple[float, int]:
    """Higher is preferred: confidence, then severity (ties are broken by :func:`_canonical`)."""
    confidence = finding.confidence if finding.confidence is not None else -1.0
    severity = _SEVERITY_RANK[finding.severity] if finding.severity is not None else _NO_SEVERITY
    return (confidence, severity)


def _canonical(finding: Finding) -> bytes:
    """A fixed order between different reports of equal rank: their sorted JSON."""
    return orjson.dumps(finding.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)


def _outranks(finding: Finding, other: Finding) -> bool:
    """Whether ``finding`` is preferred to ``other``: by rank, then by canonical JSON."""
    rank, other_rank = _rank(finding), _rank(other)
    if rank != other_rank:
        return rank > other_rank
    # an agent reporting the same finding again (a re-run) gives an equal report: no JSON to compare
    return finding is not other and finding != other and _canonical(finding) > _canonical(other)


def _best(reports: Iterable[Finding]) -> Finding:
    """The preferred report (the first of equal ones, like ``max``)."""
    best: Finding | None = None
    for finding in reports:
        if best is None or _outranks(finding, best):
            best = finding
    if best is None:
        raise ValueError("a finding slot without reports")
    return best


def fold(
    slot: FindingSlot | None,
    finding: Finding,
    key: tuple[str, str, str] | None = None,
    agent: str | None = None,
) -> FindingSlot:
    """Add one report to a finding's slot (a new slot when ``slot`` is none, at ``key``: the report's
    :func:`slot_key`, computed when not given). ``agent`` is the report's normalised agent name, when
    known already."""
    if agent is None:
        agent = reporter_key(finding.agent)
    if slot is None:
        # Built with its report at once: the slot an empty one would be evolved into, for half the cost.
        location, category, discriminator = key or slot_key(finding)
        return construct(
            FindingSlot,
            location=location,
            category=category,
            discriminator=discriminator,
            reports={agent: _kept(finding, agent, {})},
        )
    best = slot.reports.get(agent)
    if best is not None and not _outranks(finding, best):
        return slot
    return evolve(slot, reports={**slot.reports, agent: _kept(finding, agent, slot.reports)})


def compact_slot(slot: FindingSlot) -> FindingSlot:
    """``slot`` with its reports held the way :func:`fold` holds them (read back from storage, a slot's
    reports are validated anew, each with copies of its own)."""
    reports: dict[str, Finding] = {}
    for agent, finding in slot.reports.items():
        reports[agent] = _kept(finding, reporter_key(finding.agent), reports)
    return evolve(slot, reports=reports)


def _kept(finding: Finding, agent: str, others: dict[str, Finding]) -> Finding:
    """The report as a slot keeps it: with the file and category strings of the slot's other reports
    (equal ones: same place), the agent name normalising gave (cached), and a shared fields-set."""
    peer = next(iter(others.values()), None)
    if peer is None:
        return compact(finding, agent=agent)
    return compact(finding, agent=agent, file=peer.file, category=peer.category)


def merged(slot: FindingSlot, policy: Policy) -> MergedFinding:
    """The merged finding of one slot under ``policy``'s weights and bonus."""
    agents = tuple(sorted(slot.reports))
    representative = _best(slot.reports.values())
    severities = tuple(sorted(_severities(slot), key=lambda s: s.rank))
    agreement = len(agents) > 1
    return MergedFinding(
        location=slot.location,
        category=representative.category,  # as written (the slot's is the key's, without case)
        finding=representative,
        agents=agents,
        confidence=_combined(slot, agents, agreement, policy),
        agreement=agreement,
        severities=severities,
        severity_conflict=len(severities) > 1,
    )


def _combined(slot: FindingSlot, agents: tuple[str, ...], agreement: bool, policy: Policy) -> float | None:
    weighted = 0.0
    total = 0.0
    for agent in agents:
        confidence = slot.reports[agent].confidence
        if confidence is None:
            continue
        weight = policy.weight(agent)
        weighted += weight * confidence
        total += weight
    if total == 0:
        return None
    bonus = policy.agreement_bonus if agreement else 0.0
    return min(100.0, weighted / total + bonus)


def merge_findings(findings: Iterable[Finding], policy: Policy) -> list[MergedFinding]:
    """The merged view of raw reports (e.g. a whole findings stream), sorted by location and category.

    This is the function behind a merged listing and behind recomputing the view under new weights.
    """
    slots: dict[tuple[str, str, str], FindingSlot] = {}
    for finding in findings:
        key = slot_key(finding)
        slots[key] = fold(slots.get(key), finding, key)
    return [merged(slots[key], policy) for key in sorted(slots)]


def merged_view(state: GroupState, policy: Policy) -> list[MergedFinding]:
    """The merged view kept in a group's state; equal to :func:`merge_findings` of its findings stream."""
    slots = sorted(state.findings.values(), key=lambda s: (s.location, s.category, s.discriminator))
    return [merged(slot, policy) for slot in slots]


def _severities(slot: FindingSlot) -> set[Severity]:
    return {f.severity for f in slot.reports.values() if f.severity is not None}


def _in_conflict(slot: FindingSlot) -> bool:
    """``len(_severities(slot)) > 1``, without building the set: asked for every report folded."""
    first: Severity | None = None
    for report in slot.reports.values():
        severity = report.severity
        if severity is not None and severity is not first:
            if first is not None:
                return True
            first = severity
    return False


def record_finding(step: Step, finding: Finding, agent_id: str) -> None:
    """Publish one report to the findings stream and fold it into the group's merged view.

    The published report names its agent (normalised name, or the agent id when the agent's kind is
    unknown), so the view can be recomputed from the stream alone. A report that names the sender's own
    id (what ``findings add`` and the MCP tool fill in) names no kind: it is the sender's, as one that
    names none, or one whose name normalises to nothing (``[ ]``: a blank reporter is no one).
    """
    given = finding.agent
    reporter = _agent_key(given) if given and given != agent_id else ""
    if not reporter:  # none given, the sender's own id, or a name of punctuation alone ("[ ]", "**")
        record = step.find(agent_id)
        reporter = _agent_key(record.name if record is not None and record.name else agent_id) or agent_id
    if given != reporter:
        finding = evolve(finding, agent=reporter)
    step.emit(Target.FINDINGS, finding, agent_id)
    key, place = _keys(finding)
    before = step.finding(key)
    slot = fold(before, finding, place, reporter)
    if slot is before:
        return  # an unchanged slot cannot have gained a severity: its conflict, if any, is known already
    conflict = _in_conflict(slot)
    if conflict is not slot.conflict_reported:
        slot = evolve(slot, conflict_reported=conflict)
        _count_conflict(step, slot, agent_id)
    step.put_finding(key, slot)


def _count_conflict(step: Step, slot: FindingSlot, agent_id: str) -> None:
    """A slot's conflict began (announced for human review) or ended (a report's replacement agreed):
    the group's count follows, and so does the status of a group that settled before."""
    if slot.conflict_reported:
        view = merged(slot, step.policy)
        severities = ", ".join(s.value for s in view.severities)
        where = f"{view.location or view.finding.title} [{view.category}]"
        detail = f"{where}: agents {', '.join(view.agents)} disagree on severity ({severities})"
        step.decide(DecisionType.SEVERITY_CONFLICT, agent_id, detail)
    count = step.current("severity_conflicts") + (1 if slot.conflict_reported else -1)
    step.replace(severity_conflicts=max(count, 0))
    if step.current("status") is not None:  # settled once: a conflict may change its verdict
        report_group(step, agent_id)


def on_finding(step: Step) -> None:
    """A FINDING envelope: one report."""
    record_finding(step, step.payload(Finding), step.agent_id)
