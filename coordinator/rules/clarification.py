"""The clarification protocol: questions go to a human, answers come back as a resume directive.

A ``[CLARIFICATION_NEEDED]`` opens the agent's questions (a new one replaces questions still open: the
agent's latest signal says what it needs now; the same dated one again is rejected, keeping the answers
given so far). A human answers with ANSWER envelopes, all at once or one
question at a time; answers accumulate, and once every question that is not marked ``optional`` has
one, the agent gets a CLARIFICATION_RESPONSE (the seed's prompt, each answer under its question's text,
``Continue from`` = ``blocked_at``, ``Current state`` = ``current_state``) and runs again.
"""

from __future__ import annotations

from bus.directives import AnswerItem, ClarificationResponse, HumanAnswer
from bus.display import cut
from bus.events import AgentState, DecisionType
from bus.signals import ClarificationNeeded, QuestionType, recap_key
from coordinator.rules.holds import still_held
from coordinator.rules.launch import deliver
from coordinator.rules.recap import refuse_recap, settled
from coordinator.rules.step import Rejected, Step
from coordinator.state import AgentRecord

__all__ = ["DEFAULT_NEXT_STEP", "answerable", "on_answer", "on_clarification"]

DEFAULT_NEXT_STEP = "Apply the answers above and continue the task from where you stopped."


def on_clarification(step: Step) -> None:
    signal = step.payload(ClarificationNeeded)
    agent_id = step.envelope.agent_id
    record = step.agent(agent_id)
    refuse_recap(record, signal)
    key = recap_key(signal)
    if key is not None and record.questions is not None and recap_key(record.questions) == key:
        # Printed twice, or quoted while it still waits: opened again, it would drop the answers given.
        raise Rejected(f"the same questions are open (dated {signal.timestamp}): not opened again")
    listing = "\n".join(f"{q.question_id}: {q.text}" for q in signal.questions)
    step.transition(
        agent_id,
        AgentState.AWAITING_CLARIFICATION,
        DecisionType.QUESTION_OPENED,
        f"blocked at {signal.blocked_at.strip()}\n{listing}",
        questions=signal,
        answers=(),
        next_step=None,
    )


def on_answer(step: Step) -> None:
    command = step.payload(HumanAnswer)
    record = step.agent(step.envelope.agent_id)
    questions = answerable(record, [a.question_id for a in command.answers])
    answers = _merge(record, questions, command.answers)
    missing = [
        q.question_id
        for q in questions.questions
        if q.type is not QuestionType.OPTIONAL and not any(a.question_id == q.question_id for a in answers)
    ]
    answered = ", ".join(a.question_id for a in command.answers)
    earlier = {a.question_id for a in record.answers}
    replaced = [a.question_id for a in command.answers if a.question_id in earlier]
    if replaced:
        answered += f" (replacing the earlier answer to {', '.join(replaced)})"
    if missing:
        step.update(record.agent_id, answers=answers, next_step=command.next_step or record.next_step)
        detail = f"answered {answered}; waiting for {', '.join(missing)}"
        step.decide(DecisionType.QUESTION_ANSWERED, record.agent_id, detail)
        return
    then = command.next_step or record.next_step or DEFAULT_NEXT_STEP
    wait = still_held(record, step.state, then, questions=None, answers=())  # e.g. a blocker of its own
    response = ClarificationResponse(
        answers=list(answers),
        continue_from=questions.blocked_at,
        current_state=questions.current_state,
        next_step=wait or then,
    )
    deliver(step, record.agent_id, response, hold=wait is not None)
    step.resume(
        record.agent_id,
        DecisionType.QUESTION_ANSWERED,
        f"answered {answered}; resumed",
        questions=None,
        answers=(),
        next_step=None,
        settled=settled(record, questions),
    )


def answerable(record: AgentRecord, question_ids: list[str]) -> ClarificationNeeded:
    """The agent's open questions, if it has them and they include every one of ``question_ids``.

    Also checked by the ``answer`` command before it publishes, so that a typo is refused at once.
    """
    questions = record.questions
    if questions is None:
        raise Rejected(f"agent {record.agent_id!r} has no open questions")
    known = [q.question_id for q in questions.questions]
    unknown = [qid for qid in question_ids if qid not in known]
    if unknown:
        answered = {a.question_id for a in record.answers}
        listed = ", ".join(f"{qid} (answered)" if qid in answered else qid for qid in known)
        raise Rejected(
            f"agent {record.agent_id!r} has no question {', '.join(cut(q, 80) for q in unknown)} "
            f"(its questions: {listed})"
        )
    return questions


def _merge(
    record: AgentRecord, questions: ClarificationNeeded, new: list[AnswerItem]
) -> tuple[AnswerItem, ...]:
    """Earlier and new answers (a new one replaces an earlier one), in question order, with question text."""
    by_id = {a.question_id: a for a in record.answers}
    by_id.update({a.question_id: a for a in new})
    return tuple(
        by_id[q.question_id].model_copy(update={"question": q.text})
        for q in questions.questions
        if q.question_id in by_id
    )
