"""The systems `crag eval` compares: plain RAG is CRAG without grading or correction; others plug in."""

from __future__ import annotations

import json

import pytest
from support.paths import DATA

from crag import ChunkIndex, ConfigError, Settings, Verdict, build_workflow
from crag.app.cli import main
from crag.evaluation import systems
from crag.evaluation.runner import EvalOptions, evaluate
from crag.evaluation.systems import available_systems, register_system, resolve_systems
from crag.steps.grading import LexicalEvaluator, LLMGrader
from crag.steps.retrieval import HybridRetriever
from crag.steps.synthesis import LLMSynthesizer
from crag.testing import FakeLLM
from crag.workflows.plain import PlainRAGWorkflow

QUESTIONS, CORPUS = DATA / "eval_questions.jsonl", DATA / "eval_corpus.jsonl"


def llm_graded_crag(settings: Settings, index: ChunkIndex):
    """A variant for `--systems`: CRAG with a (fake) LLM grading every chunk."""
    llm = FakeLLM(reply=lambda prompt: "3")
    grader = LLMGrader(llm, fallback=LexicalEvaluator(index.term_stats))
    return build_workflow(settings, index=index, grader=grader)


async def test_plain_rag_answers_from_retrieval_without_grading_or_searching(
    sample_settings: Settings, sample_index
) -> None:
    (rag,) = resolve_systems("rag")
    workflow = rag.build(sample_settings, sample_index)
    assert isinstance(workflow, PlainRAGWorkflow) and not rag.grading
    result = await workflow.run(
        query="Who invented the lithium-ion battery?"
    )  # not in the handbook
    assert result.grades == [] and result.verdict is Verdict.CORRECT  # trusts what it found
    assert {s.kind for s in result.sources} == {"internal"}
    assert result.trace.search_calls == 0 and result.steps == ["retrieve", "postprocess", "synthesize"]


async def test_plain_rag_reads_every_sentence_of_what_it_retrieved(
    sample_settings: Settings, sample_index
) -> None:
    workflow = resolve_systems("rag")[0].build(sample_settings, sample_index)
    question = "What warranty does Lumen give on the Helio H10?"
    chunks = await workflow.retrieval.find(question)
    strips = await workflow.reader.refine(question, chunks)
    assert {s.source_id for s in strips} == {c.node.node_id for c in chunks}
    assert "12-year warranty" in (await workflow.run(query=question)).answer


async def test_plain_rag_counts_the_llm_calls_of_its_synthesizer(sample_index) -> None:
    llm = FakeLLM(reply=lambda prompt: "The Helio H10 has a 12-year warranty [1].")
    workflow = PlainRAGWorkflow(
        retriever=HybridRetriever(sample_index), synthesizer=LLMSynthesizer(llm)
    )
    result = await workflow.run(query="What warranty does Lumen give on the Helio H10?")
    assert result.trace.llm_calls == len(llm.calls) == 1
    assert {s.name: s.llm_calls for s in result.trace.steps} == {"retrieve": 0, "postprocess": 0, "synthesize": 1}
    assert "12-year warranty" in result.answer and result.sources  # whole chunks, cited


def test_a_module_function_system_is_evaluated_with_its_llm_calls_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = f"{__name__}:llm_graded_crag"
    args = [
        "eval",
        "--dataset",
        str(QUESTIONS),
        "--corpus",
        str(CORPUS),
        "--limit",
        "3",
        "--systems",
        spec,
        "--json",
    ]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (system,) = report["systems"]
    assert system["name"] == spec
    all_ = system["splits"]["all"]
    # One grading call per retrieved chunk (top 5), and per chunk a further hop retrieved
    # about the thing it names; nothing else uses the model.
    assert 5.0 <= all_["llm_calls_per_question"] <= 10.0
    assert all_["verdicts"]["incorrect"] == 1.0  # "3" of 10 is below lower for every chunk


def test_registered_systems_are_available_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        systems, "_REGISTRY", dict(systems._REGISTRY)
    )  # leave no trace for other tests
    register_system(
        "rag-again", resolve_systems("rag")[0].build, grading=False, description="plain RAG twice"
    )
    assert "rag-again" in available_systems()
    run = evaluate(
        EvalOptions(dataset=QUESTIONS, corpus=CORPUS, limit=2, systems="rag,rag-again"),
        Settings.load(env={}),
    )
    assert [o.system for o in run.outcomes] == ["rag", "rag", "rag-again", "rag-again"]
    assert [o.answer for o in run.outcomes[:2]] == [o.answer for o in run.outcomes[2:]]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "No systems"),
        ("rag,rag", "named twice"),
        ("ragged", "Unknown system 'ragged'"),
        ("json:loads_nothing", "Cannot load system"),
        ("json:__doc__", "not callable"),
    ],
)
def test_bad_system_specs_are_clear_errors(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_systems(spec)


def test_a_system_name_may_not_contain_separators() -> None:
    with pytest.raises(ConfigError, match="without ',' or ':'"):
        register_system("a,b", lambda settings, index: None)
