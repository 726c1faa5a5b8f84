"""Clarification: questions open for a human, answers resume the agent with the seed's prompt."""

from __future__ import annotations

from rules_kit import Feed, answers, clarification, completion, decisions, kinds, of_type, one

from bus.directives import ClarificationResponse
from bus.envelope import MAX_ENVELOPE_BYTES, EnvelopeType
from bus.events import AgentStarted, AgentState, DecisionType
from bus.signals import ClarificationNeeded, QuestionType
from coordinator.rules import Target, summarize
from coordinator.rules.recap import SETTLED_KEPT
from coordinator.state import GroupVerdict

AGENT = "bg-task-abc123"

SEED_PROMPT = """## CLARIFICATION RESPONSE

Your questions have been answered:

Q1: Should I analyze OAuth2, JWT, or both authentication strategies?
A1: Analyze both OAuth2 and JWT. They are both in active use.

Q2: What security framework version should I assume (2.0 or 3.0)?
A2: Assume 3.0-beta. We are migrating to 3.x.

## RESUME INSTRUCTIONS
Continue from: Analyzing authentication patterns in src/auth/
Current state: Completed secret scanning, started auth analysis
Next step: Analyze both OAuth2 and JWT implementations with 3.0-beta assumptions"""

A1 = ("Q1", "Analyze both OAuth2 and JWT. They are both in active use.")
A2 = ("Q2", "Assume 3.0-beta. We are migrating to 3.x.")


def test_question_opens_an_item_for_a_human() -> None:
    feed = Feed()
    outcome = feed.send(clarification(), AGENT)
    assert kinds(outcome) == [DecisionType.STATE_CHANGED, DecisionType.QUESTION_OPENED]
    opened = decisions(outcome)[1]
    assert opened.state is AgentState.AWAITING_CLARIFICATION
    assert "Q1: Should I analyze OAuth2" in opened.detail
    assert all(e.target is Target.EVENTS for e in outcome.emits)
    assert all(e.envelope.agent_id == AGENT and e.envelope.group_id == feed.group for e in outcome.emits)
    record = feed.state.agents[AGENT]
    assert record.state is AgentState.AWAITING_CLARIFICATION
    assert record.questions == clarification()
    view = summarize(feed.state)
    assert [(q.agent_id, q.question_id, q.answered) for q in view.open_questions] == [
        (AGENT, "Q1", False),
        (AGENT, "Q2", False),
    ]


def test_answers_resume_with_the_seed_prompt() -> None:
    feed = Feed()
    feed.send(clarification(), AGENT)
    step = "Analyze both OAuth2 and JWT implementations with 3.0-beta assumptions"
    outcome = feed.send(answers(A1, A2, next_step=step), AGENT)
    assert outcome.rejected is None
    inbox = of_type(outcome, EnvelopeType.CLARIFICATION_RESPONSE, Target.INBOX)
    assert len(inbox) == 1 and inbox[0].agent_id == AGENT
    response = inbox[0].payload
    assert isinstance(response, ClarificationResponse)
    assert response.render() == SEED_PROMPT
    assert kinds(outcome) == [DecisionType.QUESTION_ANSWERED]
    record = feed.state.agents[AGENT]
    assert record.state is AgentState.RUNNING
    assert record.questions is None and record.answers == ()
    assert record.resumed_at == outcome.emits[0].envelope.ts
    assert summarize(feed.state).open_questions == ()


def test_answers_one_at_a_time_accumulate_until_all_are_answered() -> None:
    feed = Feed()
    feed.send(clarification(), AGENT)
    first = feed.send(answers(A2), AGENT)
    assert of_type(first, EnvelopeType.CLARIFICATION_RESPONSE) == []
    assert "waiting for Q1" in decisions(first)[0].detail
    assert feed.state.agents[AGENT].state is AgentState.AWAITING_CLARIFICATION
    assert [q.answered for q in summarize(feed.state).open_questions] == [False, True]
    second = feed.send(answers(A1), AGENT)
    response = one(second, EnvelopeType.CLARIFICATION_RESPONSE)
    assert [a.question_id for a in response.answers] == ["Q1", "Q2"]  # question order, not answer order
    assert response.answers[1].question == "What security framework version should I assume (2.0 or 3.0)?"
    assert response.next_step  # derived when the human gives none
    assert feed.state.agents[AGENT].state is AgentState.RUNNING


def test_a_later_answer_replaces_an_earlier_one() -> None:
    feed = Feed()
    feed.send(clarification(), AGENT)
    feed.send(answers(("Q1", "only OAuth2")), AGENT)
    again = feed.send(answers(("Q1", "only JWT")), AGENT)
    [said] = decisions(again)  # the human is told: the same answer twice is no news, a new one is
    assert said.detail == "answered Q1 (replacing the earlier answer to Q1); waiting for Q2"
    done = feed.send(answers(A1, A2), AGENT)
    assert decisions(done)[0].detail == "answered Q1, Q2 (replacing the earlier answer to Q1); resumed"
    response = one(done, EnvelopeType.CLARIFICATION_RESPONSE)
    assert response.answers[0].answer == A1[1]


def test_optional_questions_need_no_answer() -> None:
    signal = clarification().model_dump()
    signal["questions"][1]["type"] = "optional"
    feed = Feed()
    feed.send(ClarificationNeeded.model_validate(signal), AGENT)
    response = one(feed.send(answers(A1), AGENT), EnvelopeType.CLARIFICATION_RESPONSE)
    assert [a.question_id for a in response.answers] == ["Q1"]


def test_answer_to_an_unknown_question_is_rejected_and_changes_nothing() -> None:
    feed = Feed()
    feed.send(clarification(), AGENT)
    before = feed.state
    outcome = feed.send(answers(("Q9", "what?")), AGENT)
    assert outcome.rejected is not None and "Q9" in outcome.rejected
    assert kinds(outcome) == [DecisionType.REJECTED]
    assert decisions(outcome)[0].detail == outcome.rejected
    assert outcome.state.agents == before.agents
    assert outcome.state.applied == before.applied
    assert "in-00002" in outcome.state.window


def test_a_rejected_answer_lists_the_questions_and_which_are_answered() -> None:
    feed = Feed()
    feed.send(clarification(), AGENT)
    feed.send(answers(A1), AGENT)  # Q2 still open: the agent waits
    outcome = feed.send(answers(("Q9", "what?")), AGENT)
    assert outcome.rejected == f"agent {AGENT!r} has no question Q9 (its questions: Q1 (answered), Q2)"


def test_answer_without_open_questions_or_for_unknown_agent_is_rejected() -> None:
    feed = Feed()
    feed.send(AgentStarted(task="Analyze the codebase", name="security-auditor"), AGENT)
    no_questions = feed.send(answers(A1), AGENT)
    assert no_questions.rejected == f"agent {AGENT!r} has no open questions"
    unknown = feed.send(answers(A1), "bg-task-nobody")
    assert unknown.rejected is not None and "unknown agent" in unknown.rejected
    assert "bg-task-nobody" not in feed.state.agents


def test_a_new_clarification_replaces_open_questions() -> None:
    feed = Feed()
    feed.send(clarification(), AGENT)
    feed.send(answers(A1), AGENT)
    second = clarification().model_copy(update={"blocked_at": "Reviewing session handling"})
    feed.send(second, AGENT)
    record = feed.state.agents[AGENT]
    assert record.questions is not None and record.questions.blocked_at == "Reviewing session handling"
    assert record.answers == ()


def test_an_agent_that_finishes_with_questions_unanswered_leaves_them_for_review() -> None:
    """It went on with its assumptions: a human should look at them, as at a blocker it left."""
    feed = Feed()
    agent = "bg-task-abc123"
    feed.send(clarification(agent), agent)
    feed.send(answers(("Q1", "both")), agent)
    outcome = feed.send(completion(agent), agent)
    assert [d.detail for d in decisions(outcome) if d.decision is DecisionType.CONTRACT_VIOLATION] == [
        "unresolved_blocker: questions left unanswered: Q2"
    ]
    assert feed.state.status is GroupVerdict.REVIEW
    assert summarize(feed.state).open_questions == ()


def test_optional_questions_left_unanswered_are_no_matter() -> None:
    feed = Feed()
    asked = clarification().model_copy(
        update={
            "questions": [
                q.model_copy(update={"type": QuestionType.OPTIONAL}) for q in clarification().questions
            ]
        }
    )
    feed.send(asked, "bg-task-abc123")
    feed.send(completion("bg-task-abc123"), "bg-task-abc123")
    assert feed.state.status is GroupVerdict.CONTINUE


def test_the_same_dated_questions_again_while_open_keep_the_answers_given() -> None:
    feed = Feed()
    feed.send(clarification(), AGENT)
    feed.send(answers(("Q1", "Both")), AGENT)
    again = feed.send(clarification(), AGENT)
    assert again.rejected is not None and "the same questions are open" in again.rejected
    assert [a.question_id for a in feed.state.agents[AGENT].answers] == ["Q1"]
    done = feed.send(answers(("Q2", "3.0")), AGENT)
    response = one(done, EnvelopeType.CLARIFICATION_RESPONSE)
    assert [a.question_id for a in response.answers] == ["Q1", "Q2"]
    undated = clarification().model_copy(update={"timestamp": None})
    feed.send(undated, AGENT)
    feed.send(answers(("Q1", "Both")), AGENT)
    asked_anew = feed.send(undated, AGENT)  # nothing tells it from the same questions asked anew
    assert asked_anew.rejected is None and feed.state.agents[AGENT].answers == ()


def test_the_same_dated_questions_again_after_their_answer_are_a_recap() -> None:
    # an agent resumed with its answers quotes what it asked: the quote is no new question
    feed = Feed()
    feed.send(clarification(), AGENT)
    feed.send(answers(A1, A2), AGENT)
    recap = feed.send(clarification(), AGENT)
    assert recap.rejected is not None and "a recap, not applied again" in recap.rejected
    assert kinds(recap) == [DecisionType.REJECTED]
    record = feed.state.agents[AGENT]
    assert record.state is AgentState.RUNNING and record.questions is None
    asked_anew = feed.send(clarification(at="2026-01-11T10:00:00-05:00"), AGENT)
    assert asked_anew.rejected is None
    assert feed.state.agents[AGENT].state is AgentState.AWAITING_CLARIFICATION


def test_undated_questions_asked_again_are_asked_again_and_few_are_remembered() -> None:
    feed = Feed()
    undated = clarification().model_copy(update={"timestamp": None})
    feed.send(undated, AGENT)
    feed.send(answers(A1, A2), AGENT)
    assert feed.send(undated, AGENT).rejected is None  # nothing tells it from the same question anew
    feed.send(answers(A1, A2), AGENT)
    for n in range(SETTLED_KEPT + 1):
        feed.send(clarification(at=f"2026-01-12T{n:02}:00:00Z"), AGENT)
        feed.send(answers(A1, A2), AGENT)
    assert len(feed.state.agents[AGENT].settled) == SETTLED_KEPT
    assert feed.send(clarification(at="2026-01-12T00:00:00Z"), AGENT).rejected is None  # the oldest: gone
    assert feed.send(clarification(at="2026-01-12T08:00:00Z"), AGENT).rejected is not None


def test_answers_whose_response_would_be_too_large_to_deliver_are_rejected() -> None:
    # each answer fits an envelope; the response that holds both does not, and no reader would take it
    feed = Feed()
    feed.send(clarification(), AGENT)
    half = "A" * (MAX_ENVELOPE_BYTES // 2 + 1000)
    assert feed.send(answers(("Q1", half)), AGENT).rejected is None
    outcome = feed.send(answers(("Q2", half)), AGENT)
    assert outcome.rejected is not None
    assert "its CLARIFICATION_RESPONSE for 'bg-task-abc123' would be " in outcome.rejected
    assert f"over the {MAX_ENVELOPE_BYTES} bytes an envelope may have" in outcome.rejected
    assert of_type(outcome, EnvelopeType.CLARIFICATION_RESPONSE) == []
    record = feed.state.agents[AGENT]
    assert record.state is AgentState.AWAITING_CLARIFICATION
    assert [a.question_id for a in record.answers] == ["Q1"]  # a shorter answer to Q2 may still come
    assert feed.send(answers(("Q2", "JWT")), AGENT).rejected is None


def test_a_next_step_given_with_a_partial_answer_reaches_the_response() -> None:
    feed = Feed()
    feed.send(clarification(), AGENT)
    feed.send(answers(A1, next_step="Only fix auth.py, then stop"), AGENT)
    response = one(feed.send(answers(A2), AGENT), EnvelopeType.CLARIFICATION_RESPONSE, Target.INBOX)
    assert response.next_step == "Only fix auth.py, then stop"
    assert feed.state.agents[AGENT].next_step is None
    feed.send(clarification(at="2026-01-11T11:00:00-05:00"), AGENT)  # the next questions start afresh
    feed.send(answers(A1, next_step="an older instruction"), AGENT)
    last = one(feed.send(answers(A2, next_step="Go on"), AGENT), EnvelopeType.CLARIFICATION_RESPONSE)
    assert last.next_step == "Go on"  # the completing answer's own wins
