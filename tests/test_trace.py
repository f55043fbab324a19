"""Every run carries a trace: steps, their events, times, and the model and search calls."""

from __future__ import annotations

import json

from crag import Settings, Verdict, build_workflow
from crag.steps.grading import LLMGrader
from crag.steps.rewriting import LLMRewriter
from crag.steps.synthesis import LLMSynthesizer
from crag.testing import FakeLLM
from crag.trace import RunTrace


async def test_trace_of_an_incorrect_run_follows_the_web_path(sample_settings: Settings) -> None:
    result = await build_workflow(sample_settings).run(query="Who invented the lithium-ion battery?")
    trace = result.trace
    assert trace.verdict == "incorrect" and trace.query == result.query
    by_name = {s.name: s for s in trace.steps}
    assert set(by_name) == {"retrieve", "postprocess", "rewrite", "grade", "web_search", "refine_web", "hop", "synthesize"}
    assert by_name["retrieve"].input_event == "QueryStartEvent"
    assert by_name["retrieve"].output_events == ["RewriteQueryEvent", "CandidatesEvent"]
    assert by_name["postprocess"].input_event == "CandidatesEvent"
    assert by_name["postprocess"].output_events == ["RetrievedEvent"]
    assert by_name["grade"].input_event == "RetrievedEvent"
    assert by_name["grade"].output_events == ["WebSearchNeededEvent"]
    assert by_name["synthesize"].output_events == ["StopEvent"]
    assert by_name["web_search"].search_calls == 1
    hop_searches = [s.search_calls for s in by_name["hop"].substeps if s.name.endswith("web_search")]
    assert trace.search_calls == 1 + sum(hop_searches)  # a further hop's searches too
    assert trace.llm_calls == 0  # offline components
    assert all(0 <= s.started <= s.ended <= trace.seconds for s in trace.steps)
    assert result.timings == {s.name: round(s.seconds, 6) for s in trace.steps}


async def test_trace_counts_llm_calls_on_the_step_that_made_them(sample_settings: Settings, sample_index) -> None:
    llm = FakeLLM(reply=lambda p: "9" if "Rate how relevant" in p and "warranty" in p else "2")
    from crag.steps.grading import LexicalEvaluator

    workflow = build_workflow(
        sample_settings,
        grader=LLMGrader(llm, fallback=LexicalEvaluator(sample_index.term_stats)),
        rewriter=LLMRewriter(llm),
        synthesizer=LLMSynthesizer(llm),
    )
    result = await workflow.run(query="What warranty does Lumen give on the Helio H10?")
    calls = {s.name: s.llm_calls for s in result.trace.steps}
    assert result.verdict is Verdict.CORRECT
    assert calls["grade"] == len(result.grades) == 4  # concurrent calls still count
    assert calls["rewrite"] == 1 and calls["synthesize"] == 1 and calls["retrieve"] == 0
    assert result.trace.llm_calls == len(llm.calls) == 6


async def test_a_trace_round_trips_through_json(sample_settings: Settings) -> None:
    result = await build_workflow(sample_settings).run(query="What cathode does the Helio H10 battery use?")
    restored = RunTrace.model_validate_json(result.trace.model_dump_json())
    assert restored == result.trace
    assert json.loads(result.model_dump_json())["trace"]["verdict"] == "ambiguous"
