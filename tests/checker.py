"""Compares what was published with what the coordinators applied.

The crash tests publish FINDING envelopes titled ``<agent>#<n>``, n counting up per agent. The coordinator
appends each applied finding to the append-only findings stream in commit order, so reading that stream
back tells, per agent, which were applied, how often, and in which order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bus.connection import Client
from bus.envelope import Envelope, new_envelope
from bus.findings import Finding
from bus.keys import Keys
from coordinator.view import iter_findings, load_groups

__all__ = ["Report", "check", "numbered_findings", "state_mismatches"]


def numbered_findings(agents: int, per_agent: int, groups: int = 4) -> list[Envelope]:
    """``agents * per_agent`` findings, interleaved across agents, each agent's numbered in order."""
    out = []
    for n in range(per_agent):
        for a in range(agents):
            agent = f"agent-{a}"
            finding = Finding(
                title=f"{agent}#{n}", file=f"src/{agent}.py", line=1, confidence=50, agent=agent
            )
            out.append(
                new_envelope(finding, agent_id=agent, group_id=f"group-{a % groups}", source="checker")
            )
    return out


@dataclass(frozen=True)
class Report:
    published: int
    applied: int
    lost: int
    duplicated: int
    out_of_order: int
    unexpected: int

    @property
    def clean(self) -> bool:
        return self.applied == self.published and not (
            self.lost or self.duplicated or self.out_of_order or self.unexpected
        )


async def applied_titles(client: Client, keys: Keys) -> list[str]:
    return [finding.title async for _, finding, _, _ in iter_findings(client, keys)]


async def check(client: Client, keys: Keys, published: list[Envelope]) -> Report:
    """Lost, duplicated, unexpected and out-of-order counts of the applied findings."""
    expected = [e.payload.title for e in published if isinstance(e.payload, Finding)]
    titles = await applied_titles(client, keys)
    counts = Counter(titles)
    expected_set = set(expected)
    last: dict[str, int] = {}
    inversions = 0
    for title in titles:
        agent, _, n = title.rpartition("#")
        if int(n) < last.get(agent, -1):
            inversions += 1
        last[agent] = int(n)
    return Report(
        published=len(expected),
        applied=len(titles),
        lost=len(expected_set - set(counts)),
        duplicated=sum(c - 1 for c in counts.values() if c > 1),
        out_of_order=inversions,
        unexpected=len(set(counts) - expected_set),
    )


async def state_mismatches(client: Client, keys: Keys) -> dict[str, tuple[int, int]]:
    """Agents whose applied count in the committed group states differs from their findings in the stream.

    Valid when the agents sent nothing but findings (as the fault scenarios do): each applied finding
    counts once for its agent in the state and appears once in the findings stream, both written by the
    same commit. Returns ``{agent: (applied in state, findings in stream)}`` for every disagreement.
    """
    in_stream = Counter([agent async for _, _, agent, _ in iter_findings(client, keys)])
    in_state: dict[str, int] = {}
    for state in await load_groups(client, keys):
        for agent_id, record in state.agents.items():
            in_state[agent_id] = in_state.get(agent_id, 0) + record.applied
    return {
        agent: (in_state.get(agent, 0), in_stream.get(agent, 0))
        for agent in sorted(set(in_state) | set(in_stream))
        if in_state.get(agent, 0) != in_stream.get(agent, 0)
    }
