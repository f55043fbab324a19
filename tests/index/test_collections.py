"""Named collections on disk: which folders are collections, and the settings of one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core.schema import NodeWithScore, TextNode
from support.loopback import LoopbackServer, openai_chat

from crag import build_workflow, ingest
from crag.config import Settings
from crag.errors import ConfigError, IndexNotFoundError
from crag.index.collections import (
    DEFAULT,
    FOLDER,
    check_name,
    found_collections,
)
from crag.index.grade_cache import GradeCache, grade_key, grade_scope
from crag.steps.grading import CachedGrader


def indexed(path: Path, pointer: str = "CURRENT") -> Path:
    """A folder that looks like an index to `found_collections` (its pointer, or a format-1 index)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / pointer).write_text("v1\n" if pointer == "CURRENT" else "", encoding="utf-8")
    return path


def test_the_default_comes_first_then_every_named_collection_sorted(tmp_path: Path) -> None:
    root = indexed(tmp_path / "index")
    for name in ("legal", "hr", "eng-wiki_2"):
        indexed(root / FOLDER / name)
    assert list(found_collections(root).items()) == [
        (DEFAULT, root), ("eng-wiki_2", root / FOLDER / "eng-wiki_2"), ("hr", root / FOLDER / "hr"),
        ("legal", root / FOLDER / "legal"),
    ]


def test_a_format_1_index_is_a_collection_and_an_empty_folder_is_not(tmp_path: Path) -> None:
    root = tmp_path / "index"
    indexed(root / FOLDER / "old", pointer="nodes.jsonl")
    (root / FOLDER / "empty").mkdir()
    assert found_collections(root) == {"old": root / FOLDER / "old"}  # no default: root holds no index


@pytest.mark.parametrize("name", ["HR", "-hr", "_hr", ".hidden", "h r", "a" * 65, "default", "ü"])
def test_a_folder_whose_name_cannot_name_a_collection_is_left_out(tmp_path: Path, name: str) -> None:
    root = indexed(tmp_path / "index")
    indexed(root / FOLDER / name)
    assert found_collections(root) == {DEFAULT: root}


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    elsewhere = indexed(tmp_path / "elsewhere")
    root = indexed(tmp_path / "index")
    (root / FOLDER).mkdir()
    (root / FOLDER / "linked").symlink_to(elsewhere, target_is_directory=True)
    assert found_collections(root) == {DEFAULT: root}
    other = indexed(tmp_path / "other")
    indexed(tmp_path / "shared" / "hr")
    (other / FOLDER).symlink_to(tmp_path / "shared", target_is_directory=True)  # the whole folder a link
    assert found_collections(other) == {DEFAULT: other}


def test_nothing_there_is_no_collection(tmp_path: Path) -> None:
    assert found_collections(tmp_path / "missing") == {}
    (tmp_path / "file").write_text("x", encoding="utf-8")
    assert found_collections(tmp_path / "file") == {}


def test_a_collections_settings_are_its_folder_and_its_own_vector_collections(tmp_path: Path) -> None:
    settings = Settings.load(env={}, index={"path": tmp_path, "chunk_size": 128}, llm={"model": "m"})
    hr = settings.for_collection("hr")
    assert hr.index.path == tmp_path / FOLDER / "hr"
    assert hr.vector_store.collection == "crag-hr"  # on a Chroma server, never the default's
    assert hr.index.chunk_size == 128 and hr.llm.model == "m"
    assert settings.index.path == tmp_path  # the settings given are unchanged
    assert settings.for_collection(None) is settings and settings.for_collection(DEFAULT) is settings


def test_a_bad_name_or_a_collection_with_nothing_indexed_is_a_clear_error(tmp_path: Path) -> None:
    settings = Settings.load(env={}, index={"path": tmp_path})
    with pytest.raises(ConfigError, match="cannot name a collection"):
        settings.for_collection("../hr")
    with pytest.raises(IndexNotFoundError, match="No collection 'hr'.*--collection hr"):
        settings.for_collection("hr", existing=True)
    assert settings.for_collection("hr").index.path == tmp_path / FOLDER / "hr"  # to be made
    assert check_name("legal-2026") == "legal-2026"


# --- a grade cache that several collections share (PostgreSQL's) ---------------------------------

SAME_TEXT = "Every employee gets 30 vacation days a year."


@pytest.fixture
def model() -> Iterator[LoopbackServer]:
    """A model that grades every chunk 8 out of 10."""
    with LoopbackServer(openai_chat(lambda prompt: "8")) as server:
        yield server


@pytest.fixture
def graders(tmp_path: Path, model: LoopbackServer) -> dict[str, CachedGrader]:
    """The graders the real factory builds for the collections hr and legal, each holding one
    document with the same text, around one grade cache outside both (as PostgreSQL's is)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "policy.txt").write_text(SAME_TEXT, encoding="utf-8")
    settings = Settings.load(env={}, index={"path": tmp_path / "index"}, grader={"kind": "llm"},
                             llm={"base_url": model.url + "/v1", "model": "m", "api_key": "sk-test"})
    shared = GradeCache(tmp_path / "shared.sqlite")
    found = {}
    for name in ("hr", "legal"):
        ingest([docs], settings.for_collection(name).index.path)
        found[name] = build_workflow(settings.for_collection(name), grade_cache=shared).grader
    return found


async def test_a_grade_kept_for_one_collection_is_never_found_through_another(
    graders: dict[str, CachedGrader], model: LoopbackServer
) -> None:
    chunk = [NodeWithScore(node=TextNode(id_="c1", text=SAME_TEXT), score=1.0)]
    question = "How many vacation days does an employee get?"
    (hr,) = await graders["hr"].grade(question, chunk)
    (again,) = await graders["hr"].grade(question, chunk)
    (legal,) = await graders["legal"].grade(question, chunk)
    assert (hr.cached, again.cached, legal.cached) == (False, True, False)
    assert len(model.requests_to("/chat/completions")) == 2  # hr's once, legal's once


def test_the_same_grade_under_two_scopes_has_two_keys(tmp_path: Path) -> None:
    base = {"grader": "llm", "model": "m", "prompt_version": "v", "question": "q", "content": SAME_TEXT}
    keys = {grade_key(**base), grade_key(**base, scope="/srv/index/collections/hr"),
            grade_key(**base, scope="/srv/index/collections/legal")}
    assert len(keys) == 3
    own = GradeCache(tmp_path / "grades.sqlite")  # an index's own cache: its keys as they always were
    assert grade_scope(own, tmp_path) == "" and grade_scope(own, tmp_path / "collections" / "hr") != ""
