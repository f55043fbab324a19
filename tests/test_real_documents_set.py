"""The real-world document set of `benchmarks/documents.py --real` stays honest: every file in
its folder is listed with its source, license and hash, and every question's answer is on the
page (slide, cell, line, section) the question names. Reads the files only: no index, no model.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from types import ModuleType

import pytest
from support.paths import BENCHMARKS


@pytest.fixture(scope="module")
def real_set() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_real_set", BENCHMARKS / "_real_set.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["_real_set"] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


def test_every_file_is_listed_with_its_license_and_hash_and_every_answer_is_on_its_page(
    real_set: ModuleType,
) -> None:
    assert real_set.problems() == []


def test_the_set_is_mostly_pdfs_and_holds_tables_and_a_scanned_page(real_set: ModuleType) -> None:
    files = [entry["file"] for entry in real_set.sources()]
    kinds = {q.kind for q in real_set.questions()}
    assert sum(name.endswith(".pdf") for name in files) > len(files) / 2
    assert {"prose", "table", "scanned"} <= kinds


def test_an_answer_moved_to_another_page_is_caught(real_set: ModuleType) -> None:
    q = next(q for q in real_set.questions() if q.file == "us-002.pdf" and q.page == 2)
    listed = {entry["file"]: entry for entry in real_set.sources()}
    moved = dataclasses.replace(q, page=1)
    assert real_set.question_problems(moved, listed, set()) == [
        f"{q.id}: the answer {q.answer!r} is not on us-002.pdf p. 1"]


def test_a_scanned_question_is_checked_against_its_transcript_and_the_page_has_no_text(
    real_set: ModuleType,
) -> None:
    q = next(q for q in real_set.questions() if q.kind == "scanned")
    listed = {entry["file"]: entry for entry in real_set.sources()}
    assert real_set.question_problems(dataclasses.replace(q, transcript="nothing here"), listed, set())
    on_text = dataclasses.replace(q, file="us-026.pdf", page=1)
    assert "has a text layer" in real_set.question_problems(on_text, listed, set())[0]
