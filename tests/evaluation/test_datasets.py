"""Question and passage files, and `--drop-gold`: exactly the chosen gold passages leave the index."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.paths import DATA

from crag import ChunkIndex, ConfigError, IngestError, Settings, ingest
from crag.evaluation.datasets import (
    Question,
    check_gold_in_corpus,
    drop_gold,
    load_corpus,
    load_questions,
    union_corpus,
    write_corpus,
)
from crag.evaluation.runner import build_index

QUESTIONS = DATA / "eval_questions.jsonl"
CORPUS = DATA / "eval_corpus.jsonl"


def questions(n: int) -> list[Question]:
    return [
        Question(f"q{i:03d}", f"question {i}?", (f"answer {i}",), f"doc{i:03d}") for i in range(n)
    ]


def test_the_shared_format_is_read() -> None:
    qs = load_questions(QUESTIONS)
    passages = load_corpus(CORPUS)
    assert len(qs) == 10 and len(passages) == 12
    assert qs[2].answers == ("three nights", "three") and qs[2].doc_id == "festival"
    assert passages[0].title == "Karrow Point Lighthouse"
    check_gold_in_corpus(qs, passages)  # every gold passage is there


def test_supporting_passages_are_read_and_always_led_by_the_gold_one(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    rows = [
        {"id": "bridge", "doc_id": "a", "support_doc_ids": ["a", "b"]},
        {"id": "gold-left-out", "doc_id": "a", "support_doc_ids": ["b", "c"]},
        {"id": "single", "doc_id": "a"},
    ]
    path.write_text(
        "".join(json.dumps({"question": "q?", "answers": ["x"], **r}) + "\n" for r in rows)
    )
    bridge, left_out, single = load_questions(path)
    assert bridge.support_doc_ids == ("a", "b") and bridge.multi_hop
    assert left_out.support_doc_ids == ("a", "b", "c")
    assert single.support_doc_ids == ("a",) and not single.multi_hop
    assert Question("q", "?", ("x",), "d", ("e", "d")).support_doc_ids == ("d", "e")


def test_only_the_gold_passage_of_a_multi_hop_question_is_dropped() -> None:
    qs = [Question("a", "?", ("x",), "gold", ("gold", "bridge"))]
    assert drop_gold(qs, 1.0).doc_ids == {"gold"}


def test_web_corpora_are_united_each_doc_id_once_the_first_file_winning(tmp_path: Path) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text('{"doc_id": "a", "text": "first a"}\n{"doc_id": "b", "text": "first b"}\n')
    second.write_text('{"doc_id": "b", "text": "second b"}\n{"doc_id": "c", "text": "second c"}\n')
    union = union_corpus([first, second])
    assert [(p.doc_id, p.text) for p in union] == [
        ("a", "first a"),
        ("b", "first b"),
        ("c", "second c"),
    ]
    with pytest.raises(IngestError, match="does not exist"):
        union_corpus([first, tmp_path / "missing.jsonl"])


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"id": "a", "question": "q?", "answers": ["x"]}', "needs doc_id"),
        ('{"id": "a", "question": "q?", "answers": "x", "doc_id": "d"}', "list of strings"),
        (
            '{"id": "a", "question": "q?", "answers": ["x"], "doc_id": "d", "support_doc_ids": "d"}',
            "'support_doc_ids' must be a list of strings",
        ),
        (
            '{"id": "a", "question": "q?", "answers": ["x"], "doc_id": "d", "support_doc_ids": [1]}',
            "'support_doc_ids' must be a list of strings",
        ),
        ("not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_a_bad_question_line_is_named_with_its_number(
    tmp_path: Path, line: str, message: str
) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(
        '{"id": "ok", "question": "q?", "answers": ["x"], "doc_id": "d"}\n' + line + "\n"
    )
    with pytest.raises(IngestError, match=rf"q\.jsonl:2: .*{message}"):
        load_questions(path)


def test_missing_files_duplicate_ids_and_foreign_gold_passages_are_errors(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="does not exist"):
        load_questions(tmp_path / "missing.jsonl")
    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"doc_id": "a", "text": "x"}\n{"doc_id": "a", "text": "y"}\n')
    with pytest.raises(IngestError, match="'a' appears twice"):
        load_corpus(twice)
    with pytest.raises(IngestError, match="1 question.*not in the corpus.*q01 \\(lighthouse\\)"):
        check_gold_in_corpus(load_questions(QUESTIONS)[:1], load_corpus(CORPUS)[1:])


def test_drop_gold_chooses_exactly_the_requested_share() -> None:
    qs = questions(300)
    for fraction, expected in [(0.0, 0), (0.5, 150), (0.1, 30), (1.0, 300)]:
        drop = drop_gold(qs, fraction, seed=0)
        assert len(drop.questions) == expected
        assert drop.doc_ids == {q.doc_id for q in qs if q.id in drop.questions}
        assert sum(drop.is_dropped(q) for q in qs) == expected


def test_drop_gold_is_reproducible_with_a_seed_and_independent_of_line_order() -> None:
    qs = questions(100)
    first = drop_gold(qs, 0.5, seed=7)
    assert drop_gold(qs, 0.5, seed=7) == first
    assert drop_gold(list(reversed(qs)), 0.5, seed=7) == first
    assert drop_gold(qs, 0.5, seed=8) != first


def test_a_question_sharing_a_dropped_gold_passage_counts_as_dropped() -> None:
    qs = [
        Question("a", "?", ("x",), "shared"),
        Question("b", "?", ("y",), "shared"),
        Question("c", "?", ("z",), "own"),
    ]
    seed = next(s for s in range(100) if drop_gold(qs, 1 / 3, seed=s).questions == {"a"})
    drop = drop_gold(qs, 1 / 3, seed=seed)
    assert drop.doc_ids == {"shared"}
    assert [drop.is_dropped(q) for q in qs] == [True, True, False]


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_drop_gold_outside_zero_to_one_is_an_error(fraction: float) -> None:
    with pytest.raises(ConfigError, match="--drop-gold must be a fraction between 0 and 1"):
        drop_gold(questions(4), fraction)


def test_the_eval_index_lacks_exactly_the_dropped_gold_passages(tmp_path: Path) -> None:
    qs, passages = load_questions(QUESTIONS), load_corpus(CORPUS)
    drop = drop_gold(qs, 0.5, seed=3)
    index = build_index(passages, drop.doc_ids, tmp_path, Settings.load(env={}))
    indexed = {n.metadata["doc_id"] for n in index.nodes}
    assert indexed == {p.doc_id for p in passages} - drop.doc_ids
    assert len(drop.doc_ids) == 5


def test_write_corpus_leaves_out_only_the_excluded(tmp_path: Path) -> None:
    passages = load_corpus(CORPUS)
    written = write_corpus(
        passages, tmp_path / "c.jsonl", exclude={"bridge", "museum", "not-there"}
    )
    lines = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert written == len(lines) == 10
    assert {r["doc_id"] for r in lines} == {p.doc_id for p in passages} - {"bridge", "museum"}


def test_where_a_corpus_lives_does_not_change_its_chunks(tmp_path: Path) -> None:
    """Chunk boundaries once depended on the file path's length (it counted as metadata),
    so the same evaluation differed between runs in different temporary folders."""
    digests = []
    for folder in (
        tmp_path / "a",
        tmp_path / "a-much-longer-folder-name" / "nested" / "deeper" / "x7q",
    ):
        folder.mkdir(parents=True)
        long_doc = {
            "doc_id": "long",
            "title": "Long",
            "text": " ".join(f"Sentence number {i} is here." for i in range(400)),
        }
        (folder / "c.jsonl").write_text(json.dumps(long_doc) + "\n")
        ingest([folder / "c.jsonl"], folder / "index")
        texts = [n.get_content() for n in ChunkIndex.load(folder / "index").nodes]
        digests.append((len(texts), hashlib.sha256("\x00".join(texts).encode()).hexdigest()))
    assert digests[0] == digests[1] and digests[0][0] > 3
