"""Stop work: blockers, resolutions, error recovery, and stop_reason completion."""

from __future__ import annotations

from rules_kit import (
    Feed,
    clarification,
    completion,
    decisions,
    delegate,
    kinds,
    of_type,
    one,
    stop_dependency,
    stop_error,
)

from bus.directives import AnswerItem, HumanAnswer, HumanRecover, HumanResolve, LaunchReason, RecoveryOption
from bus.envelope import EnvelopeType
from bus.events import AgentState, DecisionType
from bus.results import ResultStatus
from bus.signals import StopWork
from coordinator.policy import Policy
from coordinator.rules import Target, summarize
from coordinator.state import GroupVerdict

AGENT = "bg-task-def456"

# Seed 000's example prompt, with what the stop says was completed, which the seed's resume requirements
# have the parent acknowledge ("1. Acknowledge what was completed"; seed 003's prompt: "Completed: ...").
SEED_PROMPT = """## BLOCKER RESOLVED

Issue: node_modules missing
Resolution: Ran npm install successfully

## STATE RESTORATION
Completed:
✓ Scanned for hardcoded secrets (0 found)
✓ Analyzed SQL queries (no injection risks)

Files analyzed: 47/120
Reports generated: AUTH_ANALYSIS.md, SQL_REVIEW.md
Working directory: /Users/bln/play/agentic-primer/src

## RESUME INSTRUCTIONS
Continue with dependency vulnerability scan (npm audit)
Then proceed to license compliance check (npm ls)"""


def test_stop_opens_a_blocker() -> None:
    feed = Feed()
    outcome = feed.send(stop_dependency(), AGENT)
    assert kinds(outcome) == [DecisionType.STATE_CHANGED, DecisionType.BLOCKER_OPENED]
    opened = decisions(outcome)[1]
    assert opened.state is AgentState.BLOCKED
    assert opened.detail.startswith("external_dependency: node_modules missing")
    assert "recovery options" not in opened.detail
    assert feed.state.agents[AGENT].blocker == stop_dependency()
    (blocker,) = summarize(feed.state).blockers
    assert (blocker.agent_id, blocker.blocker_type) == (AGENT, "external_dependency")


def test_resolve_resumes_with_the_seed_prompt() -> None:
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    instructions = (
        "Continue with dependency vulnerability scan (npm audit)\n"
        "Then proceed to license compliance check (npm ls)"
    )
    outcome = feed.send(
        HumanResolve(resolution="Ran npm install successfully", instructions=instructions), AGENT
    )
    inbox = of_type(outcome, EnvelopeType.BLOCKER_RESOLVED, Target.INBOX)
    assert len(inbox) == 1 and inbox[0].agent_id == AGENT
    assert one(outcome, EnvelopeType.BLOCKER_RESOLVED).render() == SEED_PROMPT
    assert kinds(outcome) == [DecisionType.BLOCKER_RESOLVED]
    record = feed.state.agents[AGENT]
    assert record.state is AgentState.RUNNING and record.blocker is None
    assert summarize(feed.state).blockers == ()


def test_the_resume_prompt_a_stop_asks_for_is_the_default_instructions() -> None:
    """Seed 000's stop ends its requirements with the prompt to resume it with: that is what it is told,
    unless a human gives instructions of their own."""
    feed = Feed()
    requirements = (
        "Parent agent must:\n1. Run: npm install\n2. Verify: node_modules/ exists\n"
        'Then resume with: "Dependencies installed, continue with npm audit scan"'
    )
    asking = stop_dependency().model_copy(update={"resume_requirements": requirements})
    feed.send(asking, AGENT)
    directive = one(
        feed.send(HumanResolve(resolution="Ran npm install"), AGENT), EnvelopeType.BLOCKER_RESOLVED
    )
    assert directive.resume_instructions == "Dependencies installed, continue with npm audit scan"
    feed.send(
        asking.model_copy(update={"timestamp": stop_dependency(at="2026-01-11T10:15:00-05:00").timestamp}),
        AGENT,
    )
    given = HumanResolve(resolution="Ran npm install", instructions="Skip the audit")
    directive = one(feed.send(given, AGENT), EnvelopeType.BLOCKER_RESOLVED)
    assert directive.resume_instructions == "Skip the audit"


def test_resume_instructions_default_to_the_blocked_work_then_the_requirements() -> None:
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    directive = one(
        feed.send(HumanResolve(resolution="Ran npm install"), AGENT), EnvelopeType.BLOCKER_RESOLVED
    )
    assert directive.resume_instructions.startswith("Continue with the work that was blocked:\n✗ Dependency")
    bare = stop_dependency().model_copy(update={"blocked_work": None})
    feed.send(bare, AGENT)
    directive = one(
        feed.send(HumanResolve(resolution="Ran npm install"), AGENT), EnvelopeType.BLOCKER_RESOLVED
    )
    # its resume_requirements say what the parent had to do (or offer options): not instructions
    assert directive.resume_instructions == "Continue the task from the checkpoint above."
    for snapshot, then in (
        ("Files analyzed: 47/120", "from the checkpoint above"),
        (None, "from where you stopped"),
    ):
        bare = stop_dependency().model_copy(
            update={"blocked_work": None, "resume_requirements": None, "state_snapshot": snapshot}
        )
        feed.send(bare, AGENT)
        directive = one(feed.send(HumanResolve(resolution="Done"), AGENT), EnvelopeType.BLOCKER_RESOLVED)
        assert directive.resume_instructions == f"Continue the task {then}."


def test_resolve_without_a_blocker_is_rejected() -> None:
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    feed.send(HumanResolve(resolution="done"), AGENT)
    again = feed.send(HumanResolve(resolution="done"), AGENT)
    assert again.rejected == f"agent {AGENT!r} has no open blocker"
    assert of_type(again, EnvelopeType.BLOCKER_RESOLVED) == []


def test_error_stop_offers_the_recovery_options() -> None:
    feed = Feed()
    outcome = feed.send(stop_error(), "bg-task-stu901")
    opened = decisions(outcome)[-1]
    assert opened.decision is DecisionType.BLOCKER_OPENED
    assert "recovery options: retry_from_checkpoint, skip_and_continue, delegate" in opened.detail


def test_recover_skip_and_continue() -> None:
    feed = Feed()
    feed.send(stop_error(), "bg-task-stu901")
    outcome = feed.send(HumanRecover(option=RecoveryOption.SKIP_AND_CONTINUE), "bg-task-stu901")
    directive = one(outcome, EnvelopeType.ERROR_RECOVERY, Target.INBOX)
    assert directive.option is RecoveryOption.SKIP_AND_CONTINUE
    assert directive.checkpoint == "checkpoint after item 50"
    assert directive.render().startswith("## ERROR RECOVERY\n\nSkip the problematic item")
    [emit] = [e for e in outcome.emits if e.type is EnvelopeType.ERROR_RECOVERY]
    assert b'"error"' not in emit.data  # an error's recovery is written as before the field was
    assert of_type(outcome, EnvelopeType.LAUNCH) == []
    assert feed.state.agents["bg-task-stu901"].state is AgentState.RUNNING


def test_recover_retry_uses_the_humans_instructions() -> None:
    feed = Feed()
    feed.send(stop_error(), "bg-task-stu901")
    command = HumanRecover(
        option=RecoveryOption.RETRY_FROM_CHECKPOINT, instructions="Applied fix: undefined check added"
    )
    directive = one(feed.send(command, "bg-task-stu901"), EnvelopeType.ERROR_RECOVERY)
    assert directive.render() == (
        "## ERROR FIXED\n\nApplied fix: undefined check added\n"
        "Resume from checkpoint: checkpoint after item 50\n"
        "Retry the step that failed."  # as seed 000's ends, after a human's instructions too
    )


def test_recover_delegate_launches_an_agent_for_the_failing_work() -> None:
    feed = Feed()
    feed.send(stop_error(), "bg-task-stu901")
    outcome = feed.send(HumanRecover(option=RecoveryOption.DELEGATE), "bg-task-stu901")
    (launched,) = of_type(outcome, EnvelopeType.LAUNCH, Target.TASKS)
    request = one(outcome, EnvelopeType.LAUNCH)
    assert request.reason is LaunchReason.DELEGATION
    assert request.parent_agent_id == "bg-task-stu901"
    assert request.depth == 1
    assert launched.agent_id == request.new_agent_id
    directive = one(outcome, EnvelopeType.ERROR_RECOVERY, Target.INBOX)
    assert directive.render().startswith("## PARTIAL RESUME")
    assert request.new_agent_id in directive.instructions
    assert feed.state.agents[request.new_agent_id].parent_agent_id == "bg-task-stu901"


def test_an_agent_that_takes_over_a_delegate_s_work_keeps_its_request_s_priority() -> None:
    feed = Feed()
    launched = one(feed.send(delegate(priority="P0"), "bg-task-jkl012"), EnvelopeType.LAUNCH, Target.TASKS)
    assert launched.priority.value == "P0"
    child = launched.new_agent_id
    feed.send(stop_error(child), child)
    takeover = one(feed.send(HumanRecover(option=RecoveryOption.DELEGATE), child), EnvelopeType.LAUNCH)
    assert takeover.parent_agent_id == child and takeover.priority.value == "P0"


def test_recover_delegate_is_held_to_the_policy_s_resources() -> None:
    for policy, why in [
        (Policy(max_parallel_agents=1), "no parallel slot free (1 of 1 in use)"),
        (Policy(max_delegation_depth=0), "delegation depth limit 0 reached (requester depth 0)"),
        (Policy(max_agents_per_group=1), "the group's budget of 1 agents is used up"),
    ]:
        feed = Feed(policy)
        feed.send(stop_error(), "bg-task-stu901")
        outcome = feed.send(HumanRecover(option=RecoveryOption.DELEGATE), "bg-task-stu901")
        assert outcome.rejected == f"no agent can take over bg-task-stu901's work now: {why}"
        assert of_type(outcome, EnvelopeType.LAUNCH) == [] and list(feed.state.agents) == ["bg-task-stu901"]
        assert feed.state.agents["bg-task-stu901"].state is AgentState.BLOCKED


def test_a_retry_from_the_checkpoint_of_a_plain_blocker_is_rejected() -> None:
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    outcome = feed.send(HumanRecover(option=RecoveryOption.RETRY_FROM_CHECKPOINT), AGENT)
    assert outcome.rejected is not None and "resolve it instead" in outcome.rejected
    assert feed.state.agents[AGENT].state is AgentState.BLOCKED


def test_a_plain_blocker_may_be_skipped_or_delegated() -> None:
    """Seed 000's resource-limit stop offers "Delegate to multiple agents" and "Reduce scope"."""
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    outcome = feed.send(HumanRecover(option=RecoveryOption.DELEGATE), AGENT)
    request = one(outcome, EnvelopeType.LAUNCH)
    assert request.task.startswith(f"Take over work that agent {AGENT} could not complete (blocked: external")
    assert (request.context or "").startswith(f"Blocker reported by {AGENT}:\nnode_modules missing")
    directive = one(outcome, EnvelopeType.ERROR_RECOVERY, Target.INBOX)
    assert directive.instructions == (
        f"Leave the work you stopped on to {request.new_agent_id}, which takes it over, "
        "and continue with the rest of your task."
    )
    assert feed.state.agents[AGENT].state is AgentState.RUNNING
    feed.send(stop_dependency(at="2026-01-11T10:15:00-05:00"), AGENT)  # another stop
    skipped = feed.send(HumanRecover(option=RecoveryOption.SKIP_AND_CONTINUE), AGENT)
    skip = one(skipped, EnvelopeType.ERROR_RECOVERY)
    assert skipped.rejected is None and skip.option is RecoveryOption.SKIP_AND_CONTINUE
    # not the seed's ERROR RECOVERY: the agent stopped on a missing dependency, not an error
    assert skip.render().startswith("## SKIP AND CONTINUE\n\nSkip the problematic item")
    assert directive.render().startswith("## PARTIAL RESUME")


def test_resolve_also_clears_an_error_stop() -> None:
    feed = Feed()
    feed.send(stop_error(), "bg-task-stu901")
    outcome = feed.send(HumanResolve(resolution="fixed the script"), "bg-task-stu901")
    restoration = one(outcome, EnvelopeType.BLOCKER_RESOLVED).state_restoration
    assert restoration == "Completed:\nItems 1-50\n\ncheckpoint after item 50"


def test_stop_reason_completion_is_a_completion() -> None:
    feed = Feed()
    done = StopWork.model_validate(
        {
            "agent_id": AGENT,
            "stop_reason": "completion",
            "blocker_type": "missing_info",
            "details": "all done",
            "completed_work": "Scanned 120 files",
        }
    )
    outcome = feed.send(done, AGENT)
    record = feed.state.agents[AGENT]
    assert record.state is AgentState.COMPLETED and record.blocker is None
    assert record.completion is not None and record.completion.status is ResultStatus.SUCCESS
    assert record.completion.summary == "Scanned 120 files"
    assert DecisionType.COMPLETED in kinds(outcome)
    partial = done.model_copy(update={"blocked_work": "License check"})
    feed.send(partial, "bg-task-other")
    other = feed.state.agents["bg-task-other"].completion
    assert other is not None and other.status is ResultStatus.PARTIAL


def test_a_directive_that_leaves_the_agent_held_tells_it_to_wait_then_what_to_do() -> None:
    """Blocked and with questions open: resolving the blocker alone (or answering alone) must not tell
    the agent to go on; the directive that frees it does."""
    for first, second in (("resolve", "answer"), ("answer", "resolve")):
        feed = Feed()
        feed.send(stop_dependency(), AGENT)
        feed.send(clarification(AGENT), AGENT)
        commands: dict[str, tuple[HumanResolve | HumanAnswer, EnvelopeType]] = {
            "resolve": (HumanResolve(resolution="Ran npm install"), EnvelopeType.BLOCKER_RESOLVED),
            "answer": (
                HumanAnswer(answers=[AnswerItem(question_id=q, answer="JWT, 3.0") for q in ("Q1", "Q2")]),
                EnvelopeType.CLARIFICATION_RESPONSE,
            ),
        }
        command, kind = commands[first]
        held = one(feed.send(command, AGENT), kind)
        waiting = held.resume_instructions if kind is EnvelopeType.BLOCKER_RESOLVED else held.next_step
        for_what = "your questions are answered" if first == "resolve" else "your blocker is resolved"
        assert waiting.startswith(f"Do not go on yet: you will be resumed once {for_what}. Then: "), waiting
        command, kind = commands[second]
        freed = one(feed.send(command, AGENT), kind)
        going = freed.resume_instructions if kind is EnvelopeType.BLOCKER_RESOLVED else freed.next_step
        assert not going.startswith("Do not go on yet"), going
        assert feed.state.agents[AGENT].state is AgentState.RUNNING


def test_a_recovery_that_leaves_the_agent_held_tells_it_to_wait_then_what_to_do() -> None:
    """Stopped on an error with questions open: a recovery settles the stop only, so the agent is told
    to wait for its answers before it skips, retries or hands the work over."""
    for option in RecoveryOption:
        feed = Feed()
        feed.send(clarification(AGENT), AGENT)
        feed.send(stop_error(AGENT), AGENT)
        held = one(feed.send(HumanRecover(option=option), AGENT), EnvelopeType.ERROR_RECOVERY)
        assert held.instructions.startswith(
            "Do not go on yet: you will be resumed once your questions are answered. Then: "
        ), held.instructions
        assert feed.state.agents[AGENT].state is AgentState.AWAITING_CLARIFICATION
        answers = [AnswerItem(question_id=q, answer="JWT, 3.0") for q in ("Q1", "Q2")]
        feed.send(HumanAnswer(answers=answers), AGENT)
        assert feed.state.agents[AGENT].state is AgentState.RUNNING


def test_the_same_dated_stop_again_after_its_resolution_is_a_recap() -> None:
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    feed.send(HumanResolve(resolution="Ran npm install"), AGENT)
    recap = feed.send(stop_dependency(), AGENT)
    assert recap.rejected is not None and "the same stop was resolved before" in recap.rejected
    assert feed.state.agents[AGENT].state is AgentState.RUNNING
    feed.send(stop_dependency(at="2026-01-11T10:15:00-05:00"), AGENT)
    feed.send(HumanRecover(option=RecoveryOption.SKIP_AND_CONTINUE), AGENT)
    assert feed.send(stop_dependency(at="2026-01-11T10:15:00-05:00"), AGENT).rejected is not None
    assert feed.state.agents[AGENT].blocker is None


def test_a_resolved_stop_quoted_after_the_agent_completed_is_a_recap_not_a_blocker_left_open() -> None:
    """Quoted in its final report, a signal block ends the report: the stop comes after the completion.
    It was kept as a blocker unresolved, and a settled group turned from continue to review."""
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    feed.send(HumanResolve(resolution="Ran npm install"), AGENT)
    feed.send(completion(AGENT), AGENT)
    assert feed.state.status is GroupVerdict.CONTINUE
    late = feed.send(stop_dependency(), AGENT)
    assert late.rejected is not None and "the same stop was resolved before" in late.rejected
    assert (feed.state.status, feed.state.agents[AGENT].violations) == (GroupVerdict.CONTINUE, ())
    other = feed.send(stop_dependency(at="2026-01-11T11:15:00-05:00"), AGENT)  # one never resolved: kept
    assert other.rejected is None
    assert [d.detail for d in decisions(other)][-1].startswith("review")  # the group's status again


def test_a_second_stop_keeps_the_first_open_with_it_until_one_resolution_settles_both() -> None:
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    opened = feed.send(stop_error(AGENT), AGENT)
    assert "still open with it: 1 earlier blocker(s), resolved with it" in decisions(opened)[-1].detail
    (blocker,) = summarize(feed.state).blockers
    assert (blocker.blocker_type, blocker.details) == ("error", stop_error(AGENT).details)
    assert blocker.earlier == ("external_dependency: node_modules missing",)
    resolved = feed.send(HumanResolve(resolution="Installed the modules and fixed the bug"), AGENT)
    directive = one(resolved, EnvelopeType.BLOCKER_RESOLVED, Target.INBOX)
    assert directive.issue == (
        f"{stop_error(AGENT).details}\n\nStill open from earlier STOP_WORK signals:\n"
        "- external_dependency: node_modules missing"
    )
    record = feed.state.agents[AGENT]
    assert (record.state, record.blocker, record.earlier_blockers) == (AgentState.RUNNING, None, ())
    assert summarize(feed.state).blockers == ()
    recap = feed.send(stop_dependency(), AGENT)  # the earlier one, quoted after the resolution
    assert recap.rejected is not None and "the same stop was resolved before" in recap.rejected


def test_the_open_stop_sent_again_is_no_earlier_blocker() -> None:
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    again = feed.send(stop_dependency(), AGENT)
    assert "still open with it" not in decisions(again)[-1].detail
    assert feed.state.agents[AGENT].earlier_blockers == ()


def test_an_agent_that_completes_with_two_blockers_open_leaves_both_unresolved() -> None:
    feed = Feed()
    feed.send(stop_dependency(), AGENT)
    feed.send(stop_error(AGENT), AGENT)
    feed.send(completion(AGENT), AGENT)
    record = feed.state.agents[AGENT]
    assert (record.blocker, record.earlier_blockers) == (None, ())
    left = [v.detail for v in record.violations if v.rule == "unresolved_blocker"]
    assert [d.split(":")[0] for d in left] == ["external_dependency", "error"]


def test_a_blocker_sent_again_is_listed_once() -> None:
    feed = Feed()
    for stop in (stop_dependency(), stop_error(AGENT), stop_dependency(), stop_error(AGENT)):
        feed.send(stop, AGENT)
    record = feed.state.agents[AGENT]
    assert (record.blocker, record.earlier_blockers) == (stop_error(AGENT), (stop_dependency(),))
