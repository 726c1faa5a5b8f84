"""The text signals of the protocol (seed 000) as payload models.

Each model holds every field of the seed's signal format. Fields the seed's own examples leave out
(the error STOP_WORK has no ``timestamp``, ``blocked_work`` or ``resume_requirements``) are optional;
the fields a parent cannot act without are required, and a required text must say something (not
blank). Signals are open models: an agent that adds a field keeps it rather than failing, since the
protocol is hand-written YAML and grows (see the README). The closed sets (a stop reason, a priority...)
are :class:`~bus.fields.LenientEnum`: ``SUCCESS`` or ``can proceed parallel`` is the seed's value.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final, Self

from pydantic import ConfigDict, Field, field_validator, model_validator

from bus.fields import LenientEnum, NonBlankText, OpenModel, Percent, SignalTimestamp, Text
from bus.quoting import quoted

__all__ = [
    "DELIVERABLES_VERIFIED",
    "BlockerType",
    "ClarificationNeeded",
    "CompletionReport",
    "CompletionStatus",
    "DelegateWork",
    "Independence",
    "Priority",
    "Progress",
    "Question",
    "QuestionType",
    "StopReason",
    "StopWork",
    "recap_key",
]


DELIVERABLES_VERIFIED: Final = "deliverables_verified"
"""The extra field of a COMPLETION_REPORT in which an adapter with ``--workdir`` notes its deliverables'
checks."""


class QuestionType(LenientEnum):
    BLOCKING = "blocking"
    OPTIONAL = "optional"
    REQUIRED = "required"


class Question(OpenModel):
    question_id: str
    text: NonBlankText
    context: Text | None = None
    type: QuestionType | None = None
    options: list[Text] | None = None
    current_assumption: Text | None = None


def _with_ids(questions: list[Any]) -> list[Any]:
    """``questions`` with an id for each one written without: as plain text (seed 003's diagram writes
    ``questions: [Q1, Q2]``, which is then the text) or as a mapping with no ``question_id`` (or a blank
    one, which no answer could name).

    Such a question is ``Q<n>``, ``n`` its position from 1, or the next number whose id no other question
    of the list has (compared without case), so an answer can name it. Anything else is left to the model
    to validate.
    """
    used = {str(q["question_id"]).strip().casefold() for q in questions if not _without_id(q)}
    out: list[Any] = []
    number = 0
    for position, question in enumerate(questions, start=1):
        if isinstance(question, str):
            fields: dict[Any, Any] = {"text": question}
        elif isinstance(question, dict) and _without_id(question):
            fields = {key: item for key, item in question.items() if key != "question_id"}
        else:
            out.append(question)
            continue
        number = max(number + 1, position)  # never back: each id in use is stepped over once at most
        while f"q{number}" in used:
            number += 1
        out.append({"question_id": f"Q{number}", **fields})
    return out


def _listed(questions: Any) -> Any:
    """``questions`` as the seed's list when written as one question (a text, or a mapping of a question's
    fields) or as a mapping of ids to questions (``Q1: Which strategy?``, or ``Q1:`` and its fields)."""
    if isinstance(questions, str):
        return [questions]
    if not isinstance(questions, dict):
        return questions
    if questions.keys() & Question.model_fields.keys():  # `type: blocking` is no question named `type`
        return [questions]
    return [_keyed(str(key), item) for key, item in questions.items()]


def _keyed(question_id: str, question: Any) -> Any:
    """A question written under its id: the id is its ``question_id``, unless it names one of its own."""
    if not isinstance(question, dict):
        return {"question_id": question_id, "text": question}
    return {**question, "question_id": question_id} if _without_id(question) else question


def _without_id(question: Any) -> bool:
    """Whether a question (a mapping) names no id: none, or a blank one, which no answer could name."""
    if not isinstance(question, dict):
        return True
    given = question.get("question_id")
    return given is None or (isinstance(given, str) and not given.strip())


class ClarificationNeeded(OpenModel):
    """``[CLARIFICATION_NEEDED]``: the agent needs answers before it can go on."""

    agent_id: str
    timestamp: SignalTimestamp | None = None
    blocked_at: NonBlankText
    reason: NonBlankText
    questions: list[Question] = Field(
        min_length=1, description="At least one; each question_id different (an answer names its question)."
    )
    can_resume_with: Text | None = None
    current_state: Text | None = None
    work_continues: bool | None = None
    parallel_work_available: bool | Text | None = None

    @field_validator("questions", mode="before")
    @classmethod
    def _numbered(cls, value: Any) -> Any:
        value = _listed(value)
        return _with_ids(value) if isinstance(value, list) else value

    @model_validator(mode="after")
    def _distinct_questions(self) -> ClarificationNeeded:
        """An answer names its question: two questions with one id could not be told apart."""
        counts = Counter(q.question_id for q in self.questions)
        twice = sorted(i for i, n in counts.items() if n > 1)
        if twice:
            named = ", ".join(quoted(i) for i in twice[:3]) + (
                f" and {len(twice) - 3} more" if len(twice) > 3 else ""
            )
            raise ValueError(
                f"question ids must differ: {named} {'is' if len(twice) == 1 else 'are'} used more than once"
            )
        return self


class StopReason(LenientEnum):
    BLOCKER = "blocker"
    ERROR = "error"
    # Accepted for compatibility with the seed's field comment; a finished agent should send
    # COMPLETION_REPORT, and the coordinator treats this reason as a completion (see the README).
    COMPLETION = "completion"


class BlockerType(LenientEnum):
    MISSING_INFO = "missing_info"
    EXTERNAL_DEPENDENCY = "external_dependency"
    ERROR = "error"
    RESOURCE_LIMIT = "resource_limit"


class StopWork(OpenModel):
    """``[STOP_WORK]``: the agent cannot proceed without the parent."""

    # The JSON Schema says what the validator below checks, so that a schema-valid envelope of another
    # language's publisher is never dead-lettered for it.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {
                "properties": {"stop_reason": {"const": StopReason.BLOCKER.value}},
                "required": ["stop_reason"],
            },
            "then": {"required": ["blocker_type"], "properties": {"blocker_type": {"not": {"type": "null"}}}},
        }
    )

    agent_id: str
    timestamp: SignalTimestamp | None = None
    stop_reason: StopReason
    blocker_type: BlockerType | None = None
    """Required with ``stop_reason: blocker``; an error's is implied, and none fits a completion."""
    details: NonBlankText
    completed_work: Text | None = None
    blocked_work: Text | None = None
    state_snapshot: Text | None = None
    resume_requirements: Text | None = None
    error_recovery: Text | None = None

    @model_validator(mode="after")
    def _blocker_type_given(self) -> Self:
        if self.blocker_type is None and self.stop_reason is StopReason.BLOCKER:
            raise ValueError(f"blocker_type is required with stop_reason: {self.stop_reason.value}")
        return self

    @property
    def kind(self) -> str:
        """The blocker type, or the stop reason when it has none (an error, a completion)."""
        return (self.blocker_type or self.stop_reason).value


def recap_key(signal: ClarificationNeeded | StopWork) -> str | None:
    """A dated question's or stop's fingerprint (its fields, timestamp included): the same block printed
    again, once it was answered or resolved, is a recap of it; None for an undated one, which nothing
    tells from the same one asked anew."""
    return None if signal.timestamp is None else _digest(signal)


def _digest(signal: OpenModel) -> str:
    """The first 16 hex digits of SHA-256 over the signal's fields (its JSON)."""
    return hashlib.sha256(signal.model_dump_json().encode()).hexdigest()[:16]


class Independence(LenientEnum):
    CAN_PROCEED_PARALLEL = "can_proceed_parallel"
    BLOCKS_CURRENT_WORK = "blocks_current_work"
    OPTIONAL = "optional"


class Priority(LenientEnum):
    P0 = "P0"
    P1 = "P1"
    P2 = "P2"


class DelegateWork(OpenModel):
    """``[DELEGATE_WORK]``: the agent asks for another background agent."""

    agent_id: str
    timestamp: SignalTimestamp | None = None
    delegation_reason: NonBlankText
    new_task_description: NonBlankText
    independence: Independence
    priority: Priority
    context_required: Text | None = None
    coordination: Text | None = None
    estimated_duration: Text | None = None

    def request_id(self, requester: str | None = None) -> str:
        """A stable id for this request; the seed's signal has none.

        It hashes every field, so the same signal parsed twice (or re-published after a crash) names the
        same request, and two different requests never share one: a request asked again with a better
        ``delegation_reason`` is a new one, whatever its timestamp. ``requester`` is the agent whose output
        it is (the envelope's); its ``agent_id`` stands for the one the signal names, which may be a
        placeholder or an example's, so that two agents that print the same block make two requests.
        """
        named = (
            self if requester in (None, self.agent_id) else self.model_copy(update={"agent_id": requester})
        )
        return f"dlg-{_digest(named)}"


class CompletionStatus(LenientEnum):
    SUCCESS = "success"
    PARTIAL_SUCCESS = "partial_success"
    FAILED = "failed"

    @classmethod
    def aliases(cls) -> Mapping[str, Self]:
        """The result contract's PARTIAL (its SUCCESS and FAILED match in any case)."""
        return {"partial": cls.PARTIAL_SUCCESS}


class CompletionReport(OpenModel):
    """``[COMPLETION_REPORT]``: the agent finished (well or not) and lists what it delivered."""

    agent_id: str
    timestamp: SignalTimestamp | None = None
    status: CompletionStatus
    deliverables: Text | None = None
    summary: NonBlankText | None = None
    """Optional, as in seed 003's diagram of the report (status, deliverables, metrics, recommendations):
    the status is what the parent acts on."""
    metrics_achieved: Text | None = None
    issues_encountered: Text | None = None
    recommendations: Text | None = None
    total_duration: Text | None = None

    def unverified_deliverables(self) -> list[str]:
        """The deliverables an adapter with ``--workdir`` did not find: those its extra field
        ``deliverables_verified`` (one ``{path, verified}`` per deliverable) marks not verified. Anything
        else in that field (a hand-written signal may hold anything there) is not read."""
        checks = (self.model_extra or {}).get(DELIVERABLES_VERIFIED)
        if not isinstance(checks, list):
            return []
        return [
            check["path"]
            for check in checks
            if isinstance(check, dict)
            and check.get("verified") is False
            and isinstance(check.get("path"), str)
        ]


class Progress(OpenModel):
    """``[PROGRESS]``: the progress-reporting extension of seed 000 (percent complete, ETA)."""

    agent_id: str
    timestamp: SignalTimestamp | None = None
    percent: Percent
    message: Text | None = None
    eta: Text | None = None
