"""Refining a table's chunk: a row is a strip with its header, and the header no strip."""

from __future__ import annotations

from llama_index.core.schema import NodeWithScore, TextNode

from crag.steps.grading import LexicalEvaluator
from crag.steps.refining import StripRefiner
from crag.steps.synthesis import ExtractiveSynthesizer
from crag.text import TermStats

QUESTION = "How many calories per portion do berries have?"
CSV = "Food,Calories per portion\n\nBread,250\n\nBerries,150\n\nNuts,600"
PDF = "Intake per day.\n\nFood | Calories per portion\n\nBread | 250\n\nBerries | 150\n\nNuts | 600"


def refiner(*texts: str) -> StripRefiner:
    return StripRefiner(LexicalEvaluator(TermStats.from_texts(texts)), min_score=0.0)


async def answer_of(text: str, file_name: str) -> str:
    chunk = NodeWithScore(node=TextNode(text=text, metadata={"file_name": file_name}), score=1.0)
    strips = await refiner(text, "Bread is baked.").refine(QUESTION, [chunk])
    assert not {s.text for s in strips} & {"Food,Calories per portion", "Food | Calories per portion"}
    answer, _ = await ExtractiveSynthesizer().synthesize(QUESTION, strips)
    return answer


async def test_a_csv_row_answers_with_its_header_and_its_value() -> None:
    answer = await answer_of(CSV, "food.csv")
    assert answer.startswith("Food: Berries; Calories per portion: 150 [1]")


async def test_a_pdf_table_row_answers_with_its_header_and_its_value() -> None:
    answer = await answer_of(PDF, "food.pdf")
    assert answer.startswith("Food: Berries; Calories per portion: 150 [1]")
    assert "Food | Calories per portion" not in answer
