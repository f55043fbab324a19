"""The corrective workflow end to end with the offline components."""

from __future__ import annotations

import asyncio

import pytest
from support.workflow import ALL_STEPS
from workflows.events import StepState, StepStateChanged

from crag import CragResult, QueryError, Settings, Verdict, build_workflow
from crag.events import StepProgressEvent
from crag.testing import FixedGrader


async def run_and_trace(workflow, query: str) -> tuple[CragResult, list[str], set[str]]:
    """Run, returning the result, the steps that did their work, in finishing order (from
    crag's progress events on the engine's stream), and every step the engine invoked
    (a joining step is also invoked for inputs it only buffers)."""
    handler = workflow.run(query=query)
    engine_invoked: set[str] = set()
    finished: list[str] = []
    async for event in handler.stream_events(expose_internal=True):
        if isinstance(event, StepStateChanged) and event.step_state == StepState.RUNNING:
            engine_invoked.add(event.name)
        elif isinstance(event, StepProgressEvent) and event.status == "finished":
            finished.append(event.step)
    result = await handler
    assert set(finished) <= engine_invoked
    assert finished == result.steps
    return result, finished, engine_invoked


async def test_correct_answers_from_the_documents_without_searching_the_web(sample_settings: Settings) -> None:
    result, steps, _ = await run_and_trace(
        build_workflow(sample_settings), "What warranty does Lumen give on the Helio H10?"
    )
    assert result.verdict is Verdict.CORRECT
    # The rewrite runs alongside grading (speculatively); the web is never searched.
    assert set(steps) == {"retrieve", "postprocess", "rewrite", "grade", "refine_internal", "hop", "synthesize"}
    # The speculative rewrite may finish first: retrieval runs off the loop, beside it.
    path = [s for s in steps if s != "rewrite"]
    assert path[:2] == ["retrieve", "postprocess"] and steps[-1] == "synthesize"
    assert "12-year warranty" in result.answer
    assert {s.kind for s in result.sources} == {"internal"}
    assert result.rewritten_query is None


async def test_incorrect_discards_retrieval_and_answers_from_the_web(sample_settings: Settings) -> None:
    workflow = build_workflow(sample_settings)
    result, steps, _ = await run_and_trace(workflow, "Who invented the lithium-ion battery?")
    assert result.verdict is Verdict.INCORRECT
    assert set(steps) == {"retrieve", "postprocess", "grade", "rewrite", "web_search", "refine_web", "hop", "synthesize"}
    assert steps.index("grade") < steps.index("refine_web") and steps[-1] == "synthesize"
    assert all(g.score < workflow.lower for g in result.grades)
    assert result.rewritten_query == "invented lithium ion battery"
    assert [s.id for s in result.sources] == ["web:lithium-ion-history"]
    assert "Goodenough" in result.answer and "[1]" in result.answer


async def test_ambiguous_runs_both_branches_and_joins_them(sample_settings: Settings) -> None:
    result, steps, _ = await run_and_trace(
        build_workflow(sample_settings), "What cathode does the Helio H10 battery use?"
    )
    assert result.verdict is Verdict.AMBIGUOUS
    assert set(steps) == set(ALL_STEPS), "an Ambiguous run takes both branches: every step"
    assert steps[-1] == "synthesize" and steps.count("synthesize") == 1
    assert "web:lfp-chemistry" in {s.id for s in result.sources}
    assert "cathode" in result.answer


async def test_result_reports_grades_timings_and_steps(sample_settings: Settings, sample_index) -> None:
    result = await build_workflow(sample_settings).run(query="What warranty does Lumen give on the Helio H10?")
    assert len(result.grades) == min(sample_settings.retriever.top_k, len(sample_index))
    assert all(0.0 <= g.score <= 1.0 and g.grader == "lexical" for g in result.grades)
    assert set(result.timings) == set(result.steps) == {
        "retrieve", "postprocess", "rewrite", "grade", "refine_internal", "hop", "synthesize"
    }
    assert all(seconds >= 0 for seconds in result.timings.values())


@pytest.mark.parametrize("score, verdict", [(0.9, Verdict.CORRECT), (0.5, Verdict.AMBIGUOUS), (0.1, Verdict.INCORRECT)])
async def test_thresholds_decide_the_verdict(sample_settings: Settings, score: float, verdict: Verdict) -> None:
    workflow = build_workflow(sample_settings, grader=FixedGrader(score))
    result = await workflow.run(query="What warranty does Lumen give on the Helio H10?")
    assert result.verdict is verdict


async def test_binary_grading_is_the_case_upper_equals_lower(sample_settings: Settings) -> None:
    settings = sample_settings.model_copy(update={"grader": sample_settings.grader.model_copy(update={"upper": 0.5, "lower": 0.5})})
    for score, verdict in [(0.5, Verdict.CORRECT), (0.49, Verdict.INCORRECT)]:
        result = await build_workflow(settings, grader=FixedGrader(score)).run(query="warranty of the H10")
        assert result.verdict is verdict


@pytest.mark.parametrize("question", ["", "   ", "x" * 5000])
async def test_an_unusable_question_is_a_clear_error(sample_settings: Settings, question: str) -> None:
    with pytest.raises(QueryError, match="question"):
        await build_workflow(sample_settings).run(query=question)


async def test_without_a_web_search_an_incorrect_verdict_says_nothing_was_found(sample_settings: Settings) -> None:
    settings = sample_settings.model_copy(update={"web_search": sample_settings.web_search.model_copy(update={"corpus": None})})
    result = await build_workflow(settings).run(query="Who invented the lithium-ion battery?")
    assert result.verdict is Verdict.INCORRECT
    assert result.sources == []
    assert "no relevant information" in result.answer


async def test_without_speculation_the_rewrite_waits_for_the_verdict(sample_settings: Settings) -> None:
    settings = sample_settings.model_copy(update={"rewriter": sample_settings.rewriter.model_copy(update={"speculative": False})})
    correct, correct_steps, _ = await run_and_trace(build_workflow(settings), "What warranty does Lumen give on the Helio H10?")
    incorrect, incorrect_steps, _ = await run_and_trace(build_workflow(settings), "Who invented the lithium-ion battery?")
    assert "rewrite" not in correct_steps
    assert incorrect_steps == ["retrieve", "postprocess", "grade", "rewrite", "web_search", "refine_web", "hop", "synthesize"]


def test_ask_works_without_an_event_loop(sample_settings: Settings) -> None:
    result = build_workflow(sample_settings).ask("What warranty does Lumen give on the Helio H10?")
    assert result.verdict is Verdict.CORRECT


async def test_ask_works_inside_a_running_event_loop_as_in_a_notebook(sample_settings: Settings) -> None:
    asyncio.get_running_loop()  # a loop is running here, as in a Jupyter cell
    result = build_workflow(sample_settings).ask("What warranty does Lumen give on the Helio H10?")
    assert result.verdict is Verdict.CORRECT


async def test_strips_are_scored_while_grading_and_refining_only_selects(sample_settings: Settings) -> None:
    """The strip refiner scores each (query, chunk) once, during grading; refine_internal reuses it."""
    from crag.steps.refining import StripRefiner

    workflow = build_workflow(sample_settings)
    refiner: StripRefiner = workflow.refiner
    scored: list[str] = []
    original = refiner._score
    refiner._score = lambda query, chunk: scored.append(chunk.node.node_id) or original(query, chunk)  # type: ignore[method-assign]
    result = await workflow.run(query="What warranty does Lumen give on the Helio H10?")
    assert result.verdict.value == "correct" and result.answer
    assert sorted(scored) == sorted(set(scored))  # no chunk scored twice
    assert set(scored) >= {g.chunk_id for g in result.grades if g.score >= workflow.lower}
