"""A run explains itself: grades, thresholds, the verdict rule, kept and dropped strips, answer and
sources in its trace and on its pages; no web search configured is a visible state."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import SAMPLES

from crag import CorrectiveRAGWorkflow, Settings, build_workflow
from crag.app.cli import main
from crag.app.render import graph_html, trace_html
from crag.app.render.explain import strips_html
from crag.events import CragResult, Grade, Strip, Verdict
from crag.steps.grading.learned import shipped_model
from crag.trace import Explanation, RunTrace, StepRecord
from crag.workflows.explain import explain

INCORRECT = "Who invented the lithium-ion battery?"
AMBIGUOUS = "What cathode does the Helio H10 battery use?"


@pytest.fixture(scope="module")
def no_web(sample_index_dir: Path) -> CorrectiveRAGWorkflow:
    return build_workflow(Settings.load(env={}, index={"path": sample_index_dir}))


@pytest.fixture(scope="module")
def ambiguous(sample_index_dir: Path) -> CragResult:
    settings = Settings.load(env={}, index={"path": sample_index_dir}, web_search={"corpus": SAMPLES / "web.jsonl"})
    return build_workflow(settings).ask(AMBIGUOUS)


def test_the_trace_carries_grades_thresholds_rule_strips_answer_and_sources(ambiguous: CragResult) -> None:
    ex = ambiguous.trace.explanation
    assert ex is not None and ex.verdict == "ambiguous" == ambiguous.verdict.value
    model = shipped_model()
    assert (ex.upper, ex.lower) == (model.upper, model.lower)  # the offline evaluator's own
    assert [(g.chunk_id, g.score) for g in ex.grades] == [(g.chunk_id, g.score) for g in ambiguous.grades]
    assert all(g.title for g in ex.grades)  # which chunk each grade is
    best = max(g.score for g in ex.grades)
    assert ex.rule.startswith(f"Ambiguous: the best of {len(ex.grades)} grades, {best:.2f}, is between")
    assert ex.rewritten_query == ambiguous.rewritten_query and ex.web
    kept, dropped = [s for s in ex.strips if s.kept], [s for s in ex.strips if not s.kept]
    assert kept and dropped and {s.kind for s in kept} == {"internal", "web"}
    assert all(a.score >= b.score for a, b in zip(dropped, dropped[1:]))  # best first
    assert ex.answer == ambiguous.answer and [s.number for s in ex.sources] == [s.number for s in ambiguous.sources]
    # It survives the JSON of `crag ask --trace`; the records keep none of it in their own JSON.
    assert RunTrace.model_validate_json(ambiguous.trace.model_dump_json()).explanation == ex
    assert all(not r.details for r in ambiguous.trace.steps)


def test_the_trace_page_shows_the_why(ambiguous: CragResult) -> None:
    page = trace_html(CorrectiveRAGWorkflow, ambiguous.trace)
    assert "<b>Why:</b> Ambiguous: the best of" in page
    assert page.count('class="grade ') == len(ambiguous.grades)
    assert 'class="threshold lower"' in page and 'class="threshold upper"' in page
    for source in ambiguous.sources:
        assert f'href="#crag-source-{source.number}"' in page and f'id="crag-source-{source.number}"' in page
    assert "Kept by refinement" in page and "Dropped by refinement" in page and "<script" not in page


def test_grade_out_edges_are_labelled_with_the_verdicts() -> None:
    page = graph_html(CorrectiveRAGWorkflow)
    assert "Correct · Ambiguous" in page and "Incorrect · Ambiguous" in page


def test_no_web_is_a_degraded_state_not_a_search(no_web: CorrectiveRAGWorkflow) -> None:
    result = no_web.ask(INCORRECT)
    assert result.verdict.value == "incorrect" and result.trace.search_calls == 0
    assert any(d.startswith("web_search: no web search is configured") for d in result.degraded)
    ex = result.trace.explanation
    assert not ex.web and "--web-corpus" in ex.rule and "TAVILY_API_KEY" in ex.rule


def test_an_ambiguous_run_without_web_answers_from_the_chunks_that_passed_and_says_so(
    no_web: CorrectiveRAGWorkflow,
) -> None:
    result = no_web.ask(AMBIGUOUS)
    assert result.verdict.value == "ambiguous" and result.trace.search_calls == 0
    passed = {g.chunk_id for g in result.grades if g.score >= no_web.lower}
    assert result.sources and all(s.kind == "internal" and s.id in passed for s in result.sources)
    assert any("answered only from the" in d and "passed the lower threshold" in d for d in result.degraded)
    assert "answer comes only from the chunks that passed the lower threshold" in result.trace.explanation.rule


def test_crag_ask_names_the_fix_once_on_stderr(
    sample_index_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for quiet in ([], ["-q"]):
        assert main(["ask", INCORRECT, "--index", str(sample_index_dir), *quiet]) == 0
        err = capsys.readouterr().err
        assert err.count("give --web-corpus") == 1, err


def explained(hops: list[dict], kept: list[Strip], dropped: list[Strip]) -> Explanation:
    record = StepRecord(name="hop", input_event="KnowledgeEvent", started=0.0,
                        details={"hops": hops, "dropped": dropped})
    return explain(verdict=Verdict.CORRECT, grades=[Grade(chunk_id="c1", score=0.9, grader="lexical")], upper=0.6,
                   lower=0.3, rewritten_query=None, web=False, records=[record], kept=kept, answer="", sources=[],
                   degraded=[])


def hop(bridge: str, strips: int) -> dict:
    return {"question": f"{bridge} author", "bridge": bridge, "found_in": "llncs", "verdict": "correct",
            "searched": False, "strips": strips, "found": []}


def test_a_hop_is_told_once_and_only_when_it_brought_strips() -> None:
    strips = [Strip(text="It is a class.", source_id="c1", kind="internal", score=0.9)]
    assert "hopped to" not in explained([hop("llncsdoc", 0)], strips, []).rule
    rule = explained([hop("llncsdoc", 2), hop("llncsdoc", 2)], strips, []).rule
    assert rule.count("hopped to “llncsdoc”") == 1


def test_a_strip_is_listed_once() -> None:
    one = Strip(text="It is a class.", source_id="c1", kind="internal", score=0.9)
    other = Strip(text="It has options.", source_id="c1", kind="internal", score=0.5)
    ex = explained([], [one, one.model_copy(update={"hop": 1}), one], [one, other, other])
    assert [(s.text, s.kept) for s in ex.strips] == [("It is a class.", True), ("It has options.", False)]
    assert strips_html(ex).count("It is a class.") == 1
